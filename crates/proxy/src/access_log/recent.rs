//! The request log: the most recent requests kept in memory, bounded by bytes, for
//! `/api/v1/requests` ("which requests to `api` failed in the last ten minutes?", "the
//! slowest ones", "the request of this trace") without a log store.
//!
//! Each finished request is copied into a fixed-size [`Record`] (its numbers, and its
//! strings into one inline text area, the path cut to what is left), in a ring that
//! overwrites its oldest record: nothing is allocated per request and nothing the request
//! allocated is kept alive. (Keeping the access log's `Entry` itself, strings and all, cost
//! 7.5% more CPU per keep-alive request: 100,000 live small allocations made mimalloc's
//! allocation path miss the cache; a record costs a copy of ~200 bytes.)
//!
//! The log is split in shards, one per worker thread (a thread always writes to the same
//! shard), so that request threads do not contend on one lock; each shard holds
//! `budget / shards` bytes of records, grown a quarter at a time as it fills. A thread's
//! share is therefore `budget / threads`: a gateway whose load lands on one thread keeps
//! fewer requests.

use super::entry::{Entry, json_line};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

/// Bytes of text a record holds: listener, method, host, route, cipher, request ID, then
/// the path with whatever is left (the rest of a long query string is rarely what one
/// searches for, and it would crowd out other requests).
const TEXT: usize = 448;
/// The strings of a record, in the order they are stored.
const LISTENER: usize = 0;
const METHOD: usize = 1;
const HOST: usize = 2;
const ROUTE: usize = 3;
const CIPHER: usize = 4;
const REQUEST_ID: usize = 5;
const SUBJECT: usize = 6;
const PATH: usize = 7;
/// The most of a subject kept.
const MAX_SUBJECT: usize = 64;
/// What one record costs.
/// The rule ids of a WAF match a record keeps (the first ones, in the rules' order).
const WAF_RULES: usize = 4;
pub(crate) const RECORD: usize = std::mem::size_of::<Record>();
/// Requests answered by one query at most.
pub(crate) const MAX_LIMIT: usize = 1000;

/// One kept request: the access log entry's fields, without a heap allocation.
#[derive(Clone)]
pub(crate) struct Record {
    time: Option<SystemTime>,
    duration: Duration,
    upstream_time: Option<Duration>,
    bytes_in: u64,
    bytes_out: u64,
    trace: Option<(u128, u64)>,
    client: Option<SocketAddr>,
    upstream: Option<SocketAddr>,
    status: u16,
    protocol: &'static str,
    tls_version: &'static str,
    tls_resumed: Option<bool>,
    aborted: bool,
    has_route: bool,
    has_subject: bool,
    auth_refused: Option<&'static str>,
    refused: Option<&'static str>,
    /// `[route.waf]`'s action, anomaly score and reason, and its first rule ids (0: none).
    waf: Option<(&'static str, Option<u32>, Option<&'static str>)>,
    waf_rules: [u32; WAF_RULES],
    /// End of each string in `text` (string `i` is `text[ends[i - 1]..ends[i]]`).
    ends: [u16; 8],
    text: [u8; TEXT],
}

impl Record {
    fn new(e: &Entry) -> Self {
        let mut r = Record {
            time: None,
            duration: Duration::ZERO,
            upstream_time: None,
            bytes_in: 0,
            bytes_out: 0,
            trace: None,
            client: None,
            upstream: None,
            status: 0,
            protocol: "",
            tls_version: "",
            tls_resumed: None,
            aborted: false,
            has_route: false,
            has_subject: false,
            auth_refused: None,
            refused: None,
            waf: None,
            waf_rules: [0; WAF_RULES],
            ends: [0; 8],
            text: [0; TEXT],
        };
        r.fill(e);
        r
    }

