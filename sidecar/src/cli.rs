//! Command-line parsing, over the names in [`kube_prestop_contract`].
//!
//! ```text
//! kube-prestop install --dest PATH | --dest-dir DIR
//! kube-prestop watch   --container X [--started-after A,B] [--run-on always|success|failure]
//!                      [--hook-root sidecar|container] [--termination-message PATH]
//!                      [--pod-containers N] [--gate-port PORT] [--root DIR] -- HOOK [ARG...]
//! kube-prestop prestop --container X [--root DIR] -- HOOK [ARG...]
//! kube-prestop probe   --container X [--root DIR]
//! kube-prestop post-start --container X [--timeout SECONDS] [--root DIR]
//! kube-prestop signal SIGNAL
//! ```
//!
//! The first argument names the subcommand; [`lexopt`] lexes the flags
//! after it. Flags take their value as the next argument or after `=`; a
//! next argument that starts with `-` is not taken as a value (the flag
//! lacks one), so such a value must be given as `--flag=VALUE`. Everything
//! after the first `--` is the hook command, passed verbatim: as the
//! `OsString`s it came as, so an argument that is not UTF-8 reaches `exec`
//! unchanged (the subcommand and the flags' values must be UTF-8). Errors are
//! [`UsageError`]s; the binary prints them and exits with
//! [`contract::EXIT_USAGE`].

use std::ffi::OsString;
use std::path::PathBuf;

use kube_prestop_contract::{
    self as contract, COMMAND_SEPARATOR, FLAG_CONTAINER, FLAG_DEST, FLAG_DEST_DIR, FLAG_GATE_PORT,
    FLAG_HOOK_ROOT, FLAG_POD_CONTAINERS, FLAG_ROOT, FLAG_RUN_ON, FLAG_STARTED_AFTER,
    FLAG_TERMINATION_MESSAGE, FLAG_TIMEOUT, HookRoot, RunOn,
};
use lexopt::Arg;
use std::time::Duration;

/// Usage text printed by `--help` and after usage errors.
pub const USAGE: &str = "usage:
  kube-prestop install --dest PATH | --dest-dir DIR
  kube-prestop watch   --container NAME [--started-after NAME,...] [--run-on always|success|failure]
                       [--hook-root sidecar|container] [--termination-message PATH] [--pod-containers N]
                       [--gate-port PORT] [--root DIR] -- HOOK [ARG...]
  kube-prestop prestop --container NAME [--root DIR] -- HOOK [ARG...]
  kube-prestop probe   --container NAME [--root DIR]
  kube-prestop post-start --container NAME [--timeout SECONDS] [--root DIR]
  kube-prestop signal SIGNAL
  kube-prestop --help | --version";

/// A malformed command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Flags shared by `watch`, `prestop`, `probe` and `post-start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The watched container (a DNS label).
    pub container: String,
    /// Parent of our mounts (`bin/`, `state/`, `id/`; [`contract::MOUNT_PATH`]
    /// by default); the watched container's identifying mount point is
    /// `<root>/state/<container>/created` ([`contract::created_dir`]).
    pub root: PathBuf,
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cli {
    /// `install --dest PATH`.
    Install {
        /// Where to put the binary.
        dest: PathBuf,
    },
    /// `install --dest-dir DIR`: every architecture's binary
    /// ([`contract::FLAG_DEST_DIR`]).
    InstallArchitectures {
        /// The directory receiving `<arch>/kube-prestop-sidecar`.
        dest_dir: PathBuf,
    },
    /// `watch ... -- HOOK...`.
    Watch {
        /// The watched container and where our mounts are.
        target: Target,
        /// [`FLAG_STARTED_AFTER`]: the containers started after this
        /// sidecar; empty when not given.
        started_after: Vec<String>,
        /// [`FLAG_RUN_ON`] (default [`RunOn::Always`]).
        run_on: RunOn,
        /// [`FLAG_HOOK_ROOT`] (default [`HookRoot::Sidecar`]).
        hook_root: HookRoot,
        /// [`FLAG_TERMINATION_MESSAGE`] (default
        /// [`contract::TERMINATION_MESSAGE_PATH`]).
        termination_message: PathBuf,
        /// [`FLAG_POD_CONTAINERS`], when given (a positive count).
        pod_containers: Option<usize>,
        /// [`FLAG_GATE_PORT`], when given (1-65535): the start gate's port.
        gate_port: Option<u16>,
        /// The hook command, verbatim.
        hook: Vec<OsString>,
    },
    /// `prestop ... -- HOOK...`: the target and the command, verbatim.
    PreStop(Target, Vec<OsString>),
    /// `probe ...`.
    Probe(Target),
    /// `post-start ...`: wait until the watcher is armed.
    PostStart {
        /// The watched container and where our mounts are.
        target: Target,
        /// How long to wait ([`FLAG_TIMEOUT`]; default
        /// [`contract::POST_START_TIMEOUT_SECONDS`]).
        timeout: Duration,
    },
    /// `signal SIGNAL`: signal this container's first process
    /// ([`contract::SUBCOMMAND_SIGNAL`]).
    Signal(nix::sys::signal::Signal),
    /// `--help` / `-h`.
    Help,
    /// `--version` / `-V`.
    Version,
}

