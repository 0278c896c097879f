//! Property tests of the injection engine over generated Job pods.
//!
//! The generator builds realistic pods as the Job controller creates them:
//! 1-4 regular containers with random (valid, up to 63-character) names,
//! preStop handlers of every kind (exec, httpGet, sleep, none), every
//! restartPolicy, user init containers and native sidecars, resources in
//! BestEffort, Burstable and Guaranteed shapes (container or pod level),
//! env with `resourceFieldRef`, volumes and containers named like ours
//! (`kube-prestop`, `kube-prestop-install`, `kube-prestop-<x>`), hostPID,
//! and annotations (opt in/out, sidecar resource overrides, default
//! container, a copied status annotation).
//!
//! For every pod the engine injects, these hold:
//! 1. `json_patch::diff(input, output)` applies to the input and gives the
//!    output, which deserializes as a k8s-openapi Pod;
//! 2. injection is idempotent: a second pass is `Skip(AlreadyInjected)`;
//! 3. nothing outside the documented fields changes (see [`strip_allowed`]);
//! 4. the pod's QoS class is never lowered;
//! 5. every container and volume name is a unique DNS label.
//!
//! And for every pod, the webhook's own patch (`engine::plan` rendered by
//! `engine::patch::json_patch`, no diffing) applied to the input gives
//! exactly the engine's output, and `plan` decides like `inject`.
//!
//! Pods that are skipped are not changed by definition; the engine may
//! refuse only pods that mount something under our mount paths.
//!
//! `PROPTEST_CASES` overrides the case count (default 256).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ExecAction, HTTPGetAction, Lifecycle, LifecycleHandler, Pod,
    PodSpec, ResourceFieldSelector, ResourceRequirements, SleepAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_prestop_contract as contract;
use kube_prestop_engine::{
    self as engine, ClusterContext, Decision, EngineConfig, EngineError, SkipReason, annotations,
    resources,
};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;

// ---------------------------------------------------------------- generators

/// A valid container name: mostly short, sometimes exactly 63 characters,
/// sometimes one of ours.
fn container_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z][a-z0-9]{0,10}",
        2 => "[a-z][a-z0-9-]{40,61}[a-z0-9]",
        1 => "[a-z]{63}",
        1 => Just("main".to_owned()),
        1 => Just("kube-prestop-install".to_owned()),
        1 => Just("kube-prestop-main".to_owned()),
        1 => Just("install".to_owned()),
    ]
}

#[derive(Debug, Clone)]
enum PreStop {
    Exec(Vec<String>),
    /// An exec handler with an empty command (not watched).
    ExecEmpty,
    Http,
    Sleep,
    None,
}

fn prestop() -> impl Strategy<Value = PreStop> {
    prop_oneof![
        5 => prop::collection::vec("[ -~]{0,20}", 1..4).prop_map(PreStop::Exec),
        1 => Just(PreStop::ExecEmpty),
        1 => Just(PreStop::Http),
        1 => Just(PreStop::Sleep),
        2 => Just(PreStop::None),
    ]
}

fn lifecycle(p: &PreStop) -> Option<Lifecycle> {
    let handler = match p {
        PreStop::Exec(cmd) => LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(cmd.clone()),
            }),
            ..Default::default()
        },
        PreStop::ExecEmpty => LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(Vec::new()),
            }),
            ..Default::default()
        },
        PreStop::Http => LifecycleHandler {
            http_get: Some(HTTPGetAction {
                path: Some("/quit".into()),
                port: IntOrString::Int(8080),
                ..Default::default()
            }),
            ..Default::default()
        },
        PreStop::Sleep => LifecycleHandler {
            sleep: Some(SleepAction { seconds: 3 }),
            ..Default::default()
        },
        PreStop::None => return None,
    };
    Some(Lifecycle {
        pre_stop: Some(handler),
        post_start: None,
        stop_signal: None,
    })
}

/// Resource shape of one container: (cpu millis, memory MiB) requests and
/// limits; Guaranteed when both are equal and set.
#[derive(Debug, Clone, Copy)]
enum Shape {
    None,
    RequestsOnly(u32, u32),
    Guaranteed(u32, u32),
    LimitsOnly(u32, u32),
    Burstable(u32, u32),
}

