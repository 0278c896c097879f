//! The admission decision for one request body: parse the AdmissionReview,
//! run the engine on pod CREATEs, answer with a JSON Patch. Pure apart from
//! reading the cluster cache; no I/O, no panics.
//!
//! Cost per review matters (every pod CREATE in enabled namespaces waits for
//! it), so the body is parsed once, straight into typed values: the pod
//! object is kept as raw JSON text while the envelope is read, then parsed
//! into a k8s-openapi `Pod` (never through `serde_json::Value`); the JSON
//! Patch is built from the engine's own list of changes and serialized
//! straight from the k8s-openapi values
//! ([`kube_prestop_engine::patch::operations`]) instead of diffing whole
//! documents; and the answer is serialized in one pass.
//!
//! One concern per file: `cost.rs` (what a review will cost in memory once
//! parsed, estimated from its JSON before it is, and the budget of those
//! estimates in flight), `wire.rs` (the AdmissionReview as received),
//! `decision.rs` (which requests the engine sees, and the outcome),
//! `annotations_view.rs` (what writing `kube-prestop.io/skipped` depends
//! on in a pod's annotations, from a parsed pod or scanned from a pod too
//! costly to parse), `error.rs` (why a pod is not injected), `refusal.rs` (the failure mode
//! and the status of a refused pod), `answer.rs` (the AdmissionReview sent
//! back).

mod annotations_view;
mod answer;
mod cost;
mod decision;
mod error;
mod refusal;
mod wire;

pub use cost::{Cost, NotParsed, ParseBudget, estimate, estimate_review};
pub use decision::{Answer, MAX_PATCHED_POD_BYTES, Outcome, RequestFacts, review};
pub use error::PodError;
pub use refusal::{FailureMode, Refusal};
pub use wire::{InvalidPod, ReviewError};
