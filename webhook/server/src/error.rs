//! Requests answered without an AdmissionReview: one error type, one
//! mapping onto HTTP (a status code and a `{"error": "..."}` JSON body).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::admission::ReviewError;
use kube_prestop_metrics::labels::{DecisionLabel, reason};

/// Why a `/mutate` request gets no AdmissionReview back.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The body is not an AdmissionReview (HTTP 400).
    #[error(transparent)]
    BadReview(#[from] ReviewError),
    /// The body is over `--max-body-bytes` (HTTP 413).
    #[error("request body larger than {max_bytes} bytes")]
    BodyTooLarge {
        /// The limit, bytes.
        max_bytes: usize,
    },
    /// The body could not be read (HTTP 400): the connection failed, or
    /// the client sent a malformed body.
    #[error("cannot read the request body: {0}")]
    ReadBody(axum::BoxError),
    /// The body did not arrive within `--read-timeout` (HTTP 408).
    #[error("request body not received in time")]
    BodyTimeout,
    /// The bytes of request bodies in flight are at their limit
    /// (`--max-inflight-body-bytes`; HTTP 503): the request is shed unread.
    #[error(
        "overloaded: request bodies in flight at their limit of {budget_bytes} bytes; this body ({body_bytes} bytes) was not read"
    )]
    Overloaded {
        /// This body's declared size (else the size cap), bytes.
        body_bytes: usize,
        /// The limit, bytes.
        budget_bytes: usize,
    },
    /// The pods being reviewed are at their memory budget
    /// (`--max-inflight-parsed-bytes`; HTTP 503): this review, estimated at
    /// `bytes` once parsed, is shed unparsed.
    #[error(
        "overloaded: the reviews being parsed are at their memory budget of {budget_bytes} bytes (--max-inflight-parsed-bytes); this one (about {bytes} bytes parsed) was not parsed"
    )]
    ParsingOverloaded {
        /// This review's estimate, bytes.
        bytes: usize,
        /// The budget, bytes.
        budget_bytes: usize,
    },
    /// The server requires a client certificate (`--client-ca-file`) and
    /// the connection presented none (HTTP 401): only the API server, with
    /// the certificate of its `AdmissionConfiguration`, may post reviews.
    #[error(
        "a client certificate signed by the webhook's client CA (--client-ca-file) is required to post an AdmissionReview"
    )]
    Unauthenticated,
    /// The answer could not be serialized (HTTP 500; cannot happen for the
    /// plain data it is, but answered rather than assumed).
    #[error("cannot serialize the response: {0}")]
    Serialize(serde_json::Error),
}

impl HttpError {
    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadReview(_) | Self::ReadBody(_) => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::Overloaded { .. } | Self::ParsingOverloaded { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::Serialize(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `decision` and `reason` it is counted under in
    /// `kube_prestop_admissions_total`, or `None` when it is not counted
    /// (a body that never arrived whole is no admission review).
    pub fn labels(&self) -> Option<(DecisionLabel, &'static str)> {
        match self {
            Self::BadReview(_) => Some((DecisionLabel::Invalid, reason::BAD_REQUEST)),
            Self::BodyTooLarge { .. } => Some((DecisionLabel::Invalid, reason::BODY_TOO_LARGE)),
            Self::Serialize(_) => Some((DecisionLabel::Error, reason::SERIALIZE)),
            Self::Overloaded { .. } | Self::ParsingOverloaded { .. } => {
                Some((DecisionLabel::Error, reason::OVERLOADED))
            }
            Self::Unauthenticated => Some((DecisionLabel::Invalid, reason::UNAUTHENTICATED)),
            Self::ReadBody(_) | Self::BodyTimeout => None,
        }
    }

    /// The answer's body: `{"error": "<this error>"}`.
    pub fn body(&self) -> Vec<u8> {
        error_body(&self.to_string())
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        json_response(self.status(), self.body())
    }
}

/// A JSON answer with `status`.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `{"error": "..."}`.
fn error_body(message: &str) -> Vec<u8> {
    let value = serde_json::json!({ "error": message });
    value.to_string().into_bytes()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn statuses_bodies_and_labels() {
        let too_large = HttpError::BodyTooLarge { max_bytes: 7 };
        assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body: serde_json::Value = serde_json::from_slice(&too_large.body()).unwrap();
        assert_eq!(body["error"], "request body larger than 7 bytes");
        assert_eq!(
            too_large.labels(),
            Some((DecisionLabel::Invalid, "body_too_large"))
        );
        let bad = HttpError::from(ReviewError::NoUid);
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert_eq!(bad.to_string(), "the AdmissionReview request has no uid");
        assert_eq!(HttpError::BodyTimeout.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(HttpError::BodyTimeout.labels(), None);
        let response = HttpError::BodyTimeout.into_response();
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    }
}
