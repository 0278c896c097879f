//! Self-managed webhook certificates: the chart's `selfManaged` certificate
//! mode. (The chart's `certManager` mode is cert-manager.io, which issues
//! the certificate and injects the `caBundle` itself; no code here takes
//! part in it.)
//!
//! In the chart's `selfManaged` certificate mode every webhook replica runs
//! [`run`]. It keeps one CA and one serving certificate in a Secret of the
//! webhook's namespace (the Secret is the single source of truth, so all
//! replicas serve the same certificate), writes the serving pair to a local
//! directory for the server's file reload, and keeps the `caBundle` of every
//! entry of the webhook's MutatingWebhookConfiguration equal to the trust
//! bundle (repairing it when something else overwrites it).
//!
//! Concurrency: the Secret is only ever written with the `resourceVersion`
//! it was read at (optimistic concurrency). When two replicas race, the API
//! server accepts one write; the other gets `409 Conflict` (or
//! `AlreadyExists` on create), re-reads, and adopts the winner's material.
//!
//! Rotation: see [`pki::plan`]. A new CA is published in `caBundle` next to
//! the old one before any replica serves a certificate it signed, and the old
//! CA stays in the bundle until it expires.
//!
//! Secret layout (type `Opaque`; the chart creates it empty so that Helm owns
//! and deletes it, and Helm's three-way merge never touches `data`, which
//! only this controller writes): `ca.crt`, `ca.key`, `tls.crt`, `tls.key`,
//! `ca-bundle.crt`.

pub mod files;
pub mod pki;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::sync::watch;

pub use pki::{Material, Policy, needs_renewal};

/// Secret key of the current CA certificate.
pub const KEY_CA_CERT: &str = "ca.crt";
/// Secret key of the current CA's private key.
pub const KEY_CA_KEY: &str = "ca.key";
/// Secret key of the serving certificate.
pub const KEY_TLS_CERT: &str = "tls.crt";
/// Secret key of the serving certificate's private key.
pub const KEY_TLS_KEY: &str = "tls.key";
/// Secret key of the trust bundle published as `caBundle`.
pub const KEY_CA_BUNDLE: &str = "ca-bundle.crt";

/// Field manager name used for the `caBundle` patches, as recorded in the
/// webhook configuration's `managedFields`; unchanged from the releases in
/// which this module was called `certmanager`.
pub const FIELD_MANAGER: &str = "kube-prestop-certmanager";

/// Errors of the certificate controller.
#[derive(Debug, thiserror::Error)]
pub enum SelfManagedCertsError {
    /// The configuration cannot work (names, lifetimes).
    #[error("invalid certificate configuration: {0}")]
    InvalidConfig(String),
    /// A call to the Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Generating a key or certificate failed.
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    /// Stored material could not be read.
    #[error("certificate material: {0}")]
    Parse(String),
    /// Writing the certificate directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Other writers kept winning the race for the Secret.
    #[error("secret {0} kept changing under us; retrying later")]
    Contended(String),
}

/// Configuration of the self-managed certificate controller.
#[derive(Clone, Debug)]
pub struct SelfManagedCertsConfig {
    /// Name of the Secret holding the CA and the serving certificate.
    pub secret_name: String,
    /// Namespace of the webhook, its Service and the Secret.
    pub namespace: String,
    /// Name of the MutatingWebhookConfiguration whose `caBundle` is kept.
    pub webhook_config_name: String,
    /// Name of the webhook's Service; the serving certificate is for
    /// `<service>`, `<service>.<ns>`, `<service>.<ns>.svc` and
    /// `<service>.<ns>.svc.<cluster_domain>`.
    pub service_name: String,
    /// Cluster DNS domain (`cluster.local`).
    pub cluster_domain: String,
    /// Where `tls.crt`, `tls.key` and `ca.crt` are written (see [`files`]).
    pub cert_dir: PathBuf,
    /// Lifetime of a serving certificate.
    pub validity: Duration,
    /// Renew a serving certificate this long before it expires.
    pub renew_before: Duration,
    /// Lifetime of a CA.
    pub ca_validity: Duration,
    /// Rotate the CA this long before it expires.
    pub ca_renew_before: Duration,
    /// How often the Secret and `caBundle` are checked.
    pub check_interval: Duration,
}

const DAY: u64 = 24 * 3600;

