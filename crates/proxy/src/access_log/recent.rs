//! The request log: the most recent requests kept in memory, bounded by bytes, for
//! `/api/v1/requests` ("which requests to `api` failed in the last ten minutes?", "the
//! slowest ones", "the request of this trace") without a log store.
//!
//! A finished request's access log entry is moved here (no copy): the strings it already
//! owns are kept until the entry is evicted. The log is split in shards, one per worker
//! thread (a thread always pushes to the same shard), so that request threads do not
//! contend on one lock; each shard holds `budget / shards` bytes, counted as its slots
//! (the deque's capacity, which is what it allocates) plus each entry's strings, and evicts
//! its oldest entries before it would grow past that.

use super::entry::{Entry, json_line};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

/// A kept path is cut to this many bytes (the rest of a long query string is rarely what
/// one searches for, and it would crowd out other requests).
const MAX_PATH: usize = 1024;
/// What one slot of a shard's deque costs.
const SLOT: usize = std::mem::size_of::<Entry>();
/// Requests answered by one query at most.
pub(crate) const MAX_LIMIT: usize = 1000;

/// The recent requests of one gateway.
#[derive(Debug)]
pub struct RequestLog {
    shards: Box<[Mutex<Shard>]>,
    /// Bytes for all shards together.
    budget: AtomicUsize,
    kept: AtomicU64,
    evicted: AtomicU64,
}

#[derive(Debug, Default)]
struct Shard {
    entries: VecDeque<Entry>,
    heap: usize,
}

impl Shard {
    fn bytes(&self) -> usize {
        self.heap + self.entries.capacity() * SLOT
    }

    /// Evicts the oldest entries until `need` more heap bytes (and a slot) fit in `budget`;
    /// false when the entry cannot fit even alone. Returns the count evicted through `evicted`.
    fn make_room(&mut self, need: usize, budget: usize, evicted: &mut u64) -> bool {
        loop {
            let cap = self.entries.capacity();
            let slots = if self.entries.len() == cap {
                cap + grow_by(cap)
            } else {
                cap
            };
            if self.heap + need + slots * SLOT <= budget {
                return true;
            }
            match self.entries.pop_front() {
                Some(old) => {
                    self.heap -= old.heap_bytes();
                    *evicted += 1;
                }
                None => return false,
            }
        }
    }
}

