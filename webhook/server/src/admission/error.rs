//! Why a pod CREATE is answered without injection: the errors the failure
//! mode decides on (admitted with a warning, or refused).

use kube_prestop_engine::EngineError;

use kube_prestop_metrics::labels::{self, reason};

/// A pod the webhook cannot inject. Its message is the admission warning
/// (or the refusal's message) and the log line's `detail`.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// The request's object does not parse as a Pod: the field and why.
    #[error("the pod object does not parse {0}")]
    Unparsable(super::wire::InvalidPod),
    /// The request has no object.
    #[error("the request has no object")]
    NoObject,
    /// The engine panicked (a bug of ours; the panic is logged by the
    /// process's panic hook).
    #[error("internal error in the injection engine")]
    EnginePanic,
    /// The JSON Patch could not be serialized or encoded.
    #[error(transparent)]
    Patch(serde_json::Error),
    /// The engine cannot handle the pod.
    #[error(transparent)]
    Engine(EngineError),
    /// The patched pod would be over
    /// [`super::decision::MAX_PATCHED_POD_BYTES`].
    #[error(
        "the injected pod would be about {bytes} bytes of JSON, over the {max_bytes}-byte bound \
         kube-prestop keeps below etcd's request limit (the sidecar copies each watched \
         container's env and mounts)"
    )]
    TooLarge {
        /// The review's size plus the patch's, bytes.
        bytes: usize,
        /// The bound, bytes.
        max_bytes: usize,
    },
    /// The pod would cost more memory to parse than one review may take
    /// ([`super::ParseBudget::max_per_review`], half of
    /// `--max-inflight-parsed-bytes`): not parsed at all.
    #[error(
        "the pod would take about {} bytes of the webhook's memory to parse, over its {max_bytes}-byte bound per review (half of --max-inflight-parsed-bytes){}",
        cost.pod_bytes,
        super::cost::longest_list_note(cost.longest_list.as_ref())
    )]
    TooCostly {
        /// The estimate.
        cost: super::Cost,
        /// The bound, bytes.
        max_bytes: usize,
    },
}

impl PodError {
    /// Whether a pod admitted without injection because of it (failure mode
    /// `allow`) is annotated with
    /// [`SKIPPED`](kube_prestop_engine::annotations::SKIPPED): an engine
    /// error or a pod too large to inject or to parse, which its author
    /// can fix (a pod too costly to parse is annotated from its
    /// annotations scanned in its JSON, when that scan succeeds). Not a
    /// request without a readable pod (nothing to annotate), an engine
    /// panic or a patch that did not serialize (faults of ours, answered
    /// with the warning only).
    pub fn annotates_the_pod(&self) -> bool {
        matches!(
            self,
            Self::Engine(_) | Self::TooLarge { .. } | Self::TooCostly { .. }
        )
    }

    /// The `reason` label it is counted under (with decision `error`):
    /// `invalid_pod`, `engine_panic`, `patch_error`, `pod_too_large` (too
    /// large to inject, or to parse) or the
    /// engine error's
    /// label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unparsable(_) | Self::NoObject => reason::INVALID_POD,
            Self::EnginePanic => reason::ENGINE_PANIC,
            Self::Patch(_) => reason::PATCH_ERROR,
            Self::TooLarge { .. } | Self::TooCostly { .. } => reason::POD_TOO_LARGE,
            Self::Engine(e) => labels::engine_error(e),
        }
    }
}
