//! The webhook configuration as the API server uses it: which webhook of
//! the `MutatingWebhookConfiguration` is ours, the Service it calls, its
//! `caBundle` and its namespace selector.

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use kube::core::{Selector, SelectorExt};
use std::collections::BTreeMap;

/// Name of kube-prestop's webhook inside its configuration (the chart's
/// `webhooks[0].name`).
pub const WEBHOOK_NAME: &str = "inject.kube-prestop.io";

/// What the check needs from the configuration.
#[derive(Debug, Clone)]
pub struct WebhookTarget {
    /// Namespace of the Service (the webhook's namespace).
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// Service port the API server calls (443 when unset).
    pub port: i32,
    /// The PEM certificates of `clientConfig.caBundle`, decoded.
    pub ca_bundle: Vec<u8>,
    /// `failurePolicy` (`Ignore` or `Fail`; the API default `Fail` when unset).
    pub failure_policy: String,
    /// `namespaceSelector`, parsed; `None` selects every namespace.
    pub namespace_selector: Option<Selector>,
}

/// What is wrong with the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No webhook named [`WEBHOOK_NAME`] in it.
    #[error("has no webhook named {WEBHOOK_NAME} (webhooks: {0})")]
    NoWebhook(String),
    /// The webhook calls a URL, not a Service.
    #[error(
        "webhook {WEBHOOK_NAME} calls a URL, not a Service (the chart always uses its Service)"
    )]
    NotAService,
    /// `namespaceSelector` cannot be parsed.
    #[error("webhook {WEBHOOK_NAME}: namespaceSelector: {0}")]
    Selector(String),
}

/// Our webhook's target in `config`.
///
/// # Errors
/// [`ConfigError`] when the webhook is missing, calls a URL, or its
/// namespace selector is not a valid label selector.
pub fn target(config: &MutatingWebhookConfiguration) -> Result<WebhookTarget, ConfigError> {
    let webhooks = config.webhooks.as_deref().unwrap_or_default();
    let webhook: &MutatingWebhook = webhooks
        .iter()
        .find(|w| w.name == WEBHOOK_NAME)
        .ok_or_else(|| {
            ConfigError::NoWebhook(
                webhooks
                    .iter()
                    .map(|w| w.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })?;
    let service = webhook
        .client_config
        .service
        .as_ref()
        .ok_or(ConfigError::NotAService)?;
    let namespace_selector = webhook
        .namespace_selector
        .clone()
        .map(Selector::try_from)
        .transpose()
        .map_err(|e| ConfigError::Selector(e.to_string()))?;
    Ok(WebhookTarget {
        namespace: service.namespace.clone(),
        service: service.name.clone(),
        port: service.port.unwrap_or(443),
        ca_bundle: webhook
            .client_config
            .ca_bundle
            .as_ref()
            .map(|b| b.0.clone())
            .unwrap_or_default(),
        failure_policy: webhook
            .failure_policy
            .clone()
            .unwrap_or_else(|| "Fail".to_owned()),
        namespace_selector,
    })
}

impl WebhookTarget {
    /// The DNS name the API server verifies the serving certificate against
    /// (`<service>.<namespace>.svc`).
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }

    /// Whether the API server sends pods of a namespace with `labels` to the
    /// webhook (the namespace selector only; the object selector and
    /// matchConditions are about the pod).
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.namespace_selector
            .as_ref()
            .is_none_or(|s| s.matches(labels))
    }
}

/// Another kube-prestop installation: a `MutatingWebhookConfiguration`
/// other than ours that also has a webhook named [`WEBHOOK_NAME`] (a second
/// Helm release of the chart, or one left behind by a rename).
#[derive(Debug, Clone)]
pub struct OtherRelease {
    /// Name of its configuration.
    pub name: String,
    /// Its target, or why it could not be read (then the namespaces it
    /// selects are not known).
    pub target: Result<WebhookTarget, String>,
}

impl OtherRelease {
    /// Whether the API server calls this configuration's webhooks before
    /// those of configuration `ours`: mutating webhook configurations are
    /// called in order of their names (k8s.io/apiserver,
    /// `pkg/admission/configuration/mutating_webhook_manager.go`, which
    /// sorts the configurations by name; Go compares strings byte-wise, as
    /// Rust's `str` ordering does). The first kube-prestop webhook to inject
    /// a pod wins: every later one sees `kube-prestop.io/status` and leaves
    /// the pod alone.
    pub fn called_before(&self, ours: &str) -> bool {
        self.name.as_str() < ours
    }

    /// Whether it sends pods of a namespace with `labels` to its webhook;
    /// `false` when its configuration could not be read.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.target.as_ref().is_ok_and(|t| t.selects(labels))
    }
}

