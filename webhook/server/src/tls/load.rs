//! Reading a certificate chain and private key from PEM files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate/key pair could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsLoadError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no parseable PEM certificate.
    #[error("no PEM certificate in {0}")]
    NoCertificate(PathBuf),
    /// The key file holds no parseable PEM private key (PKCS#8, PKCS#1 or SEC1).
    #[error("no PEM private key in {path}: {reason}")]
    NoKey {
        /// The file.
        path: PathBuf,
        /// Parser message.
        reason: String,
    },
    /// The leaf certificate is not valid DER X.509.
    #[error("cannot parse the certificate in {path}: {reason}")]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// Parser message.
        reason: String,
    },
    /// The client CA file holds a certificate rustls cannot use as a
    /// trust anchor.
    #[error("cannot use the CA certificate in {path} to verify clients: {reason}")]
    BadClientCa {
        /// The file.
        path: PathBuf,
        /// rustls message.
        reason: String,
    },
    /// The key is unsupported or does not match the certificate.
    #[error("key {key} does not fit certificate {cert}: {source}")]
    KeyMismatch {
        /// Certificate file.
        cert: PathBuf,
        /// Key file.
        key: PathBuf,
        /// rustls error.
        #[source]
        source: rustls::Error,
    },
}

/// The CA certificates in the PEM file `path` (`--client-ca-file`), as the
/// trust anchors client certificates must chain to.
///
/// # Errors
/// [`TlsLoadError::Read`], [`TlsLoadError::NoCertificate`] when the file
/// holds none, [`TlsLoadError::BadClientCa`] when one is not a usable
/// X.509 CA certificate.
pub fn load_client_roots(path: &Path) -> Result<rustls::RootCertStore, TlsLoadError> {
    let pem = std::fs::read(path).map_err(|source| TlsLoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsLoadError::NoCertificate(path.to_owned()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsLoadError::BadClientCa {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// A certificate/key pair ready for rustls, with what the server reports
/// about it.
#[derive(Debug, Clone)]
pub struct LoadedCert {
    /// Chain and signing key for rustls.
    pub certified_key: Arc<CertifiedKey>,
    /// `notAfter` of the leaf certificate, Unix seconds.
    pub not_after_unix: i64,
    /// Raw bytes of both files, to tell whether they changed.
    pub fingerprint: Vec<u8>,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsLoadError> {
    std::fs::read(path).map_err(|source| TlsLoadError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Read the file contents used to detect changes (certificate then key).
///
/// Kubernetes Secret volumes swap a `..data` symlink; reading the content
/// through the path follows it, so a swap is seen whatever the mtimes say.
pub(crate) fn read_pair(cert: &Path, key: &Path) -> Result<Vec<u8>, TlsLoadError> {
    let mut bytes = read(cert)?;
    bytes.extend_from_slice(b"\0--key--\0");
    bytes.extend_from_slice(&read(key)?);
    Ok(bytes)
}

/// Load a PEM certificate chain (leaf first) and a PEM private key and check
/// that they belong together.
pub fn load_certified_key(cert_path: &Path, key_path: &Path) -> Result<LoadedCert, TlsLoadError> {
    let cert_pem = read(cert_path)?;
    let key_pem = read(key_path)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    let Some(leaf) = chain.first() else {
        return Err(TlsLoadError::NoCertificate(cert_path.to_owned()));
    };
    let not_after_unix = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| TlsLoadError::BadCertificate {
            path: cert_path.to_owned(),
            reason: e.to_string(),
        })?
        .1
        .validity()
        .not_after
        .timestamp();
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsLoadError::NoKey {
        path: key_path.to_owned(),
        reason: e.to_string(),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified_key = CertifiedKey::from_der(chain, key, &provider).map_err(|source| {
        TlsLoadError::KeyMismatch {
            cert: cert_path.to_owned(),
            key: key_path.to_owned(),
            source,
        }
    })?;
    let mut fingerprint = cert_pem;
    fingerprint.extend_from_slice(b"\0--key--\0");
    fingerprint.extend_from_slice(&key_pem);
    Ok(LoadedCert {
        certified_key: Arc::new(certified_key),
        not_after_unix,
        fingerprint,
    })
}
