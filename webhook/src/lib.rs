//! kube-prestop webhook: the admission server, the offline `inject` command,
//! the operator's `check` command and the self-managed certificates. The
//! injection engine they share is the `kube-prestop-engine` crate
//! (`engine/`), which does no I/O.

pub mod check;
pub mod cli;
pub mod cluster_cache;
pub mod image_volume_api;
pub mod inject_cmd;
pub mod kube_config;
pub mod logging;
pub mod metrics;
pub mod node_facts;
pub mod self_managed_certs;
pub mod server;
pub mod sidecar_configmap;
pub mod tls;
