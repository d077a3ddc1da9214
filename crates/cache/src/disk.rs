//! The disk tier: entries written to files under `[cache.disk] path`, so that a restart
//! starts warm and the pages the memory bound evicted are still served without a trip
//! upstream.
//!
//! One file per entry (primary key with its Vary key), named by a hash of that key and
//! holding the key itself, the head, the timing and every variant's bytes. Files are written
//! whole to a temporary name and renamed into place, so a reader or a crash never sees half
//! an entry; a file that does not parse is removed and counted. The index (key, size, last
//! use) lives in memory and is rebuilt at start by reading each file's head; the bound evicts
//! the least recently used files.
//!
//! A purge is recorded in the file `purges` (appended, synced) before the files it covers are
//! removed; opening the tier again removes what that file covers and then the file, so a
//! purge the process did not finish is finished at the next start (`crate::purge`).
//!
//! Every call here blocks on the file system: the store calls it from its writer thread and
//! from blocking tasks, never from the event loop.

use crate::entry::{Entry, Variant};
use crate::freshness::Timing;
use crate::purge::Purge;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use std::collections::HashMap;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAGIC: &[u8; 8] = b"SLUICE1\n";
const SUFFIX: &str = "entry";
/// The purges recorded and not yet finished (see the module's doc).
const PURGES: &str = "purges";

/// The disk tier's size and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Bytes its files take.
    pub bytes: u64,
    /// Its bound.
    pub max_bytes: u64,
    /// Entries on disk.
    pub entries: u64,
    /// Entries read back into memory.
    pub reads: u64,
    /// Files written.
    pub writes: u64,
    /// Files that did not parse (removed).
    pub corrupt: u64,
}

/// The disk tier.
#[derive(Debug)]
pub struct DiskTier {
    dir: PathBuf,
    max_bytes: u64,
    index: Mutex<Index>,
    /// Files that did not parse and were removed.
    pub corrupt: AtomicU64,
    /// Files written.
    pub writes: AtomicU64,
    /// Entries read back into memory.
    pub reads: AtomicU64,
}

#[derive(Debug, Default)]
struct Index {
    files: HashMap<String, FileMeta>,
    /// Per primary key, the Vary fields of its entries on disk.
    vary: HashMap<String, Vec<String>>,
    bytes: u64,
    clock: u64,
}

#[derive(Debug, Clone)]
struct FileMeta {
    path: PathBuf,
    size: u64,
    used: u64,
    /// When its response's request started (what a purge is compared with).
    requested: SystemTime,
}

/// What opening the tier reads from each file's head.
struct FileHead {
    size: u64,
    key: String,
    primary: String,
    vary: Vec<String>,
    requested: SystemTime,
}

/// FNV-1a, 64 bits: a file name stable across builds (the file holds its key, which is
/// what is checked).
fn fnv(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn time(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

/// An entry as file bytes.
fn encode(key: &str, primary: &str, vary: &[String], entry: &Entry) -> Vec<u8> {
    let bodies: usize = entry.variants.iter().map(|v| v.body.len()).sum();
    let mut out = Vec::with_capacity(256 + bodies);
    out.extend_from_slice(MAGIC);
    let put = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    };
    put(&mut out, key.as_bytes());
    put(&mut out, primary.as_bytes());
    put(&mut out, vary.join("\n").as_bytes());
    out.extend_from_slice(&entry.status.as_u16().to_le_bytes());
    for n in [
        nanos(entry.timing.request_time),
        nanos(entry.timing.response_time),
        u64::try_from(entry.timing.initial_age.as_nanos()).unwrap_or(u64::MAX),
        u64::try_from(entry.lifetime.as_nanos()).unwrap_or(u64::MAX),
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&(entry.headers.len() as u32).to_le_bytes());
    for (name, value) in &entry.headers {
        put(&mut out, name.as_str().as_bytes());
        put(&mut out, value.as_bytes());
    }
    out.push(entry.variants.len() as u8);
    for v in &entry.variants {
        put(&mut out, v.coding.as_bytes());
        out.push(u8::from(v.best));
        put(&mut out, &v.body);
    }
    out
}

/// Reads what `encode` wrote; `None` for anything else.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.data.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
}

/// The head of a file: its key, primary key, Vary fields and when its request started.
fn head(data: &[u8]) -> Option<(String, String, Vec<String>, SystemTime)> {
    if data.get(..MAGIC.len())? != MAGIC {
        return None;
    }
    let mut r = Reader {
        data,
        at: MAGIC.len(),
    };
    let key = r.text()?.to_owned();
    let primary = r.text()?.to_owned();
    let vary = r.text()?;
    let vary = if vary.is_empty() {
        Vec::new()
    } else {
        vary.split('\n').map(str::to_owned).collect()
    };
    let _status = r.u16()?;
    let requested = time(r.u64()?);
    Some((key, primary, vary, requested))
}

