//! One request through the rules: phases 1 (head) and 2 (body), then, with
//! `inspect_response`, phases 3 (response head) and 4 (response body) on the same
//! transaction, in the order ModSecurity-nginx drives one, each on the thread that runs its
//! job; with libmodsecurity ([`inspect`]) or the native engine (`inspect_native`, which
//! calls into this module), whose sessions [`inspect_response`] takes alike.
//! Phase 5 (logging) is not run: see `inspect`.

use crate::engine::{Rules, Transaction};
use crate::facts::{RequestFacts, ResponseFacts};
#[cfg(feature = "modsecurity")]
use crate::matches::Match;
#[cfg(feature = "modsecurity")]
use crate::verdict::Intervention;
use crate::verdict::Verdict;
use std::sync::{Arc, Mutex};

/// A request's transaction, kept after its request was inspected so that its response is
/// inspected by the same transaction (the rules' `TX` variables carry over, as CRS's
/// outbound rules expect).
#[derive(Debug)]
pub struct Session(Kept);

/// The transaction of either engine.
#[derive(Debug)]
enum Kept {
    #[cfg_attr(
        not(feature = "modsecurity"),
        expect(
            dead_code,
            reason = "no libmodsecurity transaction exists in this build"
        )
    )]
    ModSecurity(Transaction),
    /// The native engine's (`native::session`), behind a mutex: a session must be `Sync`
    /// (it rides in a response body) and the native transaction's memo is a `RefCell`;
    /// only the response's job locks it.
    Native(Mutex<Box<dyn Respond>>),
}

/// A kept transaction of an engine other than libmodsecurity: its response's phases.
pub(crate) trait Respond: Send + std::fmt::Debug {
    /// Phases 3 and 4 of `response`: what the response matched.
    fn respond(&mut self, response: &ResponseFacts) -> Verdict;
}

impl Session {
    /// A session of an engine other than libmodsecurity.
    pub(crate) fn of(kept: Box<dyn Respond>) -> Session {
        Session(Kept::Native(Mutex::new(kept)))
    }
}

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
    (verdict, kept.then_some(Session(Kept::ModSecurity(t))))
}

/// Evaluates `response` with the transaction its request was inspected by, on the calling
/// thread: phase 3, then phase 4 unless phase 3 intervened. The verdict holds only what the
/// response matched.
pub fn inspect_response(session: &mut Session, response: &ResponseFacts) -> Verdict {
    let mut verdict = match &mut session.0 {
        Kept::ModSecurity(t) => modsecurity_response(t, response),
        Kept::Native(kept) => kept
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .respond(response),
    };
    // The request's inbound score was reported with the request; a score found here would be
    // CRS's outbound one ("Total Score" of its blocking evaluation), not comparable.
    verdict.anomaly_score = None;
    verdict
}

#[cfg(feature = "modsecurity")]
fn modsecurity_response(t: &mut Transaction, response: &ResponseFacts) -> Verdict {
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
    gather(t, intervention)
}

/// Without the engine no libmodsecurity transaction can exist.
#[cfg(not(feature = "modsecurity"))]
fn modsecurity_response(t: &mut Transaction, _response: &ResponseFacts) -> Verdict {
    match t.0 {}
}

/// The transaction's messages since the last call, as matches, with `intervention`'s.
#[cfg(feature = "modsecurity")]
fn gather(t: &mut Transaction, intervention: Option<Intervention>) -> Verdict {
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
    Verdict::of(all, intervention)
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
