//! The in-memory store: entries by key, bounded by bytes, shared by every route that caches.
//!
//! An entry is one response (status, head, freshness) with every encoding of its body made
//! so far: identity first, then gzip, br or zstd as requests asked for them. Its weight is
//! the bytes of its head and all its bodies, so the bound holds whatever the variants.
//! Adding a variant replaces the entry with one more body (weights are taken at insertion).
//!
//! moka's W-TinyLFU admits a new entry only when it is likelier to be asked for again than
//! the one it would evict: a scan of URLs seen once cannot flush the pages that are hit.
//!
//! Keys: the primary key is method class, authority and path with query; a response with
//! `Vary` adds the secondary key of the request fields it names (`vary`), and the store
//! remembers per primary key which fields those are.

use crate::disk::DiskTier;
pub use crate::entry::{Entry, Variant};
use crate::purge::{Purge, Purges};
use crate::vary;
use http::HeaderMap;
use moka::sync::Cache;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::time::{Duration, SystemTime};

/// How long a key whose response could not be stored is passed straight upstream, without
/// collapsing its concurrent misses (Varnish's hit-for-pass): collapsing them would send
/// them upstream one after another.
const PASS_FOR: Duration = Duration::from_secs(60);

/// The store.
#[derive(Clone)]
pub struct Store {
    entries: Cache<String, Arc<Entry>>,
    /// Per primary key, the request fields its responses vary on.
    vary: Cache<String, Arc<Vec<String>>>,
    /// Primary keys whose last response could not be stored (`PASS_FOR`).
    pass: Cache<String, ()>,
    max_bytes: u64,
    /// The largest entry stored (`with_max_object`; default an eighth of `max_bytes`).
    max_object: u64,
    /// The disk tier, if configured, and the queue of its writer thread (writes and purges
    /// in the order they happened).
    disk: Option<Arc<DiskTier>>,
    writer: Option<Sender<DiskOp>>,
    /// Writes queued for the disk writer now (bounded by `DISK_QUEUE`; purges are never
    /// dropped and not counted here).
    queued_writes: Arc<AtomicUsize>,
    /// Disk writes dropped because the writer's queue was full.
    disk_dropped: Arc<AtomicU64>,
    /// The purges of the last while (`crate::purge`): what they cover is never stored or
    /// served again.
    purges: Arc<Purges>,
}

/// Writes queued for the disk writer at most; beyond, a write is dropped and counted (the
/// entry stays in memory). A purge is always queued.
const DISK_QUEUE: usize = 1024;

enum DiskOp {
    Write {
        key: String,
        primary: String,
        vary: Vec<String>,
        entry: Arc<Entry>,
    },
    Purge(Purge),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("max_bytes", &self.max_bytes)
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

impl Store {
    /// A store of at most `max_bytes` (entries larger than an eighth of it are not stored:
    /// one object must not empty the cache; `with_max_object` sets another limit).
    pub fn new(max_bytes: u64) -> Store {
        Store::build(max_bytes, None, None)
    }

    /// A store of at most `max_bytes` in memory with a disk tier at `dir` of at most
    /// `disk_bytes` (what a previous run left there is served again), written by a thread
    /// of its own.
    pub fn with_disk(
        max_bytes: u64,
        dir: &std::path::Path,
        disk_bytes: u64,
    ) -> std::io::Result<Store> {
        let disk = Arc::new(DiskTier::open(dir, disk_bytes)?);
        let (tx, rx) = channel::<DiskOp>();
        let store = Store::build(max_bytes, Some(disk.clone()), Some(tx));
        let (queued, purges) = (store.queued_writes.clone(), store.purges.clone());
        std::thread::Builder::new()
            .name("sluice-cache-disk".into())
            .spawn(move || {
                while let Ok(op) = rx.recv() {
                    match op {
                        DiskOp::Write {
                            key,
                            primary,
                            vary,
                            entry,
                        } => {
                            queued.fetch_sub(1, Ordering::Relaxed);
                            // Queued before a purge that covers it: not written.
                            if purges.refuses(&key, entry.timing.request_time) {
                                continue;
                            }
                            if let Err(e) = disk.write(&key, &primary, &vary, &entry) {
                                tracing::warn!(error = %e, "the cache could not write an entry to disk");
                            }
                        }
                        DiskOp::Purge(purge) => {
                            if let Err(e) = disk.record_purge(&purge) {
                                tracing::warn!(error = %e, "the cache could not record a purge on disk; removing what it covers now");
                            }
                            disk.purge(&purge);
                        }
                    }
                }
            })?;
        Ok(store)
    }