/// A whole file back as its key and entry.
fn decode(data: &Bytes) -> Option<(String, Entry)> {
    let (key, ..) = head(data)?;
    let mut r = Reader {
        data,
        at: MAGIC.len(),
    };
    let _ = (r.bytes()?, r.bytes()?, r.bytes()?);
    let status = StatusCode::from_u16(r.u16()?).ok()?;
    let (request, response, age, lifetime) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let mut headers = HeaderMap::new();
    for _ in 0..r.u32()? {
        let name = HeaderName::from_bytes(r.bytes()?).ok()?;
        let value = HeaderValue::from_bytes(r.bytes()?).ok()?;
        headers.append(name, value);
    }
    let mut variants = Vec::new();
    for _ in 0..r.u8()? {
        let coding: &'static str = match r.text()? {
            "identity" => "identity",
            "gzip" => "gzip",
            "br" => "br",
            "zstd" => "zstd",
            _ => return None,
        };
        let best = r.u8()? == 1;
        let n = r.u32()? as usize;
        let start = r.at;
        r.take(n)?;
        variants.push(Variant::new(coding, data.slice(start..start + n), best));
    }
    if r.at != data.len() || variants.first().is_none_or(|v| v.coding != "identity") {
        return None;
    }
    Some((
        key,
        Entry {
            status,
            headers,
            timing: Timing {
                request_time: time(request),
                response_time: time(response),
                initial_age: Duration::from_nanos(age),
            },
            lifetime: Duration::from_nanos(lifetime),
            variants,
        },
    ))
}

