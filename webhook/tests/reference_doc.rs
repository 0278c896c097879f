//! docs/reference.md is checked against the code, so it cannot drift: every
//! long flag of every subcommand's `--help`, every metric the webhook
//! exports (with every label value exported at zero from start-up), every
//! `kube-prestop.io/` annotation the engine reads or writes, and every
//! `KUBE_PRESTOP_*` environment variable the sidecar sets for the hook or
//! reads itself (in its section) must be named on the page, and every log
//! message the page names must be one the webhook or the sidecar writes. The flag tables
//! are checked in detail by `reference_flags.rs`.
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
    let mut exposition = kube_prestop_metrics::Metrics::new().encode().unwrap();
    // The outcome exporter's (`outcomes`), with a count of every outcome
    // and owner kind so that their label values show (not the namespace,
    // which is the counted pods').
    {
        use kube_prestop_outcomes::{Count, OutcomeLabel, OutcomeMetrics, OwnerKind};
        let outcomes = OutcomeMetrics::new();
        for (i, outcome) in OutcomeLabel::ALL.into_iter().enumerate() {
            for owner_kind in OwnerKind::ALL.into_iter().skip(i % 2) {
                outcomes.record(&Count::Outcome {
                    outcome,
                    late: i % 2 == 0,
                    namespace: "jobs".to_owned(),
                    owner_kind,
                });
            }
        }
        exposition.push_str(&outcomes.encode().unwrap());
    }
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
                    && key != "namespace"
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

/// The `"KUBE_PRESTOP_..."` string literals of the sidecar's and the
/// contract's sources: the variables the sidecar sets for the hook or reads
/// itself.
fn sidecar_env_names() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for piece in text.split("\"KUBE_PRESTOP_").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if piece[name.len()..].starts_with('"') && !name.is_empty() {
                        out.insert(format!("KUBE_PRESTOP_{name}"));
                    }
                }
            }
        }
    }
    let mut names = BTreeSet::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["../sidecar/src", "../contract/src"] {
        walk(&root.join(dir), &mut names);
    }
    names
}

#[test]
fn every_environment_variable_of_the_sidecar_is_in_the_reference() {
    use kube_prestop_contract as contract;
    let page = reference();
    let section = page
        .split("\n## Environment the hook gets\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/reference.md has a section \"## Environment the hook gets\"");
    let names = sidecar_env_names();
    // The scan finds the contract's variables, so it reads the right files.
    for known in [
        contract::ENV_HOOK_CONTAINER,
        contract::ENV_HOOK_INSTANCE,
        contract::ENV_HOOK_ATTEMPT,
        contract::ENV_HOOK_EXIT_CODE,
        contract::ENV_HOOK_EXIT_SIGNAL,
        contract::ENV_HOOK_ROOT,
        contract::ENV_GRACE_PERIOD_SECONDS,
        contract::ENV_DEBUG,
    ] {
        assert!(
            names.contains(known),
            "{known} not found in sidecar/src or contract/src"
        );
    }
    let absent: Vec<_> = names
        .iter()
        .filter(|n| !section.contains(&format!("`{n}`")))
        .collect();
    assert!(
        absent.is_empty(),
        "docs/reference.md \"## Environment the hook gets\" lacks {absent:?}"
    );
}

/// The string literals (`"..."`, escapes kept as written) of the `.rs` files
/// under `dir`, each with its `{...}` format placeholders as `\0`.
/// The source folders of the webhook binary and its crates, relative to
/// `webhook/`.
const WEBHOOK_SOURCES: [&str; 6] = [
    "src",
    "server/src",
    "cluster/src",
    "tools/src",
    "metrics/src",
    "outcomes/src",
];

fn string_literals(dir: &Path) -> Vec<Vec<char>> {
    fn walk(dir: &Path, out: &mut Vec<Vec<char>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let mut chars = text.chars();
            while let Some(c) = chars.next() {
                if c != '"' {
                    continue;
                }
                let mut literal = Vec::new();
                let mut depth = 0;
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        '{' => {
                            if depth == 0 {
                                literal.push('\0');
                            }
                            depth += 1;
                        }
                        '}' if depth > 0 => depth -= 1,
                        _ if depth > 0 => {}
                        _ => literal.push(c),
                    }
                }
                out.push(literal);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out
}

