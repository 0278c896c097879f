//! TLS for the admission server: the serving certificate and key read from
//! PEM files, reloaded when their content changes, and the rustls server
//! configuration (ring provider, TLS 1.2 and 1.3 only, ALPN `h2` and
//! `http/1.1`).

mod load;
mod resolver;

use std::sync::Arc;

pub use load::{LoadedCert, TlsLoadError, load_certified_key};
pub use resolver::{ReloadEvent, ReloadingCertResolver};

/// ALPN protocols offered, in order of preference.
pub const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Build the rustls server configuration around a certificate resolver.
///
/// Protocol versions: TLS 1.3 and TLS 1.2; cipher suites: ring's defaults
/// (AEAD with ECDHE only: AES-GCM and ChaCha20-Poly1305). No client
/// authentication (the apiserver authenticates the webhook, not the other
/// way round).
pub fn server_config(
    resolver: Arc<ReloadingCertResolver>,
) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}