impl DiskTier {
    /// Opens (creating it, mode 0700) the tier at `dir`, bounded by `max_bytes`, and indexes
    /// the entries a previous run left there.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<DiskTier> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let tier = DiskTier {
            dir: dir.to_path_buf(),
            max_bytes,
            index: Mutex::new(Index::default()),
            corrupt: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        };
        let mut found: Vec<(SystemTime, PathBuf, FileHead)> = Vec::new();
        for item in std::fs::read_dir(dir)? {
            let item = item?;
            let path = item.path();
            if path.extension().and_then(|e| e.to_str()) != Some(SUFFIX) {
                // A temporary file a crash left behind.
                if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            let meta = item.metadata()?;
            let mut first = vec![0u8; 64 << 10];
            let n = std::fs::File::open(&path)?.read(&mut first)?;
            match head(&first[..n]) {
                Some((key, primary, vary, requested)) => found.push((
                    meta.modified().unwrap_or(UNIX_EPOCH),
                    path,
                    FileHead {
                        size: meta.len(),
                        key,
                        primary,
                        vary,
                        requested,
                    },
                )),
                None => {
                    tier.corrupt.fetch_add(1, Ordering::Relaxed);
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        // Oldest first: the last written wins a key found twice, and is the last evicted.
        found.sort_by_key(|f| f.0);
        {
            let mut idx = tier.lock();
            for (_, path, f) in found {
                idx.clock += 1;
                let meta = FileMeta {
                    path,
                    size: f.size,
                    used: idx.clock,
                    requested: f.requested,
                };
                if let Some(old) = idx.files.insert(f.key, meta) {
                    idx.bytes -= old.size;
                }
                idx.bytes += f.size;
                if !f.vary.is_empty() {
                    idx.vary.insert(f.primary, f.vary);
                }
            }
        }
        tier.finish_purges()?;
        tier.evict();
        Ok(tier)
    }

    /// Removes what the purges recorded by an earlier run cover, then their record.
    fn finish_purges(&self) -> io::Result<()> {
        let path = self.dir.join(PURGES);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for purge in text.lines().filter_map(Purge::parse) {
            self.purge(&purge);
        }
        std::fs::remove_file(&path)
    }

    /// Records `purge` in the purge file (appended and synced: it is finished at the next
    /// start if this process stops first).
    pub fn record_purge(&self, purge: &Purge) -> io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(PURGES))?;
        f.write_all(purge.line().as_bytes())?;
        f.sync_data()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes the files take.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Entries on disk.
    pub fn len(&self) -> usize {
        self.lock().files.len()
    }

    /// Whether nothing is on disk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its counters and size now.
    pub fn stats(&self) -> DiskStats {
        let (bytes, entries) = {
            let idx = self.lock();
            (idx.bytes, idx.files.len() as u64)
        };
        DiskStats {
            bytes,
            max_bytes: self.max_bytes,
            entries,
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            corrupt: self.corrupt.load(Ordering::Relaxed),
        }
    }

    /// The Vary fields of `primary`'s entries on disk.
    pub fn vary(&self, primary: &str) -> Option<Vec<String>> {
        self.lock().vary.get(primary).cloned()
    }

    /// Whether `key` is on disk.
    pub fn contains(&self, key: &str) -> bool {
        self.lock().files.contains_key(key)
    }

    /// Writes `entry` under `key` (replacing what was there), then evicts to the bound.
    pub fn write(
        &self,
        key: &str,
        primary: &str,
        vary: &[String],
        entry: &Entry,
    ) -> io::Result<()> {
        let data = encode(key, primary, vary, entry);
        if data.len() as u64 > self.max_bytes / 8 {
            return Ok(());
        }
        let path = self.dir.join(format!("{:016x}.{SUFFIX}", fnv(key)));
        let tmp = self.dir.join(format!("{:016x}.tmp", fnv(key)));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&data)?;
        }
        std::fs::rename(&tmp, &path)?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        {
            let mut idx = self.lock();
            idx.clock += 1;
            let used = idx.clock;
            let meta = FileMeta {
                path,
                size: data.len() as u64,
                used,
                requested: entry.timing.request_time,
            };
            // Another key with the same hash shared this file: it is gone now.
            let same_file: Vec<String> = idx
                .files
                .iter()
                .filter(|(k, m)| m.path == meta.path && *k != key)
                .map(|(k, _)| k.clone())
                .collect();
            for k in same_file {
                if let Some(m) = idx.files.remove(&k) {
                    idx.bytes -= m.size;
                }
            }
            if let Some(old) = idx.files.insert(key.to_owned(), meta) {
                idx.bytes -= old.size;
            }
            idx.bytes += data.len() as u64;
            if vary.is_empty() {
                idx.vary.remove(primary);
            } else {
                idx.vary.insert(primary.to_owned(), vary.to_vec());
            }
        }
        self.evict();
        Ok(())
    }

    /// The entry stored under `key`, if its file is there and whole.
    pub fn read(&self, key: &str) -> Option<Entry> {
        let path = {
            let mut idx = self.lock();
            idx.clock += 1;
            let clock = idx.clock;
            let meta = idx.files.get_mut(key)?;
            meta.used = clock;
            meta.path.clone()
        };
        let mut data = Vec::new();
        let read = std::fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut data));
        match read.ok().and_then(|_| decode(&Bytes::from(data))) {
            Some((k, entry)) if k == key => {
                self.reads.fetch_add(1, Ordering::Relaxed);
                Some(entry)
            }
            Some(_) => None,
            None => {
                self.corrupt.fetch_add(1, Ordering::Relaxed);
                self.remove(key);
                None
            }
        }
    }

    /// Removes `key`'s file.
    pub fn remove(&self, key: &str) {
        let meta = {
            let mut idx = self.lock();
            let m = idx.files.remove(key);
            if let Some(m) = &m {
                idx.bytes -= m.size;
            }
            m
        };
        if let Some(m) = meta {
            let _ = std::fs::remove_file(m.path);
        }
    }

    /// Removes every file `purge` covers: its key matches and its request started at or
    /// before the purge (a file written from a later fetch stays).
    pub fn purge(&self, purge: &Purge) {
        let keys: Vec<String> = {
            let idx = self.lock();
            idx.files
                .iter()
                .filter(|(k, m)| purge.covers(k, m.requested))
                .map(|(k, _)| k.clone())
                .collect()
        };
        for k in keys {
            self.remove(&k);
        }
        // A primary key's Vary fields go with its last file.
        let mut idx = self.lock();
        let left: std::collections::HashSet<&str> = idx
            .files
            .keys()
            .filter_map(|k| k.split_once('\0').map(|(p, _)| p))
            .collect();
        let emptied: Vec<String> = idx
            .vary
            .keys()
            .filter(|p| purge.matches(p) && !left.contains(p.as_str()))
            .cloned()
            .collect();
        for p in emptied {
            idx.vary.remove(&p);
        }
    }

    /// Removes the least recently used files until the bound holds.
    fn evict(&self) {
        loop {
            let victim = {
                let idx = self.lock();
                if idx.bytes <= self.max_bytes {
                    return;
                }
                idx.files
                    .iter()
                    .min_by_key(|(_, m)| m.used)
                    .map(|(k, _)| k.clone())
            };
            match victim {
                Some(k) => self.remove(&k),
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &'static [u8], vary: Option<&'static str>) -> Entry {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/html"));
        headers.append("x-bytes", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        if let Some(v) = vary {
            headers.insert("vary", HeaderValue::from_static(v));
        }
        let now = SystemTime::now();
        Entry {
            status: StatusCode::OK,
            headers,
            timing: Timing::new(now, now, &HeaderMap::new()),
            lifetime: Duration::from_secs(60),
            variants: vec![
                Variant::new("identity", Bytes::from_static(body), false),
                Variant::new("br", Bytes::from_static(b"compressed"), true),
            ],
        }
    }

    #[test]
    fn entries_come_back_whole_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let e = entry(b"hello world", None);
        {
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            t.write("a.test/x", "a.test/x", &[], &e).unwrap();
            let v = vec!["accept-language".to_owned()];
            t.write(
                "a.test/v\0en",
                "a.test/v",
                &v,
                &entry(b"en", Some("Accept-Language")),
            )
            .unwrap();
        }
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.vary("a.test/v"), Some(vec!["accept-language".to_owned()]));
        let back = t.read("a.test/x").unwrap();
        assert_eq!(back.status, e.status);
        assert_eq!(back.headers, e.headers);
        assert_eq!(back.timing, e.timing);
        assert_eq!(back.lifetime, e.lifetime);
        assert_eq!(&back.identity()[..], b"hello world");
        let br = back.variant("br").unwrap();
        assert!(br.best);
        assert_eq!(&br.body[..], b"compressed");
        assert_eq!(&t.read("a.test/v\0en").unwrap().identity()[..], b"en");
        assert!(t.read("a.test/missing").is_none());
    }

    #[test]
    fn a_broken_file_is_removed_and_counted_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        t.write("a.test/x", "a.test/x", &[], &entry(b"hello", None))
            .unwrap();
        let path = dir
            .path()
            .join(format!("{:016x}.{SUFFIX}", fnv("a.test/x")));
        let mut data = std::fs::read(&path).unwrap();
        data.truncate(data.len() - 3);
        std::fs::write(&path, &data).unwrap();
        assert!(t.read("a.test/x").is_none());
        assert_eq!(t.corrupt.load(Ordering::Relaxed), 1);
        assert!(!path.exists());
        std::fs::write(dir.path().join("junk.entry"), b"not an entry").unwrap();
        std::fs::write(dir.path().join("half.tmp"), b"half").unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.corrupt.load(Ordering::Relaxed), 1);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn the_bound_evicts_the_least_recently_used_and_purge_removes_files() {
        let dir = tempfile::tempdir().unwrap();
        static BODY: [u8; 5_000] = [b'x'; 5_000];
        let t = DiskTier::open(dir.path(), 50_000).unwrap();
        for i in 0..4 {
            let k = format!("a.test/{i}");
            t.write(&k, &k, &[], &entry(&BODY, None)).unwrap();
        }
        assert!(t.read("a.test/0").is_some(), "used: the last to go");
        for i in 4..12 {
            let k = format!("a.test/{i}");
            t.write(&k, &k, &[], &entry(&BODY, None)).unwrap();
        }
        assert!(t.bytes() <= 50_000, "{}", t.bytes());
        assert!(t.contains("a.test/0"));
        assert!(!t.contains("a.test/1"));
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, t.len());
        t.purge(&Purge {
            target: "a.test/".into(),
            prefix: true,
            at: SystemTime::now(),
        });
        assert!(t.is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_purge_spares_later_fetches_and_a_recorded_one_is_finished_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let old = entry(b"old", None);
        t.write("a.test/old", "a.test/old", &[], &old).unwrap();
        let purge = Purge {
            target: "a.test/".into(),
            prefix: true,
            at: old.timing.request_time + Duration::from_secs(1),
        };
        let mut later = entry(b"later", None);
        later.timing.request_time = purge.at + Duration::from_secs(1);
        t.write("a.test/later", "a.test/later", &[], &later)
            .unwrap();
        // Recorded, and the process stops before it removed anything.
        t.record_purge(&purge).unwrap();
        drop(t);
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert!(!t.contains("a.test/old"), "finished at the next open");
        assert_eq!(&t.read("a.test/later").unwrap().identity()[..], b"later");
        assert!(
            !dir.path().join(PURGES).exists(),
            "the record goes once done"
        );
        // And live: only what was requested before the purge goes.
        t.purge(&purge);
        assert!(t.contains("a.test/later"));
    }
}