fn err<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// An argument as a `String`: the subcommand and the flags' values are
/// UTF-8 (container names, paths, numbers); the hook command need not be.
fn utf8(a: OsString) -> Result<String, UsageError> {
    a.into_string()
        .map_err(|a| UsageError(format!("argument {a:?} is not valid UTF-8")))
}

/// `value` of the numeric flag `flag`: plain ASCII decimal digits only, the
/// one rule for every numeric flag (`from_str` alone also takes a leading
/// `+`), in range for `T` and `valid`; else an error naming the flag, the
/// value and `what` it must be (`--gate-port "+80" is not a port (1-65535)`).
fn decimal<T: std::str::FromStr>(
    flag: &str,
    value: &str,
    what: &str,
    valid: impl Fn(&T) -> bool,
) -> Result<T, UsageError> {
    value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<T>().ok())
        .flatten()
        .filter(valid)
        .ok_or_else(|| UsageError(format!("{flag} {value:?} is not {what}")))
}

/// [`decimal`] for a flag whose range ends at `T`'s largest value
/// (`max`): digits that overflow `T` are named too large, with the
/// maximum and its `unit`, rather than "not a whole number".
fn decimal_up_to<T: std::str::FromStr + std::fmt::Display>(
    flag: &str,
    value: &str,
    what: &str,
    (max, unit): (T, &str),
    valid: impl Fn(&T) -> bool,
) -> Result<T, UsageError> {
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    if digits && value.parse::<T>().is_err() {
        return err(format!(
            "{flag} {value:?} is too large (at most {max}{unit})"
        ));
    }
    decimal(flag, value, what, valid)
}