    /// Overwrites this record with `e`.
    fn fill(&mut self, e: &Entry) {
        self.time = e.time;
        self.duration = e.duration;
        self.upstream_time = e.upstream_time;
        self.bytes_in = e.bytes_in;
        self.bytes_out = e.bytes_out;
        self.trace = e.trace;
        self.client = e.client;
        self.upstream = e.upstream;
        self.status = e.status;
        self.protocol = e.protocol;
        self.tls_version = e.tls_version;
        self.tls_resumed = e.tls_resumed;
        self.aborted = e.aborted;
        self.has_route = e.route.is_some();
        self.has_subject = e.subject.is_some();
        self.auth_refused = e.auth_refused;
        self.refused = e.refused;
        self.waf = e
            .waf
            .as_ref()
            .map(|w| (w.action, w.anomaly_score, w.reason));
        self.waf_rules = [0; WAF_RULES];
        for (slot, m) in self
            .waf_rules
            .iter_mut()
            .zip(e.waf.iter().flat_map(|w| &w.matches))
        {
            *slot = m.id;
        }
        let subject = e.subject.as_deref().unwrap_or("");
        let subject = &subject[..floor_char_boundary(subject, MAX_SUBJECT)];
        let mut at = 0;
        for (i, s) in [
            &*e.listener,
            &e.method,
            e.host.as_str(),
            e.route.as_deref().unwrap_or(""),
            &e.tls_cipher,
            e.request_id.as_str(),
            subject,
            e.path.as_str(),
        ]
        .into_iter()
        .enumerate()
        {
            let n = floor_char_boundary(s, TEXT - at);
            self.text[at..at + n].copy_from_slice(&s.as_bytes()[..n]);
            at += n;
            self.ends[i] = at as u16;
        }
    }

    fn text(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        // Whole UTF-8 strings were copied in, each cut at a character boundary.
        std::str::from_utf8(&self.text[start..self.ends[i] as usize]).unwrap_or("")
    }

    /// The access log entry again (strings allocated: only for the requests a query answers).
    fn entry(&self) -> Entry {
        Entry {
            time: self.time,
            client: self.client,
            listener: self.text(LISTENER).into(),
            host: self.text(HOST).to_owned(),
            method: self.text(METHOD).to_owned().into(),
            path: self.text(PATH).to_owned(),
            protocol: self.protocol,
            status: self.status,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            duration: self.duration,
            route: self.has_route.then(|| self.text(ROUTE).to_owned()),
            upstream: self.upstream,
            upstream_time: self.upstream_time,
            tls_version: self.tls_version,
            tls_cipher: self.text(CIPHER).to_owned().into(),
            tls_resumed: self.tls_resumed,
            aborted: self.aborted,
            request_id: self.text(REQUEST_ID).to_owned(),
            trace: self.trace,
            subject: self.has_subject.then(|| self.text(SUBJECT).into()),
            auth_refused: self.auth_refused,
            refused: self.refused,
            // Rule ids only: the messages and data stay in the access log.
            waf: self.waf.map(|(action, anomaly_score, reason)| {
                Box::new(crate::access_log::WafRecord {
                    action,
                    anomaly_score,
                    reason,
                    matches: self
                        .waf_rules
                        .iter()
                        .filter(|id| **id != 0)
                        .map(|id| sluice_waf::Match {
                            id: *id,
                            msg: String::new(),
                            data: String::new(),
                            severity: None,
                        })
                        .collect(),
                })
            }),
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn floor_char_boundary(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut n = max;
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// Brings the record at `r` into this core's cache ahead of its write by the next request.
///
/// A full ring's oldest record was written a whole ring ago (megabytes of records since):
/// filling it missed the cache on each of its lines, 1.7-2.2% of a keep-alive HTTP/2
/// request's user time. Asked for at the end of the previous push, the lines arrive while
/// the thread serves other requests.
#[cfg_attr(
    target_arch = "x86_64",
    expect(unsafe_code, reason = "PREFETCHT0 (an intrinsic)")
)]
fn prefetch(r: *const Record) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..RECORD).step_by(64) {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint: it loads nothing into the program and never faults,
        // whatever the address (`wrapping_add` makes none that is UB to compute); SSE,
        // which it needs, is part of every x86_64 CPU.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(r.cast::<i8>().wrapping_add(line)) };
    }
}

/// The recent requests of one gateway.
#[derive(Debug)]
pub struct RequestLog {
    shards: Box<[Mutex<Shard>]>,
    /// Bytes for all shards together.
    budget: AtomicUsize,
    kept: AtomicU64,
    evicted: AtomicU64,
}

