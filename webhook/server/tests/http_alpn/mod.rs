//! Raw TLS connections to the test server with a chosen ALPN protocol, for
//! the server crate's tests (the webhook crate's tests share `http_common`
//! without the TLS crates).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_common::TestServer;

/// A TLS connection to the server offering only `alpn` (ALPN), handshake
/// done.
pub async fn tls_with_alpn(
    server: &TestServer,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(server.https).await.unwrap();
    tls_over(server, tcp, alpn).await
}

/// The TLS handshake on `tcp` (connected to the server's HTTPS port),
/// offering only `alpn`.
pub async fn tls_over(
    server: &TestServer,
    tcp: tokio::net::TcpStream,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca =
        rustls_pki_types::CertificateDer::from_pem_slice(server.pki.ca_pem().as_bytes()).unwrap();
    roots.add(ca).unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await.unwrap()
}
