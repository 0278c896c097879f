//! The flag tables of docs/reference.md (section "## Commands and flags")
//! agree with `kube-prestop-webhook <command> --help` for every command, so
//! the two cannot drift:
//! * every flag a command's section names exists in that command (the
//!   section "### Flags of every command" is read with each command's);
//! * every flag of each command is named in its section or in the section of
//!   flags every command has;
//! * where a row's default cell is a plain list of values (`` `a`, `b` ``),
//!   they are the defaults `--help` shows for the row's flags (in any order,
//!   as `--sidecar-{cpu,memory}-{request,limit}` lists them); `none` or
//!   `off` means the flags have no default;
//! * a flag reads the environment variable `KUBE_PRESTOP_<FLAG>` exactly when
//!   `serve` has it, except the flags the introduction names with what they
//!   read instead; the introduction says which flags read none.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");

/// The page and the part of it about commands and flags.
const PAGE: &str = "docs/reference.md";
const CHAPTER: &str = "## Commands and flags";

/// The section of the flags every command has.
const GLOBAL_SECTION: &str = "### Flags of every command";

/// Each command, with the start of its section's heading.
const COMMANDS: [(&str, &str); 4] = [
    ("serve", "### `serve`"),
    ("inject", "### `inject`"),
    ("check", "### `check`"),
    ("outcomes", "### `outcomes`"),
];

/// The command whose flags read `KUBE_PRESTOP_<FLAG>`: a flag of another
/// command reads it exactly when it is one of this command's too.
const ENV_COMMAND: &str = "serve";

/// Flags that do not read `KUBE_PRESTOP_<FLAG>`, with what they read
/// instead, as the chapter's introduction says.
const ENV_EXCEPTIONS: [(&str, Option<&str>); 2] =
    [("log-level", Some("RUST_LOG")), ("kubeconfig", None)];

/// Flags every subcommand has (clap's), not documented in the tables.
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
    assert!(flags.len() > 3, "too few options parsed from:\n{text}");
    flags
}

/// The page's text.
fn page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(PAGE))
        .unwrap_or_else(|e| panic!("{PAGE}: {e}"))
}

/// The text after the heading line that starts with `heading`, up to the
/// next heading of any level.
fn section(heading: &str) -> String {
    let page = page();
    let start = page
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("{PAGE} has no section {heading:?}"));
    let body = &page[start + 1..];
    let body = &body[body.find('\n').map_or(body.len(), |i| i + 1)..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end].to_owned()
}

/// The section of `command`.
fn command_section(command: &str) -> String {
    let (_, heading) = COMMANDS
        .iter()
        .find(|(c, _)| *c == command)
        .unwrap_or_else(|| panic!("no section for {command}"));
    section(heading)
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
        .filter(|l| l.starts_with("| `-"))
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
fn every_flag_named_in_the_reference_exists() {
    let global = section(GLOBAL_SECTION);
    for (command, _) in COMMANDS {
        let help = help_flags(command);
        let text = format!("{global}\n{}", command_section(command));
        let unknown: Vec<_> = flags_named(&text)
            .into_iter()
            .filter(|f| !help.contains_key(f))
            .collect();
        assert!(
            unknown.is_empty(),
            "{PAGE}: the section of `{command}` names flags it does not have: {unknown:?}"
        );
    }
}

#[test]
fn every_flag_is_in_the_reference() {
    let global = flags_named(&section(GLOBAL_SECTION));
    for (command, _) in COMMANDS {
        let named = flags_named(&command_section(command));
        let missing: Vec<_> = help_flags(command)
            .into_keys()
            .filter(|f| {
                !named.contains(f) && !global.contains(f) && !BUILT_IN.contains(&f.as_str())
            })
            .collect();
        assert!(
            missing.is_empty(),
            "flags of `{command}` missing from its section of {PAGE}: {missing:?}"
        );
    }
}

/// Checks the default cells of `section`'s rows against `help`; returns how
/// many rows were checked.
fn check_defaults(command: &str, help: &BTreeMap<String, HelpFlag>, section: &str) -> usize {
    let mut checked = 0;
    for row in rows(section) {
        let actual: Vec<Option<&str>> = row
            .flags
            .iter()
            .map(|f| help.get(f).and_then(|h| h.default.as_deref()))
            .collect();
        if row.default.is_empty() || row.default == "none" || row.default == "off" {
            assert!(
                actual.iter().all(Option::is_none),
                "{PAGE} says {:?} of `{command}` have no default; --help: {actual:?}",
                row.flags
            );
            checked += 1;
            continue;
        }
        // Only a plain list of values is machine-readable; prose such as
        // "`KUBECONFIG`, then ..." or "as `serve`" is not checked.
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
            "{PAGE}: defaults of {:?} of `{command}` differ from --help",
            row.flags
        );
        checked += 1;
    }
    checked
}

#[test]
fn the_reference_defaults_are_the_real_ones() {
    let serve = help_flags(ENV_COMMAND);
    let global = check_defaults(ENV_COMMAND, &serve, &section(GLOBAL_SECTION));
    assert_eq!(global, 2, "rows checked in {GLOBAL_SECTION:?}");
    // At least this many rows of each command's table are machine-checked.
    for (command, minimum) in [("serve", 15), ("inject", 3), ("check", 4)] {
        let help = help_flags(command);
        let section = command_section(command);
        assert!(
            rows(&section).len() >= minimum,
            "too few rows for `{command}`"
        );
        let checked = check_defaults(command, &help, &section);
        assert!(
            checked >= minimum,
            "only {checked} rows of `{command}` checked"
        );
    }
}

#[test]
fn flags_read_the_environment_as_the_reference_says() {
    let with_env: BTreeSet<String> = help_flags(ENV_COMMAND).into_keys().collect();
    let mut without_env = BTreeSet::new();
    for (command, _) in COMMANDS {
        for (name, flag) in help_flags(command) {
            if BUILT_IN.contains(&name.as_str()) {
                continue;
            }
            let expected = match ENV_EXCEPTIONS.iter().find(|(n, _)| *n == name) {
                Some((_, env)) => env.map(str::to_owned),
                None if with_env.contains(&name) => Some(format!(
                    "KUBE_PRESTOP_{}",
                    name.to_uppercase().replace('-', "_")
                )),
                None => {
                    without_env.insert((command, name.clone()));
                    None
                }
            };
            assert_eq!(
                flag.env, expected,
                "environment variable of `{command} --{name}`"
            );
        }
    }
    // The introduction names the exceptions and what they read, and says
    // which commands' flags read nothing.
    let intro = section(CHAPTER);
    for (name, env) in ENV_EXCEPTIONS {
        assert!(
            intro.contains(&format!("`--{name}`")),
            "{PAGE} {CHAPTER:?}: --{name}"
        );
        if let Some(env) = env {
            assert!(
                intro.contains(&format!("`{env}`")),
                "{PAGE} {CHAPTER:?}: {env}"
            );
        }
    }
    assert!(!without_env.is_empty());
    for (command, _) in &without_env {
        assert!(
            intro.contains(&format!("`{command}`")),
            "{PAGE} {CHAPTER:?} should say that flags of `{command}` read no environment variable: {without_env:?}"
        );
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
