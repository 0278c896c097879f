//! The optional hook-outcome exporter (`kube-prestop-webhook outcomes`): it
//! watches the injected pods (label `kube-prestop.io/injected=true`,
//! cluster-wide), reads the termination messages their sidecars publish
//! ([`kube_prestop_contract::termination`]) and counts each hook run's
//! outcome once, by outcome, whether the run was late (instance `0-0`: its
//! watcher never saw it, and ran its hook at the pod's end), namespace and
//! owner kind, for Prometheus.
//!
//! Modules, each using only those listed before it:
//! - [`read`] (pure): a pod's sidecar messages, owner kind, and each run's
//!   outcome label and dedupe key;
//! - [`tracker`] (pure): what was counted per live pod (uid → keys), and
//!   what an event adds to the counters, once;
//! - [`metrics`]: the exporter's own Prometheus registry;
//! - [`watch`]: the pod watch (kube-runtime's watcher, no object store) and
//!   the plain-HTTP `/metrics` endpoint.

pub mod read;
pub mod tracker;

pub mod metrics;
pub mod watch;

pub use metrics::{OutcomeMetrics, late_label};
pub use read::{OutcomeLabel, OwnerKind, Unreadable};
pub use tracker::{Count, Tracker};
pub use watch::{OutcomesConfig, run};
