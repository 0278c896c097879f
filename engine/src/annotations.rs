//! Pod annotations: the per-pod settings the engine reads and the status it
//! writes. All live under the `kube-prestop.io/` prefix; the table for users
//! is `ANNOTATIONS.md` beside this file.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_prestop_contract::{HookRoot, RunOn};

use super::EngineError;
use super::config::ResourceDefaults;
use super::quantity::{self, FloorError};
use super::shown::{MAX_SHOWN_VALUE_CHARS, shown};

/// Prefix of every kube-prestop annotation and label.
pub const PREFIX: &str = "kube-prestop.io/";
/// `"true"` opts a non-Job pod in, `"false"` opts any pod out.
pub const INJECT: &str = "kube-prestop.io/inject";
/// Restricts injection to the named containers (comma-separated).
pub const CONTAINERS: &str = "kube-prestop.io/containers";
/// When the hook runs, by how the container ended: `always` (default),
/// `success`, `failure`; for every watched container or per container (see
/// [`PerContainer`]).
pub const RUN_ON: &str = "kube-prestop.io/run-on";
/// Where the hook's root directory is: `sidecar` (default) or `container`
/// (chrooted into the exited container's file system); for every watched
/// container or per container (see [`PerContainer`]).
pub const HOOK_ROOT: &str = "kube-prestop.io/hook-root";
/// How the kubelet waits for each sidecar's watcher to be armed before it
/// starts the pod's next containers ([`StartGate`]): `exec` (default),
/// `http-get` (opt-in; the exec gate still for `hostNetwork` and mesh pods)
/// or `none` (opt-in: no wait).
pub const GATE: &str = "kube-prestop.io/gate";
/// Overrides the sidecar's `resources.requests.cpu`.
pub const SIDECAR_CPU_REQUEST: &str = "kube-prestop.io/sidecar-cpu-request";
/// Overrides the sidecar's `resources.requests.memory`.
pub const SIDECAR_MEMORY_REQUEST: &str = "kube-prestop.io/sidecar-memory-request";
/// Overrides the sidecar's `resources.limits.cpu`.
pub const SIDECAR_CPU_LIMIT: &str = "kube-prestop.io/sidecar-cpu-limit";
/// Overrides the sidecar's `resources.limits.memory`.
pub const SIDECAR_MEMORY_LIMIT: &str = "kube-prestop.io/sidecar-memory-limit";
/// Written on injection: [`STATUS_INJECTED`].
pub const STATUS: &str = "kube-prestop.io/status";
/// Value of [`STATUS`] on an injected pod.
pub const STATUS_INJECTED: &str = "injected";
/// Written on injection: the webhook crate's version.
pub const VERSION: &str = "kube-prestop.io/version";
/// Written on a pod admitted without the sidecar because it cannot be
/// injected under the failure mode `allow` (an [`EngineError`], or a pod
/// the patch would take over the size bound), or because it opted in
/// ([`INJECT`] `"true"`) and is skipped anyway: `<reason>: <message>`
/// ([`skipped_value`]), where `<reason>` is the decision's stable
/// metric/log label (e.g. `mount_path_conflict`, `restart_policy_always`)
/// and `<message>` the admission warning's text after its `kube-prestop:`
/// prefix, at most [`MAX_SKIPPED_MESSAGE_BYTES`]. The admission warning
/// alone is dropped by a controller creating the pod (the Job controller);
/// this annotation stays on the pod. Never written on a pod skipped for
/// an ordinary reason it did not opt in against, nor on a refused one
/// (failure mode `deny`). Removed from a pod that is injected (the value
/// a copied manifest carries would be false there).
pub const SKIPPED: &str = "kube-prestop.io/skipped";
/// Longest `<message>` of [`SKIPPED`]'s value, in bytes (its `…` included
/// when it is cut).
pub const MAX_SKIPPED_MESSAGE_BYTES: usize = 1024;
/// kubectl's default container for `logs`/`exec`; set to `spec.containers[0]`
/// (kubectl's own default without it, never an init container) when the pod
/// does not set it.
pub const DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";

/// Label written on injection, [`INJECTED_LABEL_VALUE`]: what the outcome
/// exporter's pod watch selects (`kube-prestop.io/injected=true`), so it
/// lists and watches injected pods only, not every pod of the cluster.
pub const INJECTED_LABEL: &str = "kube-prestop.io/injected";
/// Value of [`INJECTED_LABEL`].
pub const INJECTED_LABEL_VALUE: &str = "true";

/// The annotations under [`PREFIX`] a user sets, in the documented order.
pub const SETTABLE: [&str; 9] = [
    INJECT,
    CONTAINERS,
    SIDECAR_CPU_REQUEST,
    SIDECAR_MEMORY_REQUEST,
    SIDECAR_CPU_LIMIT,
    SIDECAR_MEMORY_LIMIT,
    RUN_ON,
    HOOK_ROOT,
    GATE,
];

/// The sidecar's `lifecycle.postStart` handler, which holds the pod's next
/// containers until its watcher is armed ([`GATE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartGate {
    /// An exec of the binary's `post-start`
    /// ([`kube_prestop_contract::SUBCOMMAND_POST_START`]), the default: a
    /// `runc exec` (about 40 ms of pod start), and nothing can make the
    /// kubelet fail it while the watcher starts.
    #[default]
    Exec,
    /// An `httpGet` to the watcher's gate port
    /// ([`kube_prestop_contract::FLAG_GATE_PORT`]): one request from the
    /// kubelet, no `runc exec` (about 40 ms less pod start on an idle node).
    /// The kubelet sends it right after the runtime's `StartContainer`
    /// returns and fails it if nothing listens yet (`docs/facts.md` K14):
    /// a sidecar starved of CPU loses that race, and the kubelet restarts
    /// it with back-off, so on a CPU-saturated node the pod may not start
    /// for minutes (measured: `docs/figures.md`). Not for `hostNetwork`
    /// pods or pods with a mesh's proxy: they get [`StartGate::Exec`].
    HttpGet,
    /// No postStart handler: the kubelet starts the pod's next containers in
    /// the first pod sync that sees the sidecar running (kubelet v1.37.2
    /// `kuberuntime_container.go` `computeInitContainerActions`; K2), which
    /// saves the gate's round trip (about 40 ms of pod start for the exec).
    /// The watcher is then usually armed before X's process exists, but not
    /// always (a CPU-starved sidecar): X found running is watched as usual;
    /// an instance that exited before the watcher looked gets the late run
    /// at the pod's end (`KUBE_PRESTOP_LATE=1`, exit status unknown), and
    /// under `restartPolicy: OnFailure` an instance that exited unseen
    /// before a later one was found gets no run.
    None,
}

