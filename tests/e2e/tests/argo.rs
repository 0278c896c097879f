//! kube-prestop under a batch system whose pods no Job owns (issue 27):
//! real Argo Workflows (`tests/argo/install.sh`: the workflow controller and
//! the emissary executor built from Argo's sources) on the real local
//! cluster, with `argo-workflows` in the chart's `webhook.workloadKinds`
//! (`tests/install-product.sh`).
//!
//! Each case is a one-step Workflow whose `main` container has a preStop,
//! run twice at the same time: in a namespace labelled for injection and in
//! one that is not (its twin). For a step that succeeds, fails, is
//! OOM-killed, and whose Workflow is terminated while it runs (Argo's
//! controller then runs its kill command in `main` and `wait`, which the
//! webhook sets to `kube-prestop signal`: Argo's own `kill 1` would stop
//! the whole pod once it shares its PID namespace):
//! - the injected pod's hook runs exactly once (a record on the node and the
//!   sidecar's log), and the twin's never (the kubelet does not run a
//!   preStop for a container that exits on its own: the gap kube-prestop
//!   closes);
//! - the Workflow's result is the twin's: its phase and the exit code that
//!   Argo's `wait` container reported for the step (`status.nodes[].outputs
//!   .exitCode`, from the WorkflowTaskResult the executor writes);
//! - Argo's `wait` container ended with exit code 0 in both (also when the
//!   controller had to signal it: after an OOM kill of emissary no exit code
//!   reaches `wait`, argoproj/argo-workflows#9083, and the controller
//!   signals the pod's running containers).
//!
//! A cluster without Argo fails this test with the command that installs it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use kube_prestop_e2e::checks::{container_status, ensure_injected, ensure_sidecar_hooks, phase};
use kube_prestop_e2e::fixtures::{container, set};
use kube_prestop_e2e::records::{RECORD_HOOK, Records, ensure_records};
use kube_prestop_e2e::scenario::{Scenario, run_scenarios, with_scenario_in};
use kube_prestop_e2e::waits::{poll_until, wait_pod_finished};
use kube_prestop_e2e::{client, init_tracing, sidecar_name};
use serde_json::{Value, json};

/// Argo's label on every pod of a Workflow (`common.LabelKeyWorkflow`).
const WORKFLOW_LABEL: &str = "workflows.argoproj.io/workflow";
/// The container of a Workflow step (`common.MainContainerName`).
const MAIN: &str = "main";
/// Argo's executor container beside `main` (`common.WaitContainerName`).
const WAIT: &str = "wait";
const WORKFLOW_TIMEOUT: Duration = Duration::from_secs(300);
const POD_TIMEOUT: Duration = Duration::from_secs(120);

fn workflow_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Workflow"),
        "workflows",
    )
}

/// What a Workflow ended with: its phase, and the step's exit code as Argo's
/// `wait` container reported it.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    phase: String,
    exit_code: Option<String>,
}

/// One case: a step command, its main container's extra resources, and
/// the phase Argo gives it; `labels` name its injected run and its twin.
#[derive(Clone)]
struct Case {
    name: &'static str,
    labels: [&'static str; 2],
    command: &'static str,
    resources: Option<Value>,
    /// Whether the test terminates the Workflow while the step runs
    /// (`spec.shutdown: Terminate`, what `argo terminate` sets): Argo's
    /// controller then runs its kill command in `main` and `wait`.
    terminate: bool,
    phase: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "succeeds",
            labels: ["argo step succeeds (injected)", "argo step succeeds (twin)"],
            command: "echo step done",
            resources: None,
            terminate: false,
            phase: "Succeeded",
        },
        Case {
            name: "fails",
            labels: ["argo step fails (injected)", "argo step fails (twin)"],
            command: "echo step failing; exit 3",
            resources: None,
            terminate: false,
            phase: "Failed",
        },
        Case {
            name: "oom",
            labels: [
                "argo step OOM-killed (injected)",
                "argo step OOM-killed (twin)",
            ],
            command: "sleep 2; x=a; while :; do x=$x$x; done",
            resources: Some(json!({
                "requests": { "cpu": "10m", "memory": "16Mi" },
                "limits": { "memory": "20Mi" }
            })),
            terminate: false,
            phase: "Failed",
        },
        Case {
            name: "terminated",
            labels: [
                "argo Workflow terminated (injected)",
                "argo Workflow terminated (twin)",
            ],
            command: "echo step running; sleep 300",
            resources: None,
            terminate: true,
            phase: "Failed",
        },
    ]
}

