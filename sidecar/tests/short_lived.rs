//! 100 consecutive main containers running `true`, each started once the
//! watcher has seen it created: every one gets exactly one hook, however
//! fast the instances follow one another. In its own test binary so that it
//! does not share the two cores with the other namespace tests (cargo runs
//! test binaries one after another).
//!
//! Not asserted here: whether the watcher catches a `true` started the
//! instant its identifying mount appears (no gap between create and start,
//! harsher than the kubelet's). On this 2-core machine that race lost 2 to
//! 16 of 100 in some runs even when idle, and none in others; the
//! guarantee's documented exception covers it ("a container too
//! short-lived for a CPU-starved sidecar to see"), and issue 24 measures it
//! on a real runtime (`kube-prestop-cluster-bench burst --command true
//! --busy-pods N`, docs/figures.md).

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
        assert_eq!(code(pod.run_main(&["true"])), 0);
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
