//! Golden tests of the injection engine.
//!
//! Each folder under `tests/golden/<case>/` holds:
//! * `input.yaml`: a Pod as the apiserver sends it at admission (canonical:
//!   it must survive a round trip through the k8s-openapi `Pod` unchanged);
//! * `context.yaml` (optional): `namespace` (default `default`),
//!   `limitRanges` (a list of LimitRange objects), the binary-delivery facts
//!   and `workloadKinds` (the `--workload-kinds` the case enables; default
//!   `[job]`);
//! * `expected.yaml`: the injected Pod, or `{skip: <label>, reason: <text>}`,
//!   or `{error: <label>, message: <text>}`.
//!
//! For every injected case the test also checks that the JSON Patch from
//! `json_patch::diff(input, output)` applied to the input gives the expected
//! output, that the output parses as a k8s-openapi Pod, that a second pass is
//! `Skip(AlreadyInjected)` (empty patch), that the QoS class is not lowered,
//! that every container and volume name is a unique DNS label, that the
//! install container and (for pods that complied) the whole pod comply with
//! Pod Security `restricted`. A case that enables workload kinds other than
//! Job is also run with the default kinds, where its pod must be left
//! untouched (`not_job_owned`): a kind the operator does not enable changes
//! nothing.
//!
//! The batch systems' cases (`argo-workflows*`, `volcano-job`,
//! `spark-driver`, `spark-executor`, `armada`, `kueue-pod`) are pods as those
//! systems' controllers create them; each `input.yaml` names its source and
//! version (see `tests/golden/README.md`).
//!
//! The expected files hold `<version>` where the output has this build's
//! version (the `kube-prestop.io/version` annotation), so that a version
//! bump changes no fixture; the comparison puts the version back.
//!
//! `UPDATE_GOLDEN=1 cargo test -p kube-prestop-engine --test golden`
//! rewrites the expected files; review every change by eye: they are the spec.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod golden_common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use golden_common::{
    Context, VERSION_PLACEHOLDER, VERSION_POINTER, cases, read_expected, read_yaml, to_expected,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube_prestop_contract as contract;
use kube_prestop_engine::{self as engine, ClusterContext, Decision, SkipReason, resources};
use serde_json::{Value, json};

/// The cases the issue and the design require; more may exist.
const REQUIRED: &[&str] = &[
    "simple-job",
    "two-containers-different-prestops",
    "httpget-prestop",
    "no-prestop",
    "deployment-restart-always",
    "opt-in-restart-always",
    "guaranteed-qos",
    "best-effort",
    "host-pid",
    "windows-pod",
    "existing-init-and-native-sidecar",
    "kube-system",
    "webhook-namespace",
    "opted-out",
    "already-injected",
    "resource-field-ref",
    "generate-name",
    "limit-range",
    "best-effort-limit-range",
    "opt-in-non-job",
    "name-collisions",
    "invalid-annotation",
    "containers-annotation",
    "config-map-simple-job",
    "config-map-two-containers",
    "config-map-name-collisions",
    "config-map-guaranteed-qos",
    "pod-level-resources",
    "sidecar-request-above-default-limit",
    "sidecar-limit-below-request",
    "watched-not-first",
    "image-volume-simple-job",
    "image-volume-two-containers",
    "config-map-pinned-node-selector",
    "config-map-pinned-affinity",
    "config-map-single-arch-cluster",
    "mixed-cluster-unpinned",
    "unsupported-architecture",
    "argo-workflows",
    "argo-workflows-wait-prestop",
    "argo-workflows-own-kill-command",
    "volcano-job",
    "spark-driver",
    "spark-executor",
    "armada",
    "kueue-pod",
];

fn outcome(decision: &Result<Decision, engine::EngineError>) -> Value {
    match decision {
        Ok(Decision::Skip(reason)) => {
            json!({"skip": reason.as_str(), "reason": reason.to_string()})
        }
        Ok(Decision::Inject(pod)) => serde_json::to_value(pod.as_ref()).unwrap(),
        Err(e) => json!({"error": e.as_str(), "message": e.to_string()}),
    }
}

fn check_names(case: &str, pod: &Pod) {
    let spec = pod.spec.as_ref().unwrap();
    let mut seen = BTreeSet::new();
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in all {
        assert!(
            contract::is_dns_label(&c.name),
            "{case}: bad name {:?}",
            c.name
        );
        assert!(
            seen.insert(c.name.clone()),
            "{case}: duplicate {:?}",
            c.name
        );
    }
    let mut volumes = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        assert!(
            contract::is_dns_label(&v.name),
            "{case}: bad volume {:?}",
            v.name
        );
        assert!(
            volumes.insert(v.name.clone()),
            "{case}: duplicate volume {:?}",
            v.name
        );
    }
}

/// The container-level rules of the Pod Security Standards `restricted`
/// profile (pod-level settings apply where the container sets none): non-root,
/// UID not 0, no privilege escalation, all capabilities dropped (only
/// `NET_BIND_SERVICE` added back), seccomp `RuntimeDefault` or `Localhost`,
/// not privileged.
fn restricted(spec: &PodSpec, c: &Container) -> bool {
    let pod = spec.security_context.as_ref();
    let sc = c.security_context.as_ref();
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(pod.and_then(|p| p.run_as_non_root))
        == Some(true);
    let uid = sc
        .and_then(|s| s.run_as_user)
        .or(pod.and_then(|p| p.run_as_user));
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let drops_all = caps
        .and_then(|c| c.drop.as_ref())
        .is_some_and(|d| d.iter().any(|x| x == "ALL"));
    let adds_ok = caps
        .and_then(|c| c.add.as_ref())
        .is_none_or(|a| a.iter().all(|x| x == "NET_BIND_SERVICE"));
    let seccomp = sc
        .and_then(|s| s.seccomp_profile.as_ref())
        .or(pod.and_then(|p| p.seccomp_profile.as_ref()))
        .is_some_and(|p| p.type_ == "RuntimeDefault" || p.type_ == "Localhost");
    non_root
        && uid != Some(0)
        && sc.and_then(|s| s.allow_privilege_escalation) == Some(false)
        && drops_all
        && adds_ok
        && seccomp
        && sc.and_then(|s| s.privileged) != Some(true)
}

