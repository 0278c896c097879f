//! `kube-prestop-webhook`, the binary: its command line ([`cli`]: every
//! `clap` definition and the conversion to the other crates' types), its
//! logging ([`logging`]) and its allocator's settings ([`allocator`]).
//! `main.rs` wires the crates together:
//!
//! - `serve`: the admission server (`kube-prestop-server`) over the
//!   cluster-facing caches and controllers (`kube-prestop-cluster`);
//! - `inject` and `check`: the operator's tools (`kube-prestop-tools`).
//!
//! The injection engine they share is the `kube-prestop-engine` crate, which
//! does no I/O; the dependency direction between these crates is Cargo's
//! (`docs/ARCHITECTURE.md` §2).

pub mod allocator;
pub mod cli;
pub mod logging;
