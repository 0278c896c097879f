//! The `/mutate` request body, as an extractor that owns every limit on it:
//! the size cap (HTTP 413, with the rest drained so the client reads the
//! answer), the read timeout (HTTP 408), and the budget of body bytes in
//! flight across requests (HTTP 503 when spent). The handler gets the whole
//! body, or nothing.
//!
//! Why a budget: a review is buffered whole and parsed on the request
//! path, costing a few times its size in memory until it is answered. The
//! connection limit alone let about 18 concurrent maximum-size bodies take
//! the webhook past the chart's 128 MiB memory limit (issue 25); the budget
//! bounds the bytes held at once instead. It is charged as the bytes
//! arrive, never by the declared `Content-Length`, so holding a share of it
//! takes sending the bytes (a client that declares 64 KiB and stalls holds
//! one KiB). A body past [`ORDINARY_BODY_BYTES`] may not take the budget's
//! last quarter, so under a flood of large bodies ordinary reviews (a Job's
//! pod is a few KiB) still get through.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::header;
use bytes::BytesMut;
use http_body_util::BodyExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::budget::ByteBudget;
use crate::error::HttpError;
use crate::routes::AppState;

/// A body of at most this many bytes is ordinary (a Job's pod is a few KiB;
/// a pod with large env lists tens): it may use the whole budget.
pub const ORDINARY_BODY_BYTES: usize = 64 * 1024;

/// The bytes of request bodies held at once, across every connection: a
/// byte budget (`budget::ByteBudget`) whose last quarter only ordinary
/// bodies may take. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct BodyBudget {
    budget: ByteBudget,
}

impl BodyBudget {
    /// A budget of `bytes` (rounded up to whole KiB, at least one).
    pub fn new(bytes: usize) -> Self {
        Self {
            budget: ByteBudget::new(bytes),
        }
    }

    /// Permits (KiB) kept for ordinary bodies: a quarter of the budget.
    fn reserve(&self) -> usize {
        self.budget.units() / 4
    }

    /// Grows `held` (the share of one body, `None` before its first bytes)
    /// to cover `total` bytes received, or `None` when the budget is spent
    /// (for a body past [`ORDINARY_BODY_BYTES`]: when growing would eat into
    /// the reserve). Never waits.
    pub fn grow(
        &self,
        held: Option<OwnedSemaphorePermit>,
        total: usize,
    ) -> Option<OwnedSemaphorePermit> {
        let keep_free = if total > ORDINARY_BODY_BYTES {
            self.reserve()
        } else {
            0
        };
        self.budget.grow(held, total, keep_free)
    }

    /// Bytes of the budget in use now (for tests and debugging).
    pub fn in_use_bytes(&self) -> usize {
        self.budget.in_use_bytes()
    }
}

/// A whole `/mutate` request body, with its share of the [`BodyBudget`]
/// held until the value is dropped (after the review is answered).
#[derive(Debug)]
pub struct ReviewBody {
    bytes: Bytes,
    _budget: OwnedSemaphorePermit,
}

impl ReviewBody {
    /// The body's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl FromRequest<Arc<AppState>> for ReviewBody {
    type Rejection = HttpError;

    async fn from_request(request: Request, app: &Arc<AppState>) -> Result<Self, HttpError> {
        let read = read(request, app).await;
        if let Err(error) = &read {
            reject(app, error);
        }
        read
    }
}

