//! The gateway's response cache: the store every cached route shares, its request
//! collapsing, counters and background upgrades, kept across reloads while its bound stays.

use super::upgrade;
use sluice_cache::{CacheCounters, CacheSnapshot, Collapser, Purge, Store};
use sluice_config::CacheSettings;
use std::sync::Arc;
use std::time::SystemTime;

/// How many times a collapsed miss looks the store up again before it fetches on its own.
pub(super) const RETRIES: usize = 3;

/// The gateway's response cache: one store, bounded by `[cache] max_size`, for every route
/// with `[route.cache]`; kept across reloads while the bound stays.
#[derive(Debug)]
pub struct ResponseCache {
    pub(crate) store: Store,
    pub(crate) collapser: Arc<Collapser>,
    pub(crate) counters: Arc<CacheCounters>,
    pub(crate) upgrader: upgrade::Upgrader,
    settings: CacheSettings,
}

impl ResponseCache {
    /// A cache as `settings` describe, counting into `counters` (kept when a reload
    /// rebuilds the store).
    pub fn new(
        settings: &CacheSettings,
        counters: Arc<CacheCounters>,
    ) -> std::io::Result<Arc<ResponseCache>> {
        let store = match &settings.disk {
            None => Store::new(settings.max_size),
            Some((dir, bytes)) => Store::with_disk(settings.max_size, dir, *bytes).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "[cache.disk] path {}: {e}; give a directory this user may create and write",
                        dir.display()
                    ),
                )
            })?,
        };
        let store = match settings.max_object_size {
            Some(n) => store.with_max_object(n),
            None => store,
        };
        Ok(Arc::new(ResponseCache {
            store,
            collapser: Collapser::new(),
            upgrader: upgrade::Upgrader::start(counters.clone(), settings.upgrade_share_percent)?,
            counters,
            settings: settings.clone(),
        }))
    }

    /// The settings it was built with.
    pub fn settings(&self) -> &CacheSettings {
        &self.settings
    }

    /// Its counters (shared with a rebuilt cache).
    pub fn counters(&self) -> Arc<CacheCounters> {
        self.counters.clone()
    }

    /// The counters now.
    pub fn snapshot(&self) -> CacheSnapshot {
        self.counters.snapshot()
    }

    /// Bytes stored now.
    pub fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    /// Entries stored now.
    pub fn entries(&self) -> u64 {
        self.store.len()
    }

    /// The disk tier's size and counters, and the operations its writer dropped (`None`
    /// without `[cache.disk]`).
    pub fn disk(&self) -> Option<(sluice_cache::disk::DiskStats, u64)> {
        Some((self.store.disk()?.stats(), self.store.disk_dropped()))
    }

    /// Purges, for good (`sluice_cache::purge`), the entries of `host` and `path` (with its
    /// query, as requested) or every entry under `path` as a prefix, fetched at or before
    /// `at`: a purge another gateway of the fleet took. Non-blocking.
    pub fn purge(&self, host: &str, path: &str, prefix: bool, at: SystemTime) {
        self.store.purge(Purge {
            target: Store::primary_key(host, path),
            prefix,
            at,
        });
    }

    /// [`ResponseCache::purge`] for a request this gateway's admin API took, as of `at`
    /// (counted), recorded on disk before it returns where there is a disk tier: whether it
    /// was. Blocks on the file system: call it off the event loop.
    pub fn purge_requested(
        &self,
        host: &str,
        path: &str,
        prefix: bool,
        at: SystemTime,
    ) -> std::io::Result<bool> {
        let recorded = self.store.purge_durably(Purge {
            target: Store::primary_key(host, path),
            prefix,
            at,
        })?;
        self.counters
            .purges
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(recorded)
    }

    /// Never serves or stores an entry fetched at or before `t` (a fleet member that cannot
    /// know the purges issued before `t`).
    pub fn distrust_before(&self, t: SystemTime) {
        self.store.distrust_before(t);
    }

    /// The purges recorded in memory now (`sluice_cache::purge::REMEMBER`): those of this
    /// gateway's admin API, the fleet's, and invalidations by unsafe methods.
    pub fn purges_recorded(&self) -> usize {
        self.store.purges_recorded()
    }

    /// Lowers what `distrust_before` set to `t` (the purges it waited for are applied).
    pub fn trust_from(&self, t: SystemTime) {
        self.store.trust_from(t);
    }
}
