//! The node's containerd log, read for the times of each pod's CRI calls:
//! containerd's CRI service logs every `RunPodSandbox`, `CreateContainer`
//! and `StartContainer` call at info level when it comes in and when it
//! returns, and each container's exit
//! (`internal/cri/instrument/instrumented_service.go` and
//! `internal/cri/server/events.go`, containerd 2.4; the same messages in
//! 1.6, whose CRI metadata print differently: both are read), each line stamped with the time of writing in RFC 3339 with
//! nanoseconds (`time="2026-12-02T01:02:03.123456789Z"`). The local cluster
//! writes that log to `<state>/logs/containerd.log` on this machine, whose
//! clock the node shares (the node is a network namespace here).
//!
//! Only what [`RuntimeLog::parse`] recognises is kept; any other line is
//! skipped. Containers are keyed by their sandbox and their name (a
//! container restarted in place keeps the first attempt).

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

/// One CRI call: when containerd logged it coming in and returning (ns
/// since the epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Call {
    /// The request was logged.
    pub requested: Option<i128>,
    /// The call returned successfully.
    pub returned: Option<i128>,
}

/// One container's calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerTimes {
    /// Its id (from `CreateContainer`'s answer).
    pub id: Option<String>,
    /// `CreateContainer`.
    pub create: Call,
    /// `StartContainer`.
    pub start: Call,
    /// When its process exited: the exit event's `exited_at` (set by the
    /// shim as it reaped the process), else the event's log time.
    pub exited: Option<i128>,
}

/// One pod sandbox's calls and its containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTimes {
    /// The sandbox id.
    pub sandbox_id: Option<String>,
    /// `RunPodSandbox`.
    pub run_sandbox: Call,
    /// Its containers by name.
    pub containers: HashMap<String, ContainerTimes>,
}

/// What the log says about each pod, keyed by `(namespace, pod name)`.
#[derive(Debug, Default)]
pub struct RuntimeLog {
    pods: HashMap<(String, String), PodTimes>,
}

// The patterns are constants (the tests compile each of them).
#[allow(clippy::expect_used)]
static LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^time="([^"]+)" level=\w+ msg="((?:[^"\\]|\\.)*)""#).expect("a valid pattern")
});
// containerd 1.x prints the CRI metadata in Go's struct syntax
// (`&PodSandboxMetadata{Name:N,Uid:U,Namespace:NS,Attempt:0,}`), 2.x in
// protobuf text (`name:"N"  uid:"U"  namespace:"NS"`, `attempt:` left out
// when 0).
#[allow(clippy::expect_used)]
static SANDBOX_V1: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"^RunPodSandbox for &PodSandboxMetadata\{Name:([^,]*),Uid:[^,]*,Namespace:([^,]*),Attempt:\d+,\}(?: returns sandbox id "([0-9a-f]+)")?$"#,
    )
    .expect("a valid pattern")
});
#[allow(clippy::expect_used)]
static SANDBOX_V2: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"^RunPodSandbox for name:"([^"]*)"\s+uid:"[^"]*"\s+namespace:"([^"]*)"(?:\s+attempt:\d+)?(?: returns sandbox id "([0-9a-f]+)")?$"#,
    )
    .expect("a valid pattern")
});
#[allow(clippy::expect_used)]
static CREATE_V1: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"^CreateContainer within sandbox "([0-9a-f]+)" for (?:container )?&ContainerMetadata\{Name:([^,]*),Attempt:(\d+),\}(?: returns container id "([0-9a-f]+)")?$"#,
    )
    .expect("a valid pattern")
});
#[allow(clippy::expect_used)]
static CREATE_V2: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"^CreateContainer within sandbox "([0-9a-f]+)" for (?:container )?name:"([^"]*)"(?:\s+attempt:(\d+))?(?: returns container id "([0-9a-f]+)")?$"#,
    )
    .expect("a valid pattern")
});
#[allow(clippy::expect_used)]
static START: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^StartContainer for "([0-9a-f]+)"( returns successfully)?$"#)
        .expect("a valid pattern")
});
#[allow(clippy::expect_used)]
static EXIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^received container exit event container_id:"([0-9a-f]+)"(?:.*exited_at:\{seconds:(\d+) +nanos:(\d+)\})?"#)
        .expect("a valid pattern")
});

/// An RFC 3339 time (any offset) in ns since the epoch.
pub fn parse_time(s: &str) -> Option<i128> {
    s.parse::<jiff::Timestamp>().ok().map(|t| t.as_nanosecond())
}

