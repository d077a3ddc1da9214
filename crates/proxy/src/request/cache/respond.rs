//! A response from the store: the variant the client accepts (made now, once, if it is the
//! first request for that encoding), `Age`, the status header, the route's header edits, and
//! a 304 when the client's own conditional matches.

use super::marks::Marks;
use super::store::{RETRIES, ResponseCache};
use super::upgrade::Job;
use crate::body::{ProxyBody, TrackedBody};
use crate::request::compression::{self, Compressor, RequestFacts};
use crate::request::done::Done;
use crate::request::policy;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use sluice_cache::range::{self, Ranges};
use sluice_cache::{CacheStatus, Entry, Outcome, Store, Turn, Variant};
use sluice_compress::{Codec, SkipReason};
use sluice_config::{Route, RouteCache};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

/// What answering from the store needs of the request.
pub(crate) struct Serving<'a> {
    pub(crate) cache: &'a Arc<ResponseCache>,
    pub(crate) settings: &'a Arc<RouteCache>,
    /// The request's authority (Host), the first part of its key.
    pub(crate) host_key: &'a str,
    pub(crate) compressor: &'a Arc<Compressor>,
    pub(crate) facts: &'a RequestFacts,
    pub(crate) method: &'a Method,
    pub(crate) request: &'a HeaderMap,
    pub(crate) route: &'a Route,
    pub(crate) vars: policy::Vars<'a>,
}

/// Fields a 304 carries from the 200 it stands for (RFC 9110 §15.4.5).
const NOT_MODIFIED_FIELDS: [header::HeaderName; 6] = [
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::VARY,
];

