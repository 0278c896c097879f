//! kube-prestop webhook: the injection engine, the admission server and the
//! offline `inject` command.

pub mod certmanager;
pub mod engine;
