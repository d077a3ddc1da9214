//! Load balancing across the servers of one upstream group, with passive health.
//!
//! Every algorithm costs the same whatever the group's size, except NGINX's smooth weighted
//! round robin, which is a pass over the group by design (as in NGINX): round robin steps a
//! counter, `least_conn` and `peak_ewma` compare two sampled servers (the power of two
//! choices; groups of up to [`SCAN_LIMIT`] servers are scanned exactly), `ip_hash` and
//! `consistent_hash` index a table. A server that is down or already tried is stepped over;
//! only when none is left does a pick fall back to any untried server (fail open: a stale
//! mark is better than a certain 502).

mod maglev;

use maglev::Maglev;
use sluice_config::Balance;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::SystemTime;

/// Groups up to this size get an exact scan for `least_conn`; larger ones two samples.
const SCAN_LIMIT: usize = 16;

/// Peak-EWMA decay time: a sample's weight halves in about 7 s (linkerd's default of 10 s).
const EWMA_TAU_NS: f64 = 10e9;

/// Run-time state of one upstream server.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    /// Its name as configured (the consistent hash's identity for it).
    pub(crate) name: String,
    pub(crate) weight: u32,
    /// Requests in flight (least_conn, bounded load, peak_ewma).
    pub(crate) active: AtomicUsize,
    /// Consecutive failures since the last success or mark-down.
    fails: AtomicU32,
    /// Skipped until this time (ms on the group's clock).
    down_until_ms: AtomicU64,
    /// Peak-EWMA latency estimate in ns (`f64` bits) and when it was last updated (ns on the
    /// group's clock).
    ewma_ns: AtomicU64,
    ewma_at_ns: AtomicU64,
    /// The active health checks' verdict (true until checks say otherwise).
    checked_up: AtomicBool,
    /// Outlier ejection from live traffic.
    pub(crate) outlier: crate::upstreams::outlier::OutlierState,
    /// Why the checks last changed their verdict, and when (for the health endpoint).
    check_detail: Mutex<(String, SystemTime)>,
}

/// One server's health as the admin API shows it.
#[derive(Debug, Clone)]
pub(crate) struct ServerHealth {
    pub(crate) up: bool,
    pub(crate) reason: String,
    pub(crate) since: SystemTime,
}

impl Server {
    #[cfg(test)]
    pub(crate) fn new(addr: SocketAddr, weight: u32) -> Self {
        Server::named(addr.to_string(), addr, weight)
    }

    pub(crate) fn named(name: String, addr: SocketAddr, weight: u32) -> Self {
        Server {
            addr,
            name,
            weight,
            active: AtomicUsize::new(0),
            fails: AtomicU32::new(0),
            down_until_ms: AtomicU64::new(0),
            ewma_ns: AtomicU64::new(0f64.to_bits()),
            ewma_at_ns: AtomicU64::new(0),
            checked_up: AtomicBool::new(true),
            outlier: Default::default(),
            check_detail: Mutex::new(("in use".into(), SystemTime::now())),
        }
    }

    pub(crate) fn available(&self, now_ms: u64) -> bool {
        self.checked_up.load(Ordering::Relaxed)
            && self.down_until_ms.load(Ordering::Relaxed) <= now_ms
            && !self.outlier.ejected(now_ms)
    }

