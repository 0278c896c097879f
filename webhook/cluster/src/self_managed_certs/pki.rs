//! Pure certificate logic: generating the CA and the serving certificate,
//! reading them back, and deciding what to renew. No I/O here, so every
//! decision is unit-tested with fixed clocks.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;
use x509_parser::time::ASN1Time;

use super::SelfManagedCertsError;

/// Organisation name written into every certificate the controller makes.
pub const ORGANIZATION: &str = "kube-prestop";

/// How far `notBefore` is set in the past, so that API servers whose clock
/// runs a little behind ours accept a certificate made a moment ago.
pub const BACKDATE: Duration = Duration::from_secs(3600);

/// The certificate material the controller keeps in its Secret, PEM-encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Material {
    /// The current CA certificate.
    pub ca_cert: String,
    /// The current CA's private key (PKCS#8).
    pub ca_key: String,
    /// The serving certificate.
    pub tls_cert: String,
    /// The serving certificate's private key (PKCS#8).
    pub tls_key: String,
    /// Every CA the API server must trust: the current CA first, then older
    /// CAs that are not expired yet (see [`trust_bundle`]).
    pub ca_bundle: String,
}

/// What the controller wants: names, lifetimes and renewal margins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// DNS names of the serving certificate; the first is its common name.
    pub dns_names: Vec<String>,
    /// Lifetime of a new CA.
    pub ca_validity: Duration,
    /// A CA is replaced once it expires within this margin.
    pub ca_renew_before: Duration,
    /// Lifetime of a new serving certificate (capped at the CA's expiry).
    pub validity: Duration,
    /// A serving certificate is replaced once it expires within this margin.
    pub renew_before: Duration,
}

impl Policy {
    /// Checks that the margins leave room for a certificate to be used at all.
    pub fn validate(&self) -> Result<(), SelfManagedCertsError> {
        let invalid = |what: &str| Err(SelfManagedCertsError::InvalidConfig(what.to_owned()));
        if self.dns_names.is_empty() {
            return invalid("no DNS names for the serving certificate");
        }
        if self.renew_before >= self.validity {
            return invalid("renew_before must be shorter than validity");
        }
        if self.ca_renew_before >= self.ca_validity {
            return invalid("ca_renew_before must be shorter than ca_validity");
        }
        if self.ca_renew_before <= self.renew_before {
            // A serving certificate is capped at its CA's expiry; the CA must
            // be replaced before that cap makes every new serving certificate
            // due for renewal at once.
            return invalid("ca_renew_before must be longer than renew_before");
        }
        Ok(())
    }
}

/// True when a certificate valid until `not_after` (Unix seconds) must be
/// replaced at `now`: it expires within `renew_before`, or already has.
pub fn needs_renewal(not_after: i64, now: i64, renew_before: Duration) -> bool {
    let margin = i64::try_from(renew_before.as_secs()).unwrap_or(i64::MAX);
    now >= not_after.saturating_sub(margin)
}

/// A parsed certificate: what the controller needs to know about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// DER encoding, used to compare certificates.
    pub der: Vec<u8>,
    /// Raw DER of the subject name.
    pub subject: Vec<u8>,
    /// Raw DER of the issuer name.
    pub issuer: Vec<u8>,
    /// Subject common name, if any.
    pub common_name: Option<String>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// `notBefore`, Unix seconds.
    pub not_before: i64,
    /// `notAfter`, Unix seconds.
    pub not_after: i64,
    /// Whether basicConstraints says CA.
    pub is_ca: bool,
    /// The subject public key (the BIT STRING's bytes).
    pub public_key: Vec<u8>,
}

fn info(cert: &X509Certificate<'_>, der: &[u8]) -> CertInfo {
    let dns_names = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    CertInfo {
        der: der.to_vec(),
        subject: cert.subject().as_raw().to_vec(),
        issuer: cert.issuer().as_raw().to_vec(),
        common_name: cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned),
        dns_names,
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        is_ca: cert.is_ca(),
        public_key: cert.public_key().subject_public_key.data.to_vec(),
    }
}

/// Parses every certificate in a PEM bundle; blocks of other types are
/// skipped, and an unparsable certificate is an error.
pub fn parse_certs(pem: &str) -> Result<Vec<CertInfo>, SelfManagedCertsError> {
    let mut out = Vec::new();
    for block in Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| SelfManagedCertsError::Parse(format!("PEM: {e}")))?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let cert = block
            .parse_x509()
            .map_err(|e| SelfManagedCertsError::Parse(format!("certificate: {e}")))?;
        out.push(info(&cert, &block.contents));
    }
    Ok(out)
}

