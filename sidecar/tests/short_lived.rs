//! 100 consecutive main containers running `true`: every one gets its hook.
//! In its own test binary so that it does not share the two cores with the
//! other namespace tests (cargo runs test binaries one after another).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn hundred_true_containers_hundred_hooks() {
    require_root_and_util_linux();
    let mut pod = Pod::new("true100");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    for _ in 0..100 {
        assert_eq!(code(pod.run_main_racing(&["true"])), 0);
    }
    wait_for_or_show(
        "100 hook runs",
        T,
        || {
            let log = sc.log_text();
            format!(
                "{} hooks; sidecar log (warnings):\n{}",
                pod.lines("hooks").len(),
                log.lines()
                    .filter(|l| l.contains("warning") || l.contains("error"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        },
        || pod.lines("hooks").len() >= 100 && pod.records("done-").len() >= 100,
    );
    let lines = pod.lines("hooks");
    let mut ids: Vec<&str> = lines.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(lines.len(), 100);
    assert_eq!(ids.len(), 100);
    assert_eq!(pod.records("seen-").len(), 100);
    let log = sc.log_text();
    let late = log.matches("already exited").count();
    eprintln!(
        "measured: 100/100 caught; {late} found only after they had exited (handled via the exit path)"
    );
    assert!(sc.alive());
}