/// Reads the body within the limits (see the module docs).
async fn read(request: Request, app: &AppState) -> Result<ReviewBody, HttpError> {
    if app.require_client_cert
        && !request
            .extensions()
            .get::<crate::tls::ClientCert>()
            .is_some_and(|c| c.verified)
    {
        // Nothing read: hyper discards or closes what the client still sends.
        return Err(HttpError::Unauthenticated);
    }
    let deadline = tokio::time::Instant::now() + app.body_read_timeout;
    let cap = app.max_body_bytes;
    let (parts, mut body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(declared) = declared.filter(|&n| n > cap as u64) {
        // Nothing read yet. A client waiting for `100 Continue` has sent
        // nothing and will not: reading would make hyper invite the body.
        let expects_continue = parts
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !expects_continue && declared <= drain_limit(cap) as u64 {
            drain_in_background(body, drain_limit(cap), deadline);
        }
        return Err(HttpError::BodyTooLarge { max_bytes: cap });
    }
    let collected = tokio::time::timeout_at(deadline, collect(&mut body, app)).await;
    match collected {
        Ok(Ok((bytes, budget))) => Ok(ReviewBody {
            bytes,
            _budget: budget,
        }),
        Ok(Err(HttpError::BodyTooLarge { max_bytes })) => {
            drain_in_background(body, drain_limit(cap).saturating_sub(cap), deadline);
            Err(HttpError::BodyTooLarge { max_bytes })
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(HttpError::BodyTimeout),
    }
}

/// Reads the body to its end, at most `max_body_bytes`, charging the
/// budget as each frame arrives (so a share is held only for bytes
/// received). Trailers are ignored.
async fn collect(
    body: &mut Body,
    app: &AppState,
) -> Result<(Bytes, OwnedSemaphorePermit), HttpError> {
    let cap = app.max_body_bytes;
    let mut buffer = BytesMut::new();
    // An empty body still holds one unit while it is reviewed.
    let mut held = app.body_budget.grow(None, 0);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| HttpError::ReadBody(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let total = buffer.len() + data.len();
        if total > cap {
            return Err(HttpError::BodyTooLarge { max_bytes: cap });
        }
        held = app.body_budget.grow(held.take(), total);
        if held.is_none() {
            return Err(HttpError::Overloaded {
                body_bytes: total,
                budget_bytes: app.max_inflight_body_bytes,
            });
        }
        buffer.extend_from_slice(&data);
    }
    let held = held.ok_or(HttpError::Overloaded {
        body_bytes: buffer.len(),
        budget_bytes: app.max_inflight_body_bytes,
    })?;
    Ok((buffer.freeze(), held))
}

/// Counts and logs a body the handler never sees.
fn reject(app: &AppState, error: &HttpError) {
    if let Some((decision, reason)) = error.labels() {
        app.metrics.record_admission(decision, reason, 0.0);
    }
    match error {
        HttpError::BodyTooLarge { max_bytes } => {
            tracing::warn!(
                max_body_bytes = max_bytes,
                "request body over the limit refused"
            );
        }
        HttpError::BodyTimeout => {
            tracing::warn!(timeout = ?app.body_read_timeout, "request body not received in time");
        }
        HttpError::Overloaded {
            body_bytes,
            budget_bytes,
        } => tracing::warn!(
            received_bytes = body_bytes,
            budget_bytes,
            in_use_bytes = app.body_budget.in_use_bytes(),
            "request shed: request bodies in flight at their limit (--max-inflight-body-bytes)"
        ),
        HttpError::Unauthenticated => tracing::warn!(
            "review refused: the client presented no certificate (--client-ca-file is set; only the API server may post reviews)"
        ),
        _ => tracing::debug!(error = %error, "request body not read"),
    }
}

/// Largest oversize body (bytes) still read to its end after the 413, so
/// the client can finish sending and read the answer: twice the cap.
/// Larger ones are cut off.
fn drain_limit(cap: usize) -> usize {
    cap.saturating_mul(2)
}

/// Reads and discards the rest of an oversize request body in the
/// background, while the 413 is sent, until the body ends, `budget` more
/// bytes were read, or `deadline` (the request's body read deadline).
///
/// Why: answering without reading the body makes HTTP/2 (h2) reset the
/// stream (`RST_STREAM`, RFC 9113 §8.1 allows `NO_ERROR` after a complete
/// response) while the client is still sending, and clients such as curl
/// then report a stream error instead of the 413; over HTTP/1.1 hyper
/// closes the connection under a client still writing, which can lose the
/// answer ("Broken pipe", connection reset). Read to its end, the stream
/// or connection ends normally. Past the budget or the deadline the body
/// is dropped: the client gets the reset it would have got anyway. The
/// drained bytes are discarded frame by frame, never held.
fn drain_in_background(mut body: Body, budget: usize, deadline: tokio::time::Instant) {
    tokio::spawn(async move {
        let mut left = budget;
        let drained = tokio::time::timeout_at(deadline, async {
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { return false };
                let len = frame.data_ref().map_or(0, Bytes::len);
                let Some(rest) = left.checked_sub(len) else {
                    return false;
                };
                left = rest;
            }
            true
        })
        .await;
        tracing::debug!(
            read_to_end = drained.unwrap_or(false),
            "rest of an oversize request body drained"
        );
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn large_bodies_leave_the_reserve_to_ordinary_ones() {
        let budget = BodyBudget::new(16 * 1024 * 1024);
        let large = 4 * 1024 * 1024;
        let held: Vec<_> = std::iter::from_fn(|| budget.grow(None, large))
            .take(10)
            .collect();
        // 16 MiB with a 4 MiB reserve: three 4 MiB bodies, not four.
        assert_eq!(held.len(), 3);
        assert!(budget.grow(None, large).is_none());
        // Ordinary bodies still fit in the reserve.
        let small: Vec<_> = (0..100).map(|_| budget.grow(None, 8 * 1024)).collect();
        assert!(small.iter().all(Option::is_some));
        drop(held);
        assert!(budget.grow(None, large).is_some());
    }

    #[test]
    fn ordinary_bodies_can_spend_the_whole_budget_and_no_more() {
        let budget = BodyBudget::new(64 * 1024);
        let a = budget.grow(None, 32 * 1024).unwrap();
        let b = budget.grow(None, 32 * 1024).unwrap();
        assert!(budget.grow(None, 1).is_none());
        assert_eq!(budget.in_use_bytes(), 64 * 1024);
        drop((a, b));
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[test]
    fn a_share_grows_with_the_bytes_received() {
        let budget = BodyBudget::new(1024 * 1024);
        let held = budget.grow(None, 1).unwrap();
        assert_eq!(budget.in_use_bytes(), 1024);
        let held = budget.grow(Some(held), 100 * 1024).unwrap();
        assert_eq!(budget.in_use_bytes(), 100 * 1024);
        // Past the ordinary size, growth stops at the reserve (256 KiB).
        let held = budget.grow(Some(held), 700 * 1024).unwrap();
        assert!(budget.grow(Some(held), 800 * 1024).is_none());
        // The failed growth gave back everything that body held.
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[test]
    fn the_smallest_budget_is_one_kib_for_one_body() {
        let budget = BodyBudget::new(0);
        let held = budget.grow(None, 0).unwrap();
        assert_eq!(budget.in_use_bytes(), 1024);
        assert!(budget.grow(None, 0).is_none());
        drop(held);
        assert_eq!(budget.in_use_bytes(), 0);
    }
}