/// One thread's ring: `records` grows to `slots`, then `next` (the oldest) is overwritten.
#[derive(Default)]
struct Shard {
    records: Vec<Record>,
    next: usize,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl Shard {
    fn bytes(&self) -> usize {
        self.records.capacity() * RECORD
    }

    /// Keeps `e`; true when it took the place of the oldest record.
    fn push(&mut self, e: &Entry, slots: usize) -> bool {
        let evicted = if self.records.len() < slots {
            if self.records.len() == self.records.capacity() {
                let grow = (self.records.capacity() / 4).max(16);
                self.records
                    .reserve_exact(grow.min(slots - self.records.len()));
            }
            self.records.push(Record::new(e));
            false
        } else {
            self.records[self.next].fill(e);
            self.next = (self.next + 1) % self.records.len();
            true
        };
        // The slot the next request goes to: `next` once the ring is full, else the spare
        // capacity after the last record (a reallocation's slot is not known yet).
        let len = self.records.len();
        if len == slots {
            prefetch(self.records.as_ptr().wrapping_add(self.next));
        } else if len < self.records.capacity() {
            prefetch(self.records.as_ptr().wrapping_add(len));
        }
        evicted
    }

    /// The records oldest first.
    fn in_order(&self) -> impl Iterator<Item = &Record> {
        let (newer, older) = self.records.split_at(self.next);
        older.iter().chain(newer)
    }

    /// Keeps the newest `slots` records in memory of that size.
    fn shrink(&mut self, slots: usize) -> u64 {
        if self.records.len() <= slots && self.records.capacity() <= slots.max(16) {
            return 0;
        }
        let evicted = self.records.len().saturating_sub(slots);
        let mut kept: Vec<Record> = Vec::with_capacity(slots);
        kept.extend(self.in_order().skip(evicted).cloned());
        self.records = kept;
        self.next = 0;
        evicted as u64
    }
}

thread_local! {
    /// This thread's shard (round robin over the threads that log).
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl RequestLog {
    /// A log holding at most `budget` bytes; 0 keeps nothing.
    pub fn new(budget: usize) -> Self {
        Self::with_shards(
            budget,
            std::thread::available_parallelism().map_or(4, |n| n.get().clamp(1, 64)),
        )
    }

    fn with_shards(budget: usize, shards: usize) -> Self {
        RequestLog {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            budget: AtomicUsize::new(budget),
            kept: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// Records each shard holds at most.
    fn slots(&self) -> usize {
        self.budget.load(Ordering::Relaxed) / self.shards.len() / RECORD
    }

    /// Changes the bound (a reload); a smaller one evicts the oldest records now.
    pub fn set_budget(&self, budget: usize) {
        self.budget.store(budget, Ordering::Relaxed);
        let slots = self.slots();
        for shard in &*self.shards {
            let evicted = shard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .shrink(slots);
            self.evicted.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// Keeps `e`, in place of its shard's oldest record when the shard is full.
    pub(crate) fn push(&self, e: &Entry) {
        let slots = self.slots();
        if slots == 0 {
            return;
        }
        let at = SHARD.with(|s| *s) % self.shards.len();
        let evicted = self.shards[at]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e, slots);
        self.kept.fetch_add(1, Ordering::Relaxed);
        if evicted {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How much is kept now.
    pub fn stats(&self) -> RequestLogStats {
        let mut st = RequestLogStats {
            budget: self.budget.load(Ordering::Relaxed),
            kept_total: self.kept.load(Ordering::Relaxed),
            evicted_total: self.evicted.load(Ordering::Relaxed),
            ..RequestLogStats::default()
        };
        for shard in &*self.shards {
            let s = shard.lock().unwrap_or_else(|e| e.into_inner());
            st.entries += s.records.len();
            st.bytes += s.bytes();
        }
        st
    }

    /// The requests `q` selects, newest (or slowest) first, as JSON objects (the access log's
    /// JSON line, without its newline), and how many matched in all.
    pub fn query(&self, q: &Query) -> (Vec<String>, usize) {
        let limit = q.limit();
        let mut matched = 0;
        let mut top: Vec<(u128, String)> = Vec::new();
        for shard in &*self.shards {
            let s = shard.lock().unwrap_or_else(|e| e.into_inner());
            let mut hits: Vec<(u128, usize)> = s
                .records
                .iter()
                .enumerate()
                .filter(|(_, r)| q.matches(r))
                .map(|(i, r)| (q.order_key(r), i))
                .collect();
            matched += hits.len();
            if hits.len() > limit {
                hits.select_nth_unstable_by(limit - 1, |a, b| b.0.cmp(&a.0));
                hits.truncate(limit);
            }
            top.extend(hits.into_iter().map(|(key, i)| {
                let mut line = json_line(&s.records[i].entry());
                line.pop();
                (key, line)
            }));
        }
        top.sort_unstable_by_key(|t| std::cmp::Reverse(t.0));
        top.truncate(limit);
        (top.into_iter().map(|(_, l)| l).collect(), matched)
    }
}

/// The request log's size and counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct RequestLogStats {
    /// Entries kept now.
    pub entries: usize,
    /// Bytes they take (slots and strings).
    pub bytes: usize,
    /// The bound.
    pub budget: usize,
    /// Entries ever kept.
    pub kept_total: u64,
    /// Entries evicted to make room.
    pub evicted_total: u64,
}

/// A status filter: an exact code or a class pattern such as `5xx` or `50x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatusMatch {
    /// The code's digits, `None` where the pattern has `x`.
    digits: [Option<u8>; 3],
}

impl StatusMatch {
    fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 3 || !b[0].is_ascii_digit() {
            return None;
        }
        let mut digits = [None; 3];
        for (d, &c) in digits.iter_mut().zip(b) {
            *d = match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'x' | b'X' => None,
                _ => return None,
            };
        }
        Some(StatusMatch { digits })
    }

    fn matches(&self, status: u16) -> bool {
        let got = [status / 100, status / 10 % 10, status % 10];
        status < 1000
            && self
                .digits
                .iter()
                .zip(got)
                .all(|(want, got)| want.is_none_or(|w| u16::from(w) == got))
    }
}

/// A search of the request log (`/api/v1/requests?…`).
#[derive(Debug, Clone, Default)]
pub struct Query {
    status: Vec<StatusMatch>,
    route: Option<String>,
    host: Option<String>,
    method: Option<String>,
    path_prefix: Option<String>,
    since: Option<SystemTime>,
    trace_id: Option<u128>,
    request_id: Option<String>,
    subject: Option<String>,
    /// `auth_refused`: requests `[route.auth]` refused (for this reason, unless `any`).
    auth_refused: Option<String>,
    /// `waf`: requests `[route.waf]` acted on (`block`, `detect`, `open`, `closed`, `any`).
    waf: Option<String>,
    /// `rule_id`: requests a WAF rule matched.
    rule_id: Option<u32>,
    min_duration: Option<Duration>,
    slowest: bool,
    limit: usize,
}

impl Query {
    /// Parses a query string: `status` (`503`, `5xx`, `4xx,5xx`), `route`, `host`, `method`,
    /// `path` (a prefix), `since` (`10m`, or an RFC 3339 time), `trace_id`, `request_id`,
    /// `subject`, `auth_refused` (a reason, or `any`), `waf` (`block`, `detect`, `open`,
    /// `closed` or `any`), `rule_id` (among a request's first four matches), `min_ms`, `sort` (`recent`, the default, or `slowest`) and `limit` (default 100, at
    /// most 1000). An error names the parameter and what it accepts.
    pub fn parse(qs: &str, now: SystemTime) -> Result<Query, String> {
        let mut q = Query {
            limit: 100,
            ..Query::default()
        };
        for pair in qs.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v =
                percent_decode(v).ok_or_else(|| format!("`{k}` is not percent-encoded UTF-8"))?;
            if v.is_empty() {
                continue;
            }
            match k {
                "status" => {
                    for s in v.split(',') {
                        q.status.push(StatusMatch::parse(s.trim()).ok_or_else(|| {
                            format!("status `{s}` is not a code or class: use 503, 5xx or 50x, comma-separated")
                        })?);
                    }
                }
                "route" => q.route = Some(v),
                "host" => q.host = Some(v.to_ascii_lowercase()),
                "method" => q.method = Some(v.to_ascii_uppercase()),
                "path" => q.path_prefix = Some(v),
                "since" => {
                    q.since = Some(match sluice_config::parse_duration(&v) {
                        Ok(ago) => now.checked_sub(ago).unwrap_or(SystemTime::UNIX_EPOCH),
                        Err(_) => humantime::parse_rfc3339_weak(&v).map_err(|_| {
                            format!(
                                "since `{v}` is neither a duration (10m, 2h) nor an RFC 3339 time"
                            )
                        })?,
                    })
                }
                "trace_id" => {
                    q.trace_id = Some(
                        u128::from_str_radix(&v, 16)
                            .ok()
                            .filter(|_| v.len() == 32)
                            .ok_or_else(|| format!("trace_id `{v}` is not 32 hex digits"))?,
                    )
                }
                "request_id" => q.request_id = Some(v),
                "subject" => q.subject = Some(v),
                "auth_refused" => q.auth_refused = Some(v),
                "waf" => q.waf = Some(v),
                "rule_id" => {
                    q.rule_id = Some(
                        v.parse()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| format!("rule_id `{v}` is not a rule id"))?,
                    )
                }
                "min_ms" => {
                    q.min_duration = Some(Duration::from_millis(v.parse().map_err(|_| {
                        format!("min_ms `{v}` is not a whole number of milliseconds")
                    })?))
                }
                "sort" => {
                    q.slowest = match v.as_str() {
                        "recent" => false,
                        "slowest" => true,
                        _ => return Err(format!("sort `{v}` is not known: use recent or slowest")),
                    }
                }
                "limit" => {
                    q.limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| format!("limit `{v}` is not 1 to {MAX_LIMIT}"))?
                }
                _ => {
                    return Err(format!(
                        "unknown parameter `{k}`: use status, route, host, method, path, since, trace_id, request_id, subject, auth_refused, waf, rule_id, min_ms, sort or limit"
                    ));
                }
            }
        }
        Ok(q)
    }