/// Parses `args` (without the program name).
pub fn parse(args: &[OsString]) -> Result<Cli, UsageError> {
    let Some((sub, rest)) = args.split_first() else {
        return err("missing subcommand");
    };
    let sub = utf8(sub.clone())?;
    let sub = sub.as_str();
    match sub {
        "--help" | "-h" | "help" => return Ok(Cli::Help),
        "--version" | "-V" => return Ok(Cli::Version),
        _ => {}
    }
    if sub == contract::SUBCOMMAND_SIGNAL {
        let rest = rest
            .iter()
            .cloned()
            .map(utf8)
            .collect::<Result<Vec<_>, _>>()?;
        return match &rest[..] {
            [n] if n == "--help" || n == "-h" => Ok(Cli::Help),
            [n] => decimal(sub, n, "a signal number (1 to 31)", |n: &i32| {
                nix::sys::signal::Signal::try_from(*n).is_ok()
            })
            .and_then(|n| {
                nix::sys::signal::Signal::try_from(n)
                    .map(Cli::Signal)
                    .map_err(|e| UsageError(format!("{sub} {n}: {e}")))
            }),
            _ => err(format!("{sub} takes one argument, the signal number")),
        };
    }
    let known = [
        contract::SUBCOMMAND_INSTALL,
        contract::SUBCOMMAND_WATCH,
        contract::SUBCOMMAND_PRESTOP,
        contract::SUBCOMMAND_PROBE,
        contract::SUBCOMMAND_POST_START,
    ];
    if !known.contains(&sub) {
        return err(format!("unknown subcommand {sub:?}"));
    }
    let allowed: &[&str] = match sub {
        s if s == contract::SUBCOMMAND_INSTALL => &[FLAG_DEST, FLAG_DEST_DIR],
        s if s == contract::SUBCOMMAND_PROBE => &[FLAG_CONTAINER, FLAG_ROOT],
        s if s == contract::SUBCOMMAND_POST_START => &[FLAG_CONTAINER, FLAG_TIMEOUT, FLAG_ROOT],
        s if s == contract::SUBCOMMAND_WATCH => &[
            FLAG_CONTAINER,
            FLAG_STARTED_AFTER,
            FLAG_RUN_ON,
            FLAG_HOOK_ROOT,
            FLAG_TERMINATION_MESSAGE,
            FLAG_POD_CONTAINERS,
            FLAG_GATE_PORT,
            FLAG_ROOT,
        ],
        _ => &[FLAG_CONTAINER, FLAG_ROOT],
    };
    let takes_hook = sub == contract::SUBCOMMAND_WATCH || sub == contract::SUBCOMMAND_PRESTOP;

    // The flags, lexed by lexopt: `--flag=VALUE` and `--flag VALUE`; `-h`.
    let mut parser = lexopt::Parser::from_args(rest.iter().cloned());
    let mut values: Vec<(&'static str, String)> = Vec::new();
    let mut hook: Option<Vec<OsString>> = None;
    loop {
        // Everything after the first `--` is the hook command, verbatim
        // (lexopt would lex it as positional values).
        if let Some(mut raw) = parser.try_raw_args()
            && raw.next_if(|a| a == COMMAND_SEPARATOR).is_some()
        {
            if !takes_hook {
                return err(format!("{sub} takes no command after {COMMAND_SEPARATOR}"));
            }
            hook = Some(raw.collect());
            break;
        }
        let flag = match parser.next().map_err(|e| UsageError(e.to_string()))? {
            None => break,
            Some(Arg::Long("help") | Arg::Short('h')) => return Ok(Cli::Help),
            Some(Arg::Long(name)) => match allowed
                .iter()
                .find(|f| f.strip_prefix("--") == Some(name))
            {
                Some(flag) => *flag,
                None => return err(format!("unknown flag {:?} for {sub}", format!("--{name}"))),
            },
            Some(Arg::Short(c)) => {
                return err(format!("unknown flag {:?} for {sub}", format!("-{c}")));
            }
            Some(Arg::Value(a)) => {
                return err(format!("unexpected argument {:?} for {sub}", utf8(a)?));
            }
        };
        let value = match parser.optional_value() {
            Some(v) => v,
            // No value of ours starts with '-' (container names, paths,
            // seconds), so a next argument that does is the next flag, `--`
            // or `-h`: the value is missing. (`--flag=-value` still passes
            // one.)
            None => parser
                .try_raw_args()
                .and_then(|mut raw| raw.next_if(|v| !v.as_encoded_bytes().starts_with(b"-")))
                .ok_or_else(|| UsageError(format!("{flag} needs a value")))?,
        };
        let value = utf8(value)?;
        if value.is_empty() {
            return err(format!("{flag} needs a non-empty value"));
        }
        if values.iter().any(|(f, _)| *f == flag) {
            return err(format!("{flag} given twice"));
        }
        values.push((flag, value));
    }
    let get = |f: &str| values.iter().find(|(n, _)| *n == f).map(|(_, v)| v.clone());

    if sub == contract::SUBCOMMAND_INSTALL {
        return match (get(FLAG_DEST), get(FLAG_DEST_DIR)) {
            (Some(dest), None) => Ok(Cli::Install { dest: dest.into() }),
            (None, Some(dir)) => Ok(Cli::InstallArchitectures {
                dest_dir: dir.into(),
            }),
            (Some(_), Some(_)) => err(format!(
                "install takes {FLAG_DEST} or {FLAG_DEST_DIR}, not both"
            )),
            (None, None) => err(format!(
                "install needs {FLAG_DEST} PATH or {FLAG_DEST_DIR} DIR"
            )),
        };
    }
    let Some(container) = get(FLAG_CONTAINER) else {
        return err(format!("{sub} needs {FLAG_CONTAINER} NAME"));
    };
    if !contract::is_dns_label(&container) {
        return err(format!(
            "{FLAG_CONTAINER} {container:?} is not a valid container name (a DNS label: 1-63 of a-z, 0-9, '-')"
        ));
    }
    let target = Target {
        container,
        root: get(FLAG_ROOT)
            .unwrap_or_else(|| contract::MOUNT_PATH.to_owned())
            .into(),
    };
    if sub == contract::SUBCOMMAND_POST_START {
        let timeout = match get(FLAG_TIMEOUT) {
            None => Duration::from_secs(contract::POST_START_TIMEOUT_SECONDS),
            Some(v) => Duration::from_secs(decimal_up_to(
                FLAG_TIMEOUT,
                &v,
                "a whole number of seconds",
                (u64::MAX, " seconds"),
                |_: &u64| true,
            )?),
        };
        return Ok(Cli::PostStart { target, timeout });
    }
    if !takes_hook {
        return Ok(Cli::Probe(target));
    }
    let hook = match hook {
        Some(h) if !h.is_empty() && !h[0].is_empty() => h,
        _ => {
            return err(format!(
                "{sub} needs the hook command after {COMMAND_SEPARATOR}"
            ));
        }
    };
    if sub == contract::SUBCOMMAND_WATCH {
        let started_after: Vec<String> = get(FLAG_STARTED_AFTER)
            .map(|v| v.split(',').map(str::to_owned).collect())
            .unwrap_or_default();
        if let Some(bad) = started_after.iter().find(|n| !contract::is_dns_label(n)) {
            return err(format!(
                "{FLAG_STARTED_AFTER}: {bad:?} is not a valid container name (a DNS label: 1-63 of a-z, 0-9, '-')"
            ));
        }
        let run_on = match get(FLAG_RUN_ON) {
            None => RunOn::default(),
            Some(v) => RunOn::parse(&v).ok_or_else(|| {
                UsageError(format!(
                    "{FLAG_RUN_ON} {v:?} is not one of always, success, failure"
                ))
            })?,
        };
        let hook_root = match get(FLAG_HOOK_ROOT) {
            None => HookRoot::default(),
            Some(v) => HookRoot::parse(&v).ok_or_else(|| {
                UsageError(format!(
                    "{FLAG_HOOK_ROOT} {v:?} is not one of sidecar, container"
                ))
            })?,
        };
        let termination_message = get(FLAG_TERMINATION_MESSAGE)
            .unwrap_or_else(|| contract::TERMINATION_MESSAGE_PATH.to_owned())
            .into();
        let pod_containers = get(FLAG_POD_CONTAINERS)
            .map(|v| {
                decimal_up_to(
                    FLAG_POD_CONTAINERS,
                    &v,
                    "a positive whole number",
                    (usize::MAX, " containers"),
                    |n: &usize| *n > 0,
                )
            })
            .transpose()?;
        let gate_port = get(FLAG_GATE_PORT)
            .map(|v| decimal(FLAG_GATE_PORT, &v, "a port (1-65535)", |p: &u16| *p > 0))
            .transpose()?;
        Ok(Cli::Watch {
            target,
            started_after,
            run_on,
            hook_root,
            termination_message,
            pod_containers,
            gate_port,
            hook,
        })
    } else {
        Ok(Cli::PreStop(target, hook))
    }
}

/// What the binary does with its command line ([`decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// A valid command line.
    Run(Cli),
    /// A `prestop` that is not a valid wrapper invocation (malformed flags,
    /// a help flag before `--`) but has a command after `--`: the command
    /// runs, unrecorded, since the user's preStop must never be lost
    /// because of us.
    PreStopFallback {
        /// What is wrong with the wrapper's own arguments.
        why: String,
        /// The command after the first `--`, verbatim.
        hook: Vec<OsString>,
    },
    /// A usage error.
    Usage(UsageError),
}

