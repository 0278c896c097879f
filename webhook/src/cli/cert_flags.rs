//! Command-line flags of the self-managed certificate controller
//! ([`kube_prestop_cluster::self_managed_certs`]), flattened into `kube-prestop-webhook
//! serve`'s own flags, and their one mapping onto its configuration. The
//! chart's `selfManaged` mode passes exactly these.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse_duration;
use kube_prestop_cluster::self_managed_certs::SelfManagedCertsConfig;

/// Flags of the self-managed certificate mode (`--self-managed-certs`).
/// The namespace comes from the server's `--webhook-namespace`.
#[derive(Debug, Clone, Args)]
pub struct CertArgs {
    /// Make and rotate the serving certificate in a Secret, write it to
    /// --cert-dir and keep the webhook configuration's caBundle (the chart's
    /// selfManaged certificate mode). Point --tls-cert-file/--tls-key-file
    /// at <cert-dir>/tls.crt and <cert-dir>/tls.key.
    #[arg(long, env = "KUBE_PRESTOP_SELF_MANAGED_CERTS")]
    pub self_managed_certs: bool,
    /// Service the API server calls; the certificate is for its DNS names.
    #[arg(
        long,
        default_value = "kube-prestop",
        env = "KUBE_PRESTOP_SERVICE_NAME"
    )]
    pub service_name: String,
    /// MutatingWebhookConfiguration whose caBundle is kept.
    #[arg(
        long,
        default_value = "kube-prestop",
        env = "KUBE_PRESTOP_WEBHOOK_CONFIG_NAME"
    )]
    pub webhook_config_name: String,
    /// Secret (in the webhook namespace) holding the CA and certificate.
    #[arg(
        long,
        default_value = "kube-prestop-tls",
        env = "KUBE_PRESTOP_CERT_SECRET_NAME"
    )]
    pub cert_secret_name: String,
    /// Directory the serving certificate is written to (tls.crt, tls.key,
    /// ca.crt), swapped atomically as a set.
    #[arg(
        long,
        default_value = "/var/run/kube-prestop/certs",
        env = "KUBE_PRESTOP_CERT_DIR"
    )]
    pub cert_dir: PathBuf,
    /// Cluster DNS domain.
    #[arg(
        long,
        default_value = "cluster.local",
        env = "KUBE_PRESTOP_CLUSTER_DOMAIN"
    )]
    pub cluster_domain: String,
    /// Serving certificate lifetime.
    #[arg(long, default_value = "8760h", value_parser = parse_duration, env = "KUBE_PRESTOP_CERT_VALIDITY")]
    pub cert_validity: Duration,
    /// Renew the serving certificate this long before it expires.
    #[arg(long, default_value = "1440h", value_parser = parse_duration, env = "KUBE_PRESTOP_CERT_RENEW_BEFORE")]
    pub cert_renew_before: Duration,
    /// CA lifetime.
    #[arg(long, default_value = "87600h", value_parser = parse_duration, env = "KUBE_PRESTOP_CA_VALIDITY")]
    pub ca_validity: Duration,
    /// Rotate the CA this long before it expires.
    #[arg(long, default_value = "8760h", value_parser = parse_duration, env = "KUBE_PRESTOP_CA_RENEW_BEFORE")]
    pub ca_renew_before: Duration,
    /// How often the Secret and caBundle are checked (and repaired).
    #[arg(long, default_value = "1m", value_parser = parse_duration, env = "KUBE_PRESTOP_CERT_CHECK_INTERVAL")]
    pub cert_check_interval: Duration,
}

impl CertArgs {
    /// The controller configuration, or `None` without `--self-managed-certs`.
    pub fn config(&self, namespace: &str) -> Option<SelfManagedCertsConfig> {
        self.self_managed_certs.then(|| SelfManagedCertsConfig {
            secret_name: self.cert_secret_name.clone(),
            namespace: namespace.to_owned(),
            webhook_config_name: self.webhook_config_name.clone(),
            service_name: self.service_name.clone(),
            cluster_domain: self.cluster_domain.clone(),
            cert_dir: self.cert_dir.clone(),
            validity: self.cert_validity,
            renew_before: self.cert_renew_before,
            ca_validity: self.ca_validity,
            ca_renew_before: self.ca_renew_before,
            check_interval: self.cert_check_interval,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        certs: CertArgs,
    }

    #[test]
    fn defaults_match_the_library_defaults() {
        let cli = Cli::try_parse_from(["x", "--self-managed-certs"]).unwrap();
        let from_flags = cli.certs.config("ns").unwrap();
        let lib = SelfManagedCertsConfig::new(
            "ns",
            "kube-prestop",
            "kube-prestop-tls",
            "kube-prestop",
            "/var/run/kube-prestop/certs",
        );
        assert_eq!(format!("{from_flags:?}"), format!("{lib:?}"));
        assert!(
            Cli::try_parse_from(["x"])
                .unwrap()
                .certs
                .config("ns")
                .is_none()
        );
    }

    #[test]
    fn the_charts_flags_parse() {
        // As rendered by charts/kube-prestop (tests/chart/golden).
        let cli = Cli::try_parse_from([
            "x",
            "--self-managed-certs",
            "--service-name=kube-prestop",
            "--webhook-config-name=kube-prestop",
            "--cert-secret-name=kube-prestop-tls",
            "--cert-dir=/var/run/kube-prestop/certs",
            "--cluster-domain=cluster.local",
            "--cert-validity=8760h",
            "--cert-renew-before=1440h",
            "--ca-validity=87600h",
            "--ca-renew-before=8760h",
            "--cert-check-interval=1m",
        ])
        .unwrap();
        let config = cli.certs.config("prestop-system").unwrap();
        assert_eq!(config.renew_before, Duration::from_secs(1440 * 3600));
        assert_eq!(config.check_interval, Duration::from_secs(60));
        assert_eq!(config.dns_names()[0], "kube-prestop.prestop-system.svc");
    }
}
