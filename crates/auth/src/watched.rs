//! A file read into a value and read again when it changes (an htpasswd or key file edited
//! in place, or replaced by `mv`): its size, modification time and inode are looked at every
//! second; a change that does not parse leaves the old contents in force, logged and
//! counted, as NGINX would keep serving with its last good configuration.

use crate::counters::AuthCounters;
use arc_swap::ArcSwap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the file is looked at.
const POLL: Duration = Duration::from_secs(1);

/// What identifies a version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ino: m.ino(),
    })
}

/// A parsed file kept current.
pub(crate) struct Watched<T> {
    path: PathBuf,
    value: ArcSwap<T>,
    parse: fn(&str) -> Result<T, String>,
    seen: std::sync::Mutex<Option<Stamp>>,
    /// Bumped with every new value (caches of what was verified against it compare it).
    generation: std::sync::atomic::AtomicU64,
    counters: Arc<AuthCounters>,
}

impl<T: Send + Sync + 'static> Watched<T> {
    /// Reads and parses `path`; an error names the file (and the parser's line).
    pub(crate) fn open(
        path: &Path,
        parse: fn(&str) -> Result<T, String>,
        counters: &Arc<AuthCounters>,
    ) -> Result<Arc<Self>, String> {
        let seen = stamp(path);
        let value = read(path, parse)?;
        Ok(Arc::new(Watched {
            path: path.to_owned(),
            value: ArcSwap::from_pointee(value),
            parse,
            seen: std::sync::Mutex::new(seen),
            generation: Default::default(),
            counters: counters.clone(),
        }))
    }

    /// Starts looking for changes; stops when the last holder lets it go.
    pub(crate) fn start(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(this) = weak.upgrade() else { return };
                this.check();
            }
        });
    }

    /// Reads the file again if it changed.
    pub(crate) fn check(&self) {
        let now = stamp(&self.path);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if *seen == now {
                return;
            }
            *seen = now;
        }
        match read(&self.path, self.parse) {
            Ok(v) => {
                self.value.store(Arc::new(v));
                self.generation.fetch_add(1, Ordering::AcqRel);
                self.counters.files_reloaded.fetch_add(1, Ordering::Relaxed);
                tracing::info!(file = %self.path.display(), "reloaded");
            }
            Err(e) => {
                self.counters.files_refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("{e}; the previous contents stay in force");
            }
        }
    }

    /// The contents now, and their generation.
    pub(crate) fn current(&self) -> (Arc<T>, u64) {
        (
            self.value.load_full(),
            self.generation.load(Ordering::Acquire),
        )
    }
}

fn read<T>(path: &Path, parse: fn(&str) -> Result<T, String>) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Result<Vec<String>, String> {
        if text.contains("bad") {
            return Err("line 1: bad".to_owned());
        }
        Ok(text.lines().map(str::to_owned).collect())
    }

    #[test]
    fn a_changed_file_is_read_again_and_a_broken_change_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "a\n").unwrap();
        let counters = Arc::new(AuthCounters::default());
        let w = Watched::open(&path, lines, &counters).unwrap();
        assert_eq!(*w.current().0, ["a"]);
        // Replaced as editors and `htpasswd` do (a new file renamed over the old one).
        let tmp = dir.path().join("f.new");
        std::fs::write(&tmp, "a\nb\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        w.check();
        let (v, generation) = w.current();
        assert_eq!(*v, ["a", "b"]);
        assert_eq!(generation, 1);
        std::fs::write(&tmp, "bad\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        w.check();
        assert_eq!(*w.current().0, ["a", "b"], "the last good contents stay");
        assert_eq!(counters.files_refused.load(Ordering::Relaxed), 1);
        let Err(e) = Watched::open(&dir.path().join("missing"), lines, &counters) else {
            panic!("a missing file opened");
        };
        assert!(e.contains("missing"), "{e}");
    }
}
