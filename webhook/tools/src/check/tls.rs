//! Does the `caBundle` of the webhook configuration trust the certificate
//! a webhook replica presents? Checked the way the API server checks it: a
//! TLS handshake with the replica (through a port-forward, so from the
//! operator's machine) verified by webpki against the bundle's
//! certificates for the name `<service>.<namespace>.svc`.
//!
//! The handshake itself accepts any certificate (the chain is captured and
//! verified separately), so that a mismatch is reported with what the
//! replica presents rather than as a bare handshake failure; the
//! handshake's signatures are still verified (the replica holds the key of
//! the certificate it presents).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Longest wait for the port-forward and the handshake together.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// What one replica presented.
#[derive(Debug)]
pub struct Presented {
    /// Subject of the leaf certificate (RFC 4514 text).
    pub subject: String,
    /// Issuer of the leaf certificate.
    pub issuer: String,
    /// `notAfter` of the leaf, Unix seconds.
    pub not_after: i64,
    /// `Ok` when the caBundle trusts the chain for the service name; the
    /// webpki error otherwise.
    pub verified: Result<(), String>,
}

/// Why no certificate could be looked at.
#[derive(Debug, thiserror::Error)]
pub enum TlsCheckError {
    /// The caBundle holds no PEM certificate.
    #[error("the caBundle holds no certificate")]
    EmptyBundle,
    /// The caBundle's certificates cannot be used as trust anchors.
    #[error("the caBundle cannot be used: {0}")]
    Bundle(String),
    /// The port-forward failed.
    #[error("port-forward to {pod}:{port}: {source}")]
    PortForward {
        /// Pod name.
        pod: String,
        /// Pod port.
        port: u16,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The TLS handshake failed (or timed out).
    #[error("TLS handshake with {pod}:{port}: {reason}")]
    Handshake {
        /// Pod name.
        pod: String,
        /// Pod port.
        port: u16,
        /// What failed.
        reason: String,
    },
    /// The presented certificate could not be parsed.
    #[error("the presented certificate cannot be parsed: {0}")]
    Parse(String),
}

/// The trust anchors of a PEM bundle, as a webpki verifier.
fn verifier(ca_bundle: &[u8]) -> Result<Arc<WebPkiServerVerifier>, TlsCheckError> {
    let mut roots = rustls::RootCertStore::empty();
    let mut any = false;
    for cert in CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|e| TlsCheckError::Bundle(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| TlsCheckError::Bundle(e.to_string()))?;
        any = true;
    }
    if !any {
        return Err(TlsCheckError::EmptyBundle);
    }
    WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| TlsCheckError::Bundle(e.to_string()))
}

/// Captures the presented chain and webpki's verdict on it, and lets the
/// handshake go on either way (its signatures are verified as usual).
#[derive(Debug)]
struct Capture {
    inner: Arc<WebPkiServerVerifier>,
    seen: Mutex<Option<(CertificateDer<'static>, Result<(), String>)>>,
}

impl ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verdict = self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .map(|_| ())
            .map_err(|e| e.to_string());
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((end_entity.clone().into_owned(), verdict));
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Handshake with `pod`'s `port` (through a port-forward) as the API server
/// would, for `server_name`, and say what it presented and whether
/// `ca_bundle` trusts it.
///
/// # Errors
/// [`TlsCheckError`] when the bundle is unusable, the port-forward or the
/// handshake fails, or the certificate cannot be parsed.
pub async fn presented(
    pods: &kube::Api<Pod>,
    pod: &str,
    port: u16,
    server_name: &str,
    ca_bundle: &[u8],
) -> Result<Presented, TlsCheckError> {
    let capture = Arc::new(Capture {
        inner: verifier(ca_bundle)?,
        seen: Mutex::new(None),
    });
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| TlsCheckError::Bundle(e.to_string()))?
    .dangerous()
    .with_custom_certificate_verifier(Arc::clone(&capture) as Arc<dyn ServerCertVerifier>)
    .with_no_client_auth();
    let name =
        ServerName::try_from(server_name.to_owned()).map_err(|e| TlsCheckError::Handshake {
            pod: pod.to_owned(),
            port,
            reason: format!("invalid server name {server_name}: {e}"),
        })?;
    let handshake = async {
        let mut forwarder =
            pods.portforward(pod, &[port])
                .await
                .map_err(|source| TlsCheckError::PortForward {
                    pod: pod.to_owned(),
                    port,
                    source,
                })?;
        let stream = forwarder
            .take_stream(port)
            .ok_or_else(|| TlsCheckError::Handshake {
                pod: pod.to_owned(),
                port,
                reason: "the port-forward gave no stream".to_owned(),
            })?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let result = connector.connect(name, stream).await;
        forwarder.abort();
        result.map(|_| ()).map_err(|e| TlsCheckError::Handshake {
            pod: pod.to_owned(),
            port,
            reason: e.to_string(),
        })
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| TlsCheckError::Handshake {
            pod: pod.to_owned(),
            port,
            reason: format!("no answer within {}s", HANDSHAKE_TIMEOUT.as_secs()),
        })??;
    let seen = capture
        .seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let (leaf, verified) = seen.ok_or_else(|| TlsCheckError::Handshake {
        pod: pod.to_owned(),
        port,
        reason: "the server presented no certificate".to_owned(),
    })?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| TlsCheckError::Parse(e.to_string()))?;
    Ok(Presented {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        not_after: cert.validity().not_after.timestamp(),
        verified,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_garbage_bundle_is_reported_before_any_connection() {
        assert!(matches!(verifier(b""), Err(TlsCheckError::EmptyBundle)));
        assert!(matches!(verifier(b"Zm9v"), Err(TlsCheckError::EmptyBundle)));
    }
}
