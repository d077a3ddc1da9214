//! The response cache as a phase of the request path (RFC 9111; its rules are in
//! `sluice-cache`): before a request goes upstream, `lookup` answers it from the store
//! (fresh, or stale while a background fetch revalidates it) or hands the proxy phases a
//! [`Fetch`], which edits the upstream request (identity, the stored entry's validators)
//! and decides on the response: stored as it streams to the client (`capture`), a 304 that
//! renews the stored entry, or a failure answered with a stale entry (`stale-if-error`).
//!
//! Entries hold the identity body; `respond` makes each encoding the first time a client
//! asks for it (on the compression engines, once: concurrent first requests collapse) and
//! keeps it in the entry, and `upgrade` re-encodes variants served often at their codec's
//! best level in the background.

mod capture;
pub(crate) mod marks;
mod respond;
mod store;
pub(crate) mod upgrade;

pub(crate) use respond::{Serving, respond};
use store::RETRIES;
pub use store::ResponseCache;

use crate::body::{ProxyBody, empty};
use crate::request::done::Done;
use crate::upstreams::request_key::key_value;
use capture::{Capture, CaptureBody};
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Request, Response, StatusCode};
use marks::Marks;
use sluice_cache::collapse::Leader;
use sluice_cache::{
    CacheStatus, Entry, NotStored, Outcome, Purge, Serve, Store, StorePolicy, Timing, Turn,
};
use sluice_config::{HashKey, RouteCache};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// A request extension: this request is a background revalidation (stale-while-revalidate),
/// holding the lead of its key's refresh.
#[derive(Clone)]
pub(crate) struct Refresh(Arc<Mutex<Option<Leader>>>);

/// What the lookup phase decided.
pub(crate) enum Lookup {
    /// Answered from the store; with a refresh to start in the background when stale.
    Answered(Response<ProxyBody>, Option<Refresh>),
    /// Go upstream with this fetch.
    Fetch(Box<Fetch>, Done),
}

/// The lookup phase for a request on a route with `[route.cache]`.
pub(crate) async fn lookup(
    serving: Serving<'_>,
    req: &Request<crate::exchange::ClientBody>,
    done: Done,
) -> Lookup {
    let cache = serving.cache;
    let method = req.method();
    let headers = req.headers();
    let mut fetch = Fetch::new(&serving, req);
    if bypassed(&serving.settings.bypass, req) {
        fetch.store = false;
        fetch.bypassed = true;
        return Lookup::Fetch(Box::new(fetch), done);
    }
    // Protocol upgrades (WebSocket) pass straight through. A Range is answered from a
    // stored whole response (`respond`); a miss fetches the whole response, stores it and
    // sends it whole (RFC 9110 §14.2 lets a server ignore a Range), as NGINX's cache does.
    let through = headers.contains_key(header::UPGRADE);
    if !matches!(*method, Method::GET | Method::HEAD) || through {
        fetch.store = false;
        return Lookup::Fetch(Box::new(fetch), done);
    }
    if let Some(refresh) = req.extensions().get::<Refresh>() {
        // A background revalidation: straight upstream with the stored entry's validators.
        fetch.leader = refresh.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        fetch.stale = cache.store.lookup(&fetch.primary, headers);
        return Lookup::Fetch(Box::new(fetch), done);
    }
    for _ in 0..RETRIES {
        if let Some(entry) = find(cache, &fetch.primary, headers).await {
            let age = entry.timing.age(SystemTime::now());
            match sluice_cache::serve(headers, &entry.headers, entry.lifetime, age) {
                Serve::Fresh => {
                    return Lookup::Answered(
                        respond(&serving, entry, Outcome::Hit, done).await,
                        None,
                    );
                }
                Serve::StaleWhileRevalidate => {
                    let refresh = cache
                        .collapser
                        .try_lead(&format!("refresh\0{}", fetch.primary))
                        .map(|l| Refresh(Arc::new(Mutex::new(Some(l)))));
                    return Lookup::Answered(
                        respond(&serving, entry, Outcome::Stale, done).await,
                        refresh,
                    );
                }
                Serve::Revalidate { stale_if_error } => {
                    fetch.stale = Some(entry);
                    fetch.stale_if_error = stale_if_error;
                }
            }
        }
        if cache.store.is_pass(&fetch.primary) {
            // A key whose response could not be stored (too large, say): a Range goes
            // upstream as it is, not as a fetch of the whole body.
            if headers.contains_key(header::RANGE) {
                fetch.store = false;
            }
            return Lookup::Fetch(Box::new(fetch), done);
        }
        match cache
            .collapser
            .turn(&fetch.primary, serving.settings.lock_timeout)
            .await
        {
            Turn::Lead(leader) => {
                fetch.leader = Some(leader);
                return Lookup::Fetch(Box::new(fetch), done);
            }
            Turn::Alone => return Lookup::Fetch(Box::new(fetch), done),
            Turn::Retry => {
                cache
                    .counters
                    .collapsed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                fetch.stale = None;
                fetch.stale_if_error = false;
            }
        }
    }
    Lookup::Fetch(Box::new(fetch), done)
}