fn shape() -> impl Strategy<Value = Shape> {
    let q = (1u32..4000, 1u32..8192);
    prop_oneof![
        2 => Just(Shape::None),
        1 => q.clone().prop_map(|(c, m)| Shape::RequestsOnly(c, m)),
        3 => q.clone().prop_map(|(c, m)| Shape::Guaranteed(c, m)),
        1 => q.clone().prop_map(|(c, m)| Shape::LimitsOnly(c, m)),
        1 => q.prop_map(|(c, m)| Shape::Burstable(c, m)),
    ]
}

fn quantities(cpu: u32, mem: u32) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_owned(), Quantity(format!("{cpu}m"))),
        ("memory".to_owned(), Quantity(format!("{mem}Mi"))),
    ])
}

fn requirements(s: Shape) -> Option<ResourceRequirements> {
    let (requests, limits) = match s {
        Shape::None => return None,
        Shape::RequestsOnly(c, m) => (Some(quantities(c, m)), None),
        Shape::Guaranteed(c, m) => (Some(quantities(c, m)), Some(quantities(c, m))),
        Shape::LimitsOnly(c, m) => (None, Some(quantities(c, m))),
        Shape::Burstable(c, m) => (Some(quantities(c, m)), Some(quantities(c * 2, m * 2))),
    };
    Some(ResourceRequirements {
        requests,
        limits,
        claims: None,
    })
}

#[derive(Debug, Clone)]
struct Ctr {
    name: String,
    prestop: PreStop,
    shape: Shape,
    /// env with a `resourceFieldRef` (without / with a container name).
    field_ref: Option<bool>,
    /// Mounts: user volume index, or our mount path (a conflict).
    mounts: Vec<Option<usize>>,
    security: bool,
}

fn ctr() -> impl Strategy<Value = Ctr> {
    (
        container_name(),
        prestop(),
        shape(),
        prop::option::of(any::<bool>()),
        prop::collection::vec(
            prop_oneof![9 => (0usize..3).prop_map(Some), 1 => Just(None)],
            0..3,
        ),
        any::<bool>(),
    )
        .prop_map(|(name, prestop, shape, field_ref, mounts, security)| Ctr {
            name,
            prestop,
            shape,
            field_ref,
            mounts,
            security,
        })
}

/// A user init container: a plain one or a native sidecar.
#[derive(Debug, Clone)]
struct Init {
    name: String,
    native: bool,
    shape: Shape,
    prestop: PreStop,
}

fn init() -> impl Strategy<Value = Init> {
    (container_name(), any::<bool>(), shape(), prestop()).prop_map(
        |(name, native, shape, prestop)| Init {
            name,
            native,
            shape,
            prestop,
        },
    )
}

#[derive(Debug, Clone)]
struct Gen {
    containers: Vec<Ctr>,
    inits: Vec<Init>,
    restart_policy: Option<&'static str>,
    job_owned: bool,
    host_pid: bool,
    share_pid: Option<bool>,
    grace: Option<i64>,
    volumes: Vec<String>,
    annotations: BTreeMap<String, String>,
    pod_level: Option<Shape>,
    namespace: Option<String>,
    /// The namespace has the sidecar binary's ConfigMap (no install init
    /// container; a second, ConfigMap volume).
    config_map: bool,
}

fn volume_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z][a-z0-9-]{0,20}[a-z0-9]",
        1 => Just("kube-prestop".to_owned()),
        1 => Just("kube-prestop-1".to_owned()),
        1 => Just("kube-prestop-bin".to_owned()),
        1 => Just("kube-prestop-state-main".to_owned()),
    ]
}

fn annotation_set() -> impl Strategy<Value = BTreeMap<String, String>> {
    let entry = prop_oneof![
        3 => ("example\\.com/[a-z]{1,8}", "[ -~]{0,12}"),
        1 => Just((annotations::INJECT.to_owned(), "true".to_owned())),
        1 => Just((annotations::INJECT.to_owned(), "false".to_owned())),
        1 => Just((annotations::SIDECAR_CPU_REQUEST.to_owned(), "20m".to_owned())),
        1 => Just((annotations::SIDECAR_MEMORY_LIMIT.to_owned(), "256Mi".to_owned())),
        1 => Just((annotations::DEFAULT_CONTAINER.to_owned(), "main".to_owned())),
        1 => Just((annotations::STATUS.to_owned(), "injected".to_owned())),
    ];
    prop::collection::vec(entry, 0..4).prop_map(|v| v.into_iter().collect())
}