impl StartGate {
    /// The annotation's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HttpGet => "http-get",
            Self::Exec => "exec",
            Self::None => "none",
        }
    }

    /// Parses the annotation's value (exact, lower case).
    pub fn parse(v: &str) -> Option<Self> {
        [Self::HttpGet, Self::Exec, Self::None]
            .into_iter()
            .find(|g| g.as_str() == v)
    }
}
/// The annotations under [`PREFIX`] the webhook writes.
pub const WRITTEN: [&str; 3] = [STATUS, VERSION, SKIPPED];

/// [`SKIPPED`]'s value: `<label>: <message>`, the message cut to at most
/// [`MAX_SKIPPED_MESSAGE_BYTES`] on a character boundary and ended with
/// `…` when cut.
pub fn skipped_value(label: &str, message: &str) -> String {
    const MARK: &str = "…";
    let message = if message.len() <= MAX_SKIPPED_MESSAGE_BYTES {
        std::borrow::Cow::Borrowed(message)
    } else {
        let mut end = MAX_SKIPPED_MESSAGE_BYTES - MARK.len();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let kept = message.get(..end).unwrap_or_default();
        std::borrow::Cow::Owned(format!("{kept}{MARK}"))
    };
    format!("{label}: {message}")
}

/// Largest Damerau-Levenshtein distance (edits, a swap of two adjacent
/// characters counting as one) between an unknown key and a known one for
/// the known one to be suggested.
const SUGGESTION_MAX_EDITS: usize = 3;

/// Most unknown annotations reported one by one ([`unknown_annotations`]);
/// the others are only counted ([`UnknownAnnotations::more`]), so the
/// warnings of a pod stay a few kilobytes whatever it carries.
pub const MAX_UNKNOWN_ANNOTATIONS_LISTED: usize = 5;

/// Longest name (the part after [`PREFIX`]) of an unknown annotation shown
/// in full, in characters: 63, the longest valid annotation name
/// (`IsQualifiedName` in k8s.io/apimachinery `pkg/util/validation`). A
/// longer one is shown cut there, with its length ([`crate::shown`]).
pub const MAX_SHOWN_NAME_CHARS: usize = crate::shown::MAX_SHOWN_NAME_CHARS;

/// An annotation under [`PREFIX`] that kube-prestop does not know, most
/// likely misspelt. It is ignored (the pod is handled as if it were absent);
/// the webhook reports it as an admission warning and in its log, `inject`
/// on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAnnotation {
    /// The key as written, e.g. `kube-prestop.io/contianers` (whole: for
    /// finding it; [`Self::shown_key`] is what messages show).
    pub key: String,
    /// The nearest settable key, when it is at most
    /// [`SUGGESTION_MAX_EDITS`] edits away, e.g. `kube-prestop.io/containers`.
    pub suggestion: Option<&'static str>,
}

impl UnknownAnnotation {
    /// The key for messages ([`crate::shown::shown`]): whole when its
    /// name has at most [`MAX_SHOWN_NAME_CHARS`] characters, else cut there
    /// and marked `...(N bytes)` with the key's length in bytes; control
    /// characters escaped (a key is not validated before admission).
    pub fn shown_key(&self) -> String {
        let name = self.key.strip_prefix(PREFIX).unwrap_or(&self.key);
        // The prefix is ASCII: its bytes are characters.
        let prefix_chars = self.key.len() - name.len();
        shown(&self.key, prefix_chars + MAX_SHOWN_NAME_CHARS).to_string()
    }
}

impl std::fmt::Display for UnknownAnnotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown annotation {} is ignored", self.shown_key())?;
        if let Some(suggestion) = self.suggestion {
            write!(f, " (did you mean {suggestion}?)")?;
        }
        write!(f, "; known annotations: {}", SETTABLE.join(", "))
    }
}

/// The unknown annotations of a pod (see [`unknown_annotations`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnknownAnnotations {
    /// The first [`MAX_UNKNOWN_ANNOTATIONS_LISTED`], in key order.
    pub listed: Vec<UnknownAnnotation>,
    /// How many more there are (not listed, no suggestion computed).
    pub more: usize,
}

/// The annotations under [`PREFIX`] that are neither [`SETTABLE`] nor
/// [`WRITTEN`]: the first [`MAX_UNKNOWN_ANNOTATIONS_LISTED`] in key order,
/// each with the nearest settable key when close enough (see
/// [`UnknownAnnotation`]), and the count of the others. Unknown annotations
/// never change the engine's decision. Cost: linear in the keys' length
/// (suggestions are computed for the listed ones only, and only against
/// known keys whose length is within [`SUGGESTION_MAX_EDITS`]).
pub fn unknown_annotations(annotations: Option<&BTreeMap<String, String>>) -> UnknownAnnotations {
    let mut unknown = annotations
        .into_iter()
        .flat_map(BTreeMap::keys)
        .filter(|key| key.starts_with(PREFIX))
        .filter(|key| !SETTABLE.contains(&key.as_str()) && !WRITTEN.contains(&key.as_str()));
    let listed = unknown
        .by_ref()
        .take(MAX_UNKNOWN_ANNOTATIONS_LISTED)
        .map(|key| UnknownAnnotation {
            key: key.clone(),
            suggestion: nearest_settable(key),
        })
        .collect();
    UnknownAnnotations {
        listed,
        more: unknown.count(),
    }
}

/// The settable key nearest to `key`, when at most [`SUGGESTION_MAX_EDITS`]
/// edits away. The distance is at least the difference of the lengths (in
/// characters), so only known keys within that difference are compared:
/// each comparison costs at most about 80 × 80 steps, however long `key`.
fn nearest_settable(key: &str) -> Option<&'static str> {
    // Known keys are at most a few dozen characters: count no further.
    let longest = SETTABLE.iter().map(|k| k.len()).max().unwrap_or(0);
    let chars = key.chars().take(longest + SUGGESTION_MAX_EDITS + 1).count();
    SETTABLE
        .iter()
        .filter(|known| known.chars().count().abs_diff(chars) <= SUGGESTION_MAX_EDITS)
        .map(|known| (strsim::damerau_levenshtein(key, known), *known))
        .filter(|(edits, _)| *edits <= SUGGESTION_MAX_EDITS)
        .min_by_key(|(edits, _)| *edits)
        .map(|(_, known)| known)
}

