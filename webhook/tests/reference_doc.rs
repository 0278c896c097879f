//! docs/reference.md is checked against the code, so it cannot drift: every
//! long flag of every subcommand's `--help`, every metric the webhook
//! exports (with every label value exported at zero from start-up), and
//! every `kube-prestop.io/` annotation the engine reads or writes must be
//! named on the page.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");

fn reference() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference.md"))
        .unwrap()
}

/// The long flags `--help` of `subcommand` lists.
fn flags(subcommand: &str) -> BTreeSet<String> {
    let out = Command::new(BIN)
        .args([subcommand, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            l.split([' ', ','])
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(|w| w.split('=').next().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|f| f != "--help")
        .collect()
}

#[test]
fn every_flag_is_in_the_reference() {
    let page = reference();
    for subcommand in ["serve", "inject", "check"] {
        let flags = flags(subcommand);
        assert!(!flags.is_empty(), "{subcommand} --help lists no flags");
        let absent: Vec<_> = flags
            .iter()
            .filter(|f| !page.contains(&format!("`{f}")))
            .collect();
        assert!(
            absent.is_empty(),
            "docs/reference.md lacks {subcommand} flags {absent:?}"
        );
    }
}

#[test]
fn every_metric_and_label_value_is_in_the_reference() {
    let page = reference();
    let exposition = kube_prestop_webhook::metrics::Metrics::new()
        .encode()
        .unwrap();
    let mut names = BTreeSet::new();
    let mut values = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let name = words.next().unwrap();
            // OpenMetrics names counters without `_total` in TYPE lines.
            let name = match words.next() {
                Some("counter") => format!("{name}_total"),
                _ => name.to_owned(),
            };
            names.insert(name);
        } else if let Some(labels) = line.split_once('{').map(|(_, l)| l) {
            for pair in labels
                .trim_end_matches(|c: char| c != '}')
                .trim_end_matches('}')
                .split(',')
            {
                if let Some((key, value)) = pair.split_once('=')
                    && key != "le"
                {
                    values.insert(value.trim_matches('"').to_owned());
                }
            }
        }
    }
    assert!(names.len() >= 6, "{names:?}");
    let absent: Vec<_> = names
        .iter()
        .filter(|n| !page.contains(&format!("`{n}`")))
        .collect();
    assert!(
        absent.is_empty(),
        "docs/reference.md lacks metrics {absent:?}"
    );
    let absent: Vec<_> = values
        .iter()
        .filter(|v| !page.contains(&format!("`{v}`")))
        .collect();
    assert!(
        absent.is_empty(),
        "docs/reference.md lacks label values {absent:?}"
    );
}

#[test]
fn every_annotation_the_engine_knows_is_in_the_reference() {
    use kube_prestop_engine::annotations;
    let page = reference();
    let known: Vec<&str> = annotations::SETTABLE
        .iter()
        .chain(annotations::WRITTEN.iter())
        .copied()
        .chain([annotations::DEFAULT_CONTAINER])
        .collect();
    let absent: Vec<_> = known
        .iter()
        .filter(|a| !page.contains(&format!("`{a}`")))
        .collect();
    assert!(
        absent.is_empty(),
        "docs/reference.md lacks annotations {absent:?}"
    );
}