fn generated() -> impl Strategy<Value = Gen> {
    (
        prop::collection::vec(ctr(), 1..=4),
        prop::collection::vec(init(), 0..3),
        prop_oneof![
            4 => Just(Some("Never")),
            3 => Just(Some("OnFailure")),
            1 => Just(Some("Always")),
            1 => Just(None),
        ],
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.1),
        prop::option::of(any::<bool>()),
        prop::option::of(0i64..120),
        prop::collection::vec(volume_name(), 0..3),
        annotation_set(),
        prop::option::weighted(0.15, shape()),
        prop_oneof![
            8 => Just(None),
            1 => Just(Some("kube-system".to_owned())),
            1 => Just(Some("team-a".to_owned())),
        ],
        any::<bool>(),
    )
        .prop_map(
            |(
                containers,
                inits,
                restart_policy,
                job_owned,
                host_pid,
                share_pid,
                grace,
                volumes,
                annotations,
                pod_level,
                namespace,
                config_map,
            )| Gen {
                containers,
                inits,
                restart_policy,
                job_owned,
                host_pid,
                share_pid,
                grace,
                volumes,
                annotations,
                pod_level,
                namespace,
                config_map,
            },
        )
}

/// Makes `name` unique in `taken` (as the API server would require) by a
/// numeric suffix, keeping it a DNS label.
fn unique(name: &str, taken: &mut BTreeSet<String>) -> String {
    let mut candidate = name.to_owned();
    let mut n = 0;
    while taken.contains(&candidate) {
        n += 1;
        let suffix = format!("-{n}");
        let head: String = name.chars().take(63 - suffix.len()).collect();
        candidate = format!("{}{suffix}", head.trim_end_matches('-'));
    }
    taken.insert(candidate.clone());
    candidate
}

