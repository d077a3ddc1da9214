//! The admin listener's answers: a body with its content type, JSON, and API errors.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};

pub(crate) type Reply = Response<Full<Bytes>>;

pub(crate) fn reply(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

pub(crate) fn json_reply(status: StatusCode, body: &Value) -> Reply {
    reply(status, "application/json", format!("{body}\n"))
}

/// An API error: `{"error": message}` with its status.
pub(crate) fn error(status: StatusCode, message: &str) -> Reply {
    json_reply(status, &json!({ "error": message }))
}
