//! kube-prestop sidecar: watches a Job container through the pod's shared PID
//! namespace and runs its preStop command when it exits on its own.
//!
//! [`contract`] is shared with the webhook, which writes the pod specs that
//! run this binary.

pub mod contract;
