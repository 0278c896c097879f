//! The operator's tools, run from a workstation or a CI job rather than in
//! the cluster:
//!
//! - [`inject`]: offline injection, manifests in, injected manifests out,
//!   through the same engine as the admission server;
//! - [`check`]: an installation seen from the operator's side, the way the
//!   API server sees it (`docs/install.md` §5, "Check").
//!
//! Depends on the engine and on the cluster crate (client factory, the
//! sidecar ConfigMaps' name prefix); never on the server.

pub mod check;
pub mod inject;
