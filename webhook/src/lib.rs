//! kube-prestop webhook: the injection engine, the admission server and the
//! offline `inject` command.

pub mod engine;
