//! What the golden tests (`golden.rs`, `golden_patch.rs`) share: the case
//! folders under `tests/golden/`, their YAML files and the engine
//! configuration they were written for.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::LimitRange;
use kube_prestop_engine::{BinaryFacts, EngineConfig, NodeArchitectures, Support, WorkloadKind};
use serde::Deserialize;
use serde_json::Value;

/// A case's optional `context.yaml`: the pod's namespace (default
/// `default`), the namespace's LimitRanges, and the binary-delivery facts:
/// `configMaps` (architecture → the ConfigMap holding that binary there),
/// `nodeArchitectures` (every node's; absent: not known) and `imageVolumes`
/// (whether they work; default not). The default: the install init
/// container. `workloadKinds` (names as `--workload-kinds` takes them;
/// absent: the default, Job only) are the kinds the case enables.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Context {
    pub namespace: Option<String>,
    #[serde(default)]
    pub limit_ranges: Vec<LimitRange>,
    #[serde(default)]
    pub config_maps: BTreeMap<String, String>,
    pub node_architectures: Option<Vec<String>>,
    #[serde(default)]
    pub image_volumes: bool,
    pub workload_kinds: Option<Vec<String>>,
}

impl Context {
    /// `dir/context.yaml`, or the default context when the case has none.
    pub fn of_case(dir: &Path) -> Result<Self, String> {
        let path = dir.join("context.yaml");
        if !path.exists() {
            return Ok(Self::default());
        }
        serde_json::from_value(read_yaml(&path)).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The binary-delivery facts the case describes.
    pub fn binary_facts(&self) -> BinaryFacts {
        BinaryFacts {
            config_maps: self.config_maps.clone(),
            node_architectures: match &self.node_architectures {
                Some(archs) => NodeArchitectures::Known(archs.iter().cloned().collect()),
                None => NodeArchitectures::default(),
            },
            image_volumes: if self.image_volumes {
                Support::Yes
            } else {
                Support::default()
            },
        }
    }

    /// The engine configuration of the case: [`config`], with the case's
    /// workload kinds. Errors: a kind name the engine does not accept.
    pub fn engine_config(&self) -> Result<EngineConfig, String> {
        let mut config = config();
        if let Some(kinds) = &self.workload_kinds {
            config.workload_kinds = kinds
                .iter()
                .map(|k| k.parse::<WorkloadKind>().map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
        }
        Ok(config)
    }

    /// Whether the case enables workload kinds other than the default ones.
    pub fn enables_other_kinds(&self) -> bool {
        self.workload_kinds.as_ref().is_some_and(|kinds| {
            kinds
                .iter()
                .any(|k| !WorkloadKind::DEFAULT.iter().any(|d| d.as_str() == k))
        })
    }

    /// The namespace, `default` when not given.
    pub fn namespace(&self) -> String {
        self.namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned())
    }
}

/// What the expected files hold instead of this build's version (the value
/// of the `kube-prestop.io/version` annotation the engine writes), so that a
/// version bump changes no fixture; as Istio's injection golden files carry
/// no release either. [`read_expected`] puts the version back.
pub const VERSION_PLACEHOLDER: &str = "<version>";

/// The version the engine writes (the workspace version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// An expected file as JSON, with every [`VERSION_PLACEHOLDER`] string
/// replaced by [`VERSION`].
pub fn read_expected(path: &Path) -> Value {
    let mut value = read_yaml(path);
    replace_strings(&mut value, VERSION_PLACEHOLDER, VERSION);
    value
}

/// `actual` as an expected file holds it: the `kube-prestop.io/version`
/// annotation's value, when it is [`VERSION`], replaced by
/// [`VERSION_PLACEHOLDER`] (for `UPDATE_GOLDEN=1`).
pub fn to_expected(actual: &Value) -> Value {
    let mut value = actual.clone();
    if let Some(version) = value.pointer_mut(VERSION_POINTER)
        && version == VERSION
    {
        *version = Value::String(VERSION_PLACEHOLDER.to_owned());
    }
    value
}

/// Where a pod's version annotation is, as a JSON pointer.
pub const VERSION_POINTER: &str = "/metadata/annotations/kube-prestop.io~1version";

/// Replaces every string equal to `from` in `value` by `to`.
fn replace_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s == from => *s = to.to_owned(),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, from, to)),
        Value::Object(fields) => fields
            .values_mut()
            .for_each(|v| replace_strings(v, from, to)),
        _ => {}
    }
}

/// `engine/tests/golden/`, found from the compiling crate's folder upwards
/// (this module is also compiled into the admission server's
/// `golden_patch` test, whose crate lies elsewhere in the workspace).
pub fn golden_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|dir| dir.join("engine/tests/golden"))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| panic!("no engine/tests/golden above {}", manifest.display()))
}

/// A YAML file as JSON; panics naming the file when it cannot be read.
pub fn read_yaml(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The engine configuration the expected files were written with.
pub fn config() -> EngineConfig {
    EngineConfig {
        install_image: "registry.example/kube-prestop-sidecar:test".to_owned(),
        ..Default::default()
    }
}

/// Every case folder, sorted.
pub fn cases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}