impl RuntimeLog {
    /// Reads containerd's log text (see the module docs).
    pub fn parse(text: &str) -> Self {
        let mut log = Self::default();
        // Container id -> (pod key, container name), from CreateContainer's answers.
        let mut by_id: HashMap<String, ((String, String), String)> = HashMap::new();
        // Sandbox id -> pod key.
        let mut sandboxes: HashMap<String, (String, String)> = HashMap::new();
        for line in text.lines() {
            let Some(m) = LINE.captures(line) else {
                continue;
            };
            let Some(at) = parse_time(&m[1]) else {
                continue;
            };
            let msg = m[2].replace("\\\"", "\"").replace("\\\\", "\\");
            if let Some(c) = SANDBOX_V1
                .captures(&msg)
                .or_else(|| SANDBOX_V2.captures(&msg))
            {
                let key = (c[2].to_owned(), c[1].to_owned());
                let pod = log.pods.entry(key.clone()).or_default();
                match c.get(3) {
                    None => {
                        pod.run_sandbox.requested.get_or_insert(at);
                    }
                    Some(id) if pod.sandbox_id.is_none() => {
                        pod.run_sandbox.returned = Some(at);
                        pod.sandbox_id = Some(id.as_str().to_owned());
                        sandboxes.insert(id.as_str().to_owned(), key);
                    }
                    Some(_) => {}
                }
            } else if let Some(c) = CREATE_V1
                .captures(&msg)
                .or_else(|| CREATE_V2.captures(&msg))
            {
                let Some(key) = sandboxes.get(&c[1]).cloned() else {
                    continue;
                };
                if c.get(3).is_some_and(|a| a.as_str() != "0") {
                    continue;
                }
                let name = c[2].to_owned();
                let Some(pod) = log.pods.get_mut(&key) else {
                    continue;
                };
                let ctr = pod.containers.entry(name.clone()).or_default();
                match c.get(4) {
                    None => {
                        ctr.create.requested.get_or_insert(at);
                    }
                    Some(id) if ctr.id.is_none() => {
                        ctr.create.returned = Some(at);
                        ctr.id = Some(id.as_str().to_owned());
                        by_id.insert(id.as_str().to_owned(), (key, name));
                    }
                    Some(_) => {}
                }
            } else if let Some(c) = START.captures(&msg) {
                if let Some(ctr) = log.container_mut(&by_id, &c[1]) {
                    if c.get(2).is_some() {
                        ctr.start.returned.get_or_insert(at);
                    } else {
                        ctr.start.requested.get_or_insert(at);
                    }
                }
            } else if let Some(c) = EXIT.captures(&msg) {
                let exited = match (c.get(2), c.get(3)) {
                    (Some(s), Some(n)) => s
                        .as_str()
                        .parse::<i128>()
                        .ok()
                        .zip(n.as_str().parse::<i128>().ok())
                        .map(|(s, n)| s * 1_000_000_000 + n),
                    _ => None,
                }
                .unwrap_or(at);
                if let Some(ctr) = log.container_mut(&by_id, &c[1]) {
                    ctr.exited.get_or_insert(exited);
                }
            }
        }
        log
    }

    fn container_mut(
        &mut self,
        by_id: &HashMap<String, ((String, String), String)>,
        id: &str,
    ) -> Option<&mut ContainerTimes> {
        let (key, name) = by_id.get(id)?;
        self.pods.get_mut(key)?.containers.get_mut(name)
    }