    /// Takes `old`'s purge records (a store rebuilt by a reload: what was purged stays
    /// purged, in this store's memory and in what its disk writer refuses).
    pub fn take_purges_from(&self, old: &Store) {
        self.purges.take_over(&old.purges);
    }

    fn build(max_bytes: u64, disk: Option<Arc<DiskTier>>, writer: Option<Sender<DiskOp>>) -> Store {
        Store {
            disk,
            writer,
            queued_writes: Arc::new(AtomicUsize::new(0)),
            disk_dropped: Arc::new(AtomicU64::new(0)),
            purges: Arc::new(Purges::default()),
            entries: Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_, e: &Arc<Entry>| u32::try_from(e.weight()).unwrap_or(u32::MAX))
                .support_invalidation_closures()
                .build(),
            vary: Cache::builder()
                .max_capacity(100_000)
                .support_invalidation_closures()
                .build(),
            pass: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(PASS_FOR)
                .build(),
            max_bytes,
            max_object: max_bytes / 8,
        }
    }

    /// This store with `n` bytes as its largest entry (`[cache] max_object_size`; at most
    /// the bound). The disk tier keeps its own: an eighth of its bound.
    pub fn with_max_object(mut self, n: u64) -> Store {
        self.max_object = n.clamp(1, self.max_bytes);
        self
    }

    /// The largest entry stored.
    pub fn max_entry(&self) -> u64 {
        self.max_object
    }

    /// The primary key of a request: GET and HEAD share entries (a HEAD is answered from a
    /// GET's), by authority and path with query.
    pub fn primary_key(authority: &str, path_and_query: &str) -> String {
        let mut k = String::with_capacity(authority.len() + path_and_query.len() + 1);
        k.push_str(&authority.to_ascii_lowercase());
        k.push_str(path_and_query);
        k
    }

    fn full_key(primary: &str, fields: &[String], request: &HeaderMap) -> String {
        if fields.is_empty() {
            return primary.to_owned();
        }
        format!("{primary}\0{}", vary::key(fields, request))
    }

    /// The entry that answers `request` under `primary`, if stored.
    pub fn lookup(&self, primary: &str, request: &HeaderMap) -> Option<Arc<Entry>> {
        self.entries.get(&self.key_of(primary, request))
    }

    /// Stores `entry` for `request` under `primary`. `false` when it is too large, or its
    /// `Vary` is `*`.
    pub fn insert(&self, primary: &str, request: &HeaderMap, entry: Entry) -> bool {
        if entry.weight() > self.max_entry()
            || self.purges.refuses(primary, entry.timing.request_time)
        {
            return false;
        }
        let Some(fields) = vary::fields(&entry.headers) else {
            return false;
        };
        let key = Self::full_key(primary, &fields, request);
        self.pass.invalidate(primary);
        if fields.is_empty() {
            self.vary.invalidate(primary);
        } else {
            self.vary.insert(primary.to_owned(), Arc::new(fields));
        }
        let entry = Arc::new(entry);
        self.write_through(&key, primary, &entry);
        self.keep(key, primary, entry);
        true
    }

    /// Puts `entry` in memory under `key`, unless a purge that covers it was recorded
    /// meanwhile (checked after the insert: a purge between a check and the insert would
    /// have found nothing to remove).
    fn keep(&self, key: String, primary: &str, entry: Arc<Entry>) {
        let requested = entry.timing.request_time;
        self.entries.insert(key.clone(), entry);
        if self.purges.refuses(primary, requested) {
            self.entries.invalidate(&key);
        }
    }