/// Slots a full shard adds: a quarter more (not the double `VecDeque` would take), so that
/// a shard near its bound does not leave half of it unused.
fn grow_by(cap: usize) -> usize {
    (cap / 4).max(16)
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

    fn shard_budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed) / self.shards.len()
    }

    /// Changes the bound (a reload); a smaller one evicts the oldest entries now.
    pub fn set_budget(&self, budget: usize) {
        self.budget.store(budget, Ordering::Relaxed);
        let per = self.shard_budget();
        for shard in &*self.shards {
            let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
            let mut evicted = 0;
            while s.bytes() > per {
                match s.entries.pop_front() {
                    Some(old) => {
                        s.heap -= old.heap_bytes();
                        evicted += 1;
                    }
                    None => break,
                }
                if s.entries.len() <= s.entries.capacity() / 2 {
                    s.entries.shrink_to_fit();
                }
            }
            self.evicted.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// Keeps `e`, evicting the oldest entries of its shard to make room.
    pub(crate) fn push(&self, mut e: Entry) {
        let per = self.shard_budget();
        if per == 0 {
            return;
        }
        if e.path.len() > MAX_PATH {
            let mut cut = MAX_PATH;
            while !e.path.is_char_boundary(cut) {
                cut -= 1;
            }
            e.path.truncate(cut);
            e.path.shrink_to_fit();
        }
        let need = e.heap_bytes();
        let at = SHARD.with(|s| *s) % self.shards.len();
        let mut evicted = 0;
        let mut shard = self.shards[at].lock().unwrap_or_else(|e| e.into_inner());
        if shard.make_room(need, per, &mut evicted) {
            if shard.entries.len() == shard.entries.capacity() {
                let grow = grow_by(shard.entries.capacity());
                shard.entries.reserve_exact(grow);
            }
            shard.heap += need;
            shard.entries.push_back(e);
            self.kept.fetch_add(1, Ordering::Relaxed);
        }
        drop(shard);
        if evicted > 0 {
            self.evicted.fetch_add(evicted, Ordering::Relaxed);
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
            st.entries += s.entries.len();
            st.bytes += s.bytes();
        }
        st
    }

    /// The requests `q` selects, newest (or slowest) first, as JSON objects (the access log's
    /// JSON line, without its newline), and how many matched in all.
    pub fn query(&self, q: &Query) -> (Vec<String>, usize) {
        let limit = q.limit.clamp(1, MAX_LIMIT);
        let mut matched = 0;
        let mut top: Vec<(u128, String)> = Vec::new();
        for shard in &*self.shards {
            let s = shard.lock().unwrap_or_else(|e| e.into_inner());
            let mut hits: Vec<(u128, usize)> = s
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| q.matches(e))
                .map(|(i, e)| (q.order_key(e), i))
                .collect();
            matched += hits.len();
            if hits.len() > limit {
                hits.select_nth_unstable_by(limit - 1, |a, b| b.0.cmp(&a.0));
                hits.truncate(limit);
            }
            top.extend(hits.into_iter().map(|(key, i)| {
                let mut line = json_line(&s.entries[i]);
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
    min_duration: Option<Duration>,
    slowest: bool,
    limit: usize,
}

impl Query {
    /// Parses a query string: `status` (`503`, `5xx`, `4xx,5xx`), `route`, `host`, `method`,
    /// `path` (a prefix), `since` (`10m`, or an RFC 3339 time), `trace_id`, `request_id`,
    /// `min_ms`, `sort` (`recent`, the default, or `slowest`) and `limit` (default 100, at
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
                        "unknown parameter `{k}`: use status, route, host, method, path, since, trace_id, request_id, min_ms, sort or limit"
                    ));
                }
            }
        }
        Ok(q)
    }

    /// Newest (or slowest) first.
    fn order_key(&self, e: &Entry) -> u128 {
        if self.slowest {
            e.duration.as_nanos()
        } else {
            e.time
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos())
        }
    }

    fn matches(&self, e: &Entry) -> bool {
        (self.status.is_empty() || self.status.iter().any(|s| s.matches(e.status)))
            && self
                .route
                .as_ref()
                .is_none_or(|r| e.route.as_ref() == Some(r))
            && self
                .host
                .as_ref()
                .is_none_or(|h| e.host.eq_ignore_ascii_case(h))
            && self.method.as_ref().is_none_or(|m| e.method == *m)
            && self
                .path_prefix
                .as_ref()
                .is_none_or(|p| e.path.starts_with(p.as_str()))
            && self
                .since
                .is_none_or(|since| e.time.is_some_and(|t| t >= since))
            && self
                .trace_id
                .is_none_or(|t| e.trace.is_some_and(|(id, _)| id == t))
            && self.request_id.as_ref().is_none_or(|r| e.request_id == *r)
            && self.min_duration.is_none_or(|d| e.duration >= d)
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
            log.push(entry(i, 200, "api"));
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
    fn threads_pushing_at_once_stay_within_the_bound_together() {
        let budget = 512 << 10;
        let log = std::sync::Arc::new(RequestLog::with_shards(budget, 4));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        log.push(entry(t * 100_000 + i, 200, "api"));
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
            log.push(entry(i, 200, "api"));
        }
        log.set_budget(64 << 10);
        assert!(log.stats().bytes <= 64 << 10, "{:?}", log.stats());
        assert!(log.stats().entries > 0);
        log.set_budget(0);
        log.push(entry(1, 200, "api"));
        assert_eq!(log.stats().entries, 0);
    }

    #[test]
    fn long_paths_are_cut_at_a_character_boundary() {
        let log = RequestLog::new(1 << 20);
        let mut e = entry(1, 200, "api");
        e.path = format!("/{}", "é".repeat(2000));
        log.push(e);
        let (found, _) = log.query(&parse(""));
        let p = &paths(&found)[0];
        assert!(p.len() <= MAX_PATH && p.len() > MAX_PATH - 4, "{}", p.len());
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
            log.push(e);
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