impl SelfManagedCertsConfig {
    /// A configuration with the default lifetimes: serving certificate one
    /// year, renewed 60 days before expiry; CA ten years, rotated one year
    /// before expiry; checks every minute.
    pub fn new(
        namespace: impl Into<String>,
        service_name: impl Into<String>,
        secret_name: impl Into<String>,
        webhook_config_name: impl Into<String>,
        cert_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            secret_name: secret_name.into(),
            namespace: namespace.into(),
            webhook_config_name: webhook_config_name.into(),
            service_name: service_name.into(),
            cluster_domain: "cluster.local".to_owned(),
            cert_dir: cert_dir.into(),
            validity: Duration::from_secs(365 * DAY),
            renew_before: Duration::from_secs(60 * DAY),
            ca_validity: Duration::from_secs(3650 * DAY),
            ca_renew_before: Duration::from_secs(365 * DAY),
            check_interval: Duration::from_secs(60),
        }
    }

    /// The DNS names of the serving certificate.
    pub fn dns_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service_name, &self.namespace);
        let mut names = vec![
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.{}", self.cluster_domain),
            format!("{svc}.{ns}"),
            svc.clone(),
        ];
        names.dedup();
        names
    }

    /// The renewal policy this configuration describes.
    pub fn policy(&self) -> Policy {
        Policy {
            dns_names: self.dns_names(),
            ca_validity: self.ca_validity,
            ca_renew_before: self.ca_renew_before,
            validity: self.validity,
            renew_before: self.renew_before,
        }
    }

    fn validate(&self) -> Result<(), SelfManagedCertsError> {
        for (what, value) in [
            ("secret name", &self.secret_name),
            ("namespace", &self.namespace),
            ("webhook configuration name", &self.webhook_config_name),
            ("service name", &self.service_name),
        ] {
            if value.is_empty() {
                return Err(SelfManagedCertsError::InvalidConfig(format!(
                    "empty {what}"
                )));
            }
        }
        if self.check_interval.is_zero() {
            return Err(SelfManagedCertsError::InvalidConfig(
                "zero check interval".into(),
            ));
        }
        self.policy().validate()
    }
}