    /// Adds `variant` to the entry stored for `request` under `primary` (replacing the one
    /// in its coding), if that entry is still the response `current` is: the same identity
    /// bytes, whatever variants were added or revalidations renewed it meanwhile. `false`
    /// when a new response replaced it, or the entry would grow past the largest stored.
    pub fn add_variant(
        &self,
        primary: &str,
        request: &HeaderMap,
        current: &Arc<Entry>,
        variant: Variant,
    ) -> bool {
        let key = self.key_of(primary, request);
        match self.entries.get(&key) {
            Some(e) if e.same_response(current) => {
                let next = e.with_variant(variant);
                if next.weight() > self.max_entry() {
                    return false;
                }
                let next = Arc::new(next);
                self.write_through(&key, primary, &next);
                self.keep(key, primary, next);
                true
            }
            _ => false,
        }
    }

    /// Renews the entry stored for `request` under `primary` with `next`'s head, timing and
    /// lifetime (a 304 for `current`), keeping the variants it has now, if it is still the
    /// response `current` is.
    pub fn renew(
        &self,
        primary: &str,
        request: &HeaderMap,
        current: &Arc<Entry>,
        next: Entry,
    ) -> Option<Arc<Entry>> {
        let key = self.key_of(primary, request);
        match self.entries.get(&key) {
            // The stored response is what a purge judges: a revalidation renews it, it does
            // not make it newer than a purge that covers it.
            Some(e)
                if e.same_response(current)
                    && !self.purges.covers(primary, e.timing.request_time) =>
            {
                let next = Arc::new(e.renewed(next.headers, next.timing, next.lifetime));
                self.write_through(&key, primary, &next);
                self.entries.insert(key, next.clone());
                Some(next)
            }
            _ => None,
        }
    }

    fn key_of(&self, primary: &str, request: &HeaderMap) -> String {
        let fields = self.vary.get(primary).or_else(|| {
            self.disk
                .as_ref()
                .and_then(|d| d.vary(primary))
                .map(Arc::new)
        });
        let fields = fields.as_deref().map_or(&[][..], Vec::as_slice);
        Self::full_key(primary, fields, request)
    }