/// The per-pod settings read from annotations, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodOverrides {
    /// [`INJECT`]: `Some(true)` opted in, `Some(false)` opted out.
    pub inject: Option<bool>,
    /// [`CONTAINERS`]: only these containers are watched (order of the pod
    /// spec is kept); `None` watches every container with an exec preStop.
    pub containers: Option<Vec<String>>,
    /// [`RUN_ON`]; `None` when absent (every container: `always`).
    pub run_on: Option<PerContainer<RunOn>>,
    /// [`HOOK_ROOT`]; `None` when absent (every container: `sidecar`).
    pub hook_root: Option<PerContainer<HookRoot>>,
    /// [`GATE`] (default [`StartGate::Exec`]).
    pub gate: StartGate,
    /// [`SIDECAR_CPU_REQUEST`].
    pub cpu_request: Option<Quantity>,
    /// [`SIDECAR_MEMORY_REQUEST`].
    pub memory_request: Option<Quantity>,
    /// [`SIDECAR_CPU_LIMIT`].
    pub cpu_limit: Option<Quantity>,
    /// [`SIDECAR_MEMORY_LIMIT`].
    pub memory_limit: Option<Quantity>,
}

/// A setting given for every watched container, per container, or both,
/// the way [`CONTAINERS`] names containers: a comma-separated list whose
/// entries are `VALUE` (every watched container; at most one such entry)
/// or `NAME=VALUE` (container `NAME`, which must be watched; each name at
/// most once), blanks around entries ignored. E.g. `failure`,
/// `main=failure,upload=always`, `success,upload=always`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerContainer<T> {
    /// The value for containers not named.
    pub default: Option<T>,
    /// The values of named containers, in the order written.
    pub by_name: Vec<(String, T)>,
}

impl<T: Copy + Default> PerContainer<T> {
    /// The value for container `name`: its own, else the bare value, else
    /// `T::default()`.
    pub fn for_container(&self, name: &str) -> T {
        self.by_name
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .or(self.default)
            .unwrap_or_default()
    }

    /// The container names the setting names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.iter().map(|(n, _)| n.as_str())
    }
}

/// Parses a [`PerContainer`] value of annotation `key`; `parse` reads one
/// value, `allowed` lists the values for the error message.
fn per_container<T>(
    key: &str,
    value: &str,
    parse: fn(&str) -> Option<T>,
    allowed: &str,
) -> Result<PerContainer<T>, EngineError> {
    let mut out = PerContainer {
        default: None,
        by_name: Vec::new(),
    };
    let entries: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.is_empty() {
        return Err(invalid(
            key,
            value,
            &format!("must be one of {allowed}, or NAME=VALUE entries"),
        ));
    }
    for entry in entries {
        // The entry is named only when it is not the whole value, which
        // the message already shows.
        let bad_value = |v: &str| {
            let what = if v == value.trim() {
                format!("is not one of {allowed}")
            } else {
                format!("{:?} is not one of {allowed}", shown_name(v))
            };
            invalid(key, value, &what)
        };
        match entry.split_once('=') {
            None => {
                let v = parse(entry).ok_or_else(|| bad_value(entry))?;
                if out.default.is_some() {
                    return Err(invalid(
                        key,
                        value,
                        "gives more than one value for every container (use NAME=VALUE for the others)",
                    ));
                }
                out.default = Some(v);
            }
            Some((name, v)) => {
                let (name, v) = (name.trim(), v.trim());
                if !kube_prestop_contract::is_dns_label(name) {
                    return Err(invalid(
                        key,
                        value,
                        &format!("{:?} is not a valid container name", shown_name(name)),
                    ));
                }
                let v = parse(v).ok_or_else(|| bad_value(v))?;
                if out.by_name.iter().any(|(n, _)| n == name) {
                    return Err(invalid(
                        key,
                        value,
                        &format!("names {:?} twice", shown_name(name)),
                    ));
                }
                out.by_name.push((name.to_owned(), v));
            }
        }
    }
    Ok(out)
}

/// A name (a container's, an entry of a value) as a reason shows it:
/// [`crate::shown::shown`] to [`MAX_SHOWN_NAME_CHARS`].
pub(crate) fn shown_name(name: &str) -> crate::shown::Shown<'_> {
    shown(name, MAX_SHOWN_NAME_CHARS)
}

