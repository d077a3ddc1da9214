//! Purges that stay done.
//!
//! A purge is a record (a key or a key prefix, and the time it was issued), not only an
//! eviction: an entry is covered by a purge when its key matches and its request to the
//! origin started at or before the purge's time. Every way an entry comes back checks the
//! records, so a purge is never undone:
//! - a fetch that started before the purge and finishes after it is not stored
//!   (`Store::insert`, `add_variant`, `renew`);
//! - a write queued for the disk before the purge is not written (the disk writer);
//! - an entry read from the disk after the purge is dropped, not served (`Store::load`);
//! - the disk tier records each purge in a file before it removes entries, and a tier opened
//!   again removes what that file covers (`DiskTier::open`), so a purge the writer had not
//!   finished when the process stopped is finished at the next start.
//!
//! Records are kept in memory for [`REMEMBER`], long enough for the disk writer to have
//! removed what each covers; a purge forgotten raises a watermark for *storing* instead: a
//! response whose request started at or before it is not stored (a fetch that slow is rare,
//! and serving a purged page is worse). That bounds the memory a stream of purges takes.
//! Entries already on disk are not judged by the watermark (the writer removed what the
//! purge covered), so one purge does not cost the rest of the disk tier.

use std::collections::{HashMap, VecDeque};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What separates a route's further cache key parts (`[route.cache] key`) from the host and
/// path: a purge of the URL names every entry of it, whatever those parts.
pub const KEY_PART: char = '\u{1f}';

/// How long a purge's record is kept in memory: longer than any fetch or queued disk write
/// takes (see the module's doc for what happens after).
pub const REMEMBER: Duration = Duration::from_secs(600);

/// One purge: every entry whose key is `target` (with any Vary key), or starts with it when
/// `prefix`, and whose request started at or before `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purge {
    /// A primary key (authority and path with query), or the start of one.
    pub target: String,
    /// `target` is a prefix.
    pub prefix: bool,
    /// When it was issued (by the gateway that took it).
    pub at: SystemTime,
}

impl Purge {
    /// Whether `key` (a primary key, or a full key with its Vary part after a NUL, or a
    /// route's further key parts after a unit separator) is one this purge names.
    pub fn matches(&self, key: &str) -> bool {
        if self.prefix {
            return key.starts_with(&self.target);
        }
        key.strip_prefix(self.target.as_str()).is_some_and(|rest| {
            rest.is_empty() || rest.starts_with('\0') || rest.starts_with(KEY_PART)
        })
    }

    /// Whether it covers an entry under `key` whose request started at `requested`.
    pub fn covers(&self, key: &str, requested: SystemTime) -> bool {
        requested <= self.at && self.matches(key)
    }

    /// The record as one line of the disk tier's purge file: nanoseconds, `p` or `k`, the
    /// target (keys hold no newline: they are an authority and a request target).
    pub fn line(&self) -> String {
        let nanos = self
            .at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let kind = if self.prefix { 'p' } else { 'k' };
        format!("{nanos} {kind} {}\n", self.target)
    }

    /// A line written by [`Purge::line`]; `None` for a torn or foreign one.
    pub fn parse(line: &str) -> Option<Purge> {
        let mut parts = line.splitn(3, ' ');
        let nanos: u64 = parts.next()?.parse().ok()?;
        let prefix = match parts.next()? {
            "p" => true,
            "k" => false,
            _ => return None,
        };
        let target = parts.next()?;
        (!target.is_empty() && !target.contains('\n')).then(|| Purge {
            target: target.to_owned(),
            prefix,
            at: UNIX_EPOCH + Duration::from_nanos(nanos),
        })
    }
}

/// The purges of the last [`REMEMBER`], and the watermark of those forgotten. A key's purge
/// is a hash lookup (an unsafe method invalidates its URL this way, so there may be many);
/// prefixes, which an operator issues, are tried one by one.
#[derive(Debug)]
pub struct Purges {
    inner: RwLock<Inner>,
    /// Nothing recorded and nothing forgotten: the common case costs one load.
    none: AtomicBool,
}