    fn write_through(&self, key: &str, primary: &str, entry: &Arc<Entry>) {
        if let Some(w) = &self.writer {
            if self.queued_writes.fetch_add(1, Ordering::Relaxed) >= DISK_QUEUE {
                self.queued_writes.fetch_sub(1, Ordering::Relaxed);
                self.disk_dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let vary = self
                .vary
                .get(primary)
                .map(|v| (*v).clone())
                .unwrap_or_default();
            let _ = w.send(DiskOp::Write {
                key: key.to_owned(),
                primary: primary.to_owned(),
                vary,
                entry: entry.clone(),
            });
        }
    }

    /// The key under which the disk tier holds what answers `request` under `primary`, if
    /// it does (then [`Store::load`] it, off the event loop).
    pub fn on_disk(&self, primary: &str, request: &HeaderMap) -> Option<String> {
        let disk = self.disk.as_ref()?;
        let key = self.key_of(primary, request);
        disk.contains(&key).then_some(key)
    }

    /// Reads `key`'s entry from the disk tier into memory and returns it. Blocking: call it
    /// from a blocking task.
    pub fn load(&self, key: &str, primary: &str) -> Option<Arc<Entry>> {
        let disk = self.disk.as_ref()?;
        let entry = disk.read(key)?;
        if self.purges.covers(key, entry.timing.request_time) {
            // Read before the disk writer removed it (or distrusted): never served.
            return None;
        }
        if entry.weight() > self.max_entry() {
            return None;
        }
        if let Some(fields) = vary::fields(&entry.headers)
            && !fields.is_empty()
        {
            self.vary.insert(primary.to_owned(), Arc::new(fields));
        }
        let entry = Arc::new(entry);
        self.entries.insert(key.to_owned(), entry.clone());
        Some(entry)
    }

    /// The disk tier, if configured.
    pub fn disk(&self) -> Option<&Arc<DiskTier>> {
        self.disk.as_ref()
    }

    /// Disk writes dropped because the writer's queue was full (purges never are).
    pub fn disk_dropped(&self) -> u64 {
        self.disk_dropped.load(Ordering::Relaxed)
    }

    /// Remembers that `primary`'s response could not be stored: its misses go upstream
    /// side by side for a while instead of waiting for each other.
    pub fn mark_pass(&self, primary: &str) {
        self.pass.insert(primary.to_owned(), ());
    }

    /// Whether `primary` is passed (`mark_pass`, not stored since).
    pub fn is_pass(&self, primary: &str) -> bool {
        self.pass.contains_key(primary)
    }

    /// Purges every entry `purge` covers, for good (`crate::purge`): recorded first (so
    /// nothing it covers is stored or read back after this), then removed from memory, then
    /// queued for the disk tier, whose writer records it in its purge file before removing
    /// files. Never dropped. Cheap and non-blocking: fine on the event loop.
    pub fn purge(&self, purge: Purge) {
        self.purges.add(purge.clone());
        let (target, prefix) = (purge.target.clone(), purge.prefix);
        let covered = purge.clone();
        let _ = self
            .entries
            .invalidate_entries_if(move |k, e| covered.covers(k, e.timing.request_time));
        if prefix {
            let p = target.clone();
            let _ = self
                .vary
                .invalidate_entries_if(move |k, _| k.starts_with(&p));
        } else {
            self.vary.invalidate(&target);
            self.pass.invalidate(&target);
        }
        if let Some(w) = &self.writer {
            let _ = w.send(DiskOp::Purge(purge));
        }
    }

    /// [`Store::purge`], and recorded in the disk tier's purge file before it returns
    /// (synced), so that a crash before the writer reaches it still finishes it at the next
    /// start. Blocks on the file system: call it off the event loop. Whether it was recorded
    /// on disk (`false` without a disk tier).
    pub fn purge_durably(&self, purge: Purge) -> std::io::Result<bool> {
        let recorded = match &self.disk {
            Some(disk) => {
                disk.record_purge(&purge)?;
                true
            }
            None => false,
        };
        self.purge(purge);
        Ok(recorded)
    }

    /// Treats every entry whose request started at or before `t` as purged: for a gateway
    /// that cannot know the purges issued before `t` (a fleet member down longer than etcd
    /// keeps purges). Entries in memory and on disk from before `t` are never served.
    pub fn distrust_before(&self, t: SystemTime) {
        self.purges.distrust_before(t);
        let _ = self
            .entries
            .invalidate_entries_if(move |_, e| e.timing.request_time <= t);
    }

    /// Lowers the distrust `distrust_before` set to `t`: the purges it stood for are
    /// recorded now (each covers what it names).
    pub fn trust_from(&self, t: SystemTime) {
        self.purges.trust_from(t);
    }

    /// The purges recorded in memory now (`crate::purge::REMEMBER`).
    pub fn purges_recorded(&self) -> usize {
        self.purges.len()
    }

    /// The bytes stored now (after pending evictions ran).
    pub fn bytes(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.weighted_size()
    }

    /// Entries stored now.
    pub fn len(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::freshness::Timing;
    use bytes::Bytes;
    use http::HeaderValue;
    use http::StatusCode;
    use std::time::SystemTime;

    fn entry(body: usize, headers: &[(&'static str, &'static str)]) -> Entry {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.append(*k, HeaderValue::from_static(v));
        }
        let now = SystemTime::now();
        Entry {
            status: StatusCode::OK,
            headers: h,
            timing: Timing::new(now, now, &HeaderMap::new()),
            lifetime: Duration::from_secs(60),
            variants: vec![Variant::new(
                "identity",
                Bytes::from(vec![b'x'; body]),
                false,
            )],
        }
    }

    /// A purge of `target` issued now.
    fn purge_now(target: &str, prefix: bool) -> Purge {
        Purge {
            target: target.to_owned(),
            prefix,
            at: SystemTime::now(),
        }
    }

    fn req(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in fields {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn entries_are_found_by_key_and_vary() {
        let s = Store::new(10 << 20);
        let k = Store::primary_key("A.test", "/p?q=1");
        assert_eq!(k, "a.test/p?q=1");
        assert!(s.insert(&k, &req(&[]), entry(10, &[])));
        assert!(s.lookup(&k, &req(&[("accept-language", "de")])).is_some());
        // The same URL varying on Accept-Language: one entry per language.
        let v = Store::primary_key("a.test", "/v");
        let vary = [("vary", "Accept-Language, Accept-Encoding")];
        assert!(s.insert(&v, &req(&[("accept-language", "en")]), entry(1, &vary)));
        assert!(s.insert(&v, &req(&[("accept-language", "fr")]), entry(2, &vary)));
        let en = s.lookup(
            &v,
            &req(&[("accept-language", "en"), ("accept-encoding", "gzip")]),
        );
        assert_eq!(en.unwrap().identity().len(), 1);
        assert_eq!(
            s.lookup(&v, &req(&[("accept-language", "fr")]))
                .unwrap()
                .identity()
                .len(),
            2
        );
        assert!(s.lookup(&v, &req(&[("accept-language", "de")])).is_none());
        assert!(
            !s.insert(&v, &req(&[]), entry(1, &[("vary", "*")])),
            "Vary: * is not stored"
        );
    }

    #[test]
    fn variants_join_their_entry_unless_it_changed() {
        let s = Store::new(10 << 20);
        let k = Store::primary_key("a.test", "/page");
        s.insert(&k, &req(&[]), entry(1000, &[]));
        let e = s.lookup(&k, &req(&[])).unwrap();
        let v = |c, b: &'static [u8]| Variant::new(c, Bytes::from_static(b), false);
        assert!(s.add_variant(&k, &req(&[]), &e, v("gzip", b"gz")));
        let e2 = s.lookup(&k, &req(&[])).unwrap();
        assert_eq!(e2.variant("gzip").unwrap().body.as_ref(), b"gz");
        assert_eq!(e2.identity().len(), 1000);
        assert!(
            s.add_variant(&k, &req(&[]), &e, v("zstd", b"zs")),
            "made from the same response before the gzip variant joined it"
        );
        let e2 = s.lookup(&k, &req(&[])).unwrap();
        assert_eq!(e2.variants.len(), 3, "the gzip variant is kept");
        s.insert(&k, &req(&[]), entry(1000, &[]));
        assert!(
            !s.add_variant(&k, &req(&[]), &e, v("br", b"br")),
            "made from a response since replaced"
        );
        let fresh = s.lookup(&k, &req(&[])).unwrap();
        fresh.variant("identity").unwrap().hit();
        assert!(s.add_variant(&k, &req(&[]), &fresh, v("gzip", b"g1")));
        assert!(s.add_variant(&k, &req(&[]), &fresh, v("gzip", b"g2")));
        let e3 = s.lookup(&k, &req(&[])).unwrap();
        assert_eq!(e3.variants.len(), 2, "a variant replaced, not added twice");
        assert_eq!(e3.variant("gzip").unwrap().body.as_ref(), b"g2");
        assert_eq!(
            e3.variant("identity").unwrap().hits.load(Ordering::Relaxed),
            1,
            "the others keep their counts"
        );
        // A 304 renews the head and keeps the bodies, those added since the revalidation
        // began included; once a new response replaced the entry, a renewal is refused.
        let renewed = fresh.renewed(HeaderMap::new(), fresh.timing, Duration::from_secs(5));
        let r = s.renew(&k, &req(&[]), &fresh, renewed).unwrap();
        assert_eq!(r.variants.len(), 2);
        assert_eq!(r.lifetime, Duration::from_secs(5));
        s.insert(&k, &req(&[]), entry(10, &[]));
        let again = e3.renewed(HeaderMap::new(), e3.timing, Duration::from_secs(9));
        assert!(s.renew(&k, &req(&[]), &e3, again).is_none());
    }

    #[test]
    fn empty_responses_are_told_apart_though_they_share_a_buffer() {
        let a = entry(0, &[("etag", "\"a\"")]);
        let mut b = entry(0, &[("etag", "\"b\"")]);
        b.timing.response_time += Duration::from_millis(1);
        assert!(a.same_response(&a));
        assert!(
            !a.same_response(&b),
            "a later empty response is another response"
        );
        let (x, y) = (entry(10, &[]), entry(10, &[]));
        assert!(!x.same_response(&y), "equal bytes, different responses");
    }

    #[test]
    fn a_passed_key_stays_passed_until_stored_or_purged() {
        let s = Store::new(10 << 20);
        let k = Store::primary_key("a.test", "/p");
        assert!(!s.is_pass(&k));
        s.mark_pass(&k);
        assert!(s.is_pass(&k));
        s.insert(&k, &req(&[]), entry(1, &[]));
        assert!(!s.is_pass(&k), "stored since");
        s.mark_pass(&k);
        s.purge(purge_now(&k, false));
        assert!(!s.is_pass(&k), "purged");
    }

    #[test]
    fn purge_by_key_and_prefix() {
        let s = Store::new(10 << 20);
        for p in ["/a/1", "/a/2", "/b/1"] {
            s.insert(&Store::primary_key("a.test", p), &req(&[]), entry(1, &[]));
        }
        let v = Store::primary_key("a.test", "/a/v");
        s.insert(&v, &req(&[("x-d", "1")]), entry(1, &[("vary", "x-d")]));
        s.purge(purge_now(&Store::primary_key("a.test", "/a/1"), false));
        assert!(
            s.lookup(&Store::primary_key("a.test", "/a/1"), &req(&[]))
                .is_none()
        );
        assert!(
            s.lookup(&Store::primary_key("a.test", "/a/2"), &req(&[]))
                .is_some()
        );
        s.purge(purge_now("a.test/a/", true));
        assert!(
            s.lookup(&Store::primary_key("a.test", "/a/2"), &req(&[]))
                .is_none()
        );
        assert!(s.lookup(&v, &req(&[("x-d", "1")])).is_none());
        assert!(
            s.lookup(&Store::primary_key("a.test", "/b/1"), &req(&[]))
                .is_some()
        );
    }

    #[test]
    fn a_fetch_that_started_before_a_purge_is_not_stored_after_it() {
        let s = Store::new(10 << 20);
        let k = Store::primary_key("a.test", "/slow");
        let started_before = entry(1, &[]);
        s.purge(purge_now(&k, false));
        assert!(
            !s.insert(&k, &req(&[]), started_before),
            "undone by an older fetch"
        );
        assert!(s.lookup(&k, &req(&[])).is_none());
        let mut fetched_after = entry(1, &[]);
        fetched_after.timing.request_time = SystemTime::now() + Duration::from_millis(1);
        assert!(
            s.insert(&k, &req(&[]), fetched_after),
            "a later fetch is stored"
        );
        // Renewing (a 304) an entry from before a purge does not bring it back either.
        let other = Store::primary_key("a.test", "/renewed");
        assert!(s.insert(&other, &req(&[]), entry(1, &[])));
        let current = s.lookup(&other, &req(&[])).unwrap();
        s.purge(purge_now(&other, false));
        s.entries.insert(other.clone(), current.clone());
        assert!(
            s.renew(&other, &req(&[]), &current, entry(1, &[]))
                .is_none()
        );
    }

    #[test]
    fn a_full_disk_queue_drops_writes_and_never_a_purge() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskTier::open(dir.path(), 1 << 30).unwrap());
        // A writer that does not run: the queue only fills.
        let (tx, rx) = channel::<DiskOp>();
        let s = Store::build(1 << 30, Some(disk), Some(tx));
        for i in 0..DISK_QUEUE + 10 {
            let k = Store::primary_key("a.test", &format!("/{i}"));
            assert!(s.insert(&k, &req(&[]), entry(1, &[])));
        }
        assert_eq!(s.disk_dropped(), 10);
        s.purge(purge_now("a.test/", true));
        let ops: Vec<DiskOp> = rx.try_iter().collect();
        assert_eq!(ops.len(), DISK_QUEUE + 1);
        assert!(matches!(ops.last(), Some(DiskOp::Purge(p)) if p.target == "a.test/"));
    }

    #[test]
    fn a_purged_entry_never_comes_back_from_disk_nor_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let k = Store::primary_key("a.test", "/page");
        {
            let s = Store::with_disk(10 << 20, dir.path(), 10 << 20).unwrap();
            assert!(s.insert(&k, &req(&[]), entry(5, &[])));
            wait_until(|| s.on_disk(&k, &req(&[])).is_some());
            s.purge(purge_now(&k, false));
            // Missed in memory, read from disk whatever the writer has done by now: never
            // the purged entry.
            let on_disk = s.on_disk(&k, &req(&[]));
            assert!(on_disk.is_none_or(|key| s.load(&key, &k).is_none()));
            // A purge recorded durably but whose removal never ran (a crash).
            let other = Store::primary_key("a.test", "/other");
            assert!(s.insert(&other, &req(&[]), entry(5, &[])));
            wait_until(|| s.on_disk(&other, &req(&[])).is_some());
            s.disk
                .as_ref()
                .unwrap()
                .record_purge(&purge_now(&other, false))
                .unwrap();
        }
        let s = Store::with_disk(10 << 20, dir.path(), 10 << 20).unwrap();
        assert!(s.on_disk(&k, &req(&[])).is_none());
        let other = Store::primary_key("a.test", "/other");
        assert!(
            s.on_disk(&other, &req(&[])).is_none(),
            "finished at the next start"
        );
    }