fn all_restricted(spec: &PodSpec) -> bool {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .all(|c| restricted(spec, c))
}

fn run_case(dir: &Path, update: bool) -> Result<(), String> {
    let case = dir.file_name().unwrap().to_string_lossy().into_owned();
    let raw_input = read_yaml(&dir.join("input.yaml"));
    let pod: Pod = serde_json::from_value(raw_input.clone())
        .map_err(|e| format!("{case}: input is not a Pod: {e}"))?;
    let input = serde_json::to_value(&pod).unwrap();
    if input != raw_input {
        return Err(format!(
            "{case}: input.yaml is not canonical (lost or changed in a Pod round trip): {}",
            serde_json::to_string(&json_patch::diff(&raw_input, &input)).unwrap()
        ));
    }
    let context = Context::of_case(dir).map_err(|e| format!("{case}: {e}"))?;
    let config = context
        .engine_config()
        .map_err(|e| format!("{case}: context.yaml: {e}"))?;
    let other_kinds = context.enables_other_kinds();
    let cluster = ClusterContext {
        namespace: context.namespace(),
        binary: context.binary_facts(),
        limit_ranges: context.limit_ranges,
    };
    let decision = engine::inject(&pod, &cluster, &config);
    // A kind the operator does not enable changes nothing.
    if other_kinds {
        match engine::inject(&pod, &cluster, &golden_common::config()) {
            Ok(Decision::Skip(SkipReason::NotJobOwned)) => {}
            other => {
                return Err(format!(
                    "{case}: with the default workload kinds the pod should be left alone (not_job_owned), got {other:?}"
                ));
            }
        }
    }
    let actual = outcome(&decision);

    let expected_path = dir.join("expected.yaml");
    if update {
        let text = serde_saphyr::to_string(&to_expected(&actual)).unwrap();
        fs::write(&expected_path, text).unwrap();
    }
    // The fixture names no version: a version bump changes no fixture.
    if let Some(version) = read_yaml(&expected_path).pointer(VERSION_POINTER)
        && version != VERSION_PLACEHOLDER
    {
        return Err(format!(
            "{case}: expected.yaml has kube-prestop.io/version {version}; write {VERSION_PLACEHOLDER:?} (UPDATE_GOLDEN=1 does)"
        ));
    }
    let expected = read_expected(&expected_path);
    if actual != expected {
        return Err(format!(
            "{case}: output differs from expected.yaml; patch expected -> actual: {}",
            serde_json::to_string_pretty(&json_patch::diff(&expected, &actual)).unwrap()
        ));
    }

    if let Ok(Decision::Inject(out)) = &decision {
        // The webhook's patch, applied to the input, gives the expected output.
        let patch = json_patch::diff(&input, &actual);
        let mut patched = input.clone();
        json_patch::patch(&mut patched, &patch).map_err(|e| format!("{case}: patch: {e}"))?;
        if patched != expected {
            return Err(format!("{case}: patched input differs from expected"));
        }
        // The output is a valid Pod.
        let reparsed: Pod = serde_json::from_value(expected.clone())
            .map_err(|e| format!("{case}: output is not a Pod: {e}"))?;
        // Idempotent: a second pass is skipped, i.e. an empty patch.
        match engine::inject(&reparsed, &cluster, &config) {
            Ok(Decision::Skip(SkipReason::AlreadyInjected)) => {}
            other => return Err(format!("{case}: second pass gave {other:?}")),
        }
        // QoS class never lowered.
        let before = resources::pod_qos(pod.spec.as_ref().unwrap()).unwrap();
        let after = resources::pod_qos(out.spec.as_ref().unwrap()).unwrap();
        if after < before {
            return Err(format!("{case}: QoS lowered from {before:?} to {after:?}"));
        }
        check_names(&case, out);
        // Pod Security `restricted`: what we add complies whenever the pod did.
        let out_spec = out.spec.as_ref().unwrap();
        if all_restricted(pod.spec.as_ref().unwrap()) && !all_restricted(out_spec) {
            return Err(format!("{case}: injection broke Pod Security restricted"));
        }
        if let Some(install) = out_spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.command.as_deref() == Some(contract::install_command().as_slice()))
            && !restricted(out_spec, install)
        {
            return Err(format!("{case}: install container is not restricted"));
        }
    }
    Ok(())
}

#[test]
fn golden_cases() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let dirs = cases();
    let present: BTreeSet<String> = dirs
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut failures: Vec<String> = dirs
        .iter()
        .filter_map(|d| run_case(d, update).err())
        .collect();
    for required in REQUIRED {
        if !present.contains(*required) {
            failures.push(format!("missing golden case {required}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The kinds of outcome the golden cases must cover: every skip reason.
#[test]
fn every_skip_reason_has_a_golden_case() {
    let mut covered = BTreeSet::new();
    for dir in cases() {
        let expected = dir.join("expected.yaml");
        if !expected.exists() {
            continue; // reported by golden_cases
        }
        if let Some(label) = read_yaml(&expected).get("skip").and_then(Value::as_str) {
            covered.insert(label.to_owned());
        }
    }
    for reason in SkipReason::ALL {
        assert!(
            covered.contains(reason.as_str()),
            "no golden case for {}",
            reason.as_str()
        );
    }
}