/// Answers the request from `entry`.
pub(crate) async fn respond(
    s: &Serving<'_>,
    entry: Arc<Entry>,
    outcome: Outcome,
    mut done: Done,
) -> Response<ProxyBody> {
    let counters = &s.cache.counters;
    counters.outcome(outcome);
    let age = entry.timing.age(SystemTime::now());
    let mut headers = entry.headers.clone();
    // A Range on a stored 200 is answered from its identity body (206, 416): a range of an
    // encoding made here would not be one of the representation the origin described.
    let ranged = s.request.contains_key(header::RANGE)
        && entry.status == StatusCode::OK
        && *s.method == Method::GET;
    let codec = if s.facts.settings.enabled && !ranged {
        let mut facts = s.facts.clone();
        // A HEAD gets the head its GET would.
        facts.head = false;
        match compression::decide(&facts, entry.status, &headers) {
            Ok(c) => Some(c),
            Err(reason) => {
                if reason == Some(SkipReason::NotAccepted) {
                    compression::add_vary(&mut headers);
                }
                None
            }
        }
    } else {
        None
    };
    let (coding, body) = match codec {
        Some(codec) => match encoded(s, &entry, codec).await {
            Some(body) => {
                headers.insert(
                    header::CONTENT_ENCODING,
                    HeaderValue::from_static(codec.token()),
                );
                headers.remove(header::ACCEPT_RANGES);
                compression::add_vary(&mut headers);
                compression::weaken_etag(&mut headers);
                (codec.token(), body)
            }
            None => ("identity", identity(&entry)),
        },
        None => ("identity", identity(&entry)),
    };
    let not_modified = sluice_cache::conditional::not_modified(s.method, s.request, &headers);
    let (status, body) = if not_modified {
        counters.not_modified.fetch_add(1, Ordering::Relaxed);
        headers = only_fields(&headers, &NOT_MODIFIED_FIELDS);
        (StatusCode::NOT_MODIFIED, body)
    } else {
        if coding == "identity" && entry.status == StatusCode::OK {
            headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        }
        let (status, body) = if ranged {
            ranges(s.request, &mut headers, body)
        } else {
            (entry.status, body)
        };
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        (status, body)
    };
    headers.insert(header::AGE, HeaderValue::from(age.as_secs()));
    Marks::new(s.settings, cache_status(outcome, &entry, age)).apply(&mut headers);
    if !s.route.response_headers.is_empty() {
        policy::edit_headers(&s.route.response_headers, &mut headers, &s.vars);
    }
    if let Some(id) = &done.request_id {
        headers.insert(policy::X_REQUEST_ID, id.clone());
    }
    let sent = if not_modified || *s.method == Method::HEAD {
        Bytes::new()
    } else {
        body
    };
    counters.served(coding, sent.len() as u64);
    done.entry.status = status.as_u16();
    let mut resp = Response::new(
        TrackedBody::new(Full::new(sent).map_err(|never| match never {}), done).boxed(),
    );
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

/// RFC 9211's account of an answer from the store.
fn cache_status(outcome: Outcome, entry: &Entry, age: std::time::Duration) -> CacheStatus {
    match outcome {
        // Forwarded to validate the stored entry, which answered 304.
        Outcome::Revalidated => CacheStatus {
            fwd_status: Some(304),
            ..CacheStatus::of(outcome)
        },
        // From the store: its freshness left (negative: stale).
        _ => CacheStatus {
            ttl: Some(entry.lifetime.as_secs() as i64 - age.as_secs() as i64),
            ..CacheStatus::of(outcome)
        },
    }
}

/// A stored 200's identity `body` as the request's `Range` asks: one range (206 with
/// `Content-Range`), several (206 `multipart/byteranges`), none satisfiable (416), or the
/// whole body (200) for a malformed one or an `If-Range` that does not hold.
fn ranges(request: &HeaderMap, headers: &mut HeaderMap, body: Bytes) -> (StatusCode, Bytes) {
    let len = body.len() as u64;
    match range::requested(request, headers, len) {
        Ranges::Whole => (StatusCode::OK, body),
        Ranges::Unsatisfiable => {
            let v = HeaderValue::try_from(format!("bytes */{len}")).expect("ASCII");
            headers.insert(header::CONTENT_RANGE, v);
            headers.remove(header::CONTENT_TYPE);
            (StatusCode::RANGE_NOT_SATISFIABLE, Bytes::new())
        }
        Ranges::Parts(parts) if parts.len() == 1 => {
            let r = &parts[0];
            let v = HeaderValue::try_from(format!("bytes {}-{}/{len}", r.start, r.end - 1))
                .expect("ASCII");
            headers.insert(header::CONTENT_RANGE, v);
            (
                StatusCode::PARTIAL_CONTENT,
                body.slice(r.start as usize..r.end as usize),
            )
        }
        Ranges::Parts(parts) => {
            let boundary = format!("{:016x}", crate::hash::random());
            let part_type = headers.remove(header::CONTENT_TYPE);
            let mut out = Vec::with_capacity(body.len() / 2 + 128 * parts.len());
            for r in &parts {
                out.extend_from_slice(format!("\r\n--{boundary}\r\n").as_bytes());
                if let Some(t) = &part_type {
                    out.extend_from_slice(b"content-type: ");
                    out.extend_from_slice(t.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                let range = format!(
                    "content-range: bytes {}-{}/{len}\r\n\r\n",
                    r.start,
                    r.end - 1
                );
                out.extend_from_slice(range.as_bytes());
                out.extend_from_slice(&body[r.start as usize..r.end as usize]);
            }
            out.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
            let v = HeaderValue::try_from(format!("multipart/byteranges; boundary={boundary}"))
                .expect("ASCII");
            headers.insert(header::CONTENT_TYPE, v);
            (StatusCode::PARTIAL_CONTENT, Bytes::from(out))
        }
    }
}

/// Only the fields of `headers` named in `keep`.
fn only_fields(headers: &HeaderMap, keep: &[header::HeaderName]) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for name in keep {
        for v in headers.get_all(name) {
            kept.append(name.clone(), v.clone());
        }
    }
    kept
}

fn identity(entry: &Arc<Entry>) -> Bytes {
    if let Some(v) = entry.variant("identity") {
        v.hit();
    }
    entry.identity().clone()
}

/// The body of `entry` in `codec`: the stored variant, or one made now and stored. `None`
/// when the engines failed (the identity body goes out instead).
async fn encoded(s: &Serving<'_>, entry: &Arc<Entry>, codec: Codec) -> Option<Bytes> {
    let token = codec.token();
    let cache = s.cache;
    let primary = Store::primary_key(
        s.host_key,
        s.vars.uri.path_and_query().map_or("/", |p| p.as_str()),
    );
    if let Some(v) = entry.variant(token) {
        served_variant(s, &primary, entry, codec, v);
        return Some(v.body.clone());
    }
    // The first request for this encoding makes it; concurrent ones wait for it.
    let key = format!("variant\0{:p}\0{token}", Arc::as_ptr(entry));
    let settings = &s.facts.settings;
    let encoding = compression::encoding_for(settings, codec);
    let make = || {
        compression::compress_whole(
            s.compressor,
            encoding,
            settings.sw_threshold,
            entry.identity().clone(),
        )
    };
    for _ in 0..RETRIES {
        match cache.collapser.turn(&key, s.settings.lock_timeout).await {
            Turn::Lead(leader) => {
                let body = match make().await {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::warn!(error = %e, "the cache could not encode a variant; serving identity");
                        return None;
                    }
                };
                cache.counters.variant_made(token);
                cache.store.add_variant(
                    &primary,
                    s.request,
                    entry,
                    Variant::new(token, body.clone(), false),
                );
                drop(leader);
                return Some(body);
            }
            Turn::Retry => {
                cache.counters.collapsed.fetch_add(1, Ordering::Relaxed);
                if let Some(now) = cache.store.lookup(&primary, s.request)
                    && let Some(v) = now.variant(token)
                {
                    served_variant(s, &primary, &now, codec, v);
                    return Some(v.body.clone());
                }
            }
            Turn::Alone => break,
        }
    }
    make().await.ok()
}

/// Counts a stored variant served: the compression it saved, and its upgrade when it has
/// been served `upgrade_after` times (again every `upgrade_after` until it is made).
fn served_variant(s: &Serving<'_>, primary: &str, entry: &Arc<Entry>, codec: Codec, v: &Variant) {
    let hits = v.hit();
    let settings = &s.facts.settings;
    let encoding = compression::encoding_for(settings, codec);
    if let Some(ns) = sluice_compress::cost::per_byte_ns(&encoding) {
        s.cache.counters.cpu_saved_ns.fetch_add(
            (ns * entry.identity().len() as f64) as u64,
            Ordering::Relaxed,
        );
    }
    let every = s.settings.upgrade_after;
    if every > 0 && !v.best && hits.is_multiple_of(every) {
        s.cache.upgrader.submit(Job {
            store: s.cache.store.clone(),
            primary: primary.to_owned(),
            request: s.request.clone(),
            entry: entry.clone(),
            codec,
        });
    }
}