    #[test]
    fn distrust_drops_what_was_requested_before_it() {
        let s = Store::new(10 << 20);
        let k = Store::primary_key("a.test", "/p");
        assert!(s.insert(&k, &req(&[]), entry(1, &[])));
        s.distrust_before(SystemTime::now());
        assert!(s.lookup(&k, &req(&[])).is_none());
        let t = SystemTime::now();
        s.distrust_before(t);
        let mut before = entry(1, &[]);
        before.timing.request_time = t - Duration::from_secs(1);
        assert!(!s.insert(&k, &req(&[]), before));
        let mut after = entry(1, &[]);
        after.timing.request_time = t + Duration::from_millis(1);
        assert!(s.insert(&k, &req(&[]), after));
    }

    /// Polls `done` (a disk writer's work) for up to 10 s.
    fn wait_until(done: impl Fn() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the disk writer did not get there in 10 s");
    }

    #[test]
    fn the_bound_holds_under_a_scan_and_hot_entries_survive_it() {
        let bound = 4 << 20;
        let s = Store::new(bound);
        assert!(
            !s.insert("big", &req(&[]), entry(bound as usize / 4, &[])),
            "over an eighth"
        );
        let hot = Store::primary_key("a.test", "/hot");
        s.insert(&hot, &req(&[]), entry(8 << 10, &[]));
        for _ in 0..50 {
            assert!(s.lookup(&hot, &req(&[])).is_some());
        }
        for i in 0..100_000 {
            let k = Store::primary_key("a.test", &format!("/scan/{i}"));
            s.insert(&k, &req(&[]), entry(1 << 10, &[]));
            if i % 1000 == 0 {
                let _ = s.lookup(&hot, &req(&[]));
            }
        }
        assert!(s.bytes() <= bound, "{} > {bound}", s.bytes());
        assert!(s.len() > 100, "the store is used: {}", s.len());
        assert!(
            s.lookup(&hot, &req(&[])).is_some(),
            "the scan did not flush the hot page"
        );
    }
}
