//! Hook records on the node: every scenario gets its own directory under the
//! node's hostPath directory (`KUBE_PRESTOP_NODE_HOSTPATH`, default
//! `/var/lib/kube-prestop/cluster/hostpath`), mounted at [`RECORDS_MOUNT`] in
//! the watched container. The sidecar inherits the container's volumeMounts, so
//! a hook appending a line there leaves a record that outlives the pod; the
//! test counts the lines on the host ("exactly once" is counted, not assumed).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use crate::unique_suffix;
use crate::waits::poll_until;

/// Where the records directory is mounted in the watched containers.
pub const RECORDS_MOUNT: &str = "/records";

/// Name of the records volume in the pods.
pub const RECORDS_VOLUME: &str = "records";

/// A hook line that records who ran it: the sidecar sets
/// `KUBE_PRESTOP_CONTAINER`/`INSTANCE`/`ATTEMPT`; a preStop run by the kubelet
/// (through the wrapper) has none of them and records `by-kubelet`.
pub const RECORD_HOOK: &str = "echo \"${KUBE_PRESTOP_CONTAINER:-by-kubelet} \
${KUBE_PRESTOP_INSTANCE:-none} ${KUBE_PRESTOP_ATTEMPT:-0}\" >> /records/hooks";

/// The node directory the test reads on the host.
pub fn node_hostpath() -> PathBuf {
    std::env::var_os("KUBE_PRESTOP_NODE_HOSTPATH").map_or_else(
        || PathBuf::from("/var/lib/kube-prestop/cluster/hostpath"),
        PathBuf::from,
    )
}

/// A per-scenario records directory on the node (and on the host: the same path).
#[derive(Debug, Clone)]
pub struct Records {
    pub host_dir: PathBuf,
}

impl Records {
    /// Creates `<hostpath>/e2e-records/<tag>-<suffix>`, mode 0777 so that
    /// non-root hooks can write to it.
    pub fn create(tag: &str) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt as _;
        let base = node_hostpath().join("e2e-records");
        let dir = base.join(format!("{tag}-{}", unique_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for d in [&base, &dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777))
                .with_context(|| format!("chmod {}", d.display()))?;
        }
        Ok(Self { host_dir: dir })
    }

    /// The hostPath volume for the pod spec.
    pub fn volume(&self) -> Value {
        json!({
            "name": RECORDS_VOLUME,
            "hostPath": { "path": self.host_dir.to_string_lossy(), "type": "Directory" }
        })
    }

    /// The volumeMount for a container.
    pub fn mount() -> Value {
        json!({ "name": RECORDS_VOLUME, "mountPath": RECORDS_MOUNT })
    }

    /// Host path of a record file.
    pub fn path(&self, file: &str) -> PathBuf {
        self.host_dir.join(file)
    }

    /// Non-empty lines of a record file (none if it does not exist).
    pub fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(file))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Creates an (empty) file the pod can poll for, e.g. a release signal.
    pub fn touch(&self, file: &str) -> Result<()> {
        std::fs::write(self.path(file), b"").with_context(|| format!("touch {file}"))
    }

    /// Waits until the file has at least `n` lines; returns all of them.
    pub async fn wait_lines(&self, file: &str, n: usize, timeout: Duration) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        let ok = poll_until(timeout, Duration::from_millis(250), || {
            lines = self.lines(file);
            let done = lines.len() >= n;
            async move { Ok(done) }
        })
        .await;
        if ok.is_err() {
            bail!(
                "record {} has {} line(s), expected at least {n} within {timeout:?}: {lines:?}",
                self.path(file).display(),
                lines.len()
            );
        }
        Ok(lines)
    }

    /// Everything recorded, for failure reports.
    pub fn dump(&self) -> String {
        let mut out = format!("records in {}:\n", self.host_dir.display());
        if let Ok(entries) = std::fs::read_dir(&self.host_dir) {
            for e in entries.flatten() {
                let body = std::fs::read_to_string(e.path()).unwrap_or_default();
                out.push_str(&format!(
                    "  {}: {body:?}\n",
                    e.file_name().to_string_lossy()
                ));
            }
        }
        out
    }

    /// Removes the directory.
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.host_dir);
    }
}

/// Checks the records file holds exactly `n` lines once the pod is finished
/// (waits for at least `n`, then requires exactly `n`).
pub async fn ensure_records(records: &Records, file: &str, n: usize) -> Result<Vec<String>> {
    let lines = records.wait_lines(file, n, Duration::from_secs(30)).await?;
    ensure!(
        lines.len() == n,
        "record {file}: {} line(s), expected exactly {n}: {lines:?}",
        lines.len()
    );
    Ok(lines)
}
