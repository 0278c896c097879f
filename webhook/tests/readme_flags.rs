//! The README's webhook flag table (section "### Webhook flags") agrees
//! with `kube-prestop-webhook serve --help`, so the two cannot drift:
//! * every flag the section names exists;
//! * every flag of `serve` is named in the section;
//! * where a row's default cell is a plain list of values (`` `a`, `b` ``),
//!   they are the defaults `--help` shows for the row's flags (in any order,
//!   as `--sidecar-{cpu,memory}-{request,limit}` lists them); `none` or
//!   `off` means the flags have no default;
//! * every flag reads the environment variable `KUBE_PRESTOP_<FLAG>`, except
//!   those the section's introduction names.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");

/// The section of the README about the webhook's flags.
const SECTION: &str = "### Webhook flags";

/// The subcommand the table documents.
const SUBCOMMAND: &str = "serve";

/// Flags that do not read `KUBE_PRESTOP_<FLAG>`, with what they read
/// instead, as the section's introduction says.
const ENV_EXCEPTIONS: [(&str, Option<&str>); 2] =
    [("log-level", Some("RUST_LOG")), ("kubeconfig", None)];

/// Flags every subcommand has (clap's), not documented in the table.
const BUILT_IN: [&str; 2] = ["help", "version"];

/// One option of `--help`.
#[derive(Debug, Default)]
struct HelpFlag {
    /// `[default: X]`, or the `Default: X` of its description.
    default: Option<String>,
    /// `[env: X=]`.
    env: Option<String>,
}

/// The options of `kube-prestop-webhook <subcommand> --help`, by long name
/// without the dashes.
fn help_flags(subcommand: &str) -> BTreeMap<String, HelpFlag> {
    let out = Command::new(BIN)
        .args([subcommand, "--help"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags = BTreeMap::new();
    let mut current: Option<(String, HelpFlag)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        // Option lines are indented by 2 (`-h, --help`) or 6 (`--name`).
        let option = (indent <= 6)
            .then(|| {
                trimmed
                    .strip_prefix("--")
                    .or_else(|| trimmed.split_once(", --").map(|(_, r)| r))
            })
            .flatten();
        if let Some(rest) = option {
            if let Some((name, flag)) = current.take() {
                flags.insert(name, flag);
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            current = Some((name, HelpFlag::default()));
            continue;
        }
        let Some((_, flag)) = current.as_mut() else {
            continue;
        };
        if let Some(value) = trimmed
            .strip_prefix("[default: ")
            .and_then(|r| r.strip_suffix(']'))
        {
            flag.default = Some(value.to_owned());
        } else if let Some(value) = trimmed
            .strip_prefix("[env: ")
            .and_then(|r| r.strip_suffix("=]"))
        {
            flag.env = Some(value.to_owned());
        } else if let Some((_, rest)) = trimmed.split_once("Default: ") {
            // "Default: 10m." or "Default: kube-prestop (in a pod, ...)".
            let value = rest.split_whitespace().next().unwrap_or("");
            let value = value.trim_end_matches(['.', ',']);
            flag.default.get_or_insert_with(|| value.to_owned());
        }
    }
    if let Some((name, flag)) = current {
        flags.insert(name, flag);
    }
    assert!(flags.len() > 10, "too few options parsed from:\n{text}");
    flags
}

/// The README section's text, up to the next heading of any level.
fn section() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let start = readme
        .find(&format!("\n{SECTION}\n"))
        .unwrap_or_else(|| panic!("README.md has no section {SECTION:?}"));
    let body = &readme[start + SECTION.len() + 2..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end].to_owned()
}

/// The code spans (`` `...` ``) of `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `--a-{x,y}-{p,q}` → `a-x-p`, `a-x-q`, `a-y-p`, `a-y-q` (without dashes);
/// `--plain` → `plain`.
fn expand(flag: &str) -> Vec<String> {
    let flag = flag.trim_start_matches('-');
    let Some(open) = flag.find('{') else {
        return vec![flag.to_owned()];
    };
    let close = open + flag[open..].find('}').unwrap();
    let (head, alternatives, tail) = (&flag[..open], &flag[open + 1..close], &flag[close + 1..]);
    alternatives
        .split(',')
        .flat_map(|a| expand(&format!("{head}{a}{tail}")))
        .collect()
}

/// Every flag named in a code span of `text` (`--name`, `--name=value`,
/// `--name <X>`, brace patterns expanded).
fn flags_named(text: &str) -> BTreeSet<String> {
    code_spans(text)
        .into_iter()
        .filter(|span| span.starts_with("--") && span.len() > 2)
        .flat_map(|span| {
            let flag = span.split(['=', ' ']).next().unwrap_or(span);
            expand(flag)
        })
        .collect()
}

/// A table row: its main flags (before any `(+ ...)`), and its default cell.
struct Row {
    flags: Vec<String>,
    default: String,
}

fn rows(section: &str) -> Vec<Row> {
    section
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .map(|line| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
            assert_eq!(cells.len(), 3, "a row of 3 cells: {line}");
            let main = cells[0].split("(+").next().unwrap_or(cells[0]);
            Row {
                flags: flags_named(main).into_iter().collect(),
                default: cells[1].trim().to_owned(),
            }
        })
        .collect()
}

