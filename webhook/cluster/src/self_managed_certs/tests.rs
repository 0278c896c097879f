//! Unit tests of the pure parts: generation, names, renewal decisions,
//! rotation and the trust bundle.

use std::time::Duration;

use super::pki::{self, Change, Material, Policy};
use super::{SelfManagedCertsConfig, needs_renewal};

const DAY: i64 = 24 * 3600;
/// A fixed "now": 2027-01-15.
const NOW: i64 = 1_800_000_000;

fn config() -> SelfManagedCertsConfig {
    SelfManagedCertsConfig::new(
        "prestop-system",
        "kube-prestop",
        "kube-prestop-tls",
        "kube-prestop",
        "/tmp/x",
    )
}

fn policy() -> Policy {
    config().policy()
}

fn fresh() -> Material {
    let (m, change) = pki::plan(&Material::default(), &policy(), NOW, false)
        .unwrap()
        .unwrap();
    assert_eq!(change, Change::NewCa);
    m
}

#[test]
fn dns_names_cover_every_service_form() {
    assert_eq!(
        config().dns_names(),
        vec![
            "kube-prestop.prestop-system.svc",
            "kube-prestop.prestop-system.svc.cluster.local",
            "kube-prestop.prestop-system",
            "kube-prestop",
        ]
    );
}

#[test]
fn default_policy_is_valid_and_bad_ones_are_refused() {
    policy().validate().unwrap();
    let mut p = policy();
    p.renew_before = p.validity;
    assert!(p.validate().is_err());
    let mut p = policy();
    p.ca_renew_before = p.renew_before;
    assert!(p.validate().is_err());
    let mut p = policy();
    p.dns_names.clear();
    assert!(p.validate().is_err());
}

#[test]
fn renewal_decision() {
    let renew = Duration::from_secs(30 * 86400);
    let not_after = NOW + 100 * DAY;
    assert!(!needs_renewal(not_after, NOW, renew));
    assert!(!needs_renewal(not_after, not_after - 30 * DAY - 1, renew));
    assert!(needs_renewal(not_after, not_after - 30 * DAY, renew));
    assert!(needs_renewal(not_after, not_after + 1, renew));
    assert!(needs_renewal(not_after, NOW, Duration::from_secs(u64::MAX)));
}

#[test]
fn generated_ca_and_serving_certificate() {
    let m = fresh();
    let ca = pki::parse_cert(&m.ca_cert).unwrap();
    assert!(ca.is_ca);
    assert_eq!(ca.not_before, NOW - 3600);
    assert_eq!(ca.not_after, NOW + 3650 * DAY);
    assert_eq!(ca.subject, ca.issuer);

    let leaf = pki::parse_cert(&m.tls_cert).unwrap();
    assert!(!leaf.is_ca);
    assert_eq!(leaf.issuer, ca.subject);
    assert_eq!(leaf.dns_names, config().dns_names());
    assert_eq!(
        leaf.common_name.as_deref(),
        Some("kube-prestop.prestop-system.svc")
    );
    assert_eq!(leaf.not_after, NOW + 365 * DAY);
    assert!(m.tls_key.contains("PRIVATE KEY"));
    assert!(m.ca_key.contains("PRIVATE KEY"));
    // The bundle is exactly the CA.
    assert_eq!(pki::parse_certs(&m.ca_bundle).unwrap(), vec![ca]);
}

#[test]
fn serving_certificate_is_verified_by_a_tls_client() {
    // rustls (webpki) accepts the chain for the service name.
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
    let m = fresh();
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(m.ca_bundle.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider,
    )
    .build()
    .unwrap();
    let leaf = CertificateDer::from_pem_slice(m.tls_cert.as_bytes()).unwrap();
    let name = ServerName::try_from("kube-prestop.prestop-system.svc").unwrap();
    let at = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(NOW + DAY).unwrap()));
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], at)
        .unwrap();
    let other = ServerName::try_from("evil.example.com").unwrap();
    assert!(
        verifier
            .verify_server_cert(&leaf, &[], &other, &[], at)
            .is_err()
    );
}

