//! `ceiling CERT KEY RESPONSE_FILE`: HTTPS on 127.0.0.1:0 (prints
//! `listening https=ADDR`), POST /mutate reads the whole body and answers
//! RESPONSE_FILE's bytes as application/json. Same accept loop shape as the
//! webhook (nodelay, TLS 1.3/1.2 with ring, ALPN h2 + http/1.1, hyper-util
//! auto builder with HTTP/1 keep-alive, the same global allocator), minus
//! the admission work, logging and metrics.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::{get, post};
use clap::Parser;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The webhook's allocator (webhook/src/main.rs), so that the ceiling stays
/// the same stack as the webhook minus the admission work.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn mutate(State(fixed): State<Bytes>, request: Request) -> Response {
    let _body = request.into_body().collect().await.map(|c| c.to_bytes());
    let mut response = Response::new(Body::from(fixed));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "ceiling",
    about = "The transport ceiling of make bench: the webhook's TLS stack answering POST /mutate with a fixed body; prints `listening https=ADDR`"
)]
struct Args {
    /// The serving certificate chain (PEM).
    cert: PathBuf,
    /// Its private key (PEM).
    key: PathBuf,
    /// The answer to every POST /mutate (application/json).
    response_file: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let certs = CertificateDer::pem_file_iter(&args.cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&args.key)?;
    let fixed = Bytes::from(std::fs::read(&args.response_file)?);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let router = Router::new()
        .route("/mutate", post(mutate))
        .route("/readyz", get(|| async { "ok\n" }))
        .with_state(fixed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("listening https={}", listener.local_addr()?);
        loop {
            let (tcp, _) = listener.accept().await?;
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let router = router.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder.http1().timer(TokioTimer::new()).keep_alive(true);
                builder.http2().timer(TokioTimer::new());
                let service = TowerToHyperService::new(router);
                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::{CommandFactory as _, Parser as _};

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
        // As bench/run.sh starts it.
        let a = Args::try_parse_from(["ceiling", "w/tls.crt", "w/tls.key", "w/response.json"]);
        assert!(a.is_ok_and(|a| a.cert.to_str() == Some("w/tls.crt")
            && a.key.to_str() == Some("w/tls.key")
            && a.response_file.to_str() == Some("w/response.json")));
        assert!(Args::try_parse_from(["ceiling", "a", "b"]).is_err());
        assert!(Args::try_parse_from(["ceiling", "a", "b", "c", "d"]).is_err());
    }
}