    /// Requests answered at most.
    pub fn limit(&self) -> usize {
        self.limit.clamp(1, MAX_LIMIT)
    }

    /// Whether the slowest come first (else the newest).
    pub fn slowest(&self) -> bool {
        self.slowest
    }

    /// Newest (or slowest) first.
    fn order_key(&self, r: &Record) -> u128 {
        if self.slowest {
            r.duration.as_nanos()
        } else {
            r.time
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos())
        }
    }

    fn matches(&self, r: &Record) -> bool {
        (self.status.is_empty() || self.status.iter().any(|s| s.matches(r.status)))
            && self
                .route
                .as_ref()
                .is_none_or(|want| r.has_route && r.text(ROUTE) == want)
            && self
                .host
                .as_ref()
                .is_none_or(|h| r.text(HOST).eq_ignore_ascii_case(h))
            && self.method.as_ref().is_none_or(|m| r.text(METHOD) == m)
            && self
                .path_prefix
                .as_ref()
                .is_none_or(|p| r.text(PATH).starts_with(p.as_str()))
            && self
                .since
                .is_none_or(|since| r.time.is_some_and(|t| t >= since))
            && self
                .trace_id
                .is_none_or(|t| r.trace.is_some_and(|(id, _)| id == t))
            && self
                .request_id
                .as_ref()
                .is_none_or(|id| r.text(REQUEST_ID) == id)
            && self
                .subject
                .as_ref()
                .is_none_or(|s| r.has_subject && r.text(SUBJECT) == s)
            && self.auth_refused.as_ref().is_none_or(|want| {
                r.auth_refused
                    .is_some_and(|why| want == "any" || why == want)
            })
            && self.waf.as_ref().is_none_or(|want| {
                r.waf
                    .is_some_and(|(action, _, _)| want == "any" || action == want)
            })
            && self.rule_id.is_none_or(|id| r.waf_rules.contains(&id))
            && self.min_duration.is_none_or(|d| r.duration >= d)
    }
}