#[derive(Debug, Default, Clone)]
struct Inner {
    /// Purged keys, each with its latest purge's time.
    keys: HashMap<String, SystemTime>,
    prefixes: Vec<Purge>,
    /// Every record in the order it came, to forget the oldest first.
    order: VecDeque<Purge>,
    /// Purges forgotten: a response whose request started at or before this is not stored.
    forgotten: Option<SystemTime>,
    /// Entries whose request started at or before this are covered, stored or not: a
    /// gateway that cannot know the purges issued before it (`distrust_before`).
    distrust: Option<SystemTime>,
}

impl Default for Purges {
    fn default() -> Self {
        Purges {
            inner: RwLock::new(Inner::default()),
            none: AtomicBool::new(true),
        }
    }
}

impl Inner {
    /// Forgets the records issued at or before `horizon`, into the watermark.
    fn forget(&mut self, horizon: SystemTime) {
        while self.order.front().is_some_and(|p| p.at <= horizon) {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.forgotten = self.forgotten.max(Some(old.at));
            if old.prefix {
                self.prefixes.retain(|p| *p != old);
            } else if self.keys.get(&old.target) == Some(&old.at) {
                self.keys.remove(&old.target);
            }
        }
    }

    fn covers(&self, key: &str, requested: SystemTime) -> bool {
        // The URL part of the key: without its Vary part (after a NUL) and a route's further
        // key parts (after `KEY_PART`), which an exact purge names too.
        let primary = key.split(['\0', KEY_PART]).next().unwrap_or(key);
        self.distrust.is_some_and(|d| requested <= d)
            || self.keys.get(primary).is_some_and(|at| requested <= *at)
            || self.prefixes.iter().any(|p| p.covers(key, requested))
    }
}