#[test]
fn every_flag_named_in_the_readme_exists() {
    let help = help_flags(SUBCOMMAND);
    let unknown: Vec<_> = flags_named(&section())
        .into_iter()
        .filter(|f| !help.contains_key(f))
        .collect();
    assert!(
        unknown.is_empty(),
        "README {SECTION:?} names flags `{SUBCOMMAND}` does not have: {unknown:?}"
    );
}

#[test]
fn every_flag_is_in_the_readme() {
    let named = flags_named(&section());
    let missing: Vec<_> = help_flags(SUBCOMMAND)
        .into_keys()
        .filter(|f| !named.contains(f) && !BUILT_IN.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `{SUBCOMMAND}` missing from README {SECTION:?}: {missing:?}"
    );
}

#[test]
fn the_readme_defaults_are_the_real_ones() {
    let help = help_flags(SUBCOMMAND);
    let rows = rows(&section());
    assert!(rows.len() > 10, "too few table rows");
    let mut checked = 0;
    for row in rows {
        let actual: Vec<Option<&str>> = row
            .flags
            .iter()
            .map(|f| help.get(f).and_then(|h| h.default.as_deref()))
            .collect();
        if row.default.is_empty() || row.default == "none" || row.default == "off" {
            assert!(
                actual.iter().all(Option::is_none),
                "README says {:?} have no default; --help: {actual:?}",
                row.flags
            );
            checked += 1;
            continue;
        }
        // Only a plain list of values is machine-readable; prose such as
        // "7 MiB" or "`KUBECONFIG`, then ..." is not checked.
        let values = code_spans(&row.default);
        let plain = values.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>();
        if plain.join(", ") != row.default {
            continue;
        }
        let mut documented: Vec<&str> = values;
        let mut actual: Vec<&str> = actual.into_iter().map(|d| d.unwrap_or("<none>")).collect();
        documented.sort_unstable();
        actual.sort_unstable();
        assert_eq!(
            documented, actual,
            "README defaults of {:?} differ from --help",
            row.flags
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} rows checked");
}

#[test]
fn every_flag_reads_its_environment_variable() {
    for (name, flag) in help_flags(SUBCOMMAND) {
        if BUILT_IN.contains(&name.as_str()) {
            continue;
        }
        let expected = match ENV_EXCEPTIONS.iter().find(|(n, _)| *n == name) {
            Some((_, env)) => env.map(str::to_owned),
            None => Some(format!(
                "KUBE_PRESTOP_{}",
                name.to_uppercase().replace('-', "_")
            )),
        };
        assert_eq!(flag.env, expected, "environment variable of --{name}");
    }
    // The exceptions are the ones the README names.
    let intro = section();
    let intro = intro.split("\n|").next().unwrap_or("");
    for (name, env) in ENV_EXCEPTIONS {
        assert!(
            intro.contains(&format!("`--{name}`")),
            "README intro: --{name}"
        );
        if let Some(env) = env {
            assert!(intro.contains(&format!("`{env}`")), "README intro: {env}");
        }
    }
}

#[test]
fn the_parsers_read_what_they_should() {
    assert_eq!(
        expand("--sidecar-{cpu,memory}-{request,limit}"),
        [
            "sidecar-cpu-request",
            "sidecar-cpu-limit",
            "sidecar-memory-request",
            "sidecar-memory-limit"
        ]
    );
    let named = flags_named("`--a`, `--b=x` and `--c <C>`, not `-d` or `x --e`");
    assert_eq!(named.into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    let rows = rows("| `--a`, `--b` (+ `--c`) | `1`, `2` | m |\n| x | y | z |");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].flags, ["a", "b"]);
    assert_eq!(rows[0].default, "`1`, `2`");
}
