//! TLS policy of the admission server, beyond what `http_server.rs` covers
//! (TLS 1.2 works, ALPN offers h2, HTTP/1.1 and HTTP/2 both work):
//!
//! * every cipher suite a client can negotiate is in the modern allowlist
//!   (ECDHE key exchange, AEAD ciphers), for TLS 1.3 and TLS 1.2;
//! * a client offering only legacy suites (RSA key exchange, CBC, 3DES,
//!   RC4) gets a handshake failure;
//! * a TLS 1.0 or 1.1 client gets a protocol-version failure.
//!
//! The legacy clients are hand-written ClientHello records over loopback
//! (rustls cannot speak those); a control hello of the same shape but with
//! TLS 1.2 and a modern suite gets a ServerHello, so the refusals are
//! meaningful.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_common;

use std::sync::Arc;
use std::time::Duration;

use http_common::TestServer;
use rustls::CipherSuite;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The suites the server may negotiate.
const ALLOWED: &[CipherSuite] = &[
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// Handshake with a rustls client limited to one suite; the negotiated
/// suite, or `None` when the server refused.
async fn negotiate(
    server: &TestServer,
    suite: rustls::SupportedCipherSuite,
) -> Option<(CipherSuite, rustls::ProtocolVersion)> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(
            rustls_pki_types::CertificateDer::from_pem_slice(server.pki.ca_pem().as_bytes())
                .unwrap(),
        )
        .unwrap();
    let provider = CryptoProvider {
        cipher_suites: vec![suite],
        ..rustls::crypto::ring::default_provider()
    };
    let version = suite.version();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(server.https).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .expect("handshake finishes")
        .ok()?;
    let (_, conn) = tls.get_ref();
    Some((
        conn.negotiated_cipher_suite()?.suite(),
        conn.protocol_version()?,
    ))
}

#[tokio::test]
async fn only_allowlisted_suites_are_negotiated() {
    let server = TestServer::start(|_| {}).await;
    let mut negotiated = Vec::new();
    for suite in rustls::crypto::ring::ALL_CIPHER_SUITES {
        if let Some((got, version)) = negotiate(&server, *suite).await {
            assert_eq!(got, suite.suite());
            assert!(ALLOWED.contains(&got), "{got:?} negotiated");
            assert!(
                matches!(
                    version,
                    rustls::ProtocolVersion::TLSv1_3 | rustls::ProtocolVersion::TLSv1_2
                ),
                "{version:?}"
            );
            negotiated.push(got);
        }
    }
    // The test certificate is ECDSA: all TLS 1.3 suites and the three
    // ECDHE_ECDSA TLS 1.2 suites work.
    for want in [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ] {
        assert!(negotiated.contains(&want), "{want:?} not negotiated");
    }
}

/// A ClientHello record: `version` in the hello (and no
/// supported_versions extension, as a TLS ≤ 1.2 client sends), `suites`,
/// and the extensions an ECDHE client needs.
fn client_hello(version: u16, suites: &[u16]) -> Vec<u8> {
    fn u16be(v: usize) -> [u8; 2] {
        u16::try_from(v).unwrap().to_be_bytes()
    }
    let mut ext = Vec::new();
    // server_name: localhost
    let host = b"localhost";
    let mut sni = Vec::new();
    sni.extend(u16be(host.len() + 3));
    sni.push(0);
    sni.extend(u16be(host.len()));
    sni.extend(host);
    ext.extend([0x00, 0x00]);
    ext.extend(u16be(sni.len()));
    ext.extend(&sni);
    // supported_groups: x25519, secp256r1, secp384r1
    ext.extend([
        0x00, 0x0a, 0x00, 0x08, 0x00, 0x06, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18,
    ]);
    // ec_point_formats: uncompressed
    ext.extend([0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]);
    // signature_algorithms: ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256,
    // rsa_pkcs1_sha256, ecdsa_sha1, rsa_pkcs1_sha1
    ext.extend([
        0x00, 0x0d, 0x00, 0x0c, 0x00, 0x0a, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x02, 0x03, 0x02,
        0x01,
    ]);
    // extended_master_secret, renegotiation_info (empty)
    ext.extend([0x00, 0x17, 0x00, 0x00, 0xff, 0x01, 0x00, 0x01, 0x00]);

    let mut body = Vec::new();
    body.extend(version.to_be_bytes());
    body.extend([0x5a; 32]); // random
    body.push(0); // session id
    body.extend(u16be(suites.len() * 2));
    for s in suites {
        body.extend(s.to_be_bytes());
    }
    body.extend([0x01, 0x00]); // compression: null
    body.extend(u16be(ext.len()));
    body.extend(&ext);

    let mut handshake = vec![0x01];
    handshake.extend(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
    handshake.extend(&body);

    let mut record = vec![0x16, 0x03, 0x01];
    record.extend(u16be(handshake.len()));
    record.extend(&handshake);
    record
}

/// What the server answers to a raw ClientHello.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// A handshake record starting with ServerHello.
    ServerHello,
    /// A fatal alert with this description.
    Alert(u8),
    /// The connection closed without a record.
    Closed,
}