/// The emissary executor's Role and its binding to `default`, as Argo's
/// quick-start has them (`manifests/quick-start/base/executor/emissary`,
/// `executor-default-rolebinding.yaml`): the `wait` container writes the
/// step's result as a WorkflowTaskResult.
async fn executor_rbac(client: &Client, ns: &str) -> Result<()> {
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "executor" },
        "rules": [{
            "apiGroups": ["argoproj.io"],
            "resources": ["workflowtaskresults"],
            "verbs": ["create", "patch"]
        }]
    }))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "executor-default" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "executor" },
        "subjects": [{ "kind": "ServiceAccount", "name": "default", "namespace": ns }]
    }))?;
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .context("creating the executor Role")?;
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .context("creating the executor RoleBinding")?;
    Ok(())
}

/// A one-step Workflow: template `main` runs `command` with [`RECORD_HOOK`]
/// as its preStop and the records volume.
fn workflow(name: &str, case: &Case, records: &Records) -> Result<DynamicObject> {
    let mut step = container(MAIN, case.command, RECORD_HOOK);
    if let Some(resources) = &case.resources {
        set(&mut step, "resources", resources.clone());
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": { "name": name },
        "spec": {
            "entrypoint": MAIN,
            "serviceAccountName": "default",
            "activeDeadlineSeconds": WORKFLOW_TIMEOUT.as_secs(),
            "volumes": [records.volume()],
            "templates": [{ "name": MAIN, "container": step }]
        }
    }))?)
}

/// A finished Workflow's outcome (`None` while it runs): its phase and the
/// exit code of its one Pod node.
fn workflow_outcome(wf: &DynamicObject) -> Option<Outcome> {
    let status = wf.data.get("status")?;
    let phase = status.get("phase").and_then(Value::as_str)?;
    if !matches!(phase, "Succeeded" | "Failed" | "Error") {
        return None;
    }
    let exit_code = status
        .get("nodes")
        .and_then(Value::as_object)
        .and_then(|nodes| {
            nodes
                .values()
                .find(|n| n.get("type").and_then(Value::as_str) == Some("Pod"))
        })
        .and_then(|n| n.pointer("/outputs/exitCode"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(Outcome {
        phase: phase.to_owned(),
        exit_code,
    })
}

/// Waits for the Workflow to finish; its phase and the step's reported exit code.
async fn wait_workflow(client: &Client, ns: &str, name: &str) -> Result<Outcome> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &workflow_resource());
    poll_until(WORKFLOW_TIMEOUT, Duration::from_millis(500), || {
        let api = api.clone();
        async move { Ok(workflow_outcome(&api.get(name).await?).is_some()) }
    })
    .await
    .with_context(|| format!("Workflow {ns}/{name} to finish"))?;
    let wf = api.get(name).await?;
    workflow_outcome(&wf).with_context(|| format!("Workflow {ns}/{name}: no outcome"))
}

/// Once the Workflow's `main` container runs, terminates the Workflow as
/// `argo terminate` does (a merge patch of `spec.shutdown: Terminate`).
async fn terminate_when_running(client: &Client, ns: &str, name: &str) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let selector = format!("{WORKFLOW_LABEL}={name}");
    poll_until(POD_TIMEOUT, Duration::from_millis(250), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            Ok(list.items.iter().any(|p| {
                container_status(p, MAIN)
                    .and_then(|s| s.state)
                    .is_some_and(|s| s.running.is_some())
            }))
        }
    })
    .await
    .with_context(|| format!("Workflow {ns}/{name}: main running"))?;
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &workflow_resource())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "shutdown": "Terminate" } })),
        )
        .await
        .with_context(|| format!("terminating Workflow {ns}/{name}"))?;
    Ok(())
}

/// The Workflow's one pod, finished.
async fn workflow_pod(client: &Client, ns: &str, name: &str) -> Result<Pod> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{WORKFLOW_LABEL}={name}")))
        .await?;
    let [pod] = pods.items.as_slice() else {
        bail!(
            "Workflow {ns}/{name}: {} pods, expected 1",
            pods.items.len()
        );
    };
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    wait_pod_finished(client, ns, &pod_name, POD_TIMEOUT).await
}

/// `container`'s exit code in the finished `pod`.
fn exit_code(pod: &Pod, container: &str) -> Option<i32> {
    container_status(pod, container)
        .and_then(|s| s.state)
        .and_then(|s| s.terminated)
        .map(|t| t.exit_code)
}

