//! Load balancing across the servers of one upstream group, with passive health.

use sluice_config::Balance;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Run-time state of one upstream server.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) weight: u32,
    /// Requests in flight (least_conn).
    pub(crate) active: AtomicUsize,
    /// Consecutive failures since the last success or mark-down.
    fails: AtomicU32,
    /// Skipped until this time (ms on the group's clock).
    down_until_ms: AtomicU64,
}

impl Server {
    pub(crate) fn new(addr: SocketAddr, weight: u32) -> Self {
        Server {
            addr,
            weight,
            active: AtomicUsize::new(0),
            fails: AtomicU32::new(0),
            down_until_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn available(&self, now_ms: u64) -> bool {
        self.down_until_ms.load(Ordering::Relaxed) <= now_ms
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
}

/// A balancing algorithm with its state.
#[derive(Debug)]
pub(crate) enum Balancer {
    RoundRobin(AtomicUsize),
    /// NGINX's smooth weighted round robin: current weights per server.
    Weighted(Mutex<Vec<i64>>),
    /// Rotating start so that ties spread.
    LeastConn(AtomicUsize),
    IpHash,
}

impl Balancer {
    pub(crate) fn new(kind: Balance, servers: usize) -> Self {
        match kind {
            Balance::RoundRobin => Balancer::RoundRobin(AtomicUsize::new(0)),
            Balance::WeightedRoundRobin => Balancer::Weighted(Mutex::new(vec![0; servers])),
            Balance::LeastConn => Balancer::LeastConn(AtomicUsize::new(0)),
            Balance::IpHash => Balancer::IpHash,
        }
    }

    /// Picks a server for a request from `client`, never one in `tried`. Servers marked down
    /// are skipped while any other is left; when all are down they are tried anyway, since a
    /// stale mark is better than a certain 502.
    pub(crate) fn pick(
        &self,
        servers: &[Server],
        now_ms: u64,
        client: IpAddr,
        tried: &[usize],
    ) -> Option<usize> {
        let untried = |i: &usize| !tried.contains(i);
        let healthy: Vec<usize> = (0..servers.len())
            .filter(untried)
            .filter(|&i| servers[i].available(now_ms))
            .collect();
        let eligible = if healthy.is_empty() {
            (0..servers.len()).filter(untried).collect()
        } else {
            healthy
        };
        if eligible.is_empty() {
            return None;
        }
        let n = servers.len();
        let ok = |i: usize| eligible.contains(&i);
        Some(match self {
            Balancer::RoundRobin(next) => {
                let start = next.fetch_add(1, Ordering::Relaxed);
                (0..n).map(|k| (start + k) % n).find(|&i| ok(i))?
            }
            Balancer::Weighted(current) => {
                let mut current = current.lock().unwrap_or_else(|e| e.into_inner());
                let total: i64 = eligible.iter().map(|&i| i64::from(servers[i].weight)).sum();
                let mut best = eligible[0];
                for &i in &eligible {
                    current[i] += i64::from(servers[i].weight);
                    if current[i] > current[best] {
                        best = i;
                    }
                }
                current[best] -= total;
                best
            }
            Balancer::LeastConn(next) => {
                let start = next.fetch_add(1, Ordering::Relaxed);
                let mut best: Option<usize> = None;
                for i in (0..n).map(|k| (start + k) % n).filter(|&i| ok(i)) {
                    let better = match best {
                        None => true,
                        // active_i / w_i < active_b / w_b, without division.
                        Some(b) => {
                            (servers[i].active.load(Ordering::Relaxed) as u64)
                                * u64::from(servers[b].weight)
                                < (servers[b].active.load(Ordering::Relaxed) as u64)
                                    * u64::from(servers[i].weight)
                        }
                    };
                    if better {
                        best = Some(i);
                    }
                }
                best?
            }
            Balancer::IpHash => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                client.hash(&mut h);
                let start = h.finish() as usize;
                (0..n).map(|k| (start + k) % n).find(|&i| ok(i))?
            }
        })
    }
}