    /// Takes over what `old` (the same address in the group a DNS change replaced) knew;
    /// not its requests in flight, which end on `old`.
    pub(crate) fn carry_from(&self, old: &Server) {
        let copy = |to: &AtomicU64, from: &AtomicU64| {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed)
        };
        self.fails
            .store(old.fails.load(Ordering::Relaxed), Ordering::Relaxed);
        copy(&self.down_until_ms, &old.down_until_ms);
        copy(&self.ewma_ns, &old.ewma_ns);
        copy(&self.ewma_at_ns, &old.ewma_at_ns);
        self.checked_up.store(old.checked_up(), Ordering::Relaxed);
        self.outlier.carry_from(&old.outlier);
        let detail = old
            .check_detail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        *self.check_detail.lock().unwrap_or_else(|e| e.into_inner()) = detail;
    }

    pub(crate) fn checked_up(&self) -> bool {
        self.checked_up.load(Ordering::Relaxed)
    }

    /// The health checker's verdict changed.
    pub(crate) fn set_checked(&self, up: bool, reason: String) {
        *self.check_detail.lock().unwrap_or_else(|e| e.into_inner()) = (reason, SystemTime::now());
        self.checked_up.store(up, Ordering::Relaxed);
    }

    /// A down server failed another check: keep the latest reason, not the time it went down.
    pub(crate) fn note_reason(&self, reason: String) {
        self.check_detail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0 = reason;
    }

    /// Health for the admin API: active checks first, then passive marks (`max_fails`).
    /// `fail_timeout_ms` dates a passive mark; `to_system` turns the group's clock into
    /// wall-clock time.
    pub(crate) fn health(
        &self,
        now_ms: u64,
        fail_timeout_ms: u64,
        to_system: impl Fn(u64) -> SystemTime,
    ) -> ServerHealth {
        let (reason, since) = self
            .check_detail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if !self.checked_up() {
            return ServerHealth {
                up: false,
                reason: format!("health check: {reason}"),
                since,
            };
        }
        if let Some((at, until, nth)) = self.outlier.current(now_ms) {
            return ServerHealth {
                up: false,
                reason: format!(
                    "outlier: failed live traffic repeatedly; ejection #{nth}, {} ms more",
                    until - now_ms
                ),
                since: to_system(at),
            };
        }
        let until = self.down_until_ms.load(Ordering::Relaxed);
        if until > now_ms {
            return ServerHealth {
                up: false,
                reason: format!(
                    "passive: failed max_fails times; skipped for {} ms more",
                    until - now_ms
                ),
                since: to_system(until.saturating_sub(fail_timeout_ms)),
            };
        }
        ServerHealth {
            up: true,
            reason,
            since,
        }
    }

    /// Records a failure; after `max_fails` of them the server is skipped for `fail_timeout_ms`.
    /// Returns whether this failure marked it down.
    pub(crate) fn failed(&self, now_ms: u64, max_fails: u32, fail_timeout_ms: u64) -> bool {
        let fails = self.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if fails >= max_fails {
            self.fails.store(0, Ordering::Relaxed);
            self.down_until_ms
                .store(now_ms + fail_timeout_ms, Ordering::Relaxed);
            return true;
        }
        false
    }

    pub(crate) fn succeeded(&self) {
        if self.fails.load(Ordering::Relaxed) != 0 {
            self.fails.store(0, Ordering::Relaxed);
        }
    }

    /// The latency estimate at `now_ns`, decayed since its last sample: a server that has not
    /// answered for a while looks faster again, so it is tried again (linkerd's behaviour).
    fn ewma_at(&self, now_ns: u64) -> f64 {
        let estimate = f64::from_bits(self.ewma_ns.load(Ordering::Relaxed));
        let at = self.ewma_at_ns.load(Ordering::Relaxed);
        estimate * decay(now_ns.saturating_sub(at))
    }

    /// Feeds one response time: a slower sample replaces the estimate at once (the peak), a
    /// faster one is averaged in. Concurrent updates may lose one sample; the estimate stays
    /// a recent latency, which is all the balancer needs.
    pub(crate) fn observe_latency(&self, now_ns: u64, rtt_ns: u64) {
        let rtt = rtt_ns as f64;
        let at = self.ewma_at_ns.load(Ordering::Relaxed);
        let elapsed = now_ns.saturating_sub(at);
        let prev = f64::from_bits(self.ewma_ns.load(Ordering::Relaxed));
        let next = if rtt > prev {
            rtt
        } else {
            let w = decay(elapsed);
            prev * w + rtt * (1.0 - w)
        };
        self.ewma_ns.store(next.to_bits(), Ordering::Relaxed);
        self.ewma_at_ns.store(now_ns, Ordering::Relaxed);
    }
}

fn decay(elapsed_ns: u64) -> f64 {
    (-(elapsed_ns as f64) / EWMA_TAU_NS).exp()
}

