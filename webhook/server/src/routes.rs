//! HTTP routes: `/mutate`, `/livez`, `/readyz` on the HTTPS port;
//! `/metrics`, `/livez`, `/readyz` on the plain-HTTP metrics port.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::admission::{self, Answer, FailureMode, Outcome};
use crate::body::{BodyBudget, ReviewBody};
use crate::error::HttpError;
use crate::health::Health;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_engine::EngineConfig;
use kube_prestop_engine::shown::{Shown, shown};
use kube_prestop_metrics::Metrics;
use kube_prestop_metrics::labels::DecisionLabel;
use tracing::field::DisplayValue;

/// Everything a handler needs.
#[derive(Debug)]
pub struct AppState {
    /// LimitRange cache.
    pub cache: ClusterCache,
    /// Engine configuration.
    pub engine: EngineConfig,
    /// Fail open or closed on engine errors.
    pub failure_mode: FailureMode,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Readiness state.
    pub health: Arc<Health>,
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Time allowed to receive a whole request body.
    pub body_read_timeout: Duration,
    /// Request body bytes held at once across requests (the budget's size).
    pub max_inflight_body_bytes: usize,
    /// The budget itself.
    pub body_budget: BodyBudget,
    /// The memory budget of the reviews being parsed
    /// (`--max-inflight-parsed-bytes`; [`admission::ParseBudget`]).
    pub parse_budget: admission::ParseBudget,
    /// `/mutate` refuses a client without a verified certificate
    /// (`--client-ca-file`; [`crate::tls::ClientCert`]).
    pub require_client_cert: bool,
}

/// The HTTPS router.
pub fn https_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            close_when_draining,
        ))
        .with_state(state)
}

/// Once shutdown has begun, every HTTP/1.1 answer carries `Connection:
/// close`, so the client retires the connection itself after reading it.
///
/// The API server calls webhooks over HTTP/1.1 (it turns HTTP/2 off for
/// them) and keeps idle connections in a pool per Service. Endpoint removal
/// only steers new connections: pooled ones to a replica that got SIGTERM
/// keep being used for the whole drain delay, and when the drain ends and the
/// server closes them, a request the API server is writing at that moment
/// fails ("EOF", "broken pipe"); it is a POST, so it is not retried, and with
/// `failurePolicy: Ignore` the pod is created without injection. Answered with
/// `Connection: close` during the drain, each pooled connection is closed by
/// the client after its next answer, and the following requests go to a new
/// connection to a ready replica; by the end of the drain no connection the
/// client still uses is left. (HTTP/2 has GOAWAY for this, sent by the
/// graceful shutdown.)
async fn close_when_draining(
    State(app): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let http1 = request.version() < Version::HTTP_2;
    let mut response = next.run(request).await;
    if http1 && app.health.is_draining() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The plain-HTTP metrics router.
pub fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    if app.health.is_ready() {
        (StatusCode::OK, "ok\n").into_response()
    } else if app.health.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "cluster cache not synced\n",
        )
            .into_response()
    }
}

async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    match app.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// `/mutate`: the body (within its limits, see [`ReviewBody`]) reviewed,
/// counted and logged; answered with the AdmissionReview or the error.
async fn mutate(State(app): State<Arc<AppState>>, body: ReviewBody) -> Result<Answer, HttpError> {
    let started = Instant::now();
    let outcome = admission::review(
        body.bytes(),
        &app.cache,
        &app.engine,
        app.failure_mode,
        &app.parse_budget,
    );
    let seconds = started.elapsed().as_secs_f64();
    app.metrics
        .record_admission(outcome.decision, outcome.reason, seconds);
    let r = &outcome.request;
    if !r.sidecar_binary.is_empty() && !r.dry_run {
        app.metrics.record_injection(r.sidecar_binary);
    }
    log_outcome(&outcome, seconds);
    outcome.result
}

/// Most characters of a request's name in the log line (`uid`,
/// `namespace`, `owner`, `pod`, `resource`): 253, the longest Kubernetes
/// name (a DNS subdomain). They are the client's words, not yet validated
/// at mutating admission (a `generateName` never is before it).
const MAX_LOGGED_NAME_CHARS: usize = 253;

/// Most characters of the log line's messages (`detail`,
/// `unknown_annotations`, `sidecar_binary_why`), which show the pod's
/// strings cut already: a bound of its own in case one does not.
const MAX_LOGGED_TEXT_CHARS: usize = 4096;

/// One line per admission decision: at warn level for errors, invalid
/// requests, pods with unknown `kube-prestop.io/` annotations
/// (field `unknown_annotations`) and pods that opted in with
/// `kube-prestop.io/inject: "true"` but are skipped (their admission
/// warning never reaches anyone when a controller such as the Job
/// controller creates them), else at info level.
///
/// Every string from the request is logged through
/// [`kube_prestop_engine::shown::shown`]: cut, with its length, and its
/// control characters escaped, so that no value can end the line and
/// write one of its own (`--log-format text` writes fields as they are;
/// JSON escapes them anyway) or make the line megabytes long.
fn log_outcome(outcome: &Outcome, seconds: f64) {
    let r = &outcome.request;
    let duration_ms = seconds * 1000.0;
    let error = matches!(
        outcome.decision,
        DecisionLabel::Error | DecisionLabel::Invalid
    );
    // Fields that are `None` are left out of the line.
    fn name(s: &str) -> DisplayValue<Shown<'_>> {
        tracing::field::display(shown(s, MAX_LOGGED_NAME_CHARS))
    }
    fn text(s: &str) -> DisplayValue<Shown<'_>> {
        tracing::field::display(shown(s, MAX_LOGGED_TEXT_CHARS))
    }
    let detail = error.then(|| text(outcome.detail.as_deref().unwrap_or("")));
    let warn_unknown = error || !r.unknown_annotations.is_empty();
    let unknown_annotations = warn_unknown.then(|| text(&r.unknown_annotations));
    let sidecar_binary = (!r.sidecar_binary.is_empty()).then_some(r.sidecar_binary);
    let sidecar_binary_why =
        (!r.sidecar_binary_why.is_empty()).then(|| text(&r.sidecar_binary_why));
    let dry_run = r.dry_run.then_some(true);
    // One line, at a level fixed per call site (tracing's levels are static).
    macro_rules! admission_line {
        ($level:ident) => {
            tracing::$level!(
                uid = name(&r.uid),
                namespace = name(&r.namespace),
                owner = name(&r.owner),
                pod = name(&r.pod),
                operation = %r.operation,
                resource = name(&r.resource),
                decision = outcome.decision.as_str(),
                reason = %outcome.reason,
                detail,
                unknown_annotations,
                sidecar_binary,
                sidecar_binary_why,
                dry_run,
                duration_ms,
                "admission"
            )
        };
    }
    // Warn where someone has to act: an error, a misspelt annotation, or a
    // pod that asked for injection and did not get it (a Job's pod gets
    // its admission warnings dropped by the Job controller).
    if error || warn_unknown || r.opted_in_but_skipped {
        admission_line!(warn);
    } else {
        admission_line!(info);
    }
}
