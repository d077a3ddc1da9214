//! Rate limits (`[route.rate_limit]`): NGINX's `limit_req` as GCRA (the generic cell rate
//! algorithm: a "theoretical arrival time" per key, the leaky bucket without a counter to
//! drain). A request is allowed while its key's theoretical arrival time is at most
//! `burst` intervals ahead of now; it then moves that time one interval on. Without
//! `nodelay` an allowed request waits until its theoretical time (the burst is spaced out
//! at the rate, as NGINX queues it); with `nodelay` it goes at once.
//!
//! `store = "redis"`: the same algorithm runs in Redis as one script per check (atomic,
//! Redis's own clock, so gateways' clocks need not agree), on one multiplexed connection
//! per gateway whose concurrent checks are pipelined. A `nodelay` limit takes a lease: one
//! call grants up to what the rate brings in 50 ms (at most the gateway's share of the
//! burst), spent locally until it runs out or lapses; leased requests come out of the
//! shared allowance, so the fleet never passes more than the limit (a lapsed lease's rest
//! is lost, so it may pass a little less), and a busy key costs one round trip per lease
//! instead of one per request. Redis slow (past `redis_timeout`),
//! down or unreachable: the check falls back to a local limit at `rate /
//! expected_gateways`, counted, and a background task reconnects with back-off. A request
//! never fails because Redis did.

pub(crate) mod connect_rates;
mod redis_store;
pub(crate) mod takeover;

pub(crate) use redis_store::RedisStore;

use sluice_config::{RateLimit, RateLimitStore};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keys per shard of a local limiter before expired ones are swept.
const SWEEP_AT: usize = 1 << 16;
const SHARDS: usize = 16;

/// What a check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go now.
    Pass,
    /// Go after this wait (within the burst, without `nodelay`).
    Delay(Duration),
    /// Over the limit; the key has room again after this long.
    Reject(Duration),
}

/// GCRA in this process's memory: theoretical arrival times (ns on `clock`) per key hash.
#[derive(Debug)]
struct Gcra {
    interval_ns: u64,
    tau_ns: u64,
    clock: Instant,
    shards: [Mutex<HashMap<u64, u64>>; SHARDS],
}

impl Gcra {
    fn new(interval: Duration, burst: u32) -> Self {
        let interval_ns = (interval.as_nanos() as u64).max(1);
        Gcra {
            interval_ns,
            tau_ns: interval_ns.saturating_mul(u64::from(burst)),
            clock: Instant::now(),
            shards: Default::default(),
        }
    }

    /// Ok(wait until the theoretical time) or Err(time until there is room).
    fn check(&self, key: u64) -> Result<u64, u64> {
        let now = self.clock.elapsed().as_nanos() as u64;
        let mut shard = self.shards[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let tat = shard.get(&key).copied().unwrap_or(now).max(now);
        if tat - now > self.tau_ns {
            return Err(tat - now - self.tau_ns);
        }
        if shard.len() >= SWEEP_AT {
            // A key whose time has passed is the same as an absent one.
            shard.retain(|_, t| *t > now);
        }
        shard.insert(key, tat + self.interval_ns);
        Ok(tat - now)
    }
}

/// How long a leased share of a shared limit may be spent before it lapses.
const LEASE_TTL: Duration = Duration::from_millis(50);

/// Requests a gateway may still pass for a key without asking Redis; or, `refused`, a key
/// Redis refused, refused here until `until` (its allowance cannot come back sooner: the
/// theoretical arrival time only moves forward).
#[derive(Debug, Clone, Copy)]
struct Lease {
    left: u32,
    until: Instant,
    refused: bool,
    /// One request is fetching the next lease; the others spend what is left meanwhile.
    fetching: bool,
}

/// What a key's lease says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Passed on the lease.
    Pass,
    /// Passed, and this request fetches the next lease (half of this one is spent).
    PassAndRefill,
    /// Refused until Redis's retry time.
    Refused(Duration),
    /// No lease: this request fetches one.
    Fetch,
    /// The lease is spent and another request is fetching: ask for this one alone.
    Single,
}