impl Fetch {
    /// A fetch for `req` as it arrived: stored if it is a GET, invalidating if its method is
    /// unsafe; the lookup fills in a stale entry and the collapsing lead.
    fn new(serving: &Serving<'_>, req: &Request<crate::exchange::ClientBody>) -> Self {
        let method = req.method();
        Fetch {
            cache: serving.cache.clone(),
            settings: serving.settings.clone(),
            primary: primary_key(serving, req),
            request: req.headers().clone(),
            method: method.clone(),
            store: matches!(*method, Method::GET | Method::HEAD),
            as_get: *method == Method::HEAD,
            bypassed: false,
            invalidate: !matches!(
                *method,
                Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
            ),
            stale: None,
            stale_if_error: false,
            leader: None,
            request_time: SystemTime::now(),
        }
    }
}

/// The entry for `request` under `primary`: from memory, else from the disk tier (read on a
/// blocking thread, then kept in memory).
async fn find(
    cache: &Arc<ResponseCache>,
    primary: &str,
    request: &HeaderMap,
) -> Option<Arc<Entry>> {
    if let Some(e) = cache.store.lookup(primary, request) {
        return Some(e);
    }
    let key = cache.store.on_disk(primary, request)?;
    let store = cache.store.clone();
    let primary = primary.to_owned();
    tokio::task::spawn_blocking(move || store.load(&key, &primary))
        .await
        .ok()
        .flatten()
}

/// A request of a caching route on its way upstream.
pub(crate) struct Fetch {
    cache: Arc<ResponseCache>,
    settings: Arc<RouteCache>,
    primary: String,
    /// The client's request headers (the Vary key and the storing rules read them).
    request: HeaderMap,
    method: Method,
    /// Its response may be stored (a GET or HEAD).
    store: bool,
    /// `[route.cache] bypass` held: not looked up, not stored.
    bypassed: bool,
    /// A HEAD fetched upstream as a GET, so that the response is stored whole; the client
    /// gets its head (`on_response` reads the body into the store on a task of its own).
    as_get: bool,
    /// An unsafe method: a success invalidates the stored entry (RFC 9111 §4.4).
    invalidate: bool,
    /// The stored entry this revalidates.
    stale: Option<Arc<Entry>>,
    /// The stale entry may answer when upstream fails.
    stale_if_error: bool,
    /// The lead of this key's collapsed fetch: dropped when the entry is stored or not.
    leader: Option<Leader>,
    request_time: SystemTime,
}

/// What a [`Fetch`] made of the upstream's response.
pub(crate) enum Filtered {
    /// The response goes to the client (stored as it streams, if it may be), with the
    /// headers that say so.
    Pass(ProxyBody, Marks),
    /// Answer from this stored entry instead (a 304 renewed it; or stale-if-error).
    FromStore(Arc<Entry>, Outcome),
}

/// Request headers a cache sends upstream on its own behalf, not the client's.
static CLIENT_CONDITIONALS: [HeaderName; 6] = [
    header::RANGE,
    header::IF_RANGE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
];