/// [`EngineError::InvalidAnnotation`]; `reason` shows the pod's strings it
/// names through [`shown`] (the value itself is shown cut by the error's
/// message).
fn invalid(annotation: &str, value: &str, reason: &str) -> EngineError {
    EngineError::InvalidAnnotation {
        annotation: annotation.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Smallest memory request or limit (bytes) the sidecar resource
/// annotations may set: 4 MiB (`4Mi`).
///
/// Evidence (docs/figures.md, sidecar/README.md): the sidecar is resident at
/// about 600 KiB while it watches, and its static binary is 597 KiB; the
/// memory cgroup also holds, at the same time, the `post-start` instance of
/// the same binary the `exec` gate runs and the hook, which runs inside the
/// sidecar's cgroup (the hook's own need is the user's: the default limit
/// is 256 Mi for it). Two instances and the binary's pages come to about
/// 1.8 MiB; 4 MiB is that rounded up with room for the kernel's per-task
/// charges. It is a floor under which the sidecar itself cannot be counted
/// on to start, not a measured minimum: the container runtime's own set-up
/// process, which runs in the cgroup before the sidecar, was not measured.
/// A value below it (`"0.5"`: half a byte, rounded up to 1 byte by the
/// kubelet; `"1e3"`: 1000 bytes; `1Mi`) is refused, since the sidecar, and
/// so the Job's own containers after it, would never start; a request
/// below it would understate to the scheduler what the sidecar uses.
pub const MIN_SIDECAR_MEMORY_BYTES: i128 = 4 << 20;

/// [`MIN_SIDECAR_MEMORY_BYTES`] as a quantity, for messages.
pub const MIN_SIDECAR_MEMORY: &str = "4Mi";

/// Smallest CPU request or limit (nano-cores) the sidecar resource
/// annotations may set: 1 millicore (`1m`).
///
/// The API server keeps a quantity to the nano-unit (rounding finer ones
/// up: `"0.0000000001"` is stored as `1n`) and its validation
/// (`ValidateResourceQuantityValue` in `pkg/apis/core/validation`) only
/// refuses negative values, so nothing positive rounds to 0. The kubelet
/// then reads CPU as `Quantity.MilliValue()`, `ceil(q * 1000)`
/// (`k8s.io/apimachinery/pkg/api/resource/quantity.go`), and turns a limit
/// into a CFS quota of at least 1 ms per 100 ms period (`MilliCPUToQuota`,
/// `MinQuotaPeriod`, `pkg/kubelet/cm/helpers_linux.go`): a value below `1m`
/// is not applied as written but raised to `1m` (and its quota to that of
/// `10m`). Such a value is refused rather than silently changed.
pub const MIN_SIDECAR_CPU_NANOS: i128 = 1_000_000;

/// [`MIN_SIDECAR_CPU_NANOS`] as a quantity, for messages.
pub const MIN_SIDECAR_CPU: &str = "1m";

/// The quantity of annotation `key`, if set: a positive Kubernetes quantity
/// of at least `floor` nano-units (`floor_text` names it in the error).
fn quantity_at_least(
    annotations: &BTreeMap<String, String>,
    key: &str,
    (floor, floor_text, why): (i128, &str, &str),
) -> Result<Option<Quantity>, EngineError> {
    match annotations.get(key) {
        None => Ok(None),
        Some(value) => match quantity::at_least(value, floor) {
            Err(FloorError::NotPositive) => Err(invalid(key, value, "must be a positive quantity")),
            Err(FloorError::BelowFloor) => Err(invalid(
                key,
                value,
                &format!("is below the floor {floor_text}: {why}"),
            )),
            Ok(_) => Ok(Some(Quantity(value.clone()))),
            Err(FloorError::NotAQuantity) => Err(invalid(key, value, "not a Kubernetes quantity")),
        },
    }
}

/// The floor of the CPU annotations and flags, with its reason.
pub(crate) const CPU_FLOOR: (i128, &str, &str) = (
    MIN_SIDECAR_CPU_NANOS,
    MIN_SIDECAR_CPU,
    "the kubelet applies CPU in whole millicores and would raise it to 1m",
);

/// The floor of the memory annotations and flags (in nano-bytes), with its
/// reason.
pub(crate) const MEMORY_FLOOR: (i128, &str, &str) = (
    MIN_SIDECAR_MEMORY_BYTES * quantity::NANO,
    MIN_SIDECAR_MEMORY,
    "the sidecar cannot be counted on to start with less memory (and the hook runs in its cgroup too)",
);

/// The pod's [`INJECT`] annotation: `Some(true)` (opted in), `Some(false)`
/// (opted out) or `None` (absent).
///
/// Errors: [`EngineError::InvalidAnnotation`] when the value is not exactly
/// `true` or `false`.
pub fn inject_value(annotations: &BTreeMap<String, String>) -> Result<Option<bool>, EngineError> {
    match annotations.get(INJECT).map(String::as_str) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(invalid(INJECT, other, "must be \"true\" or \"false\"")),
    }
}

impl PodOverrides {
    /// Reads and validates the annotations (`None` = no annotations).
    ///
    /// Errors: [`EngineError::InvalidAnnotation`] naming the annotation and the
    /// value when [`INJECT`] is not exactly `true`/`false`, [`CONTAINERS`] is
    /// empty, names an invalid container name or a container twice, a resource value is not a
    /// positive quantity, a CPU value is below [`MIN_SIDECAR_CPU`] or a
    /// memory value below [`MIN_SIDECAR_MEMORY`] (the error names the
    /// floor), or an overridden request exceeds its limit.
    pub fn parse(annotations: Option<&BTreeMap<String, String>>) -> Result<Self, EngineError> {
        let empty = BTreeMap::new();
        let annotations = annotations.unwrap_or(&empty);
        let inject = inject_value(annotations)?;
        let containers = match annotations.get(CONTAINERS) {
            None => None,
            Some(value) => {
                let names: Vec<String> = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                if names.is_empty() {
                    return Err(invalid(CONTAINERS, value, "names no container"));
                }
                if let Some(bad) = names
                    .iter()
                    .find(|n| !kube_prestop_contract::is_dns_label(n))
                {
                    return Err(invalid(
                        CONTAINERS,
                        value,
                        &format!("{:?} is not a valid container name", shown_name(bad)),
                    ));
                }
                // As in the per-container settings: each name at most once.
                let mut seen = std::collections::BTreeSet::new();
                if let Some(twice) = names.iter().find(|n| !seen.insert(n.as_str())) {
                    return Err(invalid(
                        CONTAINERS,
                        value,
                        &format!("names {:?} twice", shown_name(twice)),
                    ));
                }
                Some(names)
            }
        };
        let run_on = annotations
            .get(RUN_ON)
            .map(|v| per_container(RUN_ON, v, RunOn::parse, "always, success, failure"))
            .transpose()?;
        let hook_root = annotations
            .get(HOOK_ROOT)
            .map(|v| per_container(HOOK_ROOT, v, HookRoot::parse, "sidecar, container"))
            .transpose()?;
        let gate = match annotations.get(GATE) {
            None => StartGate::default(),
            Some(v) => StartGate::parse(v.trim())
                .ok_or_else(|| invalid(GATE, v, "is not one of exec, http-get, none"))?,
        };
        Ok(Self {
            inject,
            containers,
            run_on,
            hook_root,
            gate,
            cpu_request: quantity_at_least(annotations, SIDECAR_CPU_REQUEST, CPU_FLOOR)?,
            memory_request: quantity_at_least(annotations, SIDECAR_MEMORY_REQUEST, MEMORY_FLOOR)?,
            cpu_limit: quantity_at_least(annotations, SIDECAR_CPU_LIMIT, CPU_FLOOR)?,
            memory_limit: quantity_at_least(annotations, SIDECAR_MEMORY_LIMIT, MEMORY_FLOOR)?,
        })
    }

    /// The run-on of container `name` ([`RUN_ON`]; `always` when absent).
    pub fn run_on_for(&self, name: &str) -> RunOn {
        self.run_on
            .as_ref()
            .map_or_else(RunOn::default, |p| p.for_container(name))
    }

    /// The hook root of container `name` ([`HOOK_ROOT`]; `sidecar` when
    /// absent).
    pub fn hook_root_for(&self, name: &str) -> HookRoot {
        self.hook_root
            .as_ref()
            .map_or_else(HookRoot::default, |p| p.for_container(name))
    }

    /// Whether any sidecar resource annotation is set.
    pub fn has_resources(&self) -> bool {
        self.cpu_request.is_some()
            || self.memory_request.is_some()
            || self.cpu_limit.is_some()
            || self.memory_limit.is_some()
    }

    /// `base` with the resource annotations applied; explicit values win
    /// over the defaults, per resource (cpu, memory):
    ///
    /// * request and limit annotations both set: taken as they are;
    /// * only the request set, above the default limit: the limit is raised
    ///   to the request (a sidecar asking for more than the default limit
    ///   gets it);
    /// * only the limit set, below the default request: the request is
    ///   lowered to the limit (as API defaulting makes an omitted request
    ///   equal to the limit).
    ///
    /// Errors: [`EngineError::InvalidAnnotation`] naming the request
    /// annotation when both are set and the request exceeds the limit.
    pub fn sidecar_resources(
        &self,
        base: &ResourceDefaults,
    ) -> Result<ResourceDefaults, EngineError> {
        let (cpu_request, cpu_limit) = request_and_limit(
            (self.cpu_request.as_ref(), SIDECAR_CPU_REQUEST),
            (self.cpu_limit.as_ref(), SIDECAR_CPU_LIMIT),
            &base.cpu_request,
            &base.cpu_limit,
        )?;
        let (memory_request, memory_limit) = request_and_limit(
            (self.memory_request.as_ref(), SIDECAR_MEMORY_REQUEST),
            (self.memory_limit.as_ref(), SIDECAR_MEMORY_LIMIT),
            &base.memory_request,
            &base.memory_limit,
        )?;
        Ok(ResourceDefaults {
            cpu_request,
            memory_request,
            cpu_limit,
            memory_limit,
        })
    }
}

/// `a > b` for two quantities; `false` if either does not parse (annotation
/// values are checked in [`PodOverrides::parse`], defaults by
/// [`ResourceDefaults::validate`]).
fn exceeds(a: &Quantity, b: &Quantity) -> bool {
    matches!((quantity::parse(a), quantity::parse(b)), (Ok(a), Ok(b)) if a > b)
}

/// One resource's request and limit from the annotations (value, key) and
/// the defaults; see [`PodOverrides::sidecar_resources`].
fn request_and_limit(
    (request, request_key): (Option<&Quantity>, &str),
    (limit, limit_key): (Option<&Quantity>, &str),
    default_request: &Quantity,
    default_limit: &Quantity,
) -> Result<(Quantity, Quantity), EngineError> {
    Ok(match (request, limit) {
        (Some(r), Some(l)) if exceeds(r, l) => {
            return Err(invalid(
                request_key,
                &r.0,
                &format!(
                    "request {} exceeds the limit {} of {limit_key}",
                    shown(&r.0, MAX_SHOWN_VALUE_CHARS),
                    shown(&l.0, MAX_SHOWN_VALUE_CHARS)
                ),
            ));
        }
        (Some(r), Some(l)) => (r.clone(), l.clone()),
        (Some(r), None) if exceeds(r, default_limit) => (r.clone(), r.clone()),
        (Some(r), None) => (r.clone(), default_limit.clone()),
        (None, Some(l)) if exceeds(default_request, l) => (l.clone(), l.clone()),
        (None, Some(l)) => (default_request.clone(), l.clone()),
        (None, None) => (default_request.clone(), default_limit.clone()),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn err_of(pairs: &[(&str, &str)]) -> (String, String) {
        match PodOverrides::parse(Some(&ann(pairs))) {
            Err(EngineError::InvalidAnnotation {
                annotation, value, ..
            }) => (annotation, value),
            other => panic!("expected InvalidAnnotation, got {other:?}"),
        }
    }

    #[test]
    fn run_on_and_hook_root_for_all_or_per_container() {
        let o = PodOverrides::parse(Some(&ann(&[
            (RUN_ON, "failure"),
            (HOOK_ROOT, " main = container , "),
        ])))
        .unwrap();
        assert_eq!(o.run_on_for("main"), RunOn::Failure);
        assert_eq!(o.run_on_for("other"), RunOn::Failure);
        assert_eq!(o.hook_root_for("main"), HookRoot::Container);
        assert_eq!(o.hook_root_for("other"), HookRoot::Sidecar);
        let o = PodOverrides::parse(Some(&ann(&[(RUN_ON, "success,upload=always")]))).unwrap();
        assert_eq!(o.run_on_for("main"), RunOn::Success);
        assert_eq!(o.run_on_for("upload"), RunOn::Always);
        assert_eq!(
            o.run_on.as_ref().unwrap().names().collect::<Vec<_>>(),
            vec!["upload"]
        );
        let o = PodOverrides::parse(None).unwrap();
        assert_eq!(o.run_on_for("main"), RunOn::Always);
        assert_eq!(o.hook_root_for("main"), HookRoot::Sidecar);
    }

    #[test]
    fn gate_parses_and_defaults_to_exec() {
        let o = PodOverrides::parse(None).unwrap();
        assert_eq!(o.gate, StartGate::Exec);
        for g in [StartGate::HttpGet, StartGate::Exec, StartGate::None] {
            let o = PodOverrides::parse(Some(&ann(&[(GATE, g.as_str())]))).unwrap();
            assert_eq!(o.gate, g);
        }
        match PodOverrides::parse(Some(&ann(&[(GATE, "tcp")]))) {
            Err(e) => assert_eq!(
                e.to_string(),
                "invalid annotation kube-prestop.io/gate: \"tcp\": is not one of exec, http-get, none"
            ),
            Ok(o) => panic!("{o:?}"),
        }
    }

    #[test]
    fn invalid_run_on_and_hook_root_name_the_annotation() {
        for (key, value) in [
            (RUN_ON, "sometimes"),
            (RUN_ON, ""),
            (RUN_ON, "Failure"),
            (RUN_ON, "failure,success"),
            (RUN_ON, "main=failure,main=success"),
            (RUN_ON, "Main_1=failure"),
            (RUN_ON, "main="),
            (HOOK_ROOT, "host"),
            (HOOK_ROOT, "main=chroot"),
            (GATE, "httpGet"),
            (GATE, "tcp"),
            (GATE, ""),
        ] {
            assert_eq!(err_of(&[(key, value)]), (key.to_owned(), value.to_owned()));
        }
        match PodOverrides::parse(Some(&ann(&[(RUN_ON, "sometimes")]))) {
            Err(e) => assert_eq!(
                e.to_string(),
                "invalid annotation kube-prestop.io/run-on: \"sometimes\": is not one of always, success, failure"
            ),
            Ok(o) => panic!("{o:?}"),
        }
        // An entry of a longer value is named.
        match PodOverrides::parse(Some(&ann(&[(RUN_ON, "success,main=sometimes")]))) {
            Err(e) => assert_eq!(
                e.to_string(),
                "invalid annotation kube-prestop.io/run-on: \"success,main=sometimes\": \"sometimes\" is not one of always, success, failure"
            ),
            Ok(o) => panic!("{o:?}"),
        }
    }

    #[test]
    fn none_and_empty_are_default() {
        assert_eq!(PodOverrides::parse(None).unwrap(), PodOverrides::default());
        assert_eq!(
            PodOverrides::parse(Some(&ann(&[("other.io/x", "y")]))).unwrap(),
            PodOverrides::default()
        );
    }

    #[test]
    fn parses_valid_values() {
        let o = PodOverrides::parse(Some(&ann(&[
            (INJECT, "true"),
            (CONTAINERS, "main, upload"),
            (SIDECAR_CPU_REQUEST, "50m"),
            (SIDECAR_MEMORY_LIMIT, "1Gi"),
        ])))
        .unwrap();
        assert_eq!(o.inject, Some(true));
        assert_eq!(
            o.containers,
            Some(vec!["main".to_owned(), "upload".to_owned()])
        );
        assert_eq!(o.cpu_request, Some(Quantity("50m".into())));
        assert_eq!(o.memory_limit, Some(Quantity("1Gi".into())));
        assert!(o.has_resources());
        let r = o.sidecar_resources(&ResourceDefaults::sidecar()).unwrap();
        assert_eq!(r.cpu_request.0, "50m");
        assert_eq!(r.memory_request.0, "32Mi");
        assert_eq!(r.memory_limit.0, "1Gi");
        assert_eq!(
            PodOverrides::parse(Some(&ann(&[(INJECT, "false")])))
                .unwrap()
                .inject,
            Some(false)
        );
    }

    #[test]
    fn errors_name_annotation_and_value() {
        assert_eq!(err_of(&[(INJECT, "yes")]), (INJECT.into(), "yes".into()));
        assert_eq!(err_of(&[(INJECT, "True")]), (INJECT.into(), "True".into()));
        assert_eq!(
            err_of(&[(SIDECAR_CPU_REQUEST, "lots")]),
            (SIDECAR_CPU_REQUEST.into(), "lots".into())
        );
        assert_eq!(
            err_of(&[(SIDECAR_MEMORY_LIMIT, "0")]),
            (SIDECAR_MEMORY_LIMIT.into(), "0".into())
        );
        assert_eq!(
            err_of(&[(SIDECAR_CPU_LIMIT, "-1")]),
            (SIDECAR_CPU_LIMIT.into(), "-1".into())
        );
        assert_eq!(
            err_of(&[(CONTAINERS, " , ")]),
            (CONTAINERS.into(), " , ".into())
        );
        assert_eq!(
            err_of(&[(CONTAINERS, "Main")]),
            (CONTAINERS.into(), "Main".into())
        );
        let msg = PodOverrides::parse(Some(&ann(&[(INJECT, "yes")])))
            .unwrap_err()
            .to_string();
        assert!(msg.contains(INJECT) && msg.contains("\"yes\""), "{msg}");
    }

    #[test]
    fn resource_values_below_the_floors_are_refused_naming_the_floor() {
        for (key, value, floor) in [
            (SIDECAR_MEMORY_LIMIT, "0.5", "4Mi"),
            (SIDECAR_MEMORY_LIMIT, "1e3", "4Mi"),
            (SIDECAR_MEMORY_LIMIT, "1Mi", "4Mi"),
            (SIDECAR_MEMORY_LIMIT, "4194303", "4Mi"),
            (SIDECAR_MEMORY_REQUEST, "1Ki", "4Mi"),
            (SIDECAR_CPU_LIMIT, "0.0000000001", "1m"),
            (SIDECAR_CPU_LIMIT, "999u", "1m"),
            (SIDECAR_CPU_REQUEST, "1n", "1m"),
        ] {
            let msg = PodOverrides::parse(Some(&ann(&[(key, value)])))
                .unwrap_err()
                .to_string();
            assert_eq!(
                msg.split(": the").next().unwrap(),
                format!("invalid annotation {key}: {value:?}: is below the floor {floor}"),
                "{msg}"
            );
        }
        for (key, value) in [
            (SIDECAR_MEMORY_LIMIT, "4Mi"),
            (SIDECAR_MEMORY_LIMIT, "4194304"),
            (SIDECAR_MEMORY_REQUEST, "5e6"),
            (SIDECAR_CPU_LIMIT, "1m"),
            (SIDECAR_CPU_LIMIT, "0.001"),
            (SIDECAR_CPU_REQUEST, "1000000n"),
        ] {
            PodOverrides::parse(Some(&ann(&[(key, value)]))).unwrap();
        }
        assert_eq!(
            MIN_SIDECAR_MEMORY_BYTES * quantity::NANO,
            quantity::parse_nanos(MIN_SIDECAR_MEMORY).unwrap()
        );
        assert_eq!(
            MIN_SIDECAR_CPU_NANOS,
            quantity::parse_nanos(MIN_SIDECAR_CPU).unwrap()
        );
    }

    #[test]
    fn unknown_annotations_under_the_prefix_are_reported_with_a_suggestion() {
        let a = ann(&[
            ("kube-prestop.io/contianers", "main"),
            ("kube-prestop.io/sidecar-cpu-limits", "1"),
            ("kube-prestop.io/something-else", "x"),
            (CONTAINERS, "main"),
            (STATUS, STATUS_INJECTED),
            (VERSION, "0.1.0"),
            (SKIPPED, "restart_policy_always: x"),
            ("example.com/contianers", "x"),
        ]);
        let unknown = unknown_annotations(Some(&a));
        assert_eq!(unknown.more, 0);
        let unknown = unknown.listed;
        let got: Vec<(&str, Option<&str>)> = unknown
            .iter()
            .map(|u| (u.key.as_str(), u.suggestion))
            .collect();
        assert_eq!(
            got,
            vec![
                ("kube-prestop.io/contianers", Some(CONTAINERS)),
                (
                    "kube-prestop.io/sidecar-cpu-limits",
                    Some(SIDECAR_CPU_LIMIT)
                ),
                ("kube-prestop.io/something-else", None),
            ]
        );
        let message = unknown[0].to_string();
        assert!(
            message.starts_with(
                "unknown annotation kube-prestop.io/contianers is ignored (did you mean kube-prestop.io/containers?); known annotations: kube-prestop.io/inject, kube-prestop.io/containers, "
            ),
            "{message}"
        );
        assert!(!unknown[2].to_string().contains("did you mean"));
        assert_eq!(unknown_annotations(None), UnknownAnnotations::default());
        // Unknown annotations change nothing else.
        assert_eq!(
            PodOverrides::parse(Some(&a)).unwrap().containers,
            Some(vec!["main".to_owned()])
        );
    }

    #[test]
    fn containers_naming_a_container_twice_is_an_error_as_in_run_on() {
        for value in ["work,work", "work, main ,work"] {
            let e = PodOverrides::parse(Some(&ann(&[(CONTAINERS, value)]))).unwrap_err();
            let message = e.to_string();
            assert!(message.contains(CONTAINERS), "{message}");
            assert!(message.contains("names \"work\" twice"), "{message}");
        }
        let e = PodOverrides::parse(Some(&ann(&[(RUN_ON, "work=failure,work=success")])));
        assert!(e.unwrap_err().to_string().contains("twice"));
    }

    /// The message of the [`EngineError::InvalidAnnotation`] `pairs` give.
    fn message_of(pairs: &[(&str, &str)]) -> String {
        match PodOverrides::parse(Some(&ann(pairs))) {
            Err(e @ EngineError::InvalidAnnotation { .. }) => e.to_string(),
            other => panic!("expected InvalidAnnotation, got {other:?}"),
        }
    }

    #[test]
    fn huge_invalid_values_are_shown_cut_with_their_length() {
        // The newcomer's reproductions: a 4 MB container list (shown twice,
        // as the value and as the invalid name, 8.38 MB), a 3 MB gate, a
        // run-on given 100,000 times.
        let containers = "a".repeat(4_190_000);
        let gate = "g".repeat(3_000_000);
        let run_on = "failure,".repeat(100_000);
        for (key, value, reason) in [
            (
                CONTAINERS,
                containers.as_str(),
                format!(
                    "\"{}\"...(4190000 bytes) is not a valid container name",
                    "a".repeat(MAX_SHOWN_NAME_CHARS)
                ),
            ),
            (
                GATE,
                gate.as_str(),
                "is not one of exec, http-get, none".to_owned(),
            ),
            (
                RUN_ON,
                run_on.as_str(),
                "gives more than one value for every container (use NAME=VALUE for the others)"
                    .to_owned(),
            ),
        ] {
            let message = message_of(&[(key, value)]);
            assert!(message.len() < 1000, "{key}: {} bytes", message.len());
            // The annotation, the start of the value and its length, and
            // what is wrong.
            let start: String = value.chars().take(MAX_SHOWN_VALUE_CHARS).collect();
            assert_eq!(
                message,
                format!(
                    "invalid annotation {key}: \"{start}\"...({} bytes): {reason}",
                    value.len()
                )
            );
            // The error itself keeps the value whole.
            assert_eq!(err_of(&[(key, value)]), (key.to_owned(), value.to_owned()));
        }
        // A long name inside a short enough value, and one given twice.
        let long_name = "n".repeat(300);
        let message = message_of(&[(RUN_ON, &format!("{long_name}=sometimes"))]);
        assert!(message.len() < 1000, "{message}");
        assert!(
            message.contains(&format!(
                "\"{}\"...(300 bytes) is not a valid container name",
                "n".repeat(MAX_SHOWN_NAME_CHARS)
            )),
            "{message}"
        );
        let message = message_of(&[(HOOK_ROOT, &format!("main={}", "v".repeat(300)))]);
        assert!(
            message.ends_with(&format!(
                "\"{}\"...(300 bytes) is not one of sidecar, container",
                "v".repeat(MAX_SHOWN_NAME_CHARS)
            )),
            "{message}"
        );
        // Values up to the bound are shown whole, as before.
        assert_eq!(
            message_of(&[(GATE, "tcp")]),
            "invalid annotation kube-prestop.io/gate: \"tcp\": is not one of exec, http-get, none"
        );
    }

    #[test]
    fn control_characters_of_invalid_values_are_escaped() {
        let message = message_of(&[(
            GATE,
            "x\nFAKE 2026-12-07T00:00:00Z INFO admission decision=injected\u{1b}[31m",
        )]);
        assert_eq!(
            message,
            "invalid annotation kube-prestop.io/gate: \"x\\nFAKE 2026-12-07T00:00:00Z INFO \
             admission decision=injected\\u{1b}[31m\": is not one of exec, http-get, none"
        );
        let message = message_of(&[(CONTAINERS, "main\r\nx")]);
        assert!(!message.chars().any(char::is_control), "{message}");
        // An unknown key, which the API server validates only after
        // admission.
        let unknown = unknown_annotations(Some(&ann(&[("kube-prestop.io/x\ny\u{1b}", "v")])));
        assert_eq!(
            unknown.listed[0].shown_key(),
            "kube-prestop.io/x\\ny\\u{1b}"
        );
    }

    #[test]
    fn a_huge_unknown_key_gets_no_suggestion_and_is_shown_cut() {
        // 3 MB: the edit distance against every known key took minutes.
        let key = format!("{PREFIX}{}", "x".repeat(3_000_000));
        let unknown = unknown_annotations(Some(&ann(&[(key.as_str(), "v")])));
        assert_eq!(unknown.listed.len(), 1);
        assert_eq!(unknown.listed[0].suggestion, None);
        assert_eq!(unknown.listed[0].key, key);
        let message = unknown.listed[0].to_string();
        assert!(message.len() < 1000, "{} bytes", message.len());
        let shown = format!(
            "{PREFIX}{}...({} bytes)",
            "x".repeat(MAX_SHOWN_NAME_CHARS),
            key.len()
        );
        assert!(message.contains(&shown), "{message}");
        // A name of 63 characters is shown whole; multi-byte ones are cut on
        // a character boundary.
        let whole = UnknownAnnotation {
            key: format!("{PREFIX}{}", "y".repeat(MAX_SHOWN_NAME_CHARS)),
            suggestion: None,
        };
        assert_eq!(whole.shown_key(), whole.key);
        let wide = UnknownAnnotation {
            key: format!("{PREFIX}{}", "é".repeat(100)),
            suggestion: None,
        };
        assert_eq!(
            wide.shown_key(),
            format!("{PREFIX}{}...({} bytes)", "é".repeat(63), wide.key.len())
        );
        // Close keys of any length within the threshold still get one.
        let close = unknown_annotations(Some(&ann(&[("kube-prestop.io/containersxx", "a")])));
        assert_eq!(close.listed[0].suggestion, Some(CONTAINERS));
    }

    #[test]
    fn only_the_first_unknown_annotations_are_listed() {
        let keys: Vec<String> = (0..60_000)
            .map(|i| format!("{PREFIX}contianers-{i:05}"))
            .collect();
        let pairs: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        let unknown = unknown_annotations(Some(&ann(&pairs)));
        assert_eq!(unknown.listed.len(), MAX_UNKNOWN_ANNOTATIONS_LISTED);
        assert_eq!(unknown.listed[0].key, keys[0]);
        assert_eq!(unknown.more, 60_000 - MAX_UNKNOWN_ANNOTATIONS_LISTED);
    }

    fn resources(pairs: &[(&str, &str)]) -> Result<ResourceDefaults, EngineError> {
        PodOverrides::parse(Some(&ann(pairs)))
            .unwrap()
            .sidecar_resources(&ResourceDefaults::sidecar())
    }

    #[test]
    fn request_alone_above_the_default_limit_raises_the_limit() {
        // Regression (issue #8): this was an error asking for the limit
        // annotation too. Defaults: 10m/32Mi requests, 200m/256Mi limits.
        let r = resources(&[(SIDECAR_CPU_REQUEST, "2"), (SIDECAR_MEMORY_REQUEST, "1Gi")]).unwrap();
        assert_eq!(r, ResourceDefaults::new("2", "1Gi", "2", "1Gi"));
        // At or below the default limit, the default limit stays.
        let r = resources(&[
            (SIDECAR_CPU_REQUEST, "200m"),
            (SIDECAR_MEMORY_REQUEST, "64Mi"),
        ])
        .unwrap();
        assert_eq!(r, ResourceDefaults::new("200m", "64Mi", "200m", "256Mi"));
    }

    #[test]
    fn limit_alone_below_the_default_request_lowers_the_request() {
        let r = resources(&[(SIDECAR_CPU_LIMIT, "5m"), (SIDECAR_MEMORY_LIMIT, "16Mi")]).unwrap();
        assert_eq!(r, ResourceDefaults::new("5m", "16Mi", "5m", "16Mi"));
        let r = resources(&[(SIDECAR_MEMORY_LIMIT, "1Gi")]).unwrap();
        assert_eq!(r, ResourceDefaults::new("10m", "32Mi", "200m", "1Gi"));
    }

    #[test]
    fn explicit_request_over_explicit_limit_is_an_error() {
        match resources(&[(SIDECAR_CPU_REQUEST, "2"), (SIDECAR_CPU_LIMIT, "1")]) {
            Err(EngineError::InvalidAnnotation {
                annotation,
                value,
                reason,
            }) => {
                assert_eq!(annotation, SIDECAR_CPU_REQUEST);
                assert_eq!(value, "2");
                assert!(reason.contains(SIDECAR_CPU_LIMIT), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        match resources(&[
            (SIDECAR_MEMORY_REQUEST, "2Gi"),
            (SIDECAR_MEMORY_LIMIT, "1Gi"),
        ]) {
            Err(EngineError::InvalidAnnotation { annotation, .. }) => {
                assert_eq!(annotation, SIDECAR_MEMORY_REQUEST);
            }
            other => panic!("{other:?}"),
        }
        // Equal is fine; written differently too.
        let r = resources(&[(SIDECAR_CPU_REQUEST, "1000m"), (SIDECAR_CPU_LIMIT, "1")]).unwrap();
        assert_eq!(
            (r.cpu_request.0.as_str(), r.cpu_limit.0.as_str()),
            ("1000m", "1")
        );
    }

    #[test]
    fn skipped_value_is_the_label_and_the_message_cut_on_a_character_boundary() {
        assert_eq!(
            skipped_value("mount_path_conflict", "container \"main\" already mounts"),
            "mount_path_conflict: container \"main\" already mounts"
        );
        let whole = "é".repeat(MAX_SKIPPED_MESSAGE_BYTES / 2);
        assert_eq!(skipped_value("l", &whole), format!("l: {whole}"));
        // One byte over: cut, each `é` two bytes, `…` three.
        let over = format!("x{whole}");
        let value = skipped_value("l", &over);
        let message = value.strip_prefix("l: ").unwrap();
        assert!(message.ends_with('…'), "{message}");
        assert!(
            message.len() <= MAX_SKIPPED_MESSAGE_BYTES,
            "{}",
            message.len()
        );
        assert!(
            message.len() >= MAX_SKIPPED_MESSAGE_BYTES - 4,
            "{}",
            message.len()
        );
        assert!(over.starts_with(message.trim_end_matches('…')));
        // Four-byte characters, every cut point.
        for extra in 0..4 {
            let long = format!("{}{}", "a".repeat(extra), "😀".repeat(400));
            let value = skipped_value("l", &long);
            let message = value.strip_prefix("l: ").unwrap();
            assert!(message.len() <= MAX_SKIPPED_MESSAGE_BYTES);
            assert!(long.starts_with(message.strip_suffix('…').unwrap()));
        }
    }
}
