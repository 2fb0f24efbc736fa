//! The error body every temper HTTP service answers with.
//!
//! Contract: produced by the hub, the sandbox and the inference server for every non-2xx answer
//! (bad JSON, unknown route, over-long body and refused requests included); consumed by their
//! clients, which show `message` to the user. What must hold: `code` is a short machine-readable
//! word (`bad_request`, `not_found`, `busy`, `internal`, ...); `message` says what to change and
//! never carries an internal path, SQL text or a backtrace. `type` is OpenAI's name for the kind
//! of error; the inference server sets it so OpenAI clients read its errors unchanged.

use serde::{Deserialize, Serialize};

/// `{"error": {"code", "message"}}`, with OpenAI's optional `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A short machine-readable word.
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `rate_limit_error`, `server_error`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl ErrorBody {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { error: ErrorDetail { code: code.into(), message: message.into(), kind: None } }
    }

    /// The same error with OpenAI's `type` set.
    pub fn with_kind(mut self, kind: &str) -> Self {
        self.error.kind = Some(kind.to_owned());
        self
    }

    /// The message of an error answer, in this shape or in the older `{"error": "<text>"}`
    /// (OpenAI servers answer `{"error": {"message", "type", "code": null}}`, also read);
    /// `None` when `bytes` is neither.
    pub fn message_of(bytes: &[u8]) -> Option<String> {
        #[derive(Deserialize)]
        struct Any {
            error: Inner,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Inner {
            Text(String),
            Detail { message: String },
        }
        match serde_json::from_slice::<Any>(bytes).ok()?.error {
            Inner::Text(message) | Inner::Detail { message } => Some(message),
        }
    }
}

/// The `code` conventionally used for an HTTP status, for answers that have no more specific
/// one (a rejected JSON body, an unknown route).
pub fn code_for_status(status: u16) -> &'static str {
    match status {
        400 | 422 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        413 => "too_large",
        415 => "unsupported_media_type",
        429 => "busy",
        503 => "unavailable",
        _ => "internal",
    }
}

/// For axum servers: answers every error response that is not already JSON (or an HTML page)
/// as an [`ErrorBody`], keeping its status and using its text as the message. Added with
/// `Router::layer(axum::middleware::map_response(json_errors))`, it covers what handlers never
/// see: rejected paths, queries and bodies, over-long bodies, unknown routes and methods.
#[cfg(feature = "axum")]
pub async fn json_errors(response: axum::response::Response) -> axum::response::Response {
    use axum::http::header::CONTENT_TYPE;
    use axum::response::IntoResponse;
    let status = response.status();
    let kind = response.headers().get(CONTENT_TYPE).map(|v| v.as_bytes().to_vec());
    let typed =
        kind.is_some_and(|k| k.starts_with(b"application/json") || k.starts_with(b"text/html"));
    if !(status.is_client_error() || status.is_server_error()) || typed {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let message = match text.trim() {
        "" => status.canonical_reason().unwrap_or("error").to_owned(),
        t => t.to_owned(),
    };
    parts.headers.remove(CONTENT_TYPE);
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let body = axum::Json(ErrorBody::new(code_for_status(status.as_u16()), message));
    (parts, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shape_and_readers() {
        let body = ErrorBody::new("busy", "try later");
        assert_eq!(
            serde_json::to_value(&body).expect("ser"),
            json!({"error": {"code": "busy", "message": "try later"}})
        );
        let openai = ErrorBody::new("bad_request", "no").with_kind("invalid_request_error");
        let bytes = serde_json::to_vec(&openai).expect("ser");
        assert_eq!(ErrorBody::message_of(&bytes).as_deref(), Some("no"));
        assert_eq!(ErrorBody::message_of(br#"{"error": "old"}"#).as_deref(), Some("old"));
        let from_openai = br#"{"error": {"message": "m", "type": "t", "code": null}}"#;
        assert_eq!(ErrorBody::message_of(from_openai).as_deref(), Some("m"));
        assert_eq!(ErrorBody::message_of(b"plain text"), None);
        assert_eq!(code_for_status(413), "too_large");
    }
}