/// What a pick knows about the request and the group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PickCx<'a> {
    /// The group's clock, in ms (down marks) and ns (latency estimates: peak EWMA only, 0
    /// for the others).
    pub(crate) now_ms: u64,
    pub(crate) now_ns: u64,
    /// The request's hash key (client address for `ip_hash`; `hash_on` for
    /// `consistent_hash`); unused by the others.
    pub(crate) key: u64,
    /// Servers this request already tried.
    pub(crate) tried: &'a [usize],
    /// Requests in flight in the whole group (bounded load).
    pub(crate) in_flight: usize,
}

impl PickCx<'_> {
    fn usable(&self, servers: &[Server], i: usize) -> bool {
        !self.tried.contains(&i) && servers[i].available(self.now_ms)
    }
}

/// A balancing algorithm with its state.
#[derive(Debug)]
pub(crate) enum Balancer {
    RoundRobin(AtomicUsize),
    /// NGINX's smooth weighted round robin: current weights per server.
    Weighted(Mutex<Vec<i64>>),
    /// Rotating start so that ties spread in exact scans.
    LeastConn(AtomicUsize),
    IpHash,
    ConsistentHash {
        table: Maglev,
        /// `None`: unbounded.
        factor: Option<f64>,
        total_weight: u64,
    },
    /// Rotating start so that ties spread in exact scans.
    PeakEwma(AtomicUsize),
}

impl Balancer {
    pub(crate) fn new(kind: Balance, servers: &[Server], factor: Option<f64>) -> Self {
        match kind {
            Balance::RoundRobin => Balancer::RoundRobin(AtomicUsize::new(0)),
            Balance::WeightedRoundRobin => Balancer::Weighted(Mutex::new(vec![0; servers.len()])),
            Balance::LeastConn => Balancer::LeastConn(AtomicUsize::new(0)),
            Balance::IpHash => Balancer::IpHash,
            Balance::ConsistentHash => {
                let names: Vec<(&str, u32)> = servers
                    .iter()
                    .map(|s| (s.name.as_str(), s.weight))
                    .collect();
                Balancer::ConsistentHash {
                    table: Maglev::new(&names),
                    factor,
                    total_weight: servers.iter().map(|s| u64::from(s.weight)).sum(),
                }
            }
            Balance::PeakEwma => Balancer::PeakEwma(AtomicUsize::new(0)),
        }
    }

    /// Picks a server for a request, never one in `cx.tried`. Servers marked down are
    /// skipped while any other is left; when all are down one is tried anyway.
    pub(crate) fn pick(&self, servers: &[Server], cx: &PickCx<'_>) -> Option<usize> {
        let n = servers.len();
        if n == 0 {
            return None;
        }
        let picked = match self {
            Balancer::RoundRobin(next) => {
                let start = next.fetch_add(1, Ordering::Relaxed);
                (0..n)
                    .map(|k| (start + k) % n)
                    .find(|&i| cx.usable(servers, i))
            }
            Balancer::Weighted(current) => {
                let mut current = current.lock().unwrap_or_else(|e| e.into_inner());
                let mut total = 0i64;
                let mut best: Option<usize> = None;
                for (i, s) in servers.iter().enumerate() {
                    if !cx.usable(servers, i) {
                        continue;
                    }
                    current[i] += i64::from(s.weight);
                    total += i64::from(s.weight);
                    if best.is_none_or(|b| current[i] > current[b]) {
                        best = Some(i);
                    }
                }
                if let Some(b) = best {
                    current[b] -= total;
                }
                best
            }
            Balancer::LeastConn(next) => least(next, servers, cx, less_loaded),
            Balancer::PeakEwma(next) => least(next, servers, cx, |a, b| {
                ewma_cost(a, cx.now_ns) < ewma_cost(b, cx.now_ns)
            }),
            Balancer::IpHash => {
                let start = (cx.key % n as u64) as usize;
                (0..n)
                    .map(|k| (start + k) % n)
                    .find(|&i| cx.usable(servers, i))
            }
            Balancer::ConsistentHash {
                table,
                factor,
                total_weight,
            } => consistent(table, *factor, *total_weight, servers, cx),
        };
        // Fail open: every server is down (or tried), so try one that is only marked down.
        picked.or_else(|| {
            let start = (cx.key as usize) % n.max(1);
            (0..n)
                .map(|k| (start + k) % n)
                .find(|i| !cx.tried.contains(i))
        })
    }
}

