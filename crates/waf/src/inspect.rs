//! One request through the rules: phases 1 (head) and 2 (body), then, with
//! `inspect_response`, phases 3 (response head) and 4 (response body) on the same
//! transaction, in the order ModSecurity-nginx drives one, each on the thread that runs its
//! job. Phase 5 (logging) is not run: see `inspect`.

use crate::engine::{Rules, Transaction};
use crate::verdict::Verdict;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;

/// What the rules see of a request: copied from it, so that a client that goes away while
/// its job runs leaves nothing the job reads.
#[derive(Debug, Clone)]
pub struct RequestFacts {
    /// The client (behind trusted proxies, the real one).
    pub client: SocketAddr,
    /// The address it connected to.
    pub server: SocketAddr,
    /// The method.
    pub method: http::Method,
    /// The request target as the client sent it (path and query).
    pub target: String,
    /// `"1.0"`, `"1.1"`, `"2.0"` or `"3.0"`.
    pub version: &'static str,
    /// The request's header fields (with `Host` for HTTP/2 and HTTP/3, from `:authority`).
    pub headers: http::HeaderMap,
    /// The body read, up to the route's limit.
    pub body: Bytes,
    /// The request's ID (`X-Request-Id`), which becomes ModSecurity's `UNIQUE_ID`; empty:
    /// a number of the process's own.
    pub id: String,
}

/// What the rules see of a response (`inspect_response`): its head as it goes to the client
/// and its body up to the route's `response_body_limit`.
#[derive(Debug, Clone)]
pub struct ResponseFacts {
    /// The status.
    pub status: u16,
    /// `"HTTP 1.1"` or `"HTTP 2.0"`, as ModSecurity-nginx passes it.
    pub protocol: &'static str,
    /// The response's header fields.
    pub headers: http::HeaderMap,
    /// The body read (empty where its type is not inspected), up to the limit, as the
    /// upstream sent it (compressed where its `Content-Encoding` says so).
    pub body: Bytes,
    /// `response_body_limit`: the most bytes of the body the rules see once decoded.
    pub body_limit: usize,
}

/// A request's transaction, kept after its request was inspected so that its response is
/// inspected by the same transaction (the rules' `TX` variables carry over, as CRS's
/// outbound rules expect).
#[derive(Debug)]
pub struct Session(Transaction);

/// A transaction ID for a request without one: unique within the process.
#[cfg(feature = "modsecurity")]
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Evaluates `request` with `rules` on the calling thread. `keep`: the transaction is
/// returned for [`inspect_response`] unless a rule intervened (the request goes no further).
#[cfg(feature = "modsecurity")]
pub fn inspect(
    rules: &Arc<Rules>,
    request: &RequestFacts,
    keep: bool,
) -> (Verdict, Option<Session>) {
    let mut t = if request.id.is_empty() {
        Transaction::new(rules, itoa::Buffer::new().format(next_id()))
    } else {
        Transaction::new(rules, &request.id)
    };
    t.connection(
        &request.client.ip().to_string(),
        request.client.port(),
        &request.server.ip().to_string(),
        request.server.port(),
    );
    t.uri(&request.target, request.method.as_str(), request.version);
    for (name, value) in &request.headers {
        t.header(name.as_str().as_bytes(), value.as_bytes());
    }
    t.headers_done();
    let mut intervention = t.intervention();
    if intervention.is_none() {
        if !request.body.is_empty() {
            t.body(&request.body);
        }
        t.body_done();
        intervention = t.intervention();
    }
    // No phase 5 (logging): its rules only log (CRS's correlation summary) and feed
    // ModSecurity's audit log, which Sluice's own record replaces (docs/waf.md).
    let kept = keep && intervention.is_none();
    let verdict = gather(&mut t, intervention);
    (verdict, kept.then_some(Session(t)))
}

/// Evaluates `response` with the transaction its request was inspected by, on the calling
/// thread: phase 3, then phase 4 unless phase 3 intervened. The verdict holds only what the
/// response matched.
#[cfg(feature = "modsecurity")]
pub fn inspect_response(session: &mut Session, response: &ResponseFacts) -> Verdict {
    let t = &mut session.0;
    for (name, value) in &response.headers {
        t.response_header(name.as_str().as_bytes(), value.as_bytes());
    }
    t.response_headers_done(response.status, response.protocol);
    let mut intervention = t.intervention();
    if intervention.is_none() {
        let body = crate::decode::for_rules(&response.headers, &response.body, response.body_limit);
        if !body.is_empty() {
            t.response_body(&body);
        }
        t.response_body_done();
        intervention = t.intervention();
    }
    let mut verdict = gather(t, intervention);
    // The request's inbound score was reported with the request; a score found here would be
    // CRS's outbound one ("Total Score" of its blocking evaluation), not comparable.
    verdict.anomaly_score = None;
    verdict
}

/// The transaction's messages since the last call, as matches, with `intervention`'s.
#[cfg(feature = "modsecurity")]
fn gather(t: &mut Transaction, intervention: Option<crate::Intervention>) -> Verdict {
    use crate::matches::{Match, SCORE_RULE, anomaly_score};
    let messages = std::mem::take(t.messages());
    let mut all: Vec<Match> = messages
        .lines
        .iter()
        .filter_map(|l| Match::parse(l))
        .collect();
    // The disruptive rule's message comes with its intervention, not through the log
    // callback (ModSecurity-nginx logs it from there too).
    all.extend(
        intervention
            .as_ref()
            .and_then(|i| Match::parse(i.log.as_deref()?)),
    );
    let anomaly_score = anomaly_score(&all);
    Verdict {
        intervention,
        matches: all.into_iter().filter(|m| m.id != SCORE_RULE).collect(),
        anomaly_score,
    }
}

/// Without the engine no `Rules` can exist (`Rules::build` refuses), so nothing calls this.
#[cfg(not(feature = "modsecurity"))]
pub fn inspect(
    rules: &Arc<Rules>,
    _request: &RequestFacts,
    _keep: bool,
) -> (Verdict, Option<Session>) {
    match rules.0 {}
}

/// Without the engine no `Session` can exist.
#[cfg(not(feature = "modsecurity"))]
pub fn inspect_response(session: &mut Session, _response: &ResponseFacts) -> Verdict {
    match session.0.0 {}
}