/// `%XX` and `+` decoded (a query string's value); `None` for broken escapes or non-UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64, status: u16, route: &str) -> Entry {
        Entry {
            time: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + i)),
            listener: "https".into(),
            host: "example.com".into(),
            method: "GET".into(),
            path: format!("/items/{i}"),
            protocol: "HTTP/1.1",
            status,
            duration: Duration::from_micros(i % 977),
            route: Some(route.into()),
            request_id: format!("{i:032x}"),
            ..Entry::default()
        }
    }

    fn parse(q: &str) -> Query {
        Query::parse(
            q,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + 100_000),
        )
        .unwrap()
    }

    fn paths(found: &[String]) -> Vec<String> {
        found
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["path"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    #[test]
    fn the_bound_holds_under_100000_requests_and_the_newest_are_kept() {
        let budget = 1 << 20;
        let log = RequestLog::with_shards(budget, 1);
        for i in 0..100_000 {
            log.push(&entry(i, 200, "api"));
            if i % 10_000 == 0 {
                assert!(log.stats().bytes <= budget, "{:?}", log.stats());
            }
        }
        let st = log.stats();
        assert!(st.bytes <= budget, "{st:?}");
        // Most of the budget is used: a bound that keeps too little is no log at all.
        assert!(st.bytes > budget / 2, "{st:?}");
        assert_eq!(st.kept_total, 100_000);
        assert_eq!(st.evicted_total + st.entries as u64, 100_000);
        let (found, matched) = log.query(&parse("limit=3"));
        assert_eq!(matched, st.entries);
        assert_eq!(
            paths(&found),
            ["/items/99999", "/items/99998", "/items/99997"]
        );
    }

    #[test]
    fn prefetching_any_address_never_faults() {
        // `push` asks for the slot after the last record: past the allocation when the ring
        // is about to grow. A prefetch that faulted, or one compiled as a load, fails here.
        prefetch(std::ptr::null());
        prefetch(std::ptr::dangling());
        prefetch(std::ptr::without_provenance(usize::MAX - 64));
        let one: Vec<Record> = Vec::with_capacity(1);
        prefetch(one.as_ptr().wrapping_add(1));
        // And the ring still holds what went in, through growth and wrap-around.
        let log = RequestLog::with_shards(40 * RECORD, 1);
        for i in 0..100 {
            log.push(&entry(i, 200, "api"));
        }
        let (found, matched) = log.query(&parse("limit=2"));
        assert_eq!(matched, 40);
        assert_eq!(paths(&found), ["/items/99", "/items/98"]);
    }

    #[test]
    fn a_record_gives_back_the_entry_it_was_made_of() {
        let e = Entry {
            client: Some("[2001:db8::7]:443".parse().unwrap()),
            upstream: Some("10.0.0.9:8080".parse().unwrap()),
            upstream_time: Some(Duration::from_micros(1500)),
            bytes_in: 12,
            bytes_out: 3456,
            tls_version: "TLSv1.3",
            tls_cipher: "TLS_AES_128_GCM_SHA256".into(),
            tls_resumed: Some(true),
            aborted: true,
            trace: Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0xab)),
            listener: "ünïcode".into(),
            ..entry(42, 503, "api")
        };
        assert_eq!(json_line(&Record::new(&e).entry()), json_line(&e));
        let bare = Entry {
            route: None,
            ..entry(1, 200, "")
        };
        let back = Record::new(&bare).entry();
        assert_eq!(back.route, None);
        assert_eq!(json_line(&back), json_line(&bare));
        // Overwriting a record leaves nothing of the one before.
        let mut r = Record::new(&e);
        r.fill(&bare);
        assert_eq!(json_line(&r.entry()), json_line(&bare));
    }

    #[test]
    fn threads_pushing_at_once_stay_within_the_bound_together() {
        let budget = 512 << 10;
        let log = std::sync::Arc::new(RequestLog::with_shards(budget, 4));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        log.push(&entry(t * 100_000 + i, 200, "api"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let st = log.stats();
        assert!(st.bytes <= budget, "{st:?}");
        assert_eq!(st.kept_total, 120_000);
        assert_eq!(st.evicted_total + st.entries as u64, 120_000);
    }

    #[test]
    fn a_smaller_budget_evicts_at_once_and_zero_keeps_nothing() {
        let log = RequestLog::new(1 << 20);
        for i in 0..5_000 {
            log.push(&entry(i, 200, "api"));
        }
        log.set_budget(64 << 10);
        assert!(log.stats().bytes <= 64 << 10, "{:?}", log.stats());
        assert!(log.stats().entries > 0);
        log.set_budget(0);
        log.push(&entry(1, 200, "api"));
        assert_eq!(log.stats().entries, 0);
    }

    #[test]
    fn long_paths_are_cut_at_a_character_boundary_to_fit_the_record() {
        let log = RequestLog::new(1 << 20);
        let mut e = entry(1, 200, "api");
        e.path = format!("/{}", "é".repeat(2000));
        log.push(&e);
        let (found, _) = log.query(&parse(""));
        let p = &paths(&found)[0];
        // The other strings take 54 bytes ("https", "GET", "example.com", "api", the ID).
        let room = TEXT - 54;
        assert!(p.len() <= room && p.len() >= room - 1, "{}", p.len());
        assert!(p.starts_with("/éé"));
    }

    #[test]
    fn queries_filter_by_subject_and_refusal() {
        let log = RequestLog::new(1 << 20);
        for i in 0..30 {
            let mut e = entry(i, 200, "api");
            match i % 3 {
                0 => e.subject = Some(format!("user{}", i % 2).into()),
                1 => {
                    e.status = 401;
                    e.auth_refused = Some(if i % 2 == 0 { "jwt_expired" } else { "missing" });
                }
                _ => {}
            }
            log.push(&e);
        }
        assert_eq!(log.query(&parse("subject=user0")).1, 5);
        assert_eq!(log.query(&parse("auth_refused=any")).1, 10);
        assert_eq!(log.query(&parse("auth_refused=jwt_expired")).1, 5);
        let (found, _) = log.query(&parse("subject=user1&limit=1"));
        assert_eq!(found.len(), 1);
        let json: serde_json::Value = serde_json::from_str(&found[0]).unwrap();
        assert_eq!(json["subject"], "user1");
    }

    #[test]
    fn queries_filter_by_status_route_time_trace_and_sort_by_duration() {
        let log = RequestLog::new(4 << 20);
        for i in 0..1000 {
            let status = match i % 10 {
                0 => 503,
                1 => 502,
                2 => 404,
                _ => 200,
            };
            let mut e = entry(i, status, if i % 2 == 0 { "api" } else { "web" });
            if i == 777 {
                e.trace = Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 7));
            }
            log.push(&e);
        }
        assert_eq!(log.query(&parse("status=5xx&limit=1000")).1, 200);
        assert_eq!(log.query(&parse("status=503")).1, 100);
        assert_eq!(log.query(&parse("status=50x,404")).1, 300);
        // Even i are api, and i % 10 == 0 are even.
        assert_eq!(log.query(&parse("status=503&route=api")).1, 100);
        assert_eq!(log.query(&parse("status=502&route=api")).1, 0);
        // `since` is relative to now (1,800,100,000 s): the last 99,001 s hold i >= 999.
        assert_eq!(log.query(&parse("since=99001s")).1, 1);
        let (found, n) = log.query(&parse("trace_id=4bf92f3577b34da6a3ce929d0e0e4736"));
        assert_eq!((n, paths(&found)), (1, vec!["/items/777".to_owned()]));
        assert_eq!(log.query(&parse("path=/items/99")).1, 11);
        let (found, _) = log.query(&parse("sort=slowest&limit=2"));
        // Durations are i % 977 µs: 976 µs is the longest (i = 976).
        assert_eq!(paths(&found)[0], "/items/976");
        let (found, _) = log.query(&parse("min_ms=1&route=web"));
        assert!(found.is_empty());
        assert_eq!(log.query(&parse(&format!("request_id={:032x}", 5))).1, 1);
    }

    #[test]
    fn bad_queries_name_the_parameter_and_what_it_takes() {
        let now = SystemTime::now();
        for (q, word) in [
            ("status=5x", "status"),
            ("status=abc", "status"),
            ("since=yesterday", "since"),
            ("trace_id=xyz", "trace_id"),
            ("limit=0", "limit"),
            ("limit=5000", "limit"),
            ("sort=oldest", "sort"),
            ("min_ms=-1", "min_ms"),
            ("colour=red", "unknown parameter"),
            ("route=%zz", "route"),
        ] {
            let e = Query::parse(q, now).unwrap_err();
            assert!(e.contains(word), "{q}: {e}");
        }
        let q = Query::parse("route=a%20b&host=Example.COM&method=get", now).unwrap();
        assert_eq!(q.route.as_deref(), Some("a b"));
        assert_eq!(q.host.as_deref(), Some("example.com"));
        assert_eq!(q.method.as_deref(), Some("GET"));
        assert!(StatusMatch::parse("5xx").unwrap().matches(599));
        assert!(!StatusMatch::parse("5xx").unwrap().matches(499));
        assert!(StatusMatch::parse("x00").is_none());
    }
}