/// `active_a / w_a < active_b / w_b`, without division.
fn less_loaded(a: &Server, b: &Server) -> bool {
    (a.active.load(Ordering::Relaxed) as u64) * u64::from(b.weight)
        < (b.active.load(Ordering::Relaxed) as u64) * u64::from(a.weight)
}

/// linkerd's cost: latency estimate × (requests in flight + 1), per unit of weight.
fn ewma_cost(s: &Server, now_ns: u64) -> f64 {
    s.ewma_at(now_ns) * (s.active.load(Ordering::Relaxed) + 1) as f64 / f64::from(s.weight)
}

/// The least loaded server by `better`: an exact scan of a small group (from a rotating
/// start, so that ties take turns), the power of two choices in a large one.
fn least(
    next: &AtomicUsize,
    servers: &[Server],
    cx: &PickCx<'_>,
    better: impl Fn(&Server, &Server) -> bool,
) -> Option<usize> {
    let n = servers.len();
    if n > SCAN_LIMIT {
        return two_choices(servers, cx, better);
    }
    let start = next.fetch_add(1, Ordering::Relaxed);
    let mut best: Option<usize> = None;
    for i in (0..n).map(|k| (start + k) % n) {
        if cx.usable(servers, i) && best.is_none_or(|b| better(&servers[i], &servers[b])) {
            best = Some(i);
        }
    }
    best
}

/// The power of two choices: two usable servers drawn at random, the better one wins. A few
/// draws are allowed for each (when some servers are down or tried); failing that, a scan.
fn two_choices(
    servers: &[Server],
    cx: &PickCx<'_>,
    better: impl Fn(&Server, &Server) -> bool,
) -> Option<usize> {
    let n = servers.len();
    let draw = || {
        (0..8)
            .map(|_| crate::hash::below(n))
            .find(|&i| cx.usable(servers, i))
    };
    let a = draw().or_else(|| (0..n).find(|&i| cx.usable(servers, i)))?;
    let Some(b) = draw().filter(|&b| b != a) else {
        return Some(a);
    };
    Some(if better(&servers[b], &servers[a]) {
        b
    } else {
        a
    })
}

/// Maglev lookup with bounded load (Mirrokni et al., "Consistent Hashing with Bounded
/// Loads"): the key's server unless it is down, tried, or already holds more than `factor` ×
/// its weighted share of the group's requests in flight (counting this one); then the next
/// slots of the table, whose servers are spread at random, so a busy or dead server's keys
/// spread evenly over the others. At least one server is always under a bound ≥ 1, so the
/// walk is short; it gives up after a few passes' worth of slots.
fn consistent(
    table: &Maglev,
    factor: Option<f64>,
    total_weight: u64,
    servers: &[Server],
    cx: &PickCx<'_>,
) -> Option<usize> {
    let slot = table.slot(cx.key);
    let bound = |i: usize| match factor {
        None => true,
        Some(c) => {
            let share =
                (cx.in_flight + 1) as f64 * f64::from(servers[i].weight) / total_weight as f64;
            (servers[i].active.load(Ordering::Relaxed) as f64) < (c * share).ceil()
        }
    };
    let walk = (4 * servers.len() + 16).min(table.len());
    let mut fallback = None;
    for k in 0..walk {
        let i = table.server(slot + k);
        if cx.usable(servers, i) {
            if bound(i) {
                return Some(i);
            }
            fallback.get_or_insert(i);
        }
    }
    // Every server met was over its bound (only possible in a long unlucky walk): the first
    // usable one keeps the key's affinity.
    fallback
}

#[cfg(test)]
mod tests;