impl Fetch {
    /// The upstream request's headers: a stored response is fetched whole and in identity
    /// (the cache makes the encodings), revalidated with the stored validators.
    pub(crate) fn edit_request(&self, headers: &mut HeaderMap) {
        if !self.store {
            return;
        }
        headers.remove(header::ACCEPT_ENCODING);
        for h in &CLIENT_CONDITIONALS {
            headers.remove(h);
        }
        if let Some(stale) = &self.stale {
            for (name, value) in sluice_cache::conditional::revalidation_headers(&stale.headers) {
                headers.insert(name, value);
            }
        }
    }

    /// The method the upstream request is sent with, where it is not the client's: a HEAD
    /// the cache fetches as a GET.
    pub(crate) fn upstream_method(&self) -> Option<Method> {
        (self.store && self.as_get).then_some(Method::GET)
    }

    /// A failure with no response: the stale entry, where `stale-if-error` allows it.
    pub(crate) fn on_failure(&mut self) -> Option<Arc<Entry>> {
        if self.stale_if_error {
            self.stale.take()
        } else {
            None
        }
    }

    /// Decides on the upstream's response (its head after hop-by-hop headers went).
    pub(crate) fn on_response(
        mut self,
        status: StatusCode,
        headers: &HeaderMap,
        body: ProxyBody,
    ) -> Filtered {
        let counters = &self.cache.counters;
        let store = &self.cache.store;
        let bypass = |fwd: &'static str| {
            let status = CacheStatus {
                fwd: Some(fwd),
                fwd_status: Some(status.as_u16()),
                ..CacheStatus::of(Outcome::Bypass)
            };
            Marks::new(&self.settings, status)
        };
        if self.invalidate {
            if status.is_success() || status.is_redirection() {
                // RFC 9111 §4.4: what was fetched before this unsafe request's answer goes,
                // a fetch already under way included.
                store.purge(Purge {
                    target: self.primary.clone(),
                    prefix: false,
                    at: SystemTime::now(),
                });
            }
            counters.outcome(Outcome::Bypass);
            return Filtered::Pass(body, bypass("method"));
        }
        if !self.store {
            counters.outcome(Outcome::Bypass);
            let fwd = if self.bypassed {
                "bypass"
            } else if matches!(self.method, Method::GET | Method::HEAD) {
                "request"
            } else {
                "method"
            };
            return Filtered::Pass(body, bypass(fwd));
        }
        let response_time = SystemTime::now();
        if let Some(stale) = self.stale.take() {
            if status == StatusCode::NOT_MODIFIED
                && sluice_cache::conditional::validates(&stale.headers, headers)
            {
                let mut merged = stale.headers.clone();
                sluice_cache::conditional::update_from_304(&mut merged, headers);
                let timing = Timing::new(self.request_time, response_time, headers);
                let lifetime =
                    sluice_cache::lifetime(stale.status, &merged, self.settings.default_ttl);
                let renewed = stale.renewed(merged, timing, lifetime);
                let entry = store
                    .renew(&self.primary, &self.request, &stale, renewed)
                    .unwrap_or(stale);
                return Filtered::FromStore(entry, Outcome::Revalidated);
            }
            if status.is_server_error() && self.stale_if_error {
                return Filtered::FromStore(stale, Outcome::Stale);
            }
            self.stale_if_error = false;
            // A new response replaces the stale one (stored below, or gone): what was
            // fetched before this request goes, this response is stored.
            store.purge(Purge {
                target: self.primary.clone(),
                prefix: false,
                at: self.request_time - std::time::Duration::from_nanos(1),
            });
            counters.outcome(Outcome::Expired);
            return self.store_or_pass(status, headers, body, response_time, Outcome::Expired);
        }
        counters.outcome(Outcome::Miss);
        self.store_or_pass(status, headers, body, response_time, Outcome::Miss)
    }

    fn store_or_pass(
        mut self,
        status: StatusCode,
        headers: &HeaderMap,
        body: ProxyBody,
        response_time: SystemTime,
        outcome: Outcome,
    ) -> Filtered {
        let forwarded = CacheStatus {
            fwd_status: Some(status.as_u16()),
            ..CacheStatus::of(outcome)
        };
        let policy = StorePolicy {
            allow_authorization: self.settings.allow_authorization,
            allow_set_cookie: self.settings.allow_set_cookie,
            default_ttl: self.settings.default_ttl,
        };
        let get = Method::GET;
        let method = if self.as_get { &get } else { &self.method };
        let verdict = sluice_cache::storable(method, &self.request, status, headers, &policy)
            .and_then(|()| {
                // An origin that encoded anyway (it was asked for identity): not stored, as
                // the entry's identity body would not be identity.
                match headers
                    .get(header::CONTENT_ENCODING)
                    .and_then(|v| v.to_str().ok())
                {
                    Some(v) if !v.trim().eq_ignore_ascii_case("identity") => {
                        Err(NotStored::Encoded)
                    }
                    _ => Ok(()),
                }
            });
        if let Err(why) = verdict {
            self.cache.counters.not_stored(why);
            // What the response says holds for every request of the key: pass it for a
            // while. What this request said (its method, Authorization, no-store) does not.
            let request_said = matches!(why, NotStored::Method | NotStored::Authorization)
                || why == NotStored::NoStore
                    && sluice_cache::CacheControl::parse(&self.request).no_store;
            if !request_said {
                self.cache.store.mark_pass(&self.primary);
            }
            // A HEAD fetched as a GET: the client gets the head only.
            let body = if self.as_get { empty() } else { body };
            return Filtered::Pass(body, Marks::new(&self.settings, forwarded));
        }
        let capture = Capture {
            store: self.cache.store.clone(),
            counters: self.cache.counters.clone(),
            primary: std::mem::take(&mut self.primary),
            request: std::mem::take(&mut self.request),
            status,
            headers: headers.clone(),
            timing: Timing::new(self.request_time, response_time, headers),
            lifetime: sluice_cache::lifetime(status, headers, self.settings.default_ttl),
            leader: self.leader.take(),
            segments: Vec::new(),
            size: 0,
        };
        use http_body_util::BodyExt as _;
        let stored = CacheStatus {
            stored: true,
            ..forwarded
        };
        let body = CaptureBody::new(body, capture).boxed();
        let body = if self.as_get {
            // Read into the store on a task of its own (bounded by the entry's limit and the
            // upstream's timeouts); the HEAD's client gets the head.
            tokio::spawn(async move {
                let _ = body.collect().await;
            });
            empty()
        } else {
            body
        };
        Filtered::Pass(body, Marks::new(&self.settings, stored))
    }
}

