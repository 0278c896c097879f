//! The webhook's cluster-facing parts: everything that talks to the API
//! server off the admission request path, behind one client factory
//! ([`client`]).
//!
//! - [`cluster_cache`]: what admission reads from memory (LimitRanges, the
//!   binary-delivery facts of a namespace);
//! - [`node_facts`]: one watch of the Nodes (architecture, kubelet and
//!   runtime versions);
//! - [`image_volume_probe`]: whether the API server keeps image volumes
//!   (a dry-run probe pod);
//! - [`sidecar_configmap`]: the per-namespace sidecar-binary ConfigMaps;
//! - [`self_managed_certs`]: the chart's `selfManaged` certificate mode.
//!
//! Depends on the engine (for the facts' types), the contract and the
//! metrics crate; never on the server or the operator's tools
//! (`docs/ARCHITECTURE.md` §2).

pub mod client;
pub mod cluster_cache;
pub mod image_volume_probe;
pub mod node_facts;
pub mod self_managed_certs;
pub mod sidecar_configmap;
