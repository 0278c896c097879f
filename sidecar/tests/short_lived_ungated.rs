//! Measurement: short-lived containers with no create/start window at all.
//! In its own test binary so it never competes for the CPU with the
//! 100-container test (cargo runs test binaries one after another).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// Measurement, with no create/start window at all: the container process
/// execs `true` right after its mount appears. Reports how many were caught;
/// asserts only that every caught one ran its hook exactly once.
#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn ungated_true_containers_measurement() {
    require_root_and_util_linux();
    let mut pod = Pod::new("ungated");
    let sc = pod.sidecar(&pod.hook(), &[]);
    let n = 100;
    for _ in 0..n {
        assert_eq!(code(pod.run_main_ungated(&["true"])), 0);
    }
    // Every instance that was seen gets a done record.
    let seen = pod.records("seen-").len();
    wait_for_or_show(
        "hooks of all seen instances",
        T,
        || {
            let seen = pod.records("seen-");
            let done = pod.records("done-");
            let missing: Vec<_> = seen
                .iter()
                .filter(|s| !done.contains(&s.replacen("seen-", "done-", 1)))
                .map(|s| format!("{s}: {}", pod.record(s)))
                .collect();
            format!(
                "seen without done: {missing:?}; sidecar log:\n{}",
                sc.log_text()
            )
        },
        || pod.records("done-").len() >= seen,
    );
    let lines = pod.lines("hooks");
    assert_eq!(lines.len(), seen);
    eprintln!("measured: no create/start window: {seen}/{n} caught");
    drop(sc);
}
