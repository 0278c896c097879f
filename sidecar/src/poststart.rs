//! `post-start`: the native sidecar's `lifecycle.postStart` handler.
//!
//! The kubelet runs an exec postStart handler inside the sidecar container
//! and does not return from starting that container until the handler ends
//! (`startContainer` in `pkg/kubelet/kuberuntime/kuberuntime_container.go`);
//! it starts the containers after this native sidecar only in a later pod
//! sync. So a handler that returns once the watcher has written its `armed`
//! mark orders X's start after the watcher is armed, as a startupProbe did,
//! without the probe's period (1 s minimum) and the extra pod sync its
//! result needs.
//!
//! The kubelet puts no time limit on an exec postStart handler, and a
//! handler that fails makes it kill and restart the sidecar, which would
//! keep X from ever starting. So the wait is bounded, and when it runs out
//! the handler still succeeds: the Job goes on (fail-open) and the
//! watcher's own log tells why it could not arm.

use std::path::Path;
use std::time::{Duration, Instant};

/// How often the handler looks for the `armed` mark: the watcher normally
/// arms within a few milliseconds of its start, and one `stat` every 2 ms
/// costs nothing measurable.
pub const POLL_INTERVAL: Duration = Duration::from_millis(2);

/// How a wait for the `armed` mark ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The mark exists; `waited` is how long it took to appear.
    Armed {
        /// Time from the start of the wait until the mark was seen.
        waited: Duration,
    },
    /// The mark did not appear within the timeout.
    TimedOut,
}

/// Waits until `mark` exists, looking every [`POLL_INTERVAL`], for at most
/// `timeout`. The watcher removes its mark when it starts and when it exits;
/// a mark that a killed watcher left behind may still be seen before the
/// restarted one removes it, which is harmless: the kubelet restarts a
/// native sidecar only after X was started, so there is nothing to order.
pub fn wait_armed(mark: &Path, timeout: Duration) -> Outcome {
    let start = Instant::now();
    loop {
        if mark.exists() {
            return Outcome::Armed {
                waited: start.elapsed(),
            };
        }
        let elapsed = start.elapsed();
        if elapsed >= timeout {
            return Outcome::TimedOut;
        }
        std::thread::sleep(POLL_INTERVAL.min(timeout - elapsed));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("kps-poststart-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_existing_mark_returns_at_once() {
        let d = tmp("exists");
        let mark = d.join("armed");
        std::fs::write(&mark, "").unwrap();
        assert!(matches!(
            wait_armed(&mark, Duration::ZERO),
            Outcome::Armed { .. }
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_mark_times_out() {
        let d = tmp("missing");
        assert_eq!(
            wait_armed(&d.join("state/x/armed"), Duration::from_millis(20)),
            Outcome::TimedOut
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_mark_written_during_the_wait_ends_it() {
        let d = tmp("later");
        let mark = d.join("state/x/armed");
        let writer = {
            let mark = mark.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                std::fs::create_dir_all(mark.parent().unwrap()).unwrap();
                std::fs::write(&mark, "").unwrap();
            })
        };
        let outcome = wait_armed(&mark, Duration::from_secs(60));
        writer.join().unwrap();
        assert!(matches!(outcome, Outcome::Armed { .. }), "{outcome:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