/// Names of the configurations in `configs` whose [`WEBHOOK_NAME`] webhook
/// sends pods of a namespace with `labels` to kube-prestop, in the order
/// the API server calls them (by name; the first one injects). One that
/// cannot be read ([`target`]'s errors) is left out.
pub fn selecting(
    configs: &[MutatingWebhookConfiguration],
    labels: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut names: Vec<String> = configs
        .iter()
        .filter(|c| target(c).is_ok_and(|t| t.selects(labels)))
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

/// The kube-prestop installations in `configs` besides configuration
/// `ours`, in the order the API server calls them (by name).
pub fn other_releases(configs: &[MutatingWebhookConfiguration], ours: &str) -> Vec<OtherRelease> {
    let mut others: Vec<OtherRelease> = configs
        .iter()
        .filter(|c| c.metadata.name.as_deref() != Some(ours))
        .filter(|c| c.webhooks.iter().flatten().any(|w| w.name == WEBHOOK_NAME))
        .map(|c| OtherRelease {
            name: c.metadata.name.clone().unwrap_or_default(),
            target: target(c).map_err(|e| e.to_string()),
        })
        .collect();
    others.sort_by(|a, b| a.name.cmp(&b.name));
    others
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn chart_config() -> MutatingWebhookConfiguration {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kube-prestop"},
            "webhooks": [{
                "name": "inject.kube-prestop.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Ignore",
                "clientConfig": {
                    "service": {"namespace": "kube-prestop", "name": "kube-prestop", "path": "/mutate", "port": 443},
                    "caBundle": "LS0tLS1CRUdJTg=="
                },
                "namespaceSelector": {
                    "matchLabels": {"kube-prestop.io/inject": "enabled"},
                    "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kube-prestop"]}]
                }
            }]
        }))
        .unwrap_or_default()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn reads_the_charts_configuration() {
        let target = target(&chart_config()).map_err(|e| e.to_string());
        let Ok(target) = target else {
            panic!("{target:?}");
        };
        assert_eq!(target.server_name(), "kube-prestop.kube-prestop.svc");
        assert_eq!(target.port, 443);
        assert_eq!(target.failure_policy, "Ignore");
        assert_eq!(target.ca_bundle, b"-----BEGIN");
        assert!(target.selects(&labels(&[
            ("kube-prestop.io/inject", "enabled"),
            ("kubernetes.io/metadata.name", "batch")
        ])));
        assert!(!target.selects(&labels(&[
            ("kube-prestop.io/inject", "enabled"),
            ("kubernetes.io/metadata.name", "kube-system")
        ])));
        assert!(!target.selects(&labels(&[("kubernetes.io/metadata.name", "batch")])));
    }

    #[test]
    fn a_configuration_without_our_webhook_names_what_it_has() {
        let mut config = chart_config();
        if let Some(w) = config.webhooks.as_mut().and_then(|w| w.first_mut()) {
            w.name = "other.example.com".to_owned();
        }
        let err = target(&config).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err(
                "has no webhook named inject.kube-prestop.io (webhooks: other.example.com)"
                    .to_owned()
            )
        );
    }

    fn named(name: &str) -> MutatingWebhookConfiguration {
        let mut config = chart_config();
        config.metadata.name = Some(name.to_owned());
        config
    }

    #[test]
    fn other_releases_are_the_other_configurations_with_our_webhook_in_call_order() {
        let mut foreign = named("aaa-other-product");
        if let Some(w) = foreign.webhooks.as_mut().and_then(|w| w.first_mut()) {
            w.name = "other.example.com".to_owned();
        }
        let mut url = named("kube-prestop-old");
        if let Some(w) = url.webhooks.as_mut().and_then(|w| w.first_mut()) {
            w.client_config.service = None;
            w.client_config.url = Some("https://example.invalid/mutate".to_owned());
        }
        let configs = [
            named("kube-prestop-z"),
            named("kube-prestop"),
            foreign,
            url,
            named("batch-kube-prestop"),
        ];
        let others = other_releases(&configs, "kube-prestop");
        let names: Vec<&str> = others.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            ["batch-kube-prestop", "kube-prestop-old", "kube-prestop-z"]
        );
        let before: Vec<bool> = others
            .iter()
            .map(|o| o.called_before("kube-prestop"))
            .collect();
        assert_eq!(before, [true, false, false]);
        let ns = labels(&[
            ("kube-prestop.io/inject", "enabled"),
            ("kubernetes.io/metadata.name", "batch"),
        ]);
        assert!(others[0].selects(&ns));
        // A configuration that cannot be read selects nothing we can tell.
        assert!(!others[1].selects(&ns));
        assert!(
            others[1]
                .target
                .as_ref()
                .is_err_and(|e| e.contains("calls a URL"))
        );
        // Every configuration with our webhook that selects the namespace,
        // ours too, in call order; the unreadable one is left out.
        assert_eq!(
            selecting(&configs, &ns),
            ["batch-kube-prestop", "kube-prestop", "kube-prestop-z"]
        );
        assert!(
            selecting(
                &configs,
                &labels(&[("kubernetes.io/metadata.name", "batch")])
            )
            .is_empty()
        );
    }
}