/// Decides what `args` (without the program name) ask for: [`parse`], except
/// that a `prestop` command line that [`parse`] does not take for a wrapper
/// run ([`Cli::PreStop`]) but that has a command after `--` runs that
/// command ([`Invocation::PreStopFallback`]): `prestop --container X -h --
/// CMD` runs `CMD` rather than printing the usage. Without a command after
/// `--`, `prestop --help` prints the usage like every other subcommand.
pub fn decide(args: &[OsString]) -> Invocation {
    let parsed = parse(args);
    if args
        .first()
        .is_some_and(|a| a == contract::SUBCOMMAND_PRESTOP)
        && !matches!(parsed, Ok(Cli::PreStop(..)))
        && let Some(hook) = hook_after_separator(args)
    {
        let why = match parsed {
            Err(e) => e.0,
            Ok(_) => format!(
                "a help flag (-h, --help) before {COMMAND_SEPARATOR} is not a wrapper invocation"
            ),
        };
        return Invocation::PreStopFallback {
            why,
            hook: hook.to_vec(),
        };
    }
    match parsed {
        Ok(cli) => Invocation::Run(cli),
        Err(e) => Invocation::Usage(e),
    }
}

/// The hook command after the first `--`, if any: lets the `prestop` wrapper
/// still run the user's preStop when its own arguments are not a wrapper
/// invocation ([`decide`]).
pub fn hook_after_separator(args: &[OsString]) -> Option<&[OsString]> {
    let i = args.iter().position(|a| a == COMMAND_SEPARATOR)?;
    let h = &args[i + 1..];
    (!h.is_empty()).then_some(h)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    fn s(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn os_all(v: &[String]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// A contract-built command line without the binary, as `parse` takes it.
    fn os(v: &[String]) -> Vec<OsString> {
        os_all(&v[1..])
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn signal_parses_argos_kill_command() {
        use nix::sys::signal::Signal;
        // What Argo execs: the annotation's command with %d replaced.
        let mut argo = contract::argo_kill_command_at(contract::BINARY_PATH);
        for a in &mut argo {
            *a = a.replace(contract::ARGO_SIGNAL_PLACEHOLDER, "15");
        }
        assert_eq!(parse(&os(&argo)).unwrap(), Cli::Signal(Signal::SIGTERM));
        assert_eq!(
            parse(&s(&["signal", "9"])).unwrap(),
            Cli::Signal(Signal::SIGKILL)
        );
        for bad in [
            &["signal"][..],
            &["signal", "TERM"],
            &["signal", "0"],
            &["signal", "+15"],
            &["signal", "-9"],
            &["signal", " 9"],
            &["signal", "32"],
            &["signal", "15", "1"],
        ] {
            let e = parse(&s(bad)).unwrap_err().0;
            assert!(e.starts_with("signal"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn run_on_and_hook_root_parse() {
        let w = contract::watch_command_with(
            "main",
            &contract::WatchOptions {
                started_after: vec![],
                run_on: RunOn::Failure,
                hook_root: HookRoot::Container,
                pod_containers: 5,
                gate_port: Some(17430),
            },
            &strings(&["true"]),
        );
        let Cli::Watch {
            run_on,
            hook_root,
            pod_containers,
            gate_port,
            ..
        } = parse(&os(&w)).unwrap()
        else {
            unreachable!()
        };
        assert_eq!((run_on, hook_root), (RunOn::Failure, HookRoot::Container));
        assert_eq!(pod_containers, Some(5));
        assert_eq!(gate_port, Some(17430));
        for bad in ["0", "65536", "http", "17430x"] {
            let e = parse(&s(&[
                "watch",
                "--container",
                "m",
                "--gate-port",
                bad,
                "--",
                "x",
            ]))
            .unwrap_err()
            .0;
            assert!(e.contains(&format!("--gate-port {bad:?}")), "{e}");
        }
        let bad = parse(&s(&[
            "watch",
            "--container",
            "m",
            "--pod-containers",
            "many",
            "--",
            "x",
        ]));
        assert!(
            bad.unwrap_err().0.contains("--pod-containers \"many\""),
            "names the flag and the value"
        );
        // Digits beyond usize: too large, with the maximum, not "not a
        // positive whole number".
        let pod_containers = |v: &str| {
            parse(&s(&[
                "watch",
                "--container",
                "m",
                "--pod-containers",
                v,
                "--",
                "x",
            ]))
            .map_err(|e| e.0)
        };
        assert_eq!(
            pod_containers("99999999999999999999").unwrap_err(),
            format!(
                "--pod-containers \"99999999999999999999\" is too large (at most {} containers)",
                usize::MAX
            )
        );
        assert!(
            pod_containers("0")
                .unwrap_err()
                .contains("is not a positive whole number")
        );
        let bad = parse(&s(&[
            "watch",
            "--container",
            "m",
            "--run-on",
            "sometimes",
            "--",
            "x",
        ]));
        assert_eq!(
            bad.unwrap_err().0,
            "--run-on \"sometimes\" is not one of always, success, failure"
        );
        let bad = parse(&s(&[
            "watch",
            "--container",
            "m",
            "--hook-root=host",
            "--",
            "x",
        ]));
        assert_eq!(
            bad.unwrap_err().0,
            "--hook-root \"host\" is not one of sidecar, container"
        );
        let c = parse(&s(&[
            "watch",
            "--container",
            "m",
            "--termination-message",
            "/tmp/t",
            "--",
            "x",
        ]))
        .unwrap();
        assert!(
            matches!(c, Cli::Watch { termination_message, .. } if termination_message == Path::new("/tmp/t"))
        );
    }

    #[test]
    fn contract_commands_parse() {
        let hook = strings(&["sh", "-c", "echo bye", "--", "--container"]);
        let w = contract::watch_command("main", &strings(&["side-2", "main"]), &hook);
        let Cli::Watch {
            target: t,
            started_after,
            hook: h,
            run_on,
            hook_root,
            termination_message,
            pod_containers,
            gate_port,
        } = parse(&os(&w)).unwrap()
        else {
            unreachable!()
        };
        assert_eq!(pod_containers, None);
        assert_eq!(gate_port, None);
        assert_eq!(run_on, RunOn::Always);
        assert_eq!(hook_root, HookRoot::Sidecar);
        assert_eq!(
            termination_message,
            PathBuf::from(contract::TERMINATION_MESSAGE_PATH)
        );
        assert_eq!(started_after, strings(&["side-2", "main"]));
        assert_eq!(t.container, "main");
        assert_eq!(t.root, PathBuf::from(contract::MOUNT_PATH));
        assert_eq!(h, os_all(&hook));
        let p = contract::prestop_command("main", &hook);
        assert!(matches!(parse(&os(&p)).unwrap(), Cli::PreStop(_, h) if h == os_all(&hook)));
        let pr = contract::probe_command("main");
        assert!(matches!(parse(&os(&pr)).unwrap(), Cli::Probe(t) if t.container == "main"));
        let ps = contract::post_start_command("main");
        assert_eq!(
            parse(&os(&ps)).unwrap(),
            Cli::PostStart {
                target: Target {
                    container: "main".to_owned(),
                    root: contract::MOUNT_PATH.into(),
                },
                timeout: Duration::from_secs(contract::POST_START_TIMEOUT_SECONDS),
            }
        );
        let i = contract::install_command();
        assert_eq!(
            parse(&os(&i)).unwrap(),
            Cli::Install {
                dest: contract::BINARY_PATH.into()
            }
        );
        assert_eq!(
            parse(&s(&["install", "--dest-dir", "/out"])).unwrap(),
            Cli::InstallArchitectures {
                dest_dir: "/out".into()
            }
        );
        assert!(parse(&s(&["install", "--dest", "/a", "--dest-dir", "/b"])).is_err());
    }

    #[test]
    fn overrides_and_equals_form() {
        let c = parse(&s(&[
            "watch",
            "--container=a",
            "--root",
            "/r",
            "--termination-message=/t",
            "--",
            "x",
        ]))
        .unwrap();
        let Cli::Watch {
            target: t,
            started_after,
            ..
        } = c
        else {
            unreachable!()
        };
        assert!(started_after.is_empty());
        assert_eq!(t.root, PathBuf::from("/r"));
    }

    #[test]
    fn bad_input() {
        for bad in [
            vec![],
            s(&["frobnicate"]),
            s(&["watch", "--container", "a"]),
            s(&["watch", "--container", "a", "--"]),
            s(&["watch", "--container", "a", "--", ""]),
            s(&["watch", "--bogus", "x", "--container", "a", "--", "x"]),
            s(&["watch", "--container", "--", "x"]),
            s(&["watch", "--container", "A_B", "--", "x"]),
            s(&["watch", "--container", "../etc", "--", "x"]),
            s(&["watch", "--container", "a", "--container", "b", "--", "x"]),
            s(&["watch", "stray", "--container", "a", "--", "x"]),
            s(&["probe", "--container", "a", "--", "x"]),
            s(&["probe", "--container", "a", "--timeout", "1"]),
            s(&["post-start", "--container", "a", "--timeout", "1.5"]),
            s(&["post-start", "--container", "a", "--timeout", "-1"]),
            s(&["post-start", "--container", "a", "--", "x"]),
            s(&["post-start", "--container", "a", "--id-root", "/x"]),
            s(&["watch", "--container", "a", "--id-root", "/x", "--", "x"]),
            s(&["prestop", "--container", "a", "--id-root=/x", "--", "x"]),
            s(&[
                "watch",
                "--container",
                "a",
                "--started-after",
                "a,",
                "--",
                "x",
            ]),
            s(&[
                "watch",
                "--container",
                "a",
                "--started-after",
                "A",
                "--",
                "x",
            ]),
            s(&[
                "prestop",
                "--container",
                "a",
                "--started-after",
                "a",
                "--",
                "x",
            ]),
            s(&["probe", "--container", "a", "--id-root", "/x"]),
            s(&["probe"]),
            s(&["install"]),
            s(&["install", "--dest"]),
            s(&["install", "--dest", ""]),
            s(&["install", "--container", "a"]),
        ] {
            assert!(parse(&bad).is_err(), "{bad:?} should fail");
        }
        assert_eq!(parse(&s(&["--help"])).unwrap(), Cli::Help);
        assert_eq!(parse(&s(&["probe", "-h"])).unwrap(), Cli::Help);
        assert_eq!(parse(&s(&["--version"])).unwrap(), Cli::Version);
    }

    #[test]
    fn a_flag_without_a_value_does_not_take_the_next_flag() {
        for (args, flag) in [
            (
                s(&["post-start", "--container", "--timeout", "5"]),
                "--container",
            ),
            (
                s(&["post-start", "--container", "a", "--root", "--timeout", "5"]),
                "--root",
            ),
            (s(&["probe", "--container", "a", "--root", "-h"]), "--root"),
            (
                s(&["watch", "--root", "--container", "a", "--", "x"]),
                "--root",
            ),
            (
                s(&["post-start", "--container", "a", "--timeout"]),
                "--timeout",
            ),
            (s(&["install", "--dest", "--container"]), "--dest"),
        ] {
            let e = parse(&args).unwrap_err();
            assert_eq!(e.0, format!("{flag} needs a value"), "{args:?}");
        }
        // A value that starts with '-' can still be given after '='.
        let Cli::Probe(t) = parse(&s(&["probe", "--container", "a", "--root=-r"])).unwrap() else {
            unreachable!()
        };
        assert_eq!(t.root, PathBuf::from("-r"));
    }

    #[test]
    fn errors_name_the_argument_and_the_hook_stays_verbatim() {
        let e = |v: &[&str]| parse(&s(v)).unwrap_err().0;
        assert_eq!(
            e(&["probe", "--container", "a", "--bogus=x"]),
            "unknown flag \"--bogus\" for probe"
        );
        assert_eq!(
            e(&["probe", "--container", "a", "-x"]),
            "unknown flag \"-x\" for probe"
        );
        assert_eq!(
            e(&["probe", "stray", "--container", "a"]),
            "unexpected argument \"stray\" for probe"
        );
        assert_eq!(
            e(&["probe", "--container="]),
            "--container needs a non-empty value"
        );
        assert_eq!(
            e(&["probe", "--root", "/a", "--container", "a", "--root=/b"]),
            "--root given twice"
        );
        assert_eq!(
            e(&["probe", "--container", "a", "--", "x"]),
            "probe takes no command after --"
        );
        // After the first `--` nothing is a flag, `-h` and `--` included.
        let hook = s(&["-h", "--help", "--", "--container=b", "x"]);
        let mut args = s(&["prestop", "--container", "a", "--"]);
        args.extend(hook.iter().cloned());
        assert!(
            matches!(parse(&args).unwrap(), Cli::PreStop(t, h) if h == hook && t.container == "a")
        );
        // `--help` anywhere before it.
        assert_eq!(
            parse(&s(&["watch", "--container", "a", "--help", "--", "x"])).unwrap(),
            Cli::Help
        );
    }

    #[test]
    fn timeout_is_plain_decimal_digits() {
        // `--timeout=V`, so that values starting with '-' reach the check too.
        let timeout = |v: &str| match parse(&s(&[
            "post-start",
            "--container",
            "a",
            &format!("--timeout={v}"),
        ])) {
            Ok(Cli::PostStart { timeout, .. }) => Ok(timeout),
            Ok(other) => unreachable!("{other:?}"),
            Err(e) => Err(e.0),
        };
        assert_eq!(timeout("0"), Ok(Duration::ZERO));
        assert_eq!(timeout("30"), Ok(Duration::from_secs(30)));
        assert_eq!(timeout("007"), Ok(Duration::from_secs(7)));
        for bad in ["+1", "-1", " 1", "1 ", "1.5", "1e3", "0x10", "١"] {
            let e = timeout(bad).unwrap_err();
            assert!(e.contains("not a whole number of seconds"), "{bad:?}: {e}");
        }
        // Digits beyond u64: too large, with the maximum, not "not a
        // whole number".
        assert_eq!(
            timeout(&u64::MAX.to_string()),
            Ok(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            timeout("99999999999999999999").unwrap_err(),
            "--timeout \"99999999999999999999\" is too large (at most 18446744073709551615 seconds)"
        );
    }

    #[test]
    fn the_hook_command_is_kept_verbatim_even_when_not_utf8() {
        use std::os::unix::ffi::OsStringExt as _;
        let bytes = OsString::from_vec(b"caf\xe9".to_vec());
        for sub in ["prestop", "watch"] {
            let mut args = s(&[sub, "--container", "a", "--", "printf"]);
            args.push(bytes.clone());
            let hook = match parse(&args).unwrap() {
                Cli::PreStop(_, hook) | Cli::Watch { hook, .. } => hook,
                other => unreachable!("{other:?}"),
            };
            assert_eq!(hook, vec![OsString::from("printf"), bytes.clone()], "{sub}");
        }
        // The flags' values are names, paths and numbers: UTF-8 only.
        let mut args = s(&["probe", "--container", "a", "--root"]);
        args.push(bytes.clone());
        assert_eq!(
            parse(&args).unwrap_err().0,
            "argument \"caf\\xE9\" is not valid UTF-8"
        );
    }

    #[test]
    fn a_prestop_that_is_not_a_wrapper_run_still_runs_its_command() {
        for help in ["-h", "--help", "--help=1", "-hc"] {
            let args = s(&["prestop", "--container", "x", help, "--", "cmd", "-h"]);
            assert_eq!(parse(&args), Ok(Cli::Help), "{help}");
            let Invocation::PreStopFallback { why, hook } = decide(&args) else {
                unreachable!("{help}: {:?}", decide(&args))
            };
            assert_eq!(hook, s(&["cmd", "-h"]), "{help}");
            assert!(why.contains("help flag"), "{why}");
        }
        let Invocation::PreStopFallback { why, hook } =
            decide(&s(&["prestop", "--bogus", "--", "cmd"]))
        else {
            unreachable!()
        };
        assert_eq!(
            (why.as_str(), hook),
            ("unknown flag \"--bogus\" for prestop", s(&["cmd"]))
        );
        // Without a command after `--`: the usage, or the usage error.
        for args in [
            &["prestop", "--help"][..],
            &["prestop", "--container", "x", "-h", "--"],
        ] {
            assert_eq!(decide(&s(args)), Invocation::Run(Cli::Help), "{args:?}");
        }
        assert!(matches!(
            decide(&s(&["prestop", "--bogus"])),
            Invocation::Usage(_)
        ));
        // A valid wrapper run, and other subcommands' help, are as parsed.
        assert!(matches!(
            decide(&s(&["prestop", "--container", "x", "--", "cmd"])),
            Invocation::Run(Cli::PreStop(..))
        ));
        assert_eq!(
            decide(&s(&["watch", "--container", "x", "-h", "--", "cmd"])),
            Invocation::Run(Cli::Help)
        );
    }

    #[test]
    fn numeric_flags_are_plain_decimal_digits() {
        // One rule for every numeric flag: ASCII decimal digits only
        // (`from_str` alone also takes a leading '+').
        let watch = |flag: &str, v: &str| {
            parse(&s(&[
                "watch",
                "--container",
                "a",
                &format!("{flag}={v}"),
                "--",
                "x",
            ]))
        };
        for flag in ["--pod-containers", "--gate-port"] {
            assert!(watch(flag, "3").is_ok(), "{flag}");
            assert!(watch(flag, "007").is_ok(), "{flag}");
            for bad in ["+3", "-3", " 3", "3 ", "0x10", "1e3", "٣", "3.0"] {
                let e = watch(flag, bad).unwrap_err().0;
                assert!(e.starts_with(&format!("{flag} {bad:?} is not ")), "{e}");
            }
        }
        let Cli::Watch {
            pod_containers,
            gate_port,
            ..
        } = parse(&s(&[
            "watch",
            "--container",
            "a",
            "--pod-containers=007",
            "--gate-port=080",
            "--",
            "x",
        ]))
        .unwrap()
        else {
            unreachable!()
        };
        assert_eq!((pod_containers, gate_port), (Some(7), Some(80)));
        let e = parse(&s(&["post-start", "--container", "a", "--timeout=+5"]))
            .unwrap_err()
            .0;
        assert_eq!(e, "--timeout \"+5\" is not a whole number of seconds");
    }

    #[test]
    fn hook_after_separator_finds_the_command() {
        assert_eq!(
            hook_after_separator(&s(&["prestop", "--bogus", "--", "a", "b"])),
            Some(&s(&["a", "b"])[..])
        );
        assert_eq!(hook_after_separator(&s(&["prestop", "--"])), None);
        assert_eq!(hook_after_separator(&s(&["prestop"])), None);
    }
}