/// What the controller last established; feeds the certificate-expiry metric
/// and readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertStatus {
    /// Expiry of the serving certificate now on disk.
    pub serving_not_after: SystemTime,
    /// Expiry of the current CA.
    pub ca_not_after: SystemTime,
    /// Whether every webhook entry's `caBundle` holds the trust bundle.
    pub ca_bundle_in_sync: bool,
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn unix_to_system(secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

fn material_from(secret: &Secret) -> Material {
    let get = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    Material {
        ca_cert: get(KEY_CA_CERT),
        ca_key: get(KEY_CA_KEY),
        tls_cert: get(KEY_TLS_CERT),
        tls_key: get(KEY_TLS_KEY),
        ca_bundle: get(KEY_CA_BUNDLE),
    }
}

fn data_from(m: &Material) -> BTreeMap<String, ByteString> {
    [
        (KEY_CA_CERT, &m.ca_cert),
        (KEY_CA_KEY, &m.ca_key),
        (KEY_TLS_CERT, &m.tls_cert),
        (KEY_TLS_KEY, &m.tls_key),
        (KEY_CA_BUNDLE, &m.ca_bundle),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect()
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// The trust bundles of the configuration's webhook entries (`None`: the
/// configuration does not exist yet).
async fn published_bundles(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
) -> Result<Option<Vec<(String, String)>>, SelfManagedCertsError> {
    let Some(config) = api.get_opt(name).await? else {
        return Ok(None);
    };
    Ok(Some(
        config
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| {
                let bundle = w
                    .client_config
                    .ca_bundle
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                    .unwrap_or_default();
                (w.name, bundle)
            })
            .collect(),
    ))
}

/// One pass: settles the Secret, the files and `caBundle`.
pub async fn reconcile_once(
    client: &kube::Client,
    config: &SelfManagedCertsConfig,
) -> Result<CertStatus, SelfManagedCertsError> {
    config.validate()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let policy = config.policy();

    // 1. The Secret, written only with optimistic concurrency.
    let mut material = None;
    for _attempt in 0..5 {
        let existing = secrets.get_opt(&config.secret_name).await?;
        let current = existing.as_ref().map(material_from).unwrap_or_default();
        let published = published_bundles(&webhooks, &config.webhook_config_name).await?;
        let ca_published = !current.ca_cert.is_empty()
            && published.as_ref().is_some_and(|entries| {
                !entries.is_empty()
                    && entries
                        .iter()
                        .all(|(_, b)| pki::bundle_contains(b, &current.ca_cert))
            });
        let Some((next, change)) = pki::plan(&current, &policy, now_unix(), ca_published)? else {
            material = Some(current);
            break;
        };
        let result = match existing {
            Some(mut secret) => {
                secret.data = Some(data_from(&next));
                secrets
                    .replace(&config.secret_name, &PostParams::default(), &secret)
                    .await
            }
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(config.secret_name.clone()),
                        namespace: Some(config.namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/managed-by".to_owned(),
                            "kube-prestop-webhook".to_owned(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("Opaque".to_owned()),
                    data: Some(data_from(&next)),
                    ..Secret::default()
                };
                secrets.create(&PostParams::default(), &secret).await
            }
        };
        match result {
            Ok(_) => {
                tracing::info!(
                    secret = %config.secret_name,
                    namespace = %config.namespace,
                    change = ?change,
                    "webhook certificate material updated"
                );
                material = Some(next);
                break;
            }
            Err(e) if is_status(&e, 409) => {
                tracing::debug!(secret = %config.secret_name, "lost the race for the Secret; re-reading");
            }
            Err(e) => return Err(e.into()),
        }
    }
    let material =
        material.ok_or_else(|| SelfManagedCertsError::Contended(config.secret_name.clone()))?;

    // 2. The files the server reloads.
    let files = [
        ("tls.crt", material.tls_cert.as_str()),
        ("tls.key", material.tls_key.as_str()),
        ("ca.crt", material.ca_cert.as_str()),
    ];
    if !files::up_to_date(&config.cert_dir, &files) {
        files::write_atomically(&config.cert_dir, &files)?;
        tracing::info!(dir = %config.cert_dir.display(), "serving certificate written");
    }

    // 3. caBundle on every webhook entry.
    let in_sync = match published_bundles(&webhooks, &config.webhook_config_name).await? {
        None => {
            tracing::warn!(
                name = %config.webhook_config_name,
                "MutatingWebhookConfiguration not found; caBundle not published yet"
            );
            false
        }
        Some(entries) => {
            let stale: Vec<&String> = entries
                .iter()
                .filter(|(_, bundle)| bundle != &material.ca_bundle)
                .map(|(name, _)| name)
                .collect();
            if !stale.is_empty() {
                let bundle =
                    serde_json::to_value(ByteString(material.ca_bundle.clone().into_bytes()))
                        .map_err(|e| SelfManagedCertsError::Parse(e.to_string()))?;
                // Strategic merge on the `webhooks` list keyed by name: only
                // `clientConfig.caBundle` of each entry changes.
                let patch = serde_json::json!({
                    "webhooks": entries.iter().map(|(name, _)| serde_json::json!({
                        "name": name,
                        "clientConfig": { "caBundle": bundle },
                    })).collect::<Vec<_>>()
                });
                webhooks
                    .patch(
                        &config.webhook_config_name,
                        &PatchParams {
                            field_manager: Some(FIELD_MANAGER.to_owned()),
                            ..PatchParams::default()
                        },
                        &Patch::Strategic(patch),
                    )
                    .await?;
                tracing::info!(
                    name = %config.webhook_config_name,
                    entries = ?stale,
                    "caBundle updated"
                );
            }
            !entries.is_empty()
        }
    };

    let serving = pki::parse_cert(&material.tls_cert)?;
    let ca = pki::parse_cert(&material.ca_cert)?;
    Ok(CertStatus {
        serving_not_after: unix_to_system(serving.not_after),
        ca_not_after: unix_to_system(ca.not_after),
        ca_bundle_in_sync: in_sync,
    })
}

/// Runs the controller until `shutdown` completes: a pass at once, then one
/// every `check_interval` (sooner after an error, with backoff from 1 s up to
/// the interval). Returns an error only for an invalid configuration;
/// API errors are logged and retried.
pub async fn run<S>(
    client: kube::Client,
    config: SelfManagedCertsConfig,
    shutdown: S,
) -> Result<(), SelfManagedCertsError>
where
    S: Future<Output = ()>,
{
    let (status, _) = watch::channel(None);
    run_with_status(client, config, status, shutdown).await
}

/// [`run`], publishing each pass's [`CertStatus`] (`None` until the first
/// successful pass) for metrics and readiness.
pub async fn run_with_status<S>(
    client: kube::Client,
    config: SelfManagedCertsConfig,
    status: watch::Sender<Option<CertStatus>>,
    shutdown: S,
) -> Result<(), SelfManagedCertsError>
where
    S: Future<Output = ()>,
{
    config.validate()?;
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = Duration::from_secs(1);
    loop {
        let wait = match reconcile_once(&client, &config).await {
            Ok(s) => {
                status.send_replace(Some(s));
                backoff = Duration::from_secs(1);
                config.check_interval
            }
            Err(e @ SelfManagedCertsError::InvalidConfig(_)) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "webhook certificate check failed");
                let wait = backoff;
                backoff = (backoff * 2).min(config.check_interval);
                wait
            }
        };
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod cluster_tests;
