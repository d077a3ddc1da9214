//! What was verified, remembered until it expires or what it was verified against changes
//! (a token's claims until its `exp` or the next key set, a password until the htpasswd
//! file changes, a forward-auth decision for its TTL). Sixteen shards by the key's hash, each
//! a map from the whole key (so two credentials never share an entry) to the value. A full
//! shard first drops its stale entries, then everything: entries are bounded in number, and a
//! flood of new credentials costs their verification, never memory.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

const SHARDS: usize = 16;

struct Entry<V> {
    value: V,
    /// Unix seconds after which the token is no longer valid.
    until: u64,
    /// The key set's generation it was verified under.
    generation: u64,
}

/// One shard: entries by their whole key.
type Shard<V> = Mutex<HashMap<Box<[u8]>, Entry<V>>>;

pub(crate) struct TtlCache<V> {
    shards: Box<[Shard<V>]>,
    per_shard: usize,
    hasher: RandomState,
}

impl<V: Clone> TtlCache<V> {
    /// A cache of `size` tokens at most; 0 for none.
    pub(crate) fn new(size: usize) -> Self {
        TtlCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: size.div_ceil(SHARDS),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, token: &[u8]) -> &Shard<V> {
        &self.shards[self.hasher.hash_one(token) as usize % SHARDS]
    }

    /// What `token` was remembered with, if under `generation` and still valid at `now`
    /// (Unix seconds).
    pub(crate) fn get(&self, token: &[u8], generation: u64, now: u64) -> Option<V> {
        if self.per_shard == 0 {
            return None;
        }
        let shard = self.shard(token).lock().unwrap_or_else(|p| p.into_inner());
        let e = shard.get(token)?;
        (e.generation == generation && now < e.until).then(|| e.value.clone())
    }

    /// Remembers `value` for `token` until `until` (Unix seconds) under `generation`.
    pub(crate) fn put(&self, token: &[u8], value: V, until: u64, generation: u64) {
        if self.per_shard == 0 {
            return;
        }
        let mut shard = self.shard(token).lock().unwrap_or_else(|p| p.into_inner());
        if shard.len() >= self.per_shard && !shard.contains_key(token) {
            let now = unix_now();
            shard.retain(|_, e| now < e.until && e.generation == generation);
            if shard.len() >= self.per_shard {
                shard.clear();
            }
        }
        shard.insert(
            token.into(),
            Entry {
                value,
                until,
                generation,
            },
        );
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn claims(sub: &str) -> Arc<str> {
        Arc::from(sub)
    }

    #[test]
    fn entries_end_at_expiry_and_with_their_key_set() {
        let c = TtlCache::new(100);
        c.put(b"t1", claims("a"), 1000, 7);
        assert_eq!(c.get(b"t1", 7, 999).as_deref(), Some("a"));
        assert!(c.get(b"t1", 7, 1000).is_none(), "expired");
        assert!(c.get(b"t1", 8, 999).is_none(), "another key set");
        assert!(c.get(b"t2", 7, 999).is_none());
        let none = TtlCache::new(0);
        none.put(b"t1", claims("a"), 1000, 7);
        assert!(none.get(b"t1", 7, 1).is_none());
    }

    #[test]
    fn the_cache_stays_within_its_size() {
        let c = TtlCache::new(32);
        let far = unix_now() + 3600;
        for i in 0..1000u32 {
            c.put(&i.to_be_bytes(), claims("x"), far, 1);
        }
        let held: usize = c.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= 32, "{held}");
    }
}
