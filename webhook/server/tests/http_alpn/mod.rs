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
    try_tls_over(&server.pki.ca_pem(), tcp, alpn).await.unwrap()
}

/// The TLS handshake on `tcp` (connected to an HTTPS port whose
/// certificate the CA `ca_pem` issued for `localhost`), offering only
/// `alpn`; an error if the server drops the connection first (it completes
/// only once the server has given the connection a slot). Takes the CA, not
/// the server, so that a spawned task can own what it needs.
pub async fn try_tls_over(
    ca_pem: &str,
    tcp: tokio::net::TcpStream,
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls_pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap();
    roots.add(ca).unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await
}

/// A TCP connection to `https` from the local address `local` (any port):
/// a client of its own peer address (`127.0.0.x`), as the slot-sharing
/// tests need.
pub async fn tcp_from(https: std::net::SocketAddr, local: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::new(
            local.parse::<std::net::IpAddr>().unwrap(),
            0,
        ))
        .unwrap();
    socket.connect(https).await.unwrap()
}
