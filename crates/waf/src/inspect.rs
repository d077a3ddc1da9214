//! One request through the rules: phases 1 (head) and 2 (body), in the order
//! ModSecurity-nginx drives a transaction, on the thread that runs the job. Phase 5 (logging)
//! is not run: see `inspect`.

use crate::engine::Rules;
use crate::verdict::Verdict;
use bytes::Bytes;
use std::net::SocketAddr;

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

/// A transaction ID for a request without one: unique within the process.
#[cfg(feature = "modsecurity")]
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Evaluates `request` with `rules` on the calling thread.
#[cfg(feature = "modsecurity")]
pub fn inspect(rules: &Rules, request: &RequestFacts) -> Verdict {
    use crate::engine::Transaction;
    use crate::matches::{Match, SCORE_RULE, anomaly_score};
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
pub fn inspect(rules: &Rules, _request: &RequestFacts) -> Verdict {
    match rules.0 {}
}