/// Parses exactly one certificate.
pub fn parse_cert(pem: &str) -> Result<CertInfo, SelfManagedCertsError> {
    let mut certs = parse_certs(pem)?;
    match certs.len() {
        1 => Ok(certs.remove(0)),
        n => Err(SelfManagedCertsError::Parse(format!(
            "expected one certificate, found {n}"
        ))),
    }
}

fn parse_key(pem: &str) -> Result<KeyPair, SelfManagedCertsError> {
    KeyPair::from_pem(pem).map_err(|e| SelfManagedCertsError::Parse(format!("private key: {e}")))
}

fn asn1(unix: i64) -> Result<ASN1Time, SelfManagedCertsError> {
    ASN1Time::from_timestamp(unix)
        .map_err(|e| SelfManagedCertsError::Parse(format!("time {unix}: {e}")))
}

fn set_validity(
    params: &mut CertificateParams,
    not_before: i64,
    not_after: i64,
) -> Result<(), SelfManagedCertsError> {
    params.not_before = asn1(not_before)?.to_datetime();
    params.not_after = asn1(not_after)?.to_datetime();
    Ok(())
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

fn ca_name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn.push(DnType::CommonName, common_name);
    dn
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = ca_name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// Makes a new self-signed CA valid from `now - BACKDATE` for `validity`.
/// Its common name carries `now`, so each CA has a distinct subject and a
/// serving certificate's issuer names exactly one CA.
pub fn generate_ca(
    now: i64,
    validity: Duration,
) -> Result<(String, String), SelfManagedCertsError> {
    let key = KeyPair::generate()?;
    let mut params = ca_params(&format!("kube-prestop webhook CA {now}"));
    set_validity(
        &mut params,
        now - secs(BACKDATE),
        now.saturating_add(secs(validity)),
    )?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Makes a serving certificate for `dns_names` (the first is also the common
/// name) signed by the CA, valid for `validity` but never beyond the CA.
pub fn generate_serving(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    dns_names: &[String],
    now: i64,
    validity: Duration,
) -> Result<(String, String), SelfManagedCertsError> {
    let ca = parse_cert(ca_cert_pem)?;
    let ca_key = parse_key(ca_key_pem)?;
    if ca.public_key != ca_key.public_key_raw() {
        return Err(SelfManagedCertsError::Parse(
            "CA key does not match the CA certificate".into(),
        ));
    }
    let ca_cn = ca
        .common_name
        .clone()
        .ok_or_else(|| SelfManagedCertsError::Parse("CA certificate has no common name".into()))?;
    let issuer = Issuer::new(ca_params(&ca_cn), ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANIZATION);
    if let Some(first) = dns_names.first() {
        dn.push(DnType::CommonName, first.as_str());
    }
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let not_after = now.saturating_add(secs(validity)).min(ca.not_after);
    set_validity(
        &mut params,
        (now - secs(BACKDATE)).max(ca.not_before),
        not_after,
    )?;
    let cert = params.signed_by(&key, &issuer)?;
    let pem = cert.pem();
    // The issuer name is rebuilt from the CA's common name: make sure it is
    // byte for byte the CA's subject, or clients would not chain it.
    if parse_cert(&pem)?.issuer != ca.subject {
        return Err(SelfManagedCertsError::Parse(
            "CA subject was not produced by this controller".into(),
        ));
    }
    Ok((pem, key.serialize_pem()))
}

/// The trust bundle for `caBundle`: `current` first, then every other CA of
/// `previous` that is still valid at `now` (so serving certificates an older
/// CA signed keep being trusted during a rotation), without duplicates, in
/// PEM. Unparsable entries of `previous` are dropped.
pub fn trust_bundle(
    current: &str,
    previous: &str,
    now: i64,
) -> Result<String, SelfManagedCertsError> {
    let current = parse_cert(current)?;
    let mut kept: Vec<CertInfo> = vec![current];
    for cert in parse_certs(previous).unwrap_or_default() {
        if cert.is_ca && cert.not_after > now && !kept.iter().any(|k| k.der == cert.der) {
            kept.push(cert);
        }
    }
    Ok(kept.iter().map(|c| to_pem(&c.der)).collect())
}

fn to_pem(der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len().div_ceil(3) * 4);
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    let bytes = b64.as_bytes();
    for line in bytes.chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// True when every certificate of `wanted` is in the PEM bundle `published`.
pub fn bundle_contains(published: &str, wanted: &str) -> bool {
    let Ok(published) = parse_certs(published) else {
        return false;
    };
    match parse_certs(wanted) {
        Ok(wanted) => wanted
            .iter()
            .all(|w| published.iter().any(|p| p.der == w.der)),
        Err(_) => false,
    }
}

/// Why the material had to change; logged by the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// No usable CA (first start, or the Secret was emptied): everything new.
    NewCa,
    /// The CA expires within `ca_renew_before`: a new CA joins the bundle.
    RotatedCa,
    /// The serving certificate was missing, invalid, for other names, due
    /// for renewal, or signed by a CA that is no longer the current one.
    NewServing,
    /// Only the trust bundle changed (an old CA expired, or it was missing).
    Bundle,
}

/// Decides the next material from what the Secret holds now.
///
/// * No valid CA (with matching key): a new CA, a new serving certificate.
/// * CA due for renewal: a new CA is put first in the bundle, the serving
///   certificate (signed by the old CA, still trusted) is kept for now.
/// * Serving certificate due (see [`needs_renewal`], wrong names, key
///   mismatch, or issued by an older CA): reissued from the current CA, but
///   only once `ca_published` (the API server's `caBundle` already holds the
///   current CA) or when the old one is no longer usable at all. This is what
///   keeps a CA rotation from breaking in-flight trust: the API server trusts
///   the new CA (one check interval at least) before any replica serves a
///   certificate it signed, and the old CA stays in the bundle until it
///   expires, so replicas still serving the previous certificate stay trusted.
///
/// Returns `None` when nothing changes.
pub fn plan(
    current: &Material,
    policy: &Policy,
    now: i64,
    ca_published: bool,
) -> Result<Option<(Material, Change)>, SelfManagedCertsError> {
    let ca_ok = valid_ca(current, now);
    let Some(ca) = ca_ok else {
        let (ca_cert, ca_key) = generate_ca(now, policy.ca_validity)?;
        let (tls_cert, tls_key) =
            generate_serving(&ca_cert, &ca_key, &policy.dns_names, now, policy.validity)?;
        let ca_bundle = trust_bundle(&ca_cert, &current.ca_bundle, now)?;
        return Ok(Some((
            Material {
                ca_cert,
                ca_key,
                tls_cert,
                tls_key,
                ca_bundle,
            },
            Change::NewCa,
        )));
    };
    if needs_renewal(ca.not_after, now, policy.ca_renew_before) {
        let (ca_cert, ca_key) = generate_ca(now, policy.ca_validity)?;
        let old = format!("{}{}", current.ca_cert, current.ca_bundle);
        let ca_bundle = trust_bundle(&ca_cert, &old, now)?;
        let mut next = Material {
            ca_cert,
            ca_key,
            ca_bundle,
            ..current.clone()
        };
        if serving_problem(current, &ca, policy, now).is_some_and(|p| p == Serving::Unusable) {
            let (tls_cert, tls_key) = generate_serving(
                &next.ca_cert,
                &next.ca_key,
                &policy.dns_names,
                now,
                policy.validity,
            )?;
            next.tls_cert = tls_cert;
            next.tls_key = tls_key;
        }
        return Ok(Some((next, Change::RotatedCa)));
    }
    let ca_bundle = trust_bundle(&current.ca_cert, &current.ca_bundle, now)?;
    match serving_problem(current, &ca, policy, now) {
        Some(problem) if problem == Serving::Unusable || ca_published => {
            let (tls_cert, tls_key) = generate_serving(
                &current.ca_cert,
                &current.ca_key,
                &policy.dns_names,
                now,
                policy.validity,
            )?;
            let next = Material {
                tls_cert,
                tls_key,
                ca_bundle,
                ..current.clone()
            };
            Ok(Some((next, Change::NewServing)))
        }
        _ if ca_bundle != current.ca_bundle => Ok(Some((
            Material {
                ca_bundle,
                ..current.clone()
            },
            Change::Bundle,
        ))),
        _ => Ok(None),
    }
}

fn valid_ca(m: &Material, now: i64) -> Option<CertInfo> {
    let ca = parse_cert(&m.ca_cert).ok()?;
    let key = parse_key(&m.ca_key).ok()?;
    let usable = ca.is_ca && ca.not_after > now && ca.common_name.is_some();
    (usable && ca.public_key == key.public_key_raw()).then_some(ca)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Serving {
    /// Missing, unparsable, expired, key mismatch or wrong names.
    Unusable,
    /// Works now, but due for renewal or signed by an older CA.
    Due,
}

fn serving_problem(m: &Material, ca: &CertInfo, policy: &Policy, now: i64) -> Option<Serving> {
    let Ok(cert) = parse_cert(&m.tls_cert) else {
        return Some(Serving::Unusable);
    };
    let Ok(key) = parse_key(&m.tls_key) else {
        return Some(Serving::Unusable);
    };
    let mut want = policy.dns_names.clone();
    want.sort();
    let mut have = cert.dns_names.clone();
    have.sort();
    if cert.public_key != key.public_key_raw() || want != have || cert.not_after <= now {
        return Some(Serving::Unusable);
    }
    if cert.issuer != ca.subject || needs_renewal(cert.not_after, now, policy.renew_before) {
        return Some(Serving::Due);
    }
    None
}
