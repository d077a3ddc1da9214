//! Background upgrades: a compressed variant served often is encoded again at its codec's
//! best level (gzip 9 with zlib-rs, brotli 11, zstd 19), and later hits get the smaller
//! bytes.
//!
//! The work runs on one thread of its own 19 nice levels below the serving threads by
//! default (`[cache] upgrade_share_percent = 1`), not on the offload pool: the pool's threads serve handshakes and compression that requests wait
//! for, while an upgrade can wait. At nice 19 the kernel gives it about 1.5% of a core the
//! event loop wants (CFS weight 15 against 1024) and all of an idle one, so the event loop
//! barely notices a brotli-11 pass and a gateway whose cores are always busy still upgrades,
//! slowly. (`SCHED_IDLE`, tried first, starved it outright on saturated cores: upgrades never
//! came.) The queue is bounded; an upgrade that finds it full is dropped, counted, and asked
//! for again `upgrade_after` hits later.

use bytes::Bytes;
use http::HeaderMap;
use sluice_cache::{CacheCounters, Entry, Store, Variant};
use sluice_compress::{BodyEncoder, Codec, Encoding, GzipBackend, compress_chunk};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// Upgrades waiting at most.
const QUEUE: usize = 64;

/// One variant to encode again.
pub(crate) struct Job {
    pub(crate) store: Store,
    pub(crate) primary: String,
    pub(crate) request: HeaderMap,
    pub(crate) entry: Arc<Entry>,
    pub(crate) codec: Codec,
}

/// The upgrade thread's queue.
#[derive(Debug)]
pub(crate) struct Upgrader {
    tx: SyncSender<Job>,
    counters: Arc<CacheCounters>,
}

/// The best level of `codec`: what an upgrade encodes with.
pub(crate) fn best(codec: Codec) -> Encoding {
    let (level, backend) = match codec {
        // ISA-L stops at level 3; zlib-rs's 9 is the smallest gzip.
        Codec::Gzip => (9, GzipBackend::ZlibRs),
        Codec::Brotli => (11, GzipBackend::ZlibRs),
        Codec::Zstd => (19, GzipBackend::ZlibRs),
    };
    Encoding {
        codec,
        level,
        backend,
        dictionary: false,
    }
}

impl Upgrader {
    /// Starts the upgrade thread, with `share_percent` of a busy core.
    pub(crate) fn start(
        counters: Arc<CacheCounters>,
        share_percent: u32,
    ) -> std::io::Result<Upgrader> {
        let (tx, rx) = sync_channel(QUEUE);
        let thread_counters = counters.clone();
        let nice = crate::handshakes::nice_for_share(share_percent);
        std::thread::Builder::new()
            .name("sluice-cache-upgrade".into())
            .spawn(move || run(rx, thread_counters, nice))?;
        Ok(Upgrader { tx, counters })
    }

    /// Queues `job`, or drops it (counted) when the queue is full.
    pub(crate) fn submit(&self, job: Job) {
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counters
                    .upgrades_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn run(rx: Receiver<Job>, counters: Arc<CacheCounters>, nice: i32) {
    if nice > 0 {
        crate::handshakes::lower_priority(crate::handshakes::Priority::Nice(nice));
    }
    while let Ok(job) = rx.recv() {
        upgrade(job, &counters);
    }
}

/// Encodes `job`'s identity body at the best level and puts it in place of the variant, if
/// it is smaller and the entry is still the one stored.
pub(crate) fn upgrade(job: Job, counters: &CacheCounters) -> bool {
    let token = job.codec.token();
    let Some(old) = job.entry.variant(token) else {
        return false;
    };
    let encoding = best(job.codec);
    let mut enc = BodyEncoder::new(encoding);
    let chunk = enc.job(job.entry.identity().clone(), true);
    let Ok(out) = compress_chunk(&chunk, "upgrade") else {
        return false;
    };
    let body: Bytes = enc.frame(out.bytes, true);
    let saved = (old.body.len() as u64).saturating_sub(body.len() as u64);
    // Smaller or not, it is the best level now: not tried again.
    let variant = if body.len() < old.body.len() {
        Variant::new(token, body, true)
    } else {
        Variant::new(token, old.body.clone(), true)
    };
    if job
        .store
        .add_variant(&job.primary, &job.request, &job.entry, variant)
    {
        counters.upgraded(token, saved);
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_cache::Timing;
    use std::time::{Duration, SystemTime};

    /// The nice value of this process's thread named `comm` (truncated to 15 bytes, as the
    /// kernel keeps it), from /proc.
    fn nice_of(comm: &str) -> Option<i64> {
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let dir = task.ok()?.path();
            if std::fs::read_to_string(dir.join("comm")).ok()?.trim() == comm {
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                // Fields after the parenthesised name: state is field 3, nice field 19.
                let rest = &stat[stat.rfind(')')? + 2..];
                return rest.split(' ').nth(16)?.parse().ok();
            }
        }
        None
    }

    #[test]
    fn the_upgrade_thread_runs_nice_by_its_share() {
        let counters = Arc::new(CacheCounters::default());
        let _u = Upgrader::start(counters, 1).unwrap();
        let mut nice = None;
        for _ in 0..200 {
            nice = nice_of("sluice-cache-up");
            if nice == Some(19) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(nice, Some(19), "1% of a busy core is nice 19");
    }

    #[test]
    fn an_upgraded_variant_is_smaller_and_decodes_to_the_same_bytes() {
        let page: Vec<u8> = (0..2000)
            .flat_map(|i| {
                format!("<li class=\"item\">entry {i} of the gateway list</li>\n").into_bytes()
            })
            .collect();
        let identity = Bytes::from(page.clone());
        let fast = Encoding {
            codec: Codec::Brotli,
            level: 1,
            backend: GzipBackend::ZlibRs,
            dictionary: false,
        };
        let mut enc = BodyEncoder::new(fast);
        let out = compress_chunk(&enc.job(identity.clone(), true), "test").unwrap();
        let fast_body = enc.frame(out.bytes, true);
        let store = Store::new(64 << 20);
        let now = SystemTime::now();
        let entry = Entry {
            status: http::StatusCode::OK,
            headers: HeaderMap::new(),
            timing: Timing::new(now, now, &HeaderMap::new()),
            lifetime: Duration::from_secs(60),
            variants: vec![
                Variant::new("identity", identity, false),
                Variant::new("br", fast_body.clone(), false),
            ],
        };
        let key = Store::primary_key("a.test", "/page");
        store.insert(&key, &HeaderMap::new(), entry);
        let current = store.lookup(&key, &HeaderMap::new()).unwrap();
        let counters = CacheCounters::default();
        let job = Job {
            store: store.clone(),
            primary: key.clone(),
            request: HeaderMap::new(),
            entry: current,
            codec: Codec::Brotli,
        };
        assert!(upgrade(job, &counters));
        let now = store.lookup(&key, &HeaderMap::new()).unwrap();
        let br = now.variant("br").unwrap();
        assert!(br.best);
        assert!(
            br.body.len() < fast_body.len(),
            "{} !< {}",
            br.body.len(),
            fast_body.len()
        );
        let mut decoded = Vec::new();
        brotli_decompressor::BrotliDecompress(&mut &br.body[..], &mut decoded).unwrap();
        assert_eq!(decoded, page);
        assert_eq!(counters.snapshot().upgrades[2], ("br", 1));
    }
}