impl Purges {
    /// Records `purge`, forgetting those older than [`REMEMBER`] (into the watermark).
    pub fn add(&self, purge: Purge) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if let Some(horizon) = purge.at.checked_sub(REMEMBER) {
            inner.forget(horizon);
        }
        if purge.prefix {
            inner.prefixes.push(purge.clone());
        } else {
            let at = inner.keys.entry(purge.target.clone()).or_insert(purge.at);
            *at = (*at).max(purge.at);
        }
        inner.order.push_back(purge);
        self.none.store(false, Ordering::Release);
    }

    /// Treats every entry whose request started at or before `t` as covered (a gateway that
    /// cannot know the purges issued before `t`).
    pub fn distrust_before(&self, t: SystemTime) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.distrust = inner.distrust.max(Some(t));
        self.none.store(false, Ordering::Release);
    }

    /// Lowers the distrust to `t` (a gateway whose purges up to now are recorded: only what
    /// precedes the oldest it can know of stays covered).
    pub fn trust_from(&self, t: SystemTime) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.distrust = inner.distrust.map(|d| d.min(t));
    }

    /// Whether a stored entry under `key` whose request started at `requested` is covered
    /// by a purge recorded (or by `distrust_before`): it must not be served.
    pub fn covers(&self, key: &str, requested: SystemTime) -> bool {
        if self.none.load(Ordering::Acquire) {
            return false;
        }
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.covers(key, requested)
    }

    /// Whether a response under `key` whose request started at `requested` must not be
    /// stored: covered, or older than a purge forgotten.
    pub fn refuses(&self, key: &str, requested: SystemTime) -> bool {
        if self.none.load(Ordering::Acquire) {
            return false;
        }
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.forgotten.is_some_and(|f| requested <= f) || inner.covers(key, requested)
    }

    /// Takes `old`'s records, watermark and distrust (a cache rebuilt by a reload keeps what
    /// its predecessor was told; records of its own stay).
    pub fn take_over(&self, old: &Purges) {
        let copy = old.inner.read().unwrap_or_else(|e| e.into_inner()).clone();
        for p in copy.order {
            self.add(p);
        }
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.forgotten = inner.forgotten.max(copy.forgotten);
        inner.distrust = inner.distrust.max(copy.distrust);
        if inner.forgotten.is_some() || inner.distrust.is_some() {
            self.none.store(false, Ordering::Release);
        }
    }

    /// The purges recorded now.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .order
            .len()
    }

    /// Whether none is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_rebuilt_cache_takes_over_its_predecessors_purges() {
        let t = |s: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000 + s);
        let old = Purges::default();
        old.add(Purge {
            target: "a.test/x".into(),
            prefix: false,
            at: t(10),
        });
        old.distrust_before(t(1));
        let new = Purges::default();
        new.add(Purge {
            target: "a.test/y".into(),
            prefix: false,
            at: t(20),
        });
        new.take_over(&old);
        assert!(new.covers("a.test/x", t(5)), "the old record");
        assert!(new.covers("a.test/y", t(15)), "its own record");
        assert!(new.covers("a.test/z", t(1)), "the old distrust");
        assert!(!new.covers("a.test/x", t(11)));
        assert_eq!(new.len(), 2);
    }

    use super::*;

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn purge(target: &str, prefix: bool, s: u64) -> Purge {
        Purge {
            target: target.into(),
            prefix,
            at: at(s),
        }
    }

    #[test]
    fn a_key_purge_names_the_key_and_its_vary_entries_only() {
        let p = purge("a.test/page", false, 10);
        assert!(p.matches("a.test/page"));
        assert!(p.matches("a.test/page\0accept-language=fr"));
        assert!(!p.matches("a.test/page2"));
        assert!(!p.matches("a.test/pag"));
        assert!(p.matches("a.test/page\u{1f}header:x-device=mobile"));
        let p = purge("a.test/static/", true, 10);
        assert!(p.matches("a.test/static/app.js"));
        assert!(!p.matches("a.test/stat"));
    }

    #[test]
    fn only_entries_requested_at_or_before_the_purge_are_covered() {
        let purges = Purges::default();
        assert!(!purges.covers("a.test/page", at(5)), "nothing recorded");
        purges.add(purge("a.test/page", false, 10));
        assert!(purges.covers("a.test/page", at(5)));
        assert!(purges.covers("a.test/page", at(10)));
        assert!(!purges.covers("a.test/page", at(11)), "fetched after it");
        assert!(!purges.covers("a.test/other", at(5)));
        // A route's further key parts and a Vary part: the same URL.
        assert!(purges.covers("a.test/page\u{1f}header:x-device=tv", at(5)));
        assert!(purges.covers("a.test/page\0accept-language=fr", at(5)));
        assert!(!purges.covers("a.test/page2\u{1f}header:x-device=tv", at(5)));
    }

    #[test]
    fn forgotten_purges_leave_a_watermark_for_storing_only() {
        let purges = Purges::default();
        purges.add(purge("a.test/old", false, 10));
        purges.add(purge("a.test/new", false, 10 + REMEMBER.as_secs() + 1));
        assert_eq!(purges.len(), 1, "the old record is forgotten");
        // A response of any key whose request started before the forgotten purge is not
        // stored: the record that would have said whether it was covered is gone.
        assert!(purges.refuses("a.test/unrelated", at(9)));
        assert!(!purges.refuses("a.test/unrelated", at(11)));
        // What is stored already stays servable: the disk writer removed what it covered.
        assert!(!purges.covers("a.test/unrelated", at(9)));
        assert!(!purges.covers("a.test/old", at(9)));
    }

    #[test]
    fn distrust_covers_everything_requested_before_it() {
        let purges = Purges::default();
        purges.distrust_before(at(100));
        assert!(purges.covers("any/key", at(100)));
        assert!(purges.refuses("any/key", at(100)));
        assert!(!purges.covers("any/key", at(101)));
    }

    #[test]
    fn trust_lowers_the_distrust() {
        let purges = Purges::default();
        purges.distrust_before(at(100));
        purges.trust_from(at(50));
        assert!(purges.covers("any/key", at(50)));
        assert!(!purges.covers("any/key", at(51)));
    }

    #[test]
    fn a_record_line_comes_back_and_torn_lines_do_not() {
        let p = purge("a.test/x y?z=1", true, 42);
        assert_eq!(Purge::parse(p.line().trim_end()), Some(p));
        for torn in ["", "12", "12 k", "12 k ", "x k a", "12 q a"] {
            assert_eq!(Purge::parse(torn), None, "{torn:?}");
        }
    }
}
