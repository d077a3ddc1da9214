//! What the cache did, for `/metrics`, `/status` and the dashboard.

use crate::freshness::NotStored;
use std::sync::atomic::{AtomicU64, Ordering};

/// The codings counted apart (bytes served, variants made, upgrades), in this order.
pub const CODINGS: [&str; 4] = ["identity", "gzip", "br", "zstd"];

/// How a request was answered, as the status header and the counters name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// From the store, fresh.
    Hit,
    /// Not stored: fetched upstream.
    Miss,
    /// Stored but stale: revalidated upstream, which said 304.
    Revalidated,
    /// Stored but stale: revalidated upstream, which sent a new response.
    Expired,
    /// Stale, served while a background fetch revalidates it (or upstream failed and
    /// `stale-if-error` allowed it).
    Stale,
    /// Not cacheable (method, a passed key, the request's `no-store`): straight upstream.
    Bypass,
}

impl Outcome {
    /// Its name in the status header (`X-Cache`) and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "HIT",
            Outcome::Miss => "MISS",
            Outcome::Revalidated => "REVALIDATED",
            Outcome::Expired => "EXPIRED",
            Outcome::Stale => "STALE",
            Outcome::Bypass => "BYPASS",
        }
    }

    const ALL: [Outcome; 6] = [
        Outcome::Hit,
        Outcome::Miss,
        Outcome::Revalidated,
        Outcome::Expired,
        Outcome::Stale,
        Outcome::Bypass,
    ];
}

const NOT_STORED: [NotStored; 9] = [
    NotStored::Method,
    NotStored::Status,
    NotStored::NoStore,
    NotStored::Private,
    NotStored::Authorization,
    NotStored::SetCookie,
    NotStored::VaryStar,
    NotStored::NoLifetime,
    NotStored::Encoded,
];

/// Counters since start (they outlive reloads).
#[derive(Debug, Default)]
pub struct CacheCounters {
    outcomes: [AtomicU64; 6],
    not_stored: [AtomicU64; 9],
    /// Responses too large to store, or with trailers, or cut short.
    pub not_stored_body: AtomicU64,
    /// Misses that waited for another request's fetch of the same key.
    pub collapsed: AtomicU64,
    /// Client conditional requests answered 304 from the store.
    pub not_modified: AtomicU64,
    served_bytes: [AtomicU64; 4],
    variants_made: [AtomicU64; 4],
    upgrades: [AtomicU64; 4],
    /// Upgrades dropped because the upgrade queue was full.
    pub upgrades_dropped: AtomicU64,
    /// Bytes saved by upgrades (the old variant's size less the new one's), summed.
    pub upgrade_bytes_saved: AtomicU64,
    /// Estimated compression CPU not spent: each encoded byte served from the store, at the
    /// measured inline cost of its encoding, in nanoseconds.
    pub cpu_saved_ns: AtomicU64,
    /// Entries purged through the admin API (by key or prefix requests, not entries).
    pub purges: AtomicU64,
}

fn coding_index(coding: &str) -> usize {
    CODINGS.iter().position(|c| *c == coding).unwrap_or(0)
}

