//! A response from the store: the variant the client accepts (made now, once, if it is the
//! first request for that encoding), `Age`, the status header, the route's header edits, and
//! a 304 when the client's own conditional matches.

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
use sluice_cache::{Entry, Outcome, Store, Turn, Variant};
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
    let codec = if s.facts.settings.enabled {
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
    let status = if not_modified {
        counters.not_modified.fetch_add(1, Ordering::Relaxed);
        headers = only_fields(&headers, &NOT_MODIFIED_FIELDS);
        StatusCode::NOT_MODIFIED
    } else {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        entry.status
    };
    headers.insert(header::AGE, HeaderValue::from(age.as_secs()));
    if let Some(name) = &s.settings.status_header {
        headers.insert(name.clone(), HeaderValue::from_static(outcome.as_str()));
    }
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
