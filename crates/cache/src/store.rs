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
use crate::vary;
use http::HeaderMap;
use moka::sync::Cache;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::Duration;

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
    /// The disk tier, if configured, and the queue of its writer thread (writes and purges
    /// in the order they happened, so a purge is never undone by an earlier write).
    disk: Option<Arc<DiskTier>>,
    writer: Option<SyncSender<DiskOp>>,
    /// Disk operations dropped because the writer's queue was full.
    disk_dropped: Arc<AtomicU64>,
}

/// Entries queued for the disk writer at most.
const DISK_QUEUE: usize = 1024;

enum DiskOp {
    Write {
        key: String,
        primary: String,
        vary: Vec<String>,
        entry: Arc<Entry>,
    },
    Purge {
        primary: String,
        prefix: bool,
    },
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
    /// one object must not empty the cache).
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
        let (tx, rx) = sync_channel::<DiskOp>(DISK_QUEUE);
        let writer = disk.clone();
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
                            if let Err(e) = writer.write(&key, &primary, &vary, &entry) {
                                tracing::warn!(error = %e, "the cache could not write an entry to disk");
                            }
                        }
                        DiskOp::Purge { primary, prefix } => writer.purge(&primary, prefix),
                    }
                }
            })?;
        Ok(Store::build(max_bytes, Some(disk), Some(tx)))
    }

    fn build(
        max_bytes: u64,
        disk: Option<Arc<DiskTier>>,
        writer: Option<SyncSender<DiskOp>>,
    ) -> Store {
        Store {
            disk,
            writer,
            disk_dropped: Arc::new(AtomicU64::new(0)),
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
        }
    }

    /// The largest entry stored.
    pub fn max_entry(&self) -> u64 {
        self.max_bytes / 8
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
        if entry.weight() > self.max_entry() {
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
        self.entries.insert(key, entry);
        true
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
                self.entries.insert(key, next);
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
            Some(e) if e.same_response(current) => {
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

    fn to_disk(&self, op: DiskOp) {
        if let Some(w) = &self.writer
            && let Err(TrySendError::Full(_)) = w.try_send(op)
        {
            self.disk_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn write_through(&self, key: &str, primary: &str, entry: &Arc<Entry>) {
        if self.writer.is_some() {
            let vary = self
                .vary
                .get(primary)
                .map(|v| (*v).clone())
                .unwrap_or_default();
            self.to_disk(DiskOp::Write {
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
        let entry = self.disk.as_ref()?.read(key)?;
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

    /// Disk writes and purges dropped because the writer's queue was full.
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

    /// Removes every entry whose primary key is `primary`.
    pub fn purge(&self, primary: &str) {
        let p = primary.to_owned();
        let with_vary = format!("{primary}\0");
        let _ = self
            .entries
            .invalidate_entries_if(move |k, _| *k == p || k.starts_with(&with_vary));
        self.vary.invalidate(primary);
        self.pass.invalidate(primary);
        self.to_disk(DiskOp::Purge {
            primary: primary.to_owned(),
            prefix: false,
        });
    }

    /// Removes every entry whose primary key starts with `prefix`.
    pub fn purge_prefix(&self, prefix: &str) {
        let p = prefix.to_owned();
        let _ = self
            .entries
            .invalidate_entries_if(move |k, _| k.starts_with(&p));
        let p = prefix.to_owned();
        let _ = self
            .vary
            .invalidate_entries_if(move |k, _| k.starts_with(&p));
        self.to_disk(DiskOp::Purge {
            primary: prefix.to_owned(),
            prefix: true,
        });
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
        s.purge(&k);
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
        s.purge(&Store::primary_key("a.test", "/a/1"));
        assert!(
            s.lookup(&Store::primary_key("a.test", "/a/1"), &req(&[]))
                .is_none()
        );
        assert!(
            s.lookup(&Store::primary_key("a.test", "/a/2"), &req(&[]))
                .is_some()
        );
        s.purge_prefix("a.test/a/");
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