impl CacheCounters {
    /// Counts how a request was answered.
    pub fn outcome(&self, o: Outcome) {
        self.outcomes[o as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a response not stored, by reason.
    pub fn not_stored(&self, why: NotStored) {
        self.not_stored[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `bytes` served from the store in `coding`.
    pub fn served(&self, coding: &str, bytes: u64) {
        self.served_bytes[coding_index(coding)].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts a variant made in `coding` (on a first request for it).
    pub fn variant_made(&self, coding: &str) {
        self.variants_made[coding_index(coding)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a background upgrade of a `coding` variant.
    pub fn upgraded(&self, coding: &str, saved: u64) {
        self.upgrades[coding_index(coding)].fetch_add(1, Ordering::Relaxed);
        self.upgrade_bytes_saved.fetch_add(saved, Ordering::Relaxed);
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> CacheSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheSnapshot {
            outcomes: Outcome::ALL
                .iter()
                .map(|o| (o.as_str(), load(&self.outcomes[*o as usize])))
                .collect(),
            not_stored: NOT_STORED
                .iter()
                .map(|r| (r.as_str(), load(&self.not_stored[*r as usize])))
                .chain([("body", load(&self.not_stored_body))])
                .collect(),
            collapsed: load(&self.collapsed),
            not_modified: load(&self.not_modified),
            served_bytes: per_coding(&self.served_bytes),
            variants_made: per_coding(&self.variants_made),
            upgrades: per_coding(&self.upgrades),
            upgrades_dropped: load(&self.upgrades_dropped),
            upgrade_bytes_saved: load(&self.upgrade_bytes_saved),
            cpu_saved_s: load(&self.cpu_saved_ns) as f64 / 1e9,
            purges: load(&self.purges),
        }
    }
}

fn per_coding(a: &[AtomicU64; 4]) -> Vec<(&'static str, u64)> {
    CODINGS
        .iter()
        .zip(a)
        .map(|(c, n)| (*c, n.load(Ordering::Relaxed)))
        .collect()
}

/// The counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheSnapshot {
    /// Requests by outcome (`HIT`, `MISS`, …).
    pub outcomes: Vec<(&'static str, u64)>,
    /// Responses not stored, by reason.
    pub not_stored: Vec<(&'static str, u64)>,
    /// Misses that waited for another's fetch.
    pub collapsed: u64,
    /// 304s answered from the store.
    pub not_modified: u64,
    /// Bytes served from the store, by coding.
    pub served_bytes: Vec<(&'static str, u64)>,
    /// Variants made, by coding.
    pub variants_made: Vec<(&'static str, u64)>,
    /// Background upgrades, by coding.
    pub upgrades: Vec<(&'static str, u64)>,
    /// Upgrades dropped (queue full).
    pub upgrades_dropped: u64,
    /// Bytes the upgrades saved per copy.
    pub upgrade_bytes_saved: u64,
    /// Estimated compression CPU seconds saved.
    pub cpu_saved_s: f64,
    /// Purge requests.
    pub purges: u64,
}

impl CacheSnapshot {
    /// Requests answered with `outcome`.
    pub fn count(&self, outcome: &str) -> u64 {
        self.outcomes
            .iter()
            .find(|(o, _)| *o == outcome)
            .map_or(0, |(_, n)| *n)
    }

    /// The share of cacheable requests answered from the store (hits, revalidated, stale),
    /// 0 with none.
    pub fn hit_ratio(&self) -> f64 {
        let from_store = self.count("HIT") + self.count("REVALIDATED") + self.count("STALE");
        let all = from_store + self.count("MISS") + self.count("EXPIRED");
        if all == 0 {
            0.0
        } else {
            from_store as f64 / all as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_land_in_their_slots() {
        let c = CacheCounters::default();
        c.outcome(Outcome::Hit);
        c.outcome(Outcome::Hit);
        c.outcome(Outcome::Miss);
        c.outcome(Outcome::Stale);
        c.not_stored(NotStored::SetCookie);
        c.served("br", 10);
        c.served("gzip", 5);
        c.upgraded("br", 7);
        let s = c.snapshot();
        assert_eq!(s.count("HIT"), 2);
        assert_eq!(s.count("MISS"), 1);
        assert_eq!(s.count("BYPASS"), 0);
        assert!((s.hit_ratio() - 0.75).abs() < 1e-9);
        assert!(s.not_stored.contains(&("set_cookie", 1)));
        assert!(s.not_stored.contains(&("private", 0)));
        assert_eq!(
            s.served_bytes,
            vec![("identity", 0), ("gzip", 5), ("br", 10), ("zstd", 0)]
        );
        assert_eq!(s.upgrades[2], ("br", 1));
        assert_eq!(s.upgrade_bytes_saved, 7);
    }
}