async fn send_hello(server: &TestServer, hello: &[u8]) -> Answer {
    let mut tcp = tokio::net::TcpStream::connect(server.https).await.unwrap();
    tcp.write_all(hello).await.unwrap();
    let mut head = [0u8; 6];
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut head))
        .await
        .expect("the server answers a ClientHello in time");
    if read.is_err() {
        return Answer::Closed;
    }
    match head[0] {
        0x16 if head[5] == 0x02 => Answer::ServerHello,
        0x15 => {
            let mut description = [0u8; 1];
            tcp.read_exact(&mut description).await.unwrap();
            assert_eq!(head[5], 2, "alert level fatal");
            Answer::Alert(description[0])
        }
        other => panic!("unexpected record type {other:#x}: {head:?}"),
    }
}

const TLS10: u16 = 0x0301;
const TLS11: u16 = 0x0302;
const TLS12: u16 = 0x0303;
const ECDHE_ECDSA_AES128_GCM: u16 = 0xc02b;
const ECDHE_ECDSA_AES128_CBC_SHA: u16 = 0xc009;
const RSA_AES128_CBC_SHA: u16 = 0x002f;
const RSA_AES128_GCM: u16 = 0x009c;
const RSA_3DES_CBC_SHA: u16 = 0x000a;
const RSA_RC4_SHA: u16 = 0x0005;
const ALERT_HANDSHAKE_FAILURE: u8 = 40;
const ALERT_PROTOCOL_VERSION: u8 = 70;

#[tokio::test]
async fn control_hello_with_a_modern_suite_is_answered() {
    let server = TestServer::start(|_| {}).await;
    let hello = client_hello(TLS12, &[ECDHE_ECDSA_AES128_GCM]);
    assert_eq!(send_hello(&server, &hello).await, Answer::ServerHello);
}

#[tokio::test]
async fn legacy_suites_only_get_a_handshake_failure() {
    let server = TestServer::start(|_| {}).await;
    let hello = client_hello(
        TLS12,
        &[
            ECDHE_ECDSA_AES128_CBC_SHA,
            RSA_AES128_CBC_SHA,
            RSA_AES128_GCM,
            RSA_3DES_CBC_SHA,
            RSA_RC4_SHA,
        ],
    );
    assert_eq!(
        send_hello(&server, &hello).await,
        Answer::Alert(ALERT_HANDSHAKE_FAILURE)
    );
}

#[tokio::test]
async fn tls10_and_tls11_are_refused() {
    let server = TestServer::start(|_| {}).await;
    for version in [TLS10, TLS11] {
        let hello = client_hello(
            version,
            &[ECDHE_ECDSA_AES128_GCM, ECDHE_ECDSA_AES128_CBC_SHA],
        );
        assert_eq!(
            send_hello(&server, &hello).await,
            Answer::Alert(ALERT_PROTOCOL_VERSION),
            "TLS version {version:#06x}"
        );
    }
}