/// Whether `fragment` is part of some line `literal` can produce: its
/// `\0`s stand for a value (text without spaces), and a word of at least
/// four letters of the fragment (or all of a shorter fragment) must be the
/// literal's own text, so that values alone never make a match.
fn produces(literal: &[char], fragment: &[char]) -> bool {
    let letters = fragment.iter().filter(|c| c.is_alphabetic()).count();
    let needed = letters.min(4);
    /// `fragment` is a prefix of what `literal` produces; `run`: letters of
    /// the literal's own text matched in a row so far, `best` the most.
    fn prefix(literal: &[char], fragment: &[char], run: usize, best: usize, needed: usize) -> bool {
        match (fragment.first(), literal.first()) {
            (None, _) => best.max(run) >= needed,
            (Some(_), None) => false,
            (Some(f), Some('\0')) => {
                prefix(&literal[1..], fragment, 0, best.max(run), needed)
                    || (*f != ' ' && prefix(literal, &fragment[1..], 0, best.max(run), needed))
            }
            (Some(f), Some(l)) if f == l => {
                let run = if f.is_alphabetic() { run + 1 } else { 0 };
                prefix(&literal[1..], &fragment[1..], run, best.max(run), needed)
            }
            _ => false,
        }
    }
    (0..literal.len()).any(|start| prefix(&literal[start..], fragment, 0, 0, needed))
}

#[test]
fn every_log_line_the_reference_names_is_in_the_code() {
    let page = reference();
    let section = page
        .split("\n## Log lines\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/reference.md has a section \"## Log lines\"");
    let (webhook_part, sidecar_part) = section
        .split_once("The sidecar's lines")
        .expect("a paragraph on the sidecar's lines");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").is_file() {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                WEBHOOK_SOURCES.contains(&format!("{name}/src").as_str()),
                "crate webhook/{name} is missing from WEBHOOK_SOURCES"
            );
        }
    }
    let parts = [
        (
            webhook_part,
            // The binary's crate and the crates it wires (server, cluster,
            // tools, metrics, outcomes): every `src/` of the webhook's folder.
            WEBHOOK_SOURCES
                .iter()
                .flat_map(|dir| string_literals(&root.join(dir)))
                .collect(),
            "Other\nlines worth",
        ),
        (
            sidecar_part,
            [
                string_literals(&root.join("../sidecar/src")),
                string_literals(&root.join("../contract/src")),
            ]
            .concat(),
            "`kube-prestop: `:",
        ),
    ];
    let mut checked = 0;
    for (text, literals, after) in parts {
        // The messages are the code spans after the paragraph's lead-in.
        let (_, messages) = text
            .split_once(after)
            .unwrap_or_else(|| panic!("no {after:?} in the log lines section"));
        for span in messages.split('`').skip(1).step_by(2) {
            if span.ends_with(".md") {
                continue;
            }
            // `a ... b`: each part must be in one message of the code; a
            // capital `X` or `N` stands for a value.
            for fragment in span.split("...").map(str::trim).filter(|f| !f.is_empty()) {
                let fragment = fragment.replace('\n', " ");
                let chars: Vec<char> = fragment.chars().collect();
                assert!(
                    literals.iter().any(|l| produces(l, &chars)),
                    "docs/reference.md names the log line {span:?}, but no message in the code \
                     contains {fragment:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} log line fragments checked");
}

#[test]
fn the_log_line_matcher_reads_placeholders() {
    let literal: Vec<char> = "\0 received while hook runs container=\0 pid=\0"
        .chars()
        .collect();
    let yes = |f: &str| produces(&literal, &f.chars().collect::<Vec<_>>());
    assert!(yes("SIGTERM received while hook runs"));
    assert!(yes("received while"));
    assert!(yes("container=X pid=N"));
    assert!(!yes("received during hook"));
    assert!(!yes("SIGTERM arrived"));
    // Values alone are no match.
    let values: Vec<char> = "\0 \0=\0".chars().collect();
    assert!(!produces(
        &values,
        &"hook completed".chars().collect::<Vec<_>>()
    ));
}