fn build(g: &Gen) -> Pod {
    let mut taken = BTreeSet::new();
    let mut vol_taken = BTreeSet::new();
    let volumes: Vec<String> = g
        .volumes
        .iter()
        .map(|v| unique(v, &mut vol_taken))
        .collect();
    let mount = |m: &Option<usize>, i: usize| -> Option<VolumeMount> {
        match m {
            Some(v) => volumes.get(*v).map(|name| VolumeMount {
                name: name.clone(),
                mount_path: format!("/data/{v}/{i}"),
                ..Default::default()
            }),
            None => Some(VolumeMount {
                name: volumes.first().cloned().unwrap_or_else(|| "x".into()),
                mount_path: contract::MOUNT_PATH.to_owned(),
                ..Default::default()
            }),
        }
    };
    let inits: Vec<Container> = g
        .inits
        .iter()
        .map(|i| Container {
            name: unique(&i.name, &mut taken),
            image: Some("registry.example/init:1".into()),
            restart_policy: i.native.then(|| "Always".to_owned()),
            resources: requirements(i.shape),
            lifecycle: if i.native {
                lifecycle(&i.prestop)
            } else {
                None
            },
            ..Default::default()
        })
        .collect();
    let containers: Vec<Container> = g
        .containers
        .iter()
        .map(|c| {
            let name = unique(&c.name, &mut taken);
            let mut env = vec![EnvVar {
                name: "PLAIN".into(),
                value: Some("1".into()),
                value_from: None,
            }];
            if let Some(named) = c.field_ref {
                env.push(EnvVar {
                    name: "MEM_LIMIT".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            container_name: named.then(|| name.clone()),
                            resource: "limits.memory".into(),
                            divisor: None,
                        }),
                        ..Default::default()
                    }),
                });
            }
            let mounts: Vec<VolumeMount> = c
                .mounts
                .iter()
                .enumerate()
                .filter_map(|(i, m)| mount(m, i))
                .collect();
            Container {
                name,
                image: Some("registry.example/job:2".into()),
                command: Some(vec!["sh".into(), "-c".into(), "run".into()]),
                env: Some(env),
                lifecycle: lifecycle(&c.prestop),
                resources: requirements(c.shape),
                volume_mounts: (!mounts.is_empty()).then_some(mounts),
                security_context: c
                    .security
                    .then(|| k8s_openapi::api::core::v1::SecurityContext {
                        run_as_user: Some(1000),
                        run_as_non_root: Some(true),
                        ..Default::default()
                    }),
                termination_message_path: Some("/dev/termination-log".into()),
                ..Default::default()
            }
        })
        .collect();
    let owner = g.job_owned.then(|| {
        vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "demo".into(),
            uid: "5d3c1f7e-0000-4000-8000-000000000001".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]
    });
    Pod {
        metadata: ObjectMeta {
            generate_name: Some("demo-".into()),
            namespace: g.namespace.clone(),
            labels: Some(BTreeMap::from([(
                "batch.kubernetes.io/job-name".into(),
                "demo".into(),
            )])),
            annotations: (!g.annotations.is_empty()).then(|| g.annotations.clone()),
            owner_references: owner,
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            init_containers: (!inits.is_empty()).then_some(inits),
            restart_policy: g.restart_policy.map(str::to_owned),
            host_pid: g.host_pid.then_some(true),
            share_process_namespace: if g.host_pid { None } else { g.share_pid },
            termination_grace_period_seconds: g.grace,
            resources: g.pod_level.and_then(requirements),
            volumes: (!volumes.is_empty()).then(|| {
                volumes
                    .iter()
                    .map(|name| Volume {
                        name: name.clone(),
                        empty_dir: Some(Default::default()),
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

// ---------------------------------------------------------------- properties

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Name of the sidecar binary's ConfigMap in generated namespaces that have
/// one.
const CONFIG_MAP: &str = "kube-prestop-sidecar-0123456789ab";

fn context(g: &Gen) -> ClusterContext {
    // With a ConfigMap: a single-architecture (amd64) cluster, whose
    // ConfigMap every pod may mount.
    let binary = if g.config_map {
        engine::BinaryFacts {
            config_maps: [("amd64".to_owned(), CONFIG_MAP.to_owned())].into(),
            node_architectures: engine::NodeArchitectures::Known(["amd64".to_owned()].into()),
            ..Default::default()
        }
    } else {
        engine::BinaryFacts::default()
    };
    ClusterContext {
        namespace: String::new(),
        limit_ranges: Vec::new(),
        binary,
    }
}

fn has_conflicting_mount(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .any(|c| {
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path.starts_with(contract::MOUNT_PATH))
        })
}

fn take(obj: &mut Value, key: &str) -> Value {
    obj.as_object_mut()
        .and_then(|o| o.remove(key))
        .unwrap_or(Value::Null)
}

fn put(obj: &mut Value, key: &str, v: Value) {
    if !v.is_null() {
        obj.as_object_mut().unwrap().insert(key.to_owned(), v);
    }
}

fn list(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        Value::Null => Vec::new(),
        other => panic!("not a list: {other}"),
    }
}

/// Removes from `after` (the injected pod as JSON) every change the engine
/// is allowed to make relative to `before`, asserting the shape of each:
///
/// * `spec.initContainers`: the user's list unchanged as a prefix, then our
///   additions (the install container and one sidecar per watched container);
/// * `spec.volumes`: the user's list unchanged as a prefix, then exactly one
///   `emptyDir` volume;
/// * `spec.shareProcessNamespace`: set to `true`, only without `hostPID`;
/// * regular containers: only `lifecycle.preStop.exec.command` (of a
///   container that had a non-empty exec preStop) and appended
///   `volumeMounts`;
/// * `metadata.annotations`: additions of `kube-prestop.io/status`,
///   `kube-prestop.io/version` and, when absent, the default container;
///   ours (status, version) may be overwritten; the meshes' inbound port
///   exclusions keep the pod's own list and add gate ports only;
/// * `metadata.labels`: `kube-prestop.io/injected: "true"` added (or
///   overwritten).
///
/// Returns the number of watched containers. What remains must equal
/// `before` exactly.
fn strip_allowed(before: &Value, after: &mut Value, config_map: bool) -> usize {
    // spec
    let spec_b = &before["spec"];
    let spec_a = after.get_mut("spec").unwrap();
    let inits_b = list(spec_b.get("initContainers").cloned().unwrap_or(Value::Null));
    let inits_a = list(take(spec_a, "initContainers"));
    assert!(inits_a.len() > inits_b.len(), "no init container added");
    assert_eq!(
        &inits_a[..inits_b.len()],
        &inits_b[..],
        "user init containers changed"
    );
    let added = &inits_a[inits_b.len()..];
    put(
        spec_a,
        "initContainers",
        spec_b.get("initContainers").cloned().unwrap_or(Value::Null),
    );

    let vols_b = list(spec_b.get("volumes").cloned().unwrap_or(Value::Null));
    let vols_a = list(take(spec_a, "volumes"));
    assert!(
        vols_a.len() > vols_b.len() + 2,
        "the id emptyDir, the binary's volume and the state emptyDirs added"
    );
    assert_eq!(&vols_a[..vols_b.len()], &vols_b[..], "user volumes changed");
    let ours = &vols_a[vols_b.len()..];
    assert!(
        ours[0].get("emptyDir").is_some(),
        "first added volume is an emptyDir: {}",
        ours[0]
    );
    if config_map {
        assert_eq!(
            ours[1]["configMap"]["name"], CONFIG_MAP,
            "second added volume is the binary's ConfigMap: {}",
            ours[1]
        );
    } else {
        assert!(
            ours[1].get("emptyDir").is_some(),
            "second added volume is the install init container's emptyDir: {}",
            ours[1]
        );
    }
    for v in &ours[2..] {
        assert!(v.get("emptyDir").is_some(), "a state emptyDir: {v}");
    }
    let install = usize::from(!config_map);
    put(
        spec_a,
        "volumes",
        spec_b.get("volumes").cloned().unwrap_or(Value::Null),
    );

    let share = take(spec_a, "shareProcessNamespace");
    if spec_b["hostPID"] == Value::Bool(true) {
        assert_eq!(
            share,
            spec_b
                .get("shareProcessNamespace")
                .cloned()
                .unwrap_or(Value::Null)
        );
    } else {
        assert_eq!(share, Value::Bool(true));
    }
    put(
        spec_a,
        "shareProcessNamespace",
        spec_b
            .get("shareProcessNamespace")
            .cloned()
            .unwrap_or(Value::Null),
    );

    let mut watched = 0;
    let cs_b = list(spec_b["containers"].clone());
    let cs_a = spec_a
        .get_mut("containers")
        .unwrap()
        .as_array_mut()
        .unwrap();
    assert_eq!(cs_a.len(), cs_b.len(), "containers added or removed");
    for (a, b) in cs_a.iter_mut().zip(&cs_b) {
        if a == b {
            continue;
        }
        watched += 1;
        let cmd_b = &b["lifecycle"]["preStop"]["exec"]["command"];
        assert!(
            cmd_b.as_array().is_some_and(|c| !c.is_empty()),
            "container without an exec preStop changed: {}",
            b["name"]
        );
        let cmd_a = a
            .pointer_mut("/lifecycle/preStop/exec/command")
            .expect("preStop kept");
        *cmd_a = cmd_b.clone();
        let mounts_b = list(b.get("volumeMounts").cloned().unwrap_or(Value::Null));
        let mounts_a = list(take(a, "volumeMounts"));
        assert!(mounts_a.len() > mounts_b.len(), "no mount added");
        assert_eq!(
            &mounts_a[..mounts_b.len()],
            &mounts_b[..],
            "user mounts changed"
        );
        for m in &mounts_a[mounts_b.len()..] {
            assert!(
                ours.iter().any(|v| v["name"] == m["name"]),
                "added mount of another volume: {m}"
            );
        }
        put(
            a,
            "volumeMounts",
            b.get("volumeMounts").cloned().unwrap_or(Value::Null),
        );
    }
    assert_eq!(
        added.len(),
        watched + install,
        "install (unless the binary comes from a ConfigMap) + one sidecar per watched container"
    );
    assert_eq!(
        ours.len(),
        2 + watched,
        "one state emptyDir per watched container"
    );

    // metadata
    let ann_b = before["metadata"]
        .get("annotations")
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    let meta_a = after.get_mut("metadata").unwrap();
    let mut ann_a = take(meta_a, "annotations");
    let ann_a_map = ann_a.as_object_mut().expect("annotations added");
    for key in [annotations::STATUS, annotations::VERSION] {
        assert!(ann_a_map.contains_key(key), "{key} set");
        match ann_b.get(key) {
            Some(v) => {
                ann_a_map.insert(key.to_owned(), v.clone());
            }
            None => {
                ann_a_map.remove(key);
            }
        }
    }
    if ann_b.get(annotations::DEFAULT_CONTAINER).is_none() {
        ann_a_map.remove(annotations::DEFAULT_CONTAINER);
    }
    // The meshes' port exclusions: the pod's own list, then the gate ports.
    for key in [
        engine::gate::ISTIO_EXCLUDE_INBOUND_PORTS,
        engine::gate::LINKERD_SKIP_INBOUND_PORTS,
    ] {
        let Some(Value::String(v)) = ann_a_map.remove(key) else {
            continue;
        };
        let own: Vec<&str> = ann_b
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let items: Vec<&str> = v.split(',').collect();
        assert!(items.starts_with(&own), "{key}: {v:?} drops the pod's own");
        assert!(
            items[own.len()..].iter().all(|p| p
                .parse::<u16>()
                .is_ok_and(|p| p >= contract::GATE_PORT_BASE)),
            "{key}: {v:?}"
        );
        if let Some(b) = ann_b.get(key) {
            ann_a_map.insert(key.to_owned(), b.clone());
        }
    }
    if !ann_a_map.is_empty() || before["metadata"].get("annotations").is_some() {
        put(meta_a, "annotations", ann_a);
    }
    let labels_b = before["metadata"].get("labels").cloned();
    let mut labels_a = take(meta_a, "labels");
    let labels_a_map = labels_a.as_object_mut().expect("labels added");
    assert_eq!(
        labels_a_map.get(annotations::INJECTED_LABEL),
        Some(&Value::String(annotations::INJECTED_LABEL_VALUE.to_owned())),
        "{} set",
        annotations::INJECTED_LABEL
    );
    match labels_b
        .as_ref()
        .and_then(|l| l.get(annotations::INJECTED_LABEL))
    {
        Some(v) => {
            labels_a_map.insert(annotations::INJECTED_LABEL.to_owned(), v.clone());
        }
        None => {
            labels_a_map.remove(annotations::INJECTED_LABEL);
        }
    }
    if labels_b.is_some() {
        put(meta_a, "labels", labels_a);
    }
    watched
}

fn check_names(pod: &Pod) {
    let spec = pod.spec.as_ref().unwrap();
    let mut seen = BTreeSet::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        assert!(
            contract::is_dns_label(&c.name),
            "container name {:?}",
            c.name
        );
        assert!(
            seen.insert(c.name.clone()),
            "duplicate container name {:?}",
            c.name
        );
    }
    let mut seen = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        assert!(contract::is_dns_label(&v.name), "volume name {:?}", v.name);
        assert!(
            seen.insert(v.name.clone()),
            "duplicate volume name {:?}",
            v.name
        );
    }
}

fn check(g: &Gen) -> Result<(), TestCaseError> {
    let pod = build(g);
    let config = EngineConfig::default();
    let decision = engine::inject(&pod, &context(g), &config);
    let out = match decision {
        Ok(Decision::Skip(_)) => return Ok(()),
        Ok(Decision::Inject(out)) => *out,
        Err(EngineError::MountPathConflict { .. }) if has_conflicting_mount(&pod) => {
            return Ok(());
        }
        Err(e) => panic!(
            "engine refused a valid pod: {e}\n{}",
            serde_json::to_string(&pod).unwrap()
        ),
    };
    let before = serde_json::to_value(&pod).unwrap();
    let after = serde_json::to_value(&out).unwrap();

    // 1. The patch applies and yields a Pod.
    let patch = json_patch::diff(&before, &after);
    let mut patched = before.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    prop_assert_eq!(&patched, &after);
    let reparsed: Pod = serde_json::from_value(patched).unwrap();
    prop_assert_eq!(&serde_json::to_value(&reparsed).unwrap(), &after);

    // 2. Idempotent.
    match engine::inject(&out, &context(g), &config) {
        Ok(Decision::Skip(SkipReason::AlreadyInjected)) => {}
        other => panic!("second pass: {other:?}"),
    }

    // 3. Only documented fields change.
    let mut stripped = after.clone();
    let watched = strip_allowed(&before, &mut stripped, g.config_map);
    prop_assert!(watched >= 1);
    prop_assert_eq!(&stripped, &before);

    // 4. QoS class never lowered.
    let qos_before = resources::pod_qos(pod.spec.as_ref().unwrap()).unwrap();
    let qos_after = resources::pod_qos(out.spec.as_ref().unwrap()).unwrap();
    prop_assert!(
        qos_after >= qos_before,
        "QoS {qos_before:?} -> {qos_after:?}"
    );

    // 5. Names.
    check_names(&out);

    // 6. Our volumes are writable only where they must be.
    check_shared_volume(&pod, &out);
    Ok(())
}

/// Every mount of the volumes injection adds is whole (no `subPath`: each
/// would cost the kubelet two `mount` execs), a mount point inside a state
/// volume is only X's identifying mount (read-only, at
/// `/.kube-prestop/state/X/created`, in X itself, whose runtime makes that
/// directory, the evidence of X's start), and the only writable ones are the
/// install init container's (to write the binary) and each watched
/// container X's state volume at `/.kube-prestop/state/X`, in X and X's
/// sidecar alone: no container can replace the binary, write another
/// container's records or fake another container's start through a volume.
fn check_shared_volume(before: &Pod, out: &Pod) {
    let spec_b = before.spec.as_ref().unwrap();
    let spec = out.spec.as_ref().unwrap();
    let user_volumes: BTreeSet<&str> = spec_b
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    let ours: BTreeSet<&str> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .filter(|v| !user_volumes.contains(v))
        .collect();
    let mut writers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        for m in c.volume_mounts.iter().flatten() {
            if !ours.contains(m.name.as_str()) {
                continue;
            }
            assert_eq!(m.sub_path, None, "{}: subPath of {}", c.name, m.name);
            assert_eq!(
                m.sub_path_expr, None,
                "{}: subPathExpr of {}",
                c.name, m.name
            );
            let nested = m
                .mount_path
                .strip_prefix(&contract::state_mount_path(""))
                .is_some_and(|rest| rest.contains('/'));
            if nested {
                assert_eq!(m.mount_path, contract::id_mount_path(&c.name), "{}", c.name);
                assert_eq!(
                    m.read_only,
                    Some(true),
                    "{}: {} writable",
                    c.name,
                    m.mount_path
                );
                continue;
            }
            if m.read_only == Some(true) {
                continue;
            }
            if c.command.as_deref() == Some(&contract::install_command()[..]) {
                assert_eq!(m.mount_path, contract::BINARY_DIR, "{}", c.name);
                continue;
            }
            let x = m
                .mount_path
                .strip_prefix(&contract::state_mount_path(""))
                .unwrap_or_else(|| panic!("{}: {} mounted read-write", c.name, m.mount_path));
            writers
                .entry(m.name.clone())
                .or_default()
                .push(format!("{x}:{}", c.name));
        }
    }
    for (volume, names) in &writers {
        let x = names[0].split(':').next().unwrap_or_default();
        assert!(
            names.len() == 2
                && names.iter().all(|n| n.starts_with(&format!("{x}:")))
                && names.contains(&format!("{x}:{x}")),
            "{volume} writable by {names:?}, not by one container X and its sidecar only"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn injection_properties(g in generated()) {
        check(&g)?;
    }
}

fn check_webhook_patch(g: &Gen) -> Result<(), TestCaseError> {
    let pod = build(g);
    let config = EngineConfig::default();
    let decision = engine::inject(&pod, &context(g), &config);
    let plan = engine::plan(&pod, &context(g), &config);
    match (decision, plan) {
        (Ok(Decision::Inject(out)), Ok(engine::Plan::Inject(mutation))) => {
            let patch = engine::patch::json_patch(&pod, &mutation).unwrap();
            let mut patched = serde_json::to_value(&pod).unwrap();
            json_patch::patch(&mut patched, &patch).unwrap();
            prop_assert_eq!(&patched, &serde_json::to_value(&*out).unwrap());
        }
        (Ok(Decision::Skip(a)), Ok(engine::Plan::Skip(b))) => prop_assert_eq!(a, b),
        (Err(a), Err(b)) => prop_assert_eq!(a, b),
        (decision, plan) => panic!("inject gave {decision:?}, plan gave {plan:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn webhook_patch_gives_the_output(g in generated()) {
        check_webhook_patch(&g)?;
    }
}

/// The generator reaches injection often enough for the properties to mean
/// something (a fixed seed: deterministic).
#[test]
fn generator_reaches_injection() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = generated();
    let mut injected = 0;
    let mut guaranteed = 0;
    for _ in 0..200 {
        let g = strategy.new_tree(&mut runner).unwrap().current();
        let pod = build(&g);
        if let Ok(Decision::Inject(_)) =
            engine::inject(&pod, &context(&g), &EngineConfig::default())
        {
            injected += 1;
            if resources::pod_qos(pod.spec.as_ref().unwrap()).unwrap()
                == resources::QosClass::Guaranteed
            {
                guaranteed += 1;
            }
        }
    }
    assert!(
        injected >= 40,
        "only {injected} of 200 generated pods injected"
    );
    assert!(guaranteed >= 1, "no Guaranteed pod injected");
}