#[test]
fn nothing_changes_while_valid() {
    let m = fresh();
    assert!(pki::plan(&m, &policy(), NOW + DAY, true).unwrap().is_none());
    assert!(
        pki::plan(&m, &policy(), NOW + 300 * DAY, false)
            .unwrap()
            .is_none()
    );
}

#[test]
fn serving_certificate_is_renewed_before_expiry() {
    let m = fresh();
    let due = NOW + 305 * DAY; // 60 days before the one-year expiry
    let (next, change) = pki::plan(&m, &policy(), due, true).unwrap().unwrap();
    assert_eq!(change, Change::NewServing);
    assert_eq!(next.ca_cert, m.ca_cert);
    assert_eq!(next.ca_bundle, m.ca_bundle);
    assert_ne!(next.tls_cert, m.tls_cert);
    assert_eq!(
        pki::parse_cert(&next.tls_cert).unwrap().not_after,
        due + 365 * DAY
    );
}

#[test]
fn changed_service_name_reissues_at_once() {
    let m = fresh();
    let mut p = policy();
    p.dns_names = vec!["other.ns.svc".into()];
    let (next, change) = pki::plan(&m, &p, NOW + DAY, false).unwrap().unwrap();
    assert_eq!(change, Change::NewServing);
    assert_eq!(
        pki::parse_cert(&next.tls_cert).unwrap().dns_names,
        vec!["other.ns.svc"]
    );
}

#[test]
fn mismatched_or_garbage_material_is_replaced() {
    let m = fresh();
    let other = fresh();
    // Serving key from another pair: unusable, reissued.
    let broken = Material {
        tls_key: other.tls_key.clone(),
        ..m.clone()
    };
    let (_, change) = pki::plan(&broken, &policy(), NOW, false).unwrap().unwrap();
    assert_eq!(change, Change::NewServing);
    // CA key from another CA: a whole new CA.
    let broken = Material {
        ca_key: other.ca_key.clone(),
        ..m.clone()
    };
    let (next, change) = pki::plan(&broken, &policy(), NOW, false).unwrap().unwrap();
    assert_eq!(change, Change::NewCa);
    assert_ne!(next.ca_cert, m.ca_cert);
    // Garbage.
    let garbage = Material {
        ca_cert: "junk".into(),
        ..Material::default()
    };
    let (_, change) = pki::plan(&garbage, &policy(), NOW, false).unwrap().unwrap();
    assert_eq!(change, Change::NewCa);
}

#[test]
fn ca_rotation_keeps_trust_in_flight() {
    let m = fresh();
    let p = policy();
    // Serving certificates keep being renewed from the old CA until the CA
    // itself is due; walk to the CA's renewal point.
    let rotate_at = NOW + 3650 * DAY - 365 * DAY;
    let mut current = m.clone();
    // Make the serving certificate fresh at rotate_at - 1 day.
    let (renewed, _) = pki::plan(&current, &p, rotate_at - 100 * DAY, true)
        .unwrap()
        .unwrap();
    current = renewed;

    // Step 1: the CA is rotated; the serving certificate is kept (its CA is
    // still trusted) and both CAs are in the bundle, the new one first.
    let (step1, change) = pki::plan(&current, &p, rotate_at, true).unwrap().unwrap();
    assert_eq!(change, Change::RotatedCa);
    assert_ne!(step1.ca_cert, current.ca_cert);
    assert_eq!(step1.tls_cert, current.tls_cert);
    let bundle = pki::parse_certs(&step1.ca_bundle).unwrap();
    assert_eq!(bundle.len(), 2);
    assert_eq!(bundle[0], pki::parse_cert(&step1.ca_cert).unwrap());
    assert_eq!(bundle[1], pki::parse_cert(&current.ca_cert).unwrap());

    // Step 2: until the API server's caBundle holds the new CA, the old
    // serving certificate stays.
    assert!(
        pki::plan(&step1, &p, rotate_at + 60, false)
            .unwrap()
            .is_none()
    );

    // Step 3: once published, the serving certificate moves to the new CA;
    // the old CA stays trusted (other replicas may still serve the old
    // certificate).
    let (step3, change) = pki::plan(&step1, &p, rotate_at + 120, true)
        .unwrap()
        .unwrap();
    assert_eq!(change, Change::NewServing);
    let leaf = pki::parse_cert(&step3.tls_cert).unwrap();
    assert_eq!(
        leaf.issuer,
        pki::parse_cert(&step3.ca_cert).unwrap().subject
    );
    assert_eq!(step3.ca_bundle, step1.ca_bundle);

    // Step 4: when the old CA expires it leaves the bundle.
    let old_expiry = NOW + 3650 * DAY;
    let (step4, change) = pki::plan(&step3, &p, old_expiry + 1, true)
        .unwrap()
        .unwrap();
    // (The serving certificate is due again by then, so it is renewed in
    // the same step; the bundle shrinks either way.)
    assert!(matches!(change, Change::Bundle | Change::NewServing));
    assert_eq!(step4.ca_cert, step3.ca_cert);
    assert_eq!(pki::parse_certs(&step4.ca_bundle).unwrap().len(), 1);
    // A bundle-only change when the serving certificate is fine.
    let only_bundle = Material {
        tls_cert: step4.tls_cert.clone(),
        tls_key: step4.tls_key.clone(),
        ..step3.clone()
    };
    let (_, change) = pki::plan(&only_bundle, &p, old_expiry + 1, true)
        .unwrap()
        .unwrap();
    assert_eq!(change, Change::Bundle);
}

