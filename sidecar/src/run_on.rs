//! Whether a hook runs, by `--run-on` ([`RunOn`]) and what is known about
//! the container's exit ([`ExitKnowledge`]). Pure.
//!
//! When the exit status is unknown the hook runs (cleanup is never skipped
//! for lack of knowledge), and the caller logs why it is unknown.

use crate::exit_info::ExitKnowledge;
use kube_prestop_contract::RunOn;

/// What to do about one exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunDecision {
    /// Run the hook.
    Run,
    /// Run the hook although `run-on` is not `always`: the status is unknown.
    RunUnknown,
    /// Do not run it: `run-on` excludes how the container ended. Recorded as
    /// `outcome=skipped-run-on`.
    Skip,
}

/// Decides by `run_on` and `exit`: `always` runs; `success` runs on exit
/// code 0; `failure` runs on a non-zero code or a signal; an unknown status
/// runs ([`RunDecision::RunUnknown`] unless `always`).
pub fn decide(run_on: RunOn, exit: ExitKnowledge) -> RunDecision {
    match (run_on, exit) {
        (RunOn::Always, _) => RunDecision::Run,
        (_, ExitKnowledge::Unknown(_)) => RunDecision::RunUnknown,
        (RunOn::Success, ExitKnowledge::Known(e)) if e.success() => RunDecision::Run,
        (RunOn::Failure, ExitKnowledge::Known(e)) if !e.success() => RunDecision::Run,
        _ => RunDecision::Skip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_info::{ContainerExit, Unknown};

    const OK: ExitKnowledge = ExitKnowledge::Known(ContainerExit::Code(0));
    const FAIL: ExitKnowledge = ExitKnowledge::Known(ContainerExit::Code(3));
    const OOM: ExitKnowledge = ExitKnowledge::Known(ContainerExit::Signal(9));
    const UNKNOWN: ExitKnowledge = ExitKnowledge::Unknown(Unknown::Kernel);

    #[test]
    fn always_runs() {
        for e in [OK, FAIL, OOM, UNKNOWN] {
            assert_eq!(decide(RunOn::Always, e), RunDecision::Run);
        }
    }

    #[test]
    fn success_and_failure_split_the_statuses() {
        assert_eq!(decide(RunOn::Success, OK), RunDecision::Run);
        assert_eq!(decide(RunOn::Success, FAIL), RunDecision::Skip);
        assert_eq!(decide(RunOn::Success, OOM), RunDecision::Skip);
        assert_eq!(decide(RunOn::Failure, OK), RunDecision::Skip);
        assert_eq!(decide(RunOn::Failure, FAIL), RunDecision::Run);
        assert_eq!(decide(RunOn::Failure, OOM), RunDecision::Run);
    }

    #[test]
    fn unknown_runs() {
        assert_eq!(decide(RunOn::Success, UNKNOWN), RunDecision::RunUnknown);
        assert_eq!(decide(RunOn::Failure, UNKNOWN), RunDecision::RunUnknown);
    }
}
