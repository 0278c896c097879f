//! The test pod the check creates (as a server-side dry run in every
//! selected namespace, and inside the optional test Job): one container
//! `main` that prints a line and exits, with an exec preStop that prints
//! [`HOOK_OUTPUT`]. It meets Pod Security `restricted`, so namespaces that
//! enforce it admit it.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ExecAction, Lifecycle, LifecycleHandler, Pod, PodSpec,
    PodTemplateSpec, SeccompProfile, SecurityContext,
};
use kube::api::ObjectMeta;
use kube_prestop_engine::annotations::{INJECT, STATUS, STATUS_INJECTED};
use std::collections::BTreeMap;

use kube_prestop_cluster::sidecar_configmap::NAME_PREFIX;

/// Name of the test pod's container (the sidecar watching it is
/// `kube-prestop-main`).
pub const CONTAINER: &str = "main";

/// What the test pod's preStop prints: the check looks for it in the
/// sidecar's log.
pub const HOOK_OUTPUT: &str = "kube-prestop check: preStop hook ran";

/// Label on everything the check creates.
pub const CHECK_LABEL: &str = "kube-prestop.io/check";

/// The test pod's template: `image` must have `sh`.
pub fn template(image: &str, opt_in: bool) -> PodTemplateSpec {
    let mut annotations = BTreeMap::new();
    if opt_in {
        // A bare pod is no Job's: it is injected only when opted in.
        annotations.insert(INJECT.to_owned(), "true".to_owned());
    }
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([(
                CHECK_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            termination_grace_period_seconds: Some(30),
            containers: vec![Container {
                name: CONTAINER.to_owned(),
                image: Some(image.to_owned()),
                image_pull_policy: Some("IfNotPresent".to_owned()),
                command: Some(vec![
                    "sh".to_owned(),
                    "-c".to_owned(),
                    "echo kube-prestop check: work done".to_owned(),
                ]),
                lifecycle: Some(Lifecycle {
                    pre_stop: Some(LifecycleHandler {
                        exec: Some(ExecAction {
                            command: Some(vec![
                                "sh".to_owned(),
                                "-c".to_owned(),
                                format!("echo {HOOK_OUTPUT}"),
                            ]),
                        }),
                        ..LifecycleHandler::default()
                    }),
                    ..Lifecycle::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".to_owned()]),
                        ..Capabilities::default()
                    }),
                    run_as_non_root: Some(true),
                    run_as_user: Some(65534),
                    run_as_group: Some(65534),
                    seccomp_profile: Some(SeccompProfile {
                        type_: "RuntimeDefault".to_owned(),
                        ..SeccompProfile::default()
                    }),
                    ..SecurityContext::default()
                }),
                resources: None,
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

/// A bare test pod (opted in), named by the API server from `generate_name`.
pub fn pod(image: &str) -> Pod {
    let template = template(image, true);
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.generate_name = Some("kube-prestop-check-".to_owned());
    Pod {
        metadata,
        spec: template.spec,
        status: None,
    }
}

/// Where an injected pod's sidecar binary comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The install image (this reference) mounted as an image volume.
    ImageVolume(String),
    /// Mounted from this ConfigMap of the namespace.
    ConfigMap(String),
    /// Copied by the install init container.
    InstallContainer,
}

/// What the webhook did to a pod: `None` when it was not injected, else
/// where its binary comes from.
pub fn injected(pod: &Pod) -> Option<Delivery> {
    let injected = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATUS))
        .is_some_and(|v| v == STATUS_INJECTED);
    if !injected {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let image = spec.volumes.iter().flatten().find_map(|v| {
        v.image
            .as_ref()
            .filter(|_| {
                v.name
                    .starts_with(kube_prestop_contract::BINARY_VOLUME_NAME)
            })
            .and_then(|i| i.reference.clone())
    });
    if let Some(reference) = image {
        return Some(Delivery::ImageVolume(reference));
    }
    let config_map = spec.volumes.iter().flatten().find_map(|v| {
        v.config_map
            .as_ref()
            .map(|c| c.name.clone())
            .filter(|name| name.starts_with(NAME_PREFIX))
    });
    Some(match config_map {
        Some(name) => Delivery::ConfigMap(name),
        None => Delivery::InstallContainer,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn an_uninjected_pod_is_none() {
        assert_eq!(injected(&pod("busybox")), None);
    }

    #[test]
    fn delivery_is_read_from_the_volumes() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"annotations": {"kube-prestop.io/status": "injected"}},
            "spec": {"containers": [], "volumes": [
                {"name": "kube-prestop", "emptyDir": {}},
                {"name": "kube-prestop-bin", "configMap": {"name": "kube-prestop-sidecar-d99e85a195e9"}}
            ]}
        }))
        .unwrap();
        assert_eq!(
            injected(&p),
            Some(Delivery::ConfigMap(
                "kube-prestop-sidecar-d99e85a195e9".to_owned()
            ))
        );
        // The install init container's delivery: an emptyDir of that name.
        let volumes = p.spec.as_mut().unwrap().volumes.as_mut().unwrap();
        volumes.pop();
        volumes.push(
            serde_json::from_value(serde_json::json!({"name": "kube-prestop-bin", "emptyDir": {}}))
                .unwrap(),
        );
        assert_eq!(injected(&p), Some(Delivery::InstallContainer));
        p.spec.as_mut().unwrap().volumes.as_mut().unwrap().pop();
        p.spec.as_mut().unwrap().volumes.as_mut().unwrap().push(
            serde_json::from_value(serde_json::json!(
                {"name": "kube-prestop-bin", "image": {"reference": "example/sidecar:1"}}
            ))
            .unwrap(),
        );
        assert_eq!(
            injected(&p),
            Some(Delivery::ImageVolume("example/sidecar:1".to_owned()))
        );
    }
}