#[test]
fn serving_certificate_never_outlives_its_ca() {
    let (ca_cert, ca_key) = pki::generate_ca(NOW, Duration::from_secs(10 * 86400)).unwrap();
    let (cert, _) = pki::generate_serving(
        &ca_cert,
        &ca_key,
        &["a.b.svc".to_owned()],
        NOW,
        Duration::from_secs(365 * 86400),
    )
    .unwrap();
    assert_eq!(pki::parse_cert(&cert).unwrap().not_after, NOW + 10 * DAY);
}

#[test]
fn trust_bundle_merge() {
    let (a, _) = pki::generate_ca(NOW, Duration::from_secs(100 * 86400)).unwrap();
    let (b, _) = pki::generate_ca(NOW + 1, Duration::from_secs(10 * 86400)).unwrap();
    let (c, _) = pki::generate_ca(NOW + 2, Duration::from_secs(1000 * 86400)).unwrap();
    // Current first, duplicates removed, order of the rest kept.
    let merged = pki::trust_bundle(&c, &format!("{a}{c}{b}{a}"), NOW).unwrap();
    let certs = pki::parse_certs(&merged).unwrap();
    let der = |pem: &str| pki::parse_cert(pem).unwrap().der;
    assert_eq!(
        certs.iter().map(|c| c.der.clone()).collect::<Vec<_>>(),
        vec![der(&c), der(&a), der(&b)]
    );
    // Our PEM encoding round-trips.
    assert_eq!(pki::trust_bundle(&c, &merged, NOW).unwrap(), merged);
    assert!(merged.starts_with("-----BEGIN CERTIFICATE-----\n"));
    // Expired CAs are dropped.
    let later = pki::trust_bundle(&c, &merged, NOW + 11 * DAY).unwrap();
    assert_eq!(pki::parse_certs(&later).unwrap().len(), 2);
    // Garbage in the old bundle is dropped, not fatal.
    let merged = pki::trust_bundle(&c, "not a pem", NOW).unwrap();
    assert_eq!(pki::parse_certs(&merged).unwrap().len(), 1);
    // Containment.
    assert!(pki::bundle_contains(&format!("{a}{b}"), &b));
    assert!(!pki::bundle_contains(&a, &b));
    assert!(!pki::bundle_contains("", &b));
}

#[test]
fn secret_data_round_trip() {
    let m = fresh();
    let secret = k8s_openapi::api::core::v1::Secret {
        data: Some(super::data_from(&m)),
        ..Default::default()
    };
    assert_eq!(super::material_from(&secret), m);
    let keys: Vec<_> = secret.data.as_ref().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        ["ca-bundle.crt", "ca.crt", "ca.key", "tls.crt", "tls.key"]
    );
    // An empty (chart-created) Secret reads as no material.
    let empty = k8s_openapi::api::core::v1::Secret::default();
    assert_eq!(super::material_from(&empty), Material::default());
}