/// Runs `case` in a namespace labelled for injection (`inject`) or not:
/// its outcome, after the per-namespace checks (hooks, `wait`).
async fn run_case(client: Client, case: &Case, inject: bool) -> Result<Outcome> {
    let prefix = format!(
        "kpt-argo-{}-{}",
        case.name,
        if inject { "inj" } else { "twin" }
    );
    let mut result = None;
    with_scenario_in(&client.clone(), &prefix, inject, |ns, rec| {
        let result = &mut result;
        async move {
            executor_rbac(&client, &ns).await?;
            let name = format!("step-{}", case.name);
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &workflow_resource());
            api.create(&PostParams::default(), &workflow(&name, case, &rec)?)
                .await
                .with_context(|| format!("creating Workflow {ns}/{name}"))?;
            if case.terminate {
                terminate_when_running(&client, &ns, &name).await?;
            }
            let outcome = wait_workflow(&client, &ns, &name).await?;
            let pod = workflow_pod(&client, &ns, &name).await?;
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            tracing::info!(%ns, ?outcome, pod_phase = %phase(&pod), main = ?exit_code(&pod, MAIN), "workflow finished");
            ensure!(
                outcome.phase == case.phase,
                "Workflow {ns}/{name}: phase {}, expected {}",
                outcome.phase,
                case.phase
            );
            ensure!(
                exit_code(&pod, WAIT) == Some(0),
                "Argo's wait container in {pod_name} ended with {:?}, expected 0",
                exit_code(&pod, WAIT)
            );
            if inject {
                ensure_injected(&pod, MAIN)?;
                let lines = ensure_records(&rec, "hooks", 1).await?;
                ensure!(
                    lines[0].starts_with(&format!("{MAIN} ")),
                    "the hook record was not the sidecar's: {lines:?}"
                );
                let logs = ensure_sidecar_hooks(&client, &ns, &pod_name, MAIN, 1).await?;
                tracing::info!(%ns, hook_record = %lines[0], "hook ran once");
                // Emissary forwards Argo's SIGTERM with kill(-1): the
                // sidecar sees it and stays (sidecar/src/sender.rs).
                ensure!(
                    !case.terminate || logs.contains("ignored SIGTERM from PID"),
                    "the sidecar of {pod_name} did not log emissary's SIGTERM as ignored:\n{logs}"
                );
            } else {
                ensure!(
                    !kube_prestop_e2e::container_names(&pod).contains(&sidecar_name(MAIN)),
                    "the twin's pod {pod_name} was injected"
                );
                ensure!(
                    rec.lines("hooks").is_empty(),
                    "the twin's step had a hook run: {:?} (the kubelet runs no preStop for an exit)",
                    rec.lines("hooks")
                );
            }
            *result = Some(outcome);
            Ok(())
        }
    })
    .await?;
    result.context("no outcome")
}

/// Fails with the install command when the cluster has no Argo.
async fn ensure_argo(client: &Client) -> Result<()> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &workflow_resource());
    api.list(&ListParams::default().limit(1)).await.context(
        "Argo Workflows is not installed on this cluster: run tests/argo/install.sh \
         (make e2e-all does), and install the chart with argo-workflows in \
         webhook.workloadKinds (tests/install-product.sh does)",
    )?;
    Ok(())
}

#[tokio::test]
async fn argo_workflow_steps_run_their_hook_once_and_keep_their_result() -> Result<()> {
    init_tracing();
    let client = client().await?;
    ensure_argo(&client).await?;
    let cases = cases();
    let mut scenarios: Vec<Scenario> = Vec::new();
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for (i, case) in cases.iter().enumerate() {
        for inject in [true, false] {
            let (client, outcomes) = (client.clone(), outcomes.clone());
            let case = case.clone();
            let label = case.labels[usize::from(!inject)];
            scenarios.push((
                label,
                Box::pin(async move {
                    let outcome = run_case(client, &case, inject).await?;
                    if let Ok(mut o) = outcomes.lock() {
                        o.push((i, inject, outcome));
                    }
                    Ok(())
                }),
            ));
        }
    }
    run_scenarios(scenarios, 6).await?;
    let outcomes = outcomes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    for (i, case) in cases.iter().enumerate() {
        let of = |inject| {
            outcomes
                .iter()
                .find(|(j, k, _)| *j == i && *k == inject)
                .map(|(_, _, o)| o)
        };
        let (injected, twin) = (of(true), of(false));
        ensure!(
            injected.is_some() && injected == twin,
            "step {}: injected Workflow ended {injected:?}, its uninjected twin {twin:?}",
            case.name
        );
        ensure!(
            injected.and_then(|o| o.exit_code.as_ref()).is_some(),
            "step {}: Argo's wait container reported no exit code: {injected:?}",
            case.name
        );
    }
    Ok(())
}
