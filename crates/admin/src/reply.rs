//! The admin listener's answers: a body with its content type, JSON, and API errors.

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
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

/// Largest JSON body a PUT may carry (a certificate chain and key fit many times over).
const MAX_BODY: usize = 1 << 20;

/// A PUT's or POST's JSON body (at most [`MAX_BODY`]).
pub(crate) async fn json_body(req: Request<Incoming>) -> Result<Value, Box<Reply>> {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Err(Box::new(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the body is over 1 MiB or did not arrive whole",
            )));
        }
    };
    serde_json::from_slice(&body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            &format!("the body is not JSON: {e}"),
        ))
    })
}

/// 405 with the methods the endpoint takes in `Allow`.
pub(crate) fn not_allowed(allow: &'static str) -> Reply {
    let mut r = error(StatusCode::METHOD_NOT_ALLOWED, &format!("use {allow}"));
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}
