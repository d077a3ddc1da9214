//! `[route.waf] inspect_response`: the upstream's response through the rules' phases 3
//! (head) and 4 (body), with the transaction its request was inspected by, on the WAF's
//! threads, before anything of it reaches the client.
//!
//! The head is inspected as it will be sent (after the route's header edits, before Lua's
//! `header_filter` and compression). A body whose media type is in `response_mime_types` is
//! held back up to `response_body_limit` and inspected; the rest of a longer one follows
//! uninspected (ModSecurity's `ProcessPartial`). A rule that blocks replaces the response with
//! its status and the request ID (ModSecurity-nginx can only cut a response it has begun to
//! send; holding it back lets the client get a clean answer). A saturated WAF follows the
//! route's `on_overload`, counted, as for requests.

use crate::access_log::WafRecord;
use crate::body::{BoxError, ProxyBody, size_after};
use crate::request::done::Done;
use crate::request::error::Failure;
use crate::request::firewall::blocked;
use crate::request::phases::Stop;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Version, response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use sluice_waf::{Outcome, PendingResponse, ResponseFacts, Verdict};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Inspects the response `parts` and `body` of `done`'s request. `Ok`: the body to send on
/// (what was held back, then the rest); `Err`: the answer that replaces the response.
pub(crate) async fn inspect(
    pending: Box<PendingResponse>,
    done: &mut Done,
    parts: &response::Parts,
    body: ProxyBody,
) -> Result<ProxyBody, Stop> {
    let settings = pending.settings();
    let inspected = inspectable(&parts.headers, &settings.response_mime_types);
    let limit = usize::try_from(settings.response_body_limit).unwrap_or(usize::MAX);
    let held = if inspected {
        hold(body, limit).await?
    } else {
        Held {
            data: Bytes::new(),
            trailers: None,
            rest: Some(body),
        }
    };
    let facts = ResponseFacts {
        status: parts.status.as_u16(),
        protocol: if parts.version == Version::HTTP_2 {
            "HTTP 2.0"
        } else {
            "HTTP 1.1"
        },
        headers: parts.headers.clone(),
        body: held.data.slice(..held.data.len().min(limit)),
        body_limit: limit,
    };
    let matched_before = done.entry.waf.is_some();
    match pending.check(facts, matched_before).await {
        Outcome::Pass(verdict, _) => {
            record(done, "detect", verdict);
            Ok(held.boxed())
        }
        Outcome::Block(status, verdict) => {
            let redirect = verdict.intervention.as_ref().and_then(|i| i.url.clone());
            record(done, "block", verdict);
            Err(blocked(done.request_id.as_ref(), status, redirect))
        }
        Outcome::Overloaded(open) => {
            record(
                done,
                if open { "open" } else { "closed" },
                Verdict::default(),
            );
            if open {
                Ok(held.boxed())
            } else {
                Err(Stop::Fail(Failure::WafUnavailable))
            }
        }
    }
}

/// The response's matches added to the request's record; `action` replaces the request's
/// where the response was blocked or not inspected, and is the record's where the request
/// matched nothing.
fn record(done: &mut Done, action: &'static str, verdict: Verdict) {
    match &mut done.entry.waf {
        Some(r) => {
            if action != "detect" {
                r.action = action;
            }
            r.matches.extend(verdict.matches);
        }
        None if action == "detect" && verdict.matches.is_empty() => {}
        None => done.entry.waf = Some(WafRecord::new(action, verdict)),
    }
}

/// Whether the body's media type (`Content-Type` without parameters, in lower case) is one
/// the route inspects.
fn inspectable(headers: &HeaderMap, types: &[String]) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media = ct.split(';').next().unwrap_or("").trim();
    types.iter().any(|t| t.eq_ignore_ascii_case(media))
}

/// The start of a response body, held back for the rules, and the rest.
struct Held {
    /// Data read (up to one frame past the limit).
    data: Bytes,
    /// The trailers, where the body ended with them while held.
    trailers: Option<HeaderMap>,
    /// The body after `data`; `None` when it ended while held.
    rest: Option<ProxyBody>,
}

/// Reads `body` until it ends or more than `limit` bytes are held. An upstream that fails
/// while its body is held gets 502, as one that fails before its head.
async fn hold(mut body: ProxyBody, limit: usize) -> Result<Held, Stop> {
    let mut data = BytesMut::new();
    loop {
        if data.len() > limit {
            return Ok(Held {
                data: data.freeze(),
                trailers: None,
                rest: Some(body),
            });
        }
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) => data.extend_from_slice(&d),
                Err(frame) => {
                    return Ok(Held {
                        data: data.freeze(),
                        trailers: frame.into_trailers().ok(),
                        rest: None,
                    });
                }
            },
            Some(Err(_)) => return Err(Stop::Fail(Failure::UpstreamError)),
        }
    }
    Ok(Held {
        data: data.freeze(),
        trailers: None,
        rest: None,
    })
}

impl Held {
    fn boxed(self) -> ProxyBody {
        BodyExt::boxed(self)
    }
}

impl Body for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if !this.data.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut this.data)))));
        }
        if let Some(t) = this.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        match &mut this.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_empty()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self
            .rest
            .as_ref()
            .map_or(SizeHint::with_exact(0), Body::size_hint);
        size_after(self.data.len() as u64, rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(chunks: &[&'static str], trailers: bool) -> ProxyBody {
        let mut frames: Vec<Result<Frame<Bytes>, BoxError>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes()))))
            .collect();
        if trailers {
            let mut t = HeaderMap::new();
            t.insert("grpc-status", "0".parse().unwrap());
            frames.push(Ok(Frame::trailers(t)));
        }
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed()
    }

    async fn replayed(b: ProxyBody) -> (Vec<u8>, Option<HeaderMap>) {
        let c = b.collect().await.unwrap();
        let t = c.trailers().cloned();
        (c.to_bytes().to_vec(), t)
    }

    #[tokio::test]
    async fn a_held_body_is_sent_whole_with_its_trailers() {
        let held = hold(body(&["ab", "cd", "ef"], true), 100)
            .await
            .ok()
            .unwrap();
        assert_eq!(&held.data[..], b"abcdef");
        assert!(held.rest.is_none());
        let (bytes, trailers) = replayed(held.boxed()).await;
        assert_eq!(bytes, b"abcdef");
        assert_eq!(trailers.unwrap()["grpc-status"], "0");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_held_in_part_and_the_rest_follows() {
        let held = hold(body(&["ab", "cd", "ef", "gh"], false), 3)
            .await
            .ok()
            .unwrap();
        assert_eq!(&held.data[..], b"abcd", "read until past the limit");
        assert!(held.rest.is_some());
        let (bytes, trailers) = replayed(held.boxed()).await;
        assert_eq!(bytes, b"abcdefgh", "nothing lost or repeated");
        assert!(trailers.is_none());
    }

    #[test]
    fn only_the_routes_media_types_are_held() {
        let types = vec!["text/html".to_string(), "text/plain".to_string()];
        let mut h = HeaderMap::new();
        assert!(!inspectable(&h, &types), "no type: not held");
        h.insert(
            header::CONTENT_TYPE,
            "Text/HTML; charset=utf-8".parse().unwrap(),
        );
        assert!(inspectable(&h, &types));
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        assert!(!inspectable(&h, &types));
    }
}
