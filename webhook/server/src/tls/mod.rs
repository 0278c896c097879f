//! TLS for the admission server: the serving certificate and key read from
//! PEM files, reloaded when their content changes, and the rustls server
//! configuration (ring provider, TLS 1.2 and 1.3 only, ALPN `h2` and
//! `http/1.1`).

mod load;
mod resolver;

use std::sync::Arc;

pub use load::{LoadedCert, TlsLoadError, load_certified_key, load_client_roots};
pub use resolver::{ReloadEvent, ReloadingCertResolver};

/// ALPN protocols offered, in order of preference.
pub const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Build the rustls server configuration around a certificate resolver.
///
/// Protocol versions: TLS 1.3 and TLS 1.2; cipher suites: ring's defaults
/// (AEAD with ECDHE only: AES-GCM and ChaCha20-Poly1305).
///
/// Client certificates: none asked for when `client_roots` is `None`.
/// Otherwise every client is asked for one; a certificate that does not
/// chain to `client_roots` (or is expired, or not for client
/// authentication) fails the handshake, and a client that sends none is let
/// through so that the kubelet's probes of `/livez` and `/readyz` still
/// work: `/mutate` then refuses it ([`ClientCert`]). The API server sends
/// the client certificate configured for the webhook in its
/// `AdmissionConfiguration` (`kubeConfigFile`).
///
/// # Errors
/// rustls refuses the protocol versions or the client roots.
pub fn server_config(
    resolver: Arc<ReloadingCertResolver>,
    client_roots: Option<rustls::RootCertStore>,
) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_roots {
        None => builder.with_no_client_auth(),
        Some(roots) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Whether the connection's client presented a certificate that the
/// server verified against `--client-ca-file` (a request extension set per
/// connection). Without `--client-ca-file` it is never inserted and
/// `/mutate` does not look for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCert {
    /// A verified client certificate was presented.
    pub verified: bool,
}
