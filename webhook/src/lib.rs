//! kube-prestop webhook: the injection engine, the admission server and the
//! offline `inject` command.

pub mod certmanager;
pub mod cli;
pub mod cluster_cache;
pub mod engine;
pub mod inject_cmd;
pub mod logging;
pub mod metrics;
pub mod server;
pub mod sidecar_configmap;
pub mod tls;