    /// The pod `namespace/name`, if the log has its sandbox.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodTimes> {
        self.pods.get(&(namespace.to_owned(), name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // As containerd 2.4.2 wrote them on the local cluster (ids shortened).
    const LOG: &str = r#"time="2026-12-02T01:00:00.100000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:p0-000-abcde,Uid:1f2e,Namespace:kpb-inj-x1,Attempt:0,}"
time="2026-12-02T01:00:00.150000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:p0-000-abcde,Uid:1f2e,Namespace:kpb-inj-x1,Attempt:0,} returns sandbox id \"aa11\""
time="2026-12-02T01:00:00.160000000Z" level=info msg="CreateContainer within sandbox \"aa11\" for container &ContainerMetadata{Name:kube-prestop-main,Attempt:0,}"
time="2026-12-02T01:00:00.170000000Z" level=info msg="CreateContainer within sandbox \"aa11\" for &ContainerMetadata{Name:kube-prestop-main,Attempt:0,} returns container id \"bb22\""
time="2026-12-02T01:00:00.171000000Z" level=info msg="StartContainer for \"bb22\""
time="2026-12-02T01:00:00.180000000Z" level=info msg="StartContainer for \"bb22\" returns successfully"
time="2026-12-02T01:00:00.190000000Z" level=info msg="something else \"bb22\""
time="2026-12-02T01:00:02.000000000Z" level=info msg="received container exit event container_id:\"bb22\" id:\"bb22\" pid:4242 exited_at:{seconds:1796173201 nanos:900000000}"
"#;

    #[test]
    fn reads_the_calls_of_a_pod() {
        let log = RuntimeLog::parse(LOG);
        let pod = log.pod("kpb-inj-x1", "p0-000-abcde").unwrap();
        let t = |s: &str| parse_time(s).unwrap();
        assert_eq!(pod.sandbox_id.as_deref(), Some("aa11"));
        assert_eq!(
            pod.run_sandbox,
            Call {
                requested: Some(t("2026-12-02T01:00:00.1Z")),
                returned: Some(t("2026-12-02T01:00:00.15Z"))
            }
        );
        let c = &pod.containers["kube-prestop-main"];
        assert_eq!(c.id.as_deref(), Some("bb22"));
        assert_eq!(c.create.requested, Some(t("2026-12-02T01:00:00.16Z")));
        assert_eq!(c.create.returned, Some(t("2026-12-02T01:00:00.17Z")));
        assert_eq!(c.start.requested, Some(t("2026-12-02T01:00:00.171Z")));
        assert_eq!(c.start.returned, Some(t("2026-12-02T01:00:00.18Z")));
        // exited_at, not the log line's time.
        assert_eq!(c.exited, Some(t("2026-12-02T01:00:01.9Z")));
        assert!(log.pod("kpb-inj-x1", "other").is_none());
    }

    // containerd 2.4.2's protobuf text, as the local cluster wrote it.
    const LOG_V2: &str = r#"time="2026-12-02T01:29:53.472303422Z" level=info msg="RunPodSandbox for name:\"p0-000-abcde\"  uid:\"cba8\"  namespace:\"kpb-inj-x1\""
time="2026-12-02T01:29:53.746621820Z" level=info msg="RunPodSandbox for name:\"p0-000-abcde\"  uid:\"cba8\"  namespace:\"kpb-inj-x1\" returns sandbox id \"4728\""
time="2026-12-02T01:29:53.751985690Z" level=info msg="CreateContainer within sandbox \"4728\" for container name:\"main\""
time="2026-12-02T01:29:53.791360572Z" level=info msg="CreateContainer within sandbox \"4728\" for name:\"main\" returns container id \"f043\""
time="2026-12-02T01:29:53.793880731Z" level=info msg="StartContainer for \"f043\""
time="2026-12-02T01:29:53.988723637Z" level=info msg="StartContainer for \"f043\" returns successfully"
time="2026-12-02T01:29:54.064204806Z" level=info msg="received container exit event container_id:\"f043\"  id:\"f043\"  pid:29460  exited_at:{seconds:1796174994  nanos:60052463}"
time="2026-12-02T01:29:55.000000000Z" level=info msg="CreateContainer within sandbox \"4728\" for container name:\"main\"  attempt:1"
"#;

    #[test]
    fn reads_containerd_2s_protobuf_text() {
        let log = RuntimeLog::parse(LOG_V2);
        let pod = log.pod("kpb-inj-x1", "p0-000-abcde").unwrap();
        let t = |s: &str| parse_time(s).unwrap();
        assert_eq!(
            pod.run_sandbox.returned,
            Some(t("2026-12-02T01:29:53.746621820Z"))
        );
        let c = &pod.containers["main"];
        assert_eq!(c.id.as_deref(), Some("f043"));
        // The restart (attempt 1) does not replace the first attempt.
        assert_eq!(
            c.create.requested,
            Some(t("2026-12-02T01:29:53.751985690Z"))
        );
        assert_eq!(c.start.returned, Some(t("2026-12-02T01:29:53.988723637Z")));
        assert_eq!(c.exited, Some(1_796_174_994_060_052_463));
    }

    #[test]
    fn skips_what_it_does_not_know() {
        let log = RuntimeLog::parse("garbage\ntime=\"bad\" level=info msg=\"x\"\n");
        assert!(log.pods.is_empty());
    }
}