/// The request's primary key: the host and path, the query where the route's key has it,
/// then the route's further parts (`[route.cache] key`), each `name=value` after a unit
/// separator (`sluice_cache::purge::KEY_PART`), so that a purge of the URL still names it.
fn primary_key(serving: &Serving<'_>, req: &Request<crate::exchange::ClientBody>) -> String {
    let key = &serving.settings.key;
    let uri = req.uri();
    let target = if key.query {
        uri.path_and_query().map_or("/", |p| p.as_str())
    } else {
        uri.path()
    };
    let mut primary = Store::primary_key(serving.host_key, target);
    for part in &key.parts {
        let value = key_value(part, uri, req.headers()).unwrap_or_default();
        primary.push(sluice_cache::purge::KEY_PART);
        primary.push_str(&part_name(part));
        primary.push('=');
        primary.push_str(&String::from_utf8_lossy(value));
    }
    primary
}

/// `header:NAME`, `cookie:NAME` or `query:NAME`, as the configuration names a part.
fn part_name(part: &HashKey) -> String {
    match part {
        HashKey::Header(n) => format!("header:{n}"),
        HashKey::Cookie(n) => format!("cookie:{n}"),
        HashKey::Query(n) => format!("query:{n}"),
        HashKey::Uri | HashKey::Client | HashKey::Subject => String::new(),
    }
}

/// Whether one of the route's bypass parts is in the request with a value other than empty
/// or `0` (NGINX's `proxy_cache_bypass` reading).
fn bypassed(parts: &[HashKey], req: &Request<crate::exchange::ClientBody>) -> bool {
    parts
        .iter()
        .any(|p| key_value(p, req.uri(), req.headers()).is_some_and(|v| !v.is_empty() && v != b"0"))
}
