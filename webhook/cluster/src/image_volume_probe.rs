//! Whether the API server keeps a pod's `spec.volumes[].image`: it drops
//! the field when its `ImageVolume` feature gate is off (alpha from 1.31,
//! beta and off from 1.33, on by default from 1.35, GA and locked on from
//! 1.36: `pkg/features/kube_features.go`), and a pod whose only volume
//! source was dropped is then refused ("must specify a volume type"). So a
//! pod is never given an image volume unless a server-side dry-run create
//! of a probe pod with one came back with the field: at start-up and every
//! [`PROBE_INTERVAL`] after (never per request). The API server's version
//! is logged with each result that changes.
//!
//! The probe pod: `generateName: kube-prestop-image-volume-probe-` in the
//! webhook's own namespace (never injected), labelled
//! `kube-prestop.io/component: webhook` (the webhook configuration's
//! objectSelector leaves such pods out), Pod Security `restricted`, the
//! install image as both its container's image and its image volume.
//! `dryRun=All`: nothing is stored. Needs RBAC `create` on `pods` in that
//! namespace.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube_prestop_engine::Support;
use serde_json::json;

/// How often the probe repeats (an API server upgrade or a feature-gate
/// change shows within this).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(300);

/// Longest wait for one probe's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// `generateName` of the probe pod.
pub const PROBE_GENERATE_NAME: &str = "kube-prestop-image-volume-probe-";

/// Whether the API server keeps `volumes[].image`, as the last probe said.
/// Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct ImageVolumeProbe {
    state: Arc<RwLock<Support>>,
}

impl ImageVolumeProbe {
    /// Always `support` (tests; no cluster).
    pub fn fixed(support: Support) -> Self {
        Self {
            state: Arc::new(RwLock::new(support)),
        }
    }

    /// What the last probe said; before the first one, not supported.
    pub fn support(&self) -> Support {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Probe on `client` now and every [`PROBE_INTERVAL`], in a background
    /// task (inside a tokio runtime), with a pod in `namespace` mounting
    /// `image` (pulled with `pull_policy`).
    pub fn start(client: kube::Client, namespace: &str, image: &str, pull_policy: &str) -> Self {
        let this = Self::fixed(Support::No(
            "the API server has not been probed yet".to_owned(),
        ));
        let probing = this.clone();
        let pod = probe_pod(image, pull_policy);
        let api = Api::<Pod>::namespaced(client.clone(), namespace);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(PROBE_INTERVAL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let version = client
                    .apiserver_version()
                    .await
                    .map(|v| v.git_version)
                    .unwrap_or_else(|e| format!("unknown ({e})"));
                let answer = tokio::time::timeout(
                    PROBE_TIMEOUT,
                    api.create(
                        &PostParams {
                            dry_run: true,
                            field_manager: None,
                        },
                        &pod,
                    ),
                )
                .await;
                let previous = probing.support();
                let next = match answer {
                    Ok(answer) => interpret(answer, &previous),
                    Err(_) => keep_or(
                        &previous,
                        format!(
                            "no answer to the probe within {} s",
                            PROBE_TIMEOUT.as_secs()
                        ),
                    ),
                };
                if next != previous {
                    match &next {
                        Support::Yes => tracing::info!(
                            api_server = %version,
                            "the API server keeps spec.volumes[].image: image volumes may be used"
                        ),
                        Support::No(why) => tracing::warn!(
                            api_server = %version,
                            why = %why,
                            "no image volumes: the API server does not keep spec.volumes[].image"
                        ),
                    }
                }
                *probing
                    .state
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = next;
            }
        });
        this
    }
}

/// A transport error keeps an earlier "yes" (the server did not change by
/// failing to answer once); otherwise not supported, with `why`.
fn keep_or(previous: &Support, why: String) -> Support {
    match previous {
        Support::Yes => Support::Yes,
        Support::No(_) => Support::No(why),
    }
}