/// One route's limiter.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    pub(crate) config: RateLimit,
    route: String,
    /// The limit itself (`store = "local"`), or the fallback at rate / expected gateways.
    local: Gcra,
    redis: Option<Arc<RedisStore>>,
    /// passed, delayed, rejected.
    pub(crate) counts: [AtomicU64; 3],
    /// Checks decided locally because Redis could not answer.
    pub(crate) fell_back: AtomicU64,
    /// Shared `nodelay` limits: requests taken from Redis ahead, per key (see
    /// [`RateLimiter::lease_size`]).
    leases: [Mutex<HashMap<u64, Lease>>; SHARDS],
    lease_size: u32,
    /// Calls to Redis (one per lease, or per request when leases are off).
    pub(crate) redis_calls: AtomicU64,
}

impl RateLimiter {
    pub(crate) fn new(
        route: &str,
        config: RateLimit,
        store: &RateLimitStore,
        redis: Option<Arc<RedisStore>>,
    ) -> Self {
        let redis = if config.shared { redis } else { None };
        let divisor = if config.shared {
            store.expected_gateways.max(1)
        } else {
            1
        };
        // A lease is what the rate brings in LEASE_TTL, at most this gateway's share of the
        // burst: so it never lets through more than the limit (leased requests come out of
        // the shared allowance), and one gateway cannot hold all of it. Queued (not
        // `nodelay`) limits need each request's own wait, so they never lease.
        let per_ttl = (f64::from(config.quota) * LEASE_TTL.as_secs_f64()
            / config.window.as_secs_f64()) as u32;
        let share = (config.burst + 1) / divisor;
        let lease_size = if config.shared && config.nodelay {
            per_ttl.min(share).max(1)
        } else {
            1
        };
        RateLimiter {
            leases: Default::default(),
            lease_size,
            redis_calls: AtomicU64::new(0),
            local: Gcra::new(config.interval() * divisor, config.burst),
            route: route.to_string(),
            redis,
            counts: Default::default(),
            fell_back: AtomicU64::new(0),
            config,
        }
    }

