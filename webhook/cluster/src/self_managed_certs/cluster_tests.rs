//! The controller against a real API server (no fakes): two "replicas"
//! racing for the Secret agree on one certificate, caBundle is written on
//! every webhook entry and repaired after an overwrite, a steady state
//! writes nothing, and a deleted Secret is re-created.
//!
//! Ignored by default; `make e2e-all` runs it with
//! `KUBE_PRESTOP_TEST_KUBECONFIG` naming a kubeconfig with cluster-admin
//! rights (the test cluster's, /var/lib/kube-prestop/cluster/kubeconfig). It creates a namespace and a webhook configuration
//! that matches no namespace, and deletes both.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};

use super::{KEY_CA_BUNDLE, KEY_TLS_CERT, SelfManagedCertsConfig, reconcile_once};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn client(path: &str) -> Result<kube::Client, Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

fn webhook(name: &str, ns: &str) -> MutatingWebhook {
    MutatingWebhook {
        name: name.to_owned(),
        admission_review_versions: vec!["v1".to_owned()],
        client_config: WebhookClientConfig {
            service: Some(ServiceReference {
                name: "absent".to_owned(),
                namespace: ns.to_owned(),
                path: Some("/mutate".to_owned()),
                port: Some(443),
            }),
            ..WebhookClientConfig::default()
        },
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".to_owned()]),
            operations: Some(vec!["CREATE".to_owned()]),
            resources: Some(vec!["pods".to_owned()]),
            scope: Some("Namespaced".to_owned()),
        }]),
        // Matches no namespace: this test never intercepts anything.
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kube-prestop.io/self-managed-certs-test".to_owned(),
                "never".to_owned(),
            )])),
            ..LabelSelector::default()
        }),
        failure_policy: Some("Ignore".to_owned()),
        side_effects: "None".to_owned(),
        timeout_seconds: Some(1),
        ..MutatingWebhook::default()
    }
}

fn bundles(config: &MutatingWebhookConfiguration) -> Vec<Vec<u8>> {
    config
        .webhooks
        .iter()
        .flatten()
        .map(|w| {
            w.client_config
                .ca_bundle
                .clone()
                .map(|b| b.0)
                .unwrap_or_default()
        })
        .collect()
}

fn secret_key(secret: &Secret, key: &str) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

async fn scenario(client: &kube::Client, ns: &str) -> TestResult {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(ns.to_owned());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;

    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mwc = MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![
            webhook("a.self-managed-certs-test.kube-prestop.io", ns),
            webhook("b.self-managed-certs-test.kube-prestop.io", ns),
        ]),
    };
    webhooks.create(&PostParams::default(), &mwc).await?;

    // The chart's empty Secret.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut empty = Secret::default();
    empty.metadata.name = Some("kube-prestop-tls".to_owned());
    empty.type_ = Some("Opaque".to_owned());
    secrets.create(&PostParams::default(), &empty).await?;

    let dir1 = tempfile::tempdir()?;
    let dir2 = tempfile::tempdir()?;
    let config = |dir: &std::path::Path| {
        SelfManagedCertsConfig::new(ns, "kube-prestop", "kube-prestop-tls", ns, dir)
    };
    let (c1, c2) = (config(dir1.path()), config(dir2.path()));

    // Two replicas at once: both succeed and serve the same certificate.
    let (r1, r2) = tokio::join!(reconcile_once(client, &c1), reconcile_once(client, &c2));
    let (s1, s2) = (r1?, r2?);
    assert_eq!(s1.serving_not_after, s2.serving_not_after);
    let crt1 = std::fs::read(dir1.path().join("tls.crt"))?;
    let crt2 = std::fs::read(dir2.path().join("tls.crt"))?;
    assert_eq!(crt1, crt2, "replicas disagree on the certificate");
    let secret = secrets.get("kube-prestop-tls").await?;
    assert_eq!(secret_key(&secret, KEY_TLS_CERT), crt1);
    let bundle = secret_key(&secret, KEY_CA_BUNDLE);

    // caBundle on every entry.
    let live = webhooks.get(ns).await?;
    assert_eq!(bundles(&live), vec![bundle.clone(), bundle.clone()]);
    assert!(s1.ca_bundle_in_sync || s2.ca_bundle_in_sync);

    // Steady state: nothing is written.
    let version = secret.metadata.resource_version.clone();
    let live_version = live.metadata.resource_version.clone();
    reconcile_once(client, &c1).await?;
    assert_eq!(
        secrets
            .get("kube-prestop-tls")
            .await?
            .metadata
            .resource_version,
        version
    );
    assert_eq!(
        webhooks.get(ns).await?.metadata.resource_version,
        live_version
    );

    // Something overwrites one entry's caBundle: repaired.
    let (other_ca, _) = super::pki::generate_ca(0, std::time::Duration::from_secs(86400))?;
    let overwrite = serde_json::json!({"webhooks": [{
        "name": "b.self-managed-certs-test.kube-prestop.io",
        "clientConfig": {"caBundle": ByteString(other_ca.into_bytes())},
    }]});
    webhooks
        .patch(ns, &PatchParams::default(), &Patch::Strategic(overwrite))
        .await?;
    assert_ne!(bundles(&webhooks.get(ns).await?)[1], bundle);
    reconcile_once(client, &c2).await?;
    assert_eq!(
        bundles(&webhooks.get(ns).await?),
        vec![bundle.clone(), bundle.clone()]
    );

    // The Secret is deleted out of band: re-created, new CA published.
    secrets
        .delete("kube-prestop-tls", &DeleteParams::default())
        .await?;
    reconcile_once(client, &c1).await?;
    let recreated = secrets.get("kube-prestop-tls").await?;
    let new_bundle = secret_key(&recreated, KEY_CA_BUNDLE);
    assert_ne!(new_bundle, bundle);
    assert_eq!(
        bundles(&webhooks.get(ns).await?),
        vec![new_bundle.clone(), new_bundle]
    );
    assert_eq!(
        std::fs::read(dir1.path().join("tls.crt"))?,
        secret_key(&recreated, KEY_TLS_CERT)
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs a cluster: KUBE_PRESTOP_TEST_KUBECONFIG=... cargo test -- --ignored (make e2e-all runs it)"]
async fn against_a_real_api_server() {
    let path = std::env::var("KUBE_PRESTOP_TEST_KUBECONFIG")
        .expect("KUBE_PRESTOP_TEST_KUBECONFIG must name the test cluster's kubeconfig");
    let client = client(&path).await.unwrap();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let ns = format!("kube-prestop-certs-test-{stamp}");
    let result = scenario(&client, &ns).await;
    // Clean up whatever happened.
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let _ = webhooks.delete(&ns, &DeleteParams::default()).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    result.unwrap();
}