/// What one dry-run create says: the pod back with its image volume →
/// yes; back without it, or refused as invalid → no, saying so; forbidden
/// → no, naming the missing permission; a transport error → as before
/// ([`keep_or`]).
pub fn interpret(answer: Result<Pod, kube::Error>, previous: &Support) -> Support {
    match answer {
        Ok(pod) => {
            let kept = pod
                .spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .any(|v| v.image.as_ref().is_some_and(|i| i.reference.is_some()));
            if kept {
                Support::Yes
            } else {
                Support::No(
                    "the API server dropped spec.volumes[].image from a dry-run pod (feature gate ImageVolume off)"
                        .to_owned(),
                )
            }
        }
        Err(kube::Error::Api(status)) if status.code == 422 => Support::No(format!(
            "the API server refused a dry-run pod with an image volume: {}",
            status.message
        )),
        Err(kube::Error::Api(status)) if status.code == 403 => Support::No(format!(
            "the webhook may not dry-run create pods in its namespace (RBAC): {}",
            status.message
        )),
        Err(kube::Error::Api(status)) => Support::No(format!(
            "the dry-run probe pod was refused ({}): {}",
            status.code, status.message
        )),
        Err(e) => keep_or(previous, format!("cannot probe the API server: {e}")),
    }
}

/// The probe pod (see the module documentation).
pub fn probe_pod(image: &str, pull_policy: &str) -> Pod {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": PROBE_GENERATE_NAME,
            "labels": {
                "kube-prestop.io/component": "webhook",
                "app.kubernetes.io/name": "kube-prestop-image-volume-probe",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "probe",
                "image": image,
                "imagePullPolicy": pull_policy,
                "command": [kube_prestop_contract::INSTALL_IMAGE_BINARY, "--version"],
                "resources": {
                    "requests": {"cpu": "1m", "memory": "1Mi"},
                    "limits": {"cpu": "10m", "memory": "8Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{
                    "name": "image",
                    "mountPath": "/probe",
                    "readOnly": true,
                }],
            }],
            "volumes": [{
                "name": "image",
                "image": {"reference": image, "pullPolicy": pull_policy},
            }],
        },
    });
    // A literal of the Pod schema: it always deserializes.
    serde_json::from_value(pod).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure(message, "").with_code(code)))
    }

    #[test]
    fn probe_pod_has_the_image_volume() {
        let pod = probe_pod("example/sidecar:1", "IfNotPresent");
        let spec = pod.spec.as_ref().unwrap();
        let v = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(
            v.image.as_ref().unwrap().reference.as_deref(),
            Some("example/sidecar:1")
        );
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some("example/sidecar:1")
        );
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()["kube-prestop.io/component"],
            "webhook"
        );
        assert_eq!(interpret(Ok(pod), &Support::default()), Support::Yes);
    }

    /// A cluster that drops the field: the pod comes back without it, or
    /// is refused for having a volume without a source. Never "yes".
    #[test]
    fn dropped_field_or_refusal_is_no() {
        let mut dropped = probe_pod("x", "Never");
        dropped.spec.as_mut().unwrap().volumes.as_mut().unwrap()[0].image = None;
        assert!(matches!(
            interpret(Ok(dropped), &Support::Yes),
            Support::No(why) if why.contains("dropped spec.volumes[].image")
        ));
        let refused = status(
            422,
            "spec.volumes[0]: Required value: must specify a volume type",
        );
        assert!(matches!(
            interpret(Err(refused), &Support::Yes),
            Support::No(why) if why.contains("must specify a volume type")
        ));
        assert!(matches!(
            interpret(Err(status(403, "forbidden")), &Support::Yes),
            Support::No(why) if why.contains("RBAC")
        ));
    }

    #[test]
    fn transport_errors_keep_a_yes() {
        let e = || kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(interpret(Err(e()), &Support::Yes), Support::Yes);
        assert!(matches!(
            interpret(Err(e()), &Support::No("x".into())),
            Support::No(why) if why.contains("cannot probe")
        ));
    }
}