    /// The request's key hash: its client, header, cookie, argument or authenticated
    /// `subject`, or the route.
    /// Whether it uses `redis` (the same store) or, `None`, none.
    pub(crate) fn shares(&self, redis: Option<&Arc<RedisStore>>) -> bool {
        match (&self.redis, redis) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    pub(crate) fn key(
        &self,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        client: IpAddr,
        subject: Option<&str>,
    ) -> u64 {
        match (&self.config.key, subject) {
            (None, _) => 0,
            (Some(sluice_config::HashKey::Subject), Some(s)) => {
                crate::hash::hash64(0, s.as_bytes())
            }
            (Some(k), _) => crate::upstreams::request_key::key_hash(k, 0, uri, headers, client),
        }
    }

    pub(crate) async fn check(&self, key: u64) -> Verdict {
        let decided = match &self.redis {
            Some(redis) if self.lease_size > 1 => match self.take(key) {
                Take::Pass => Ok(0),
                Take::Refused(wait) => Err(wait.as_nanos() as u64),
                Take::PassAndRefill => {
                    // This request passed on the lease; the answer only refills it.
                    let _ = self
                        .ask(redis, key, self.lease_size, Take::PassAndRefill)
                        .await;
                    Ok(0)
                }
                Take::Fetch => self.ask(redis, key, self.lease_size, Take::Fetch).await,
                Take::Single => self.ask(redis, key, 1, Take::Single).await,
            },
            Some(redis) => self.ask(redis, key, 1, Take::Single).await,
            None => self.local.check(key),
        };
        let verdict = match decided {
            Ok(0) => Verdict::Pass,
            Ok(_) if self.config.nodelay => Verdict::Pass,
            Ok(wait) => Verdict::Delay(Duration::from_nanos(wait)),
            Err(retry) => Verdict::Reject(Duration::from_nanos(retry)),
        };
        let i = match verdict {
            Verdict::Pass => 0,
            Verdict::Delay(_) => 1,
            Verdict::Reject(_) => 2,
        };
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        verdict
    }

    /// Asks Redis for up to `want` requests, or decides locally when it cannot answer. A
    /// `Fetch` or `PassAndRefill` keeps what this request does not use as the key's lease.
    async fn ask(
        &self,
        redis: &Arc<RedisStore>,
        key: u64,
        want: u32,
        why: Take,
    ) -> Result<u64, u64> {
        let interval_us = self.config.interval().as_secs_f64() * 1e6;
        let name = format!("sluice:rl:{}:{key:016x}", self.route);
        self.redis_calls.fetch_add(1, Ordering::Relaxed);
        let tau_us = interval_us * f64::from(self.config.burst);
        let answer = redis.check(&name, interval_us, tau_us, want).await;
        let leasing = matches!(why, Take::Fetch | Take::PassAndRefill);
        match answer {
            Some(Ok((granted, wait))) => {
                if leasing {
                    let used = u32::from(why == Take::Fetch);
                    self.settle(key, Some(granted.saturating_sub(used)), LEASE_TTL);
                }
                Ok(wait * 1_000)
            }
            Some(Err(retry)) => {
                if leasing {
                    self.settle(key, None, Duration::from_micros(retry));
                }
                Err(retry * 1_000)
            }
            None => {
                if leasing {
                    self.settle(key, Some(0), Duration::ZERO);
                }
                if why == Take::PassAndRefill {
                    return Ok(0);
                }
                self.fell_back.fetch_add(1, Ordering::Relaxed);
                self.local.check(key)
            }
        }
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Lease>> {
        self.leases[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// What the key's lease says about one more request.
    fn take(&self, key: u64) -> Take {
        let now = Instant::now();
        let mut map = self.shard(key);
        if map.len() >= SWEEP_AT {
            map.retain(|_, l| l.until > now || l.fetching);
        }
        let l = map.entry(key).or_insert(Lease {
            left: 0,
            until: now,
            refused: false,
            fetching: false,
        });
        if l.until <= now && !l.fetching {
            // Lapsed (its rest is lost) or new.
            l.left = 0;
            l.refused = false;
        }
        if l.refused {
            return Take::Refused(l.until - now);
        }
        if l.left > 0 {
            l.left -= 1;
            if l.left < self.lease_size / 2 && !l.fetching {
                l.fetching = true;
                return Take::PassAndRefill;
            }
            return Take::Pass;
        }
        if l.fetching {
            return Take::Single;
        }
        l.fetching = true;
        Take::Fetch
    }

    /// Records a fetch's outcome: `Some(n)` more requests leased for `ttl`, or `None`: Redis
    /// refused the key for `ttl`.
    fn settle(&self, key: u64, granted: Option<u32>, ttl: Duration) {
        let now = Instant::now();
        let mut map = self.shard(key);
        let l = map.entry(key).or_insert(Lease {
            left: 0,
            until: now,
            refused: false,
            fetching: false,
        });
        l.fetching = false;
        match granted {
            Some(n) => {
                l.left = l.left.saturating_add(n);
                l.until = now + ttl;
                l.refused = false;
            }
            None => {
                l.left = 0;
                l.until = now + ttl;
                l.refused = true;
            }
        }
    }

    /// The headers of a 429: `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit`
    /// (draft-ietf-httpapi-ratelimit-headers: quota `q` per window `w` seconds; `r` left now,
    /// `t` seconds until there is room).
    pub(crate) fn reject_headers(&self, retry: Duration, headers: &mut http::HeaderMap) {
        let secs = retry.as_secs() + u64::from(retry.subsec_nanos() > 0);
        let secs = secs.max(1);
        let policy = format!(
            "\"{}\";q={};w={}",
            self.route,
            self.config.quota,
            self.config.window.as_secs()
        );
        let now = format!("\"{}\";r=0;t={secs}", self.route);
        for (name, value) in [
            ("retry-after", secs.to_string()),
            ("ratelimit-policy", policy),
            ("ratelimit", now),
        ] {
            if let Ok(v) = http::HeaderValue::from_str(&value) {
                headers.insert(name, v);
            }
        }
    }
}

/// The limiters of a configuration, by route name; kept across reloads for routes whose
/// limit (and store) did not change, so that a reload does not reset every client's
/// allowance.
pub(crate) fn build(
    routes: &[Arc<sluice_config::Route>],
    store: &RateLimitStore,
    redis: Option<&Arc<RedisStore>>,
    old: &HashMap<String, Arc<RateLimiter>>,
) -> HashMap<String, Arc<RateLimiter>> {
    routes
        .iter()
        .filter_map(|r| {
            let cfg = r.rate_limit.clone()?;
            let kept = old
                .get(&r.name)
                .filter(|l| l.config == cfg && l.shares(redis.filter(|_| cfg.shared)));
            let limiter = match kept {
                Some(l) => l.clone(),
                None => Arc::new(RateLimiter::new(&r.name, cfg, store, redis.cloned())),
            };
            Some((r.name.clone(), limiter))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(quota: u32, burst: u32, nodelay: bool) -> RateLimit {
        RateLimit {
            quota,
            window: Duration::from_secs(1),
            burst,
            nodelay,
            key: None,
            shared: false,
            before_auth: true,
        }
    }

    #[test]
    fn gcra_allows_the_burst_then_one_per_interval() {
        let g = Gcra::new(Duration::from_millis(100), 3);
        // At the same instant: the first plus a burst of 3; the fifth must wait.
        let results: Vec<bool> = (0..5).map(|_| g.check(7).is_ok()).collect();
        assert_eq!(results, [true, true, true, true, false]);
        // Another key is untouched.
        assert!(g.check(8).is_ok());
        // The refusal says when there is room: about one interval.
        let retry = g.check(7).unwrap_err();
        assert!(retry <= 100_000_000, "{retry}");
    }

    #[tokio::test]
    async fn without_nodelay_the_burst_is_spaced_out_and_with_it_goes_at_once() {
        let store = RateLimitStore::default();
        let queued = RateLimiter::new("r", limit(10, 2, false), &store, None);
        assert_eq!(queued.check(1).await, Verdict::Pass);
        assert!(
            matches!(queued.check(1).await, Verdict::Delay(d) if d > Duration::from_millis(50))
        );
        assert!(
            matches!(queued.check(1).await, Verdict::Delay(d) if d > Duration::from_millis(150))
        );
        assert!(matches!(queued.check(1).await, Verdict::Reject(_)));
        let at_once = RateLimiter::new("r", limit(10, 2, true), &store, None);
        let v: Vec<Verdict> =
            futures_util::future::join_all((0..4).map(|_| at_once.check(1))).await;
        assert_eq!(&v[..3], [Verdict::Pass; 3]);
        assert!(matches!(v[3], Verdict::Reject(_)));
        assert_eq!(at_once.counts[0].load(Ordering::Relaxed), 3);
        assert_eq!(at_once.counts[2].load(Ordering::Relaxed), 1);
    }

    #[test]
    fn one_request_fetches_a_lease_while_the_others_spend_it() {
        let mut cfg = limit(1_000, 99, true);
        cfg.shared = true;
        let store = RateLimitStore::default();
        let l = RateLimiter::new("r", cfg, &store, None);
        assert_eq!(l.lease_size, 50, "1,000/s x 50 ms, within the burst of 100");
        assert_eq!(l.take(1), Take::Fetch);
        assert_eq!(
            l.take(1),
            Take::Single,
            "another request while the first fetches"
        );
        l.settle(1, Some(49), LEASE_TTL);
        let takes: Vec<Take> = (0..49).map(|_| l.take(1)).collect();
        assert_eq!(
            takes.iter().filter(|t| **t == Take::PassAndRefill).count(),
            1,
            "one refill at half"
        );
        assert_eq!(takes.iter().filter(|t| **t == Take::Pass).count(), 48);
        assert_eq!(l.take(1), Take::Single, "spent while the refill is out");
        l.settle(1, None, Duration::from_secs(5));
        assert!(
            matches!(l.take(1), Take::Refused(_)),
            "a refusal is remembered"
        );
        assert_eq!(l.take(2), Take::Fetch, "keys are apart");
    }

    #[test]
    fn the_429_headers_name_the_policy_and_the_wait() {
        let store = RateLimitStore::default();
        let l = RateLimiter::new("api", limit(5, 0, true), &store, None);
        let mut h = http::HeaderMap::new();
        l.reject_headers(Duration::from_millis(1_200), &mut h);
        assert_eq!(h["retry-after"], "2");
        assert_eq!(h["ratelimit-policy"], "\"api\";q=5;w=1");
        assert_eq!(h["ratelimit"], "\"api\";r=0;t=2");
    }
}
