//! Background upgrades: a compressed variant served often is encoded again at its codec's
//! best level (gzip 9 with zlib-rs, brotli 11, zstd 19), and later hits get the smaller
//! bytes.
//!
//! The work runs on one thread of its own under `SCHED_IDLE`, not on the offload pool: the
//! pool's threads serve handshakes and compression that requests wait for, while an
//! upgrade is wanted only when a core has nothing better to do. `SCHED_IDLE` gives it exactly
//! that (the kernel runs it only when no normal thread wants the core), so the event loop and
//! the pool never wait behind a brotli-11 pass. The queue is bounded; an upgrade that finds
//! it full is dropped, counted, and asked for again `upgrade_after` hits later.

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
    /// Starts the upgrade thread.
    pub(crate) fn start(counters: Arc<CacheCounters>) -> std::io::Result<Upgrader> {
        let (tx, rx) = sync_channel(QUEUE);
        let thread_counters = counters.clone();
        std::thread::Builder::new()
            .name("sluice-cache-upgrade".into())
            .spawn(move || run(rx, thread_counters))?;
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

fn run(rx: Receiver<Job>, counters: Arc<CacheCounters>) {
    if !sluice_offload::idle::lower_to_idle() {
        tracing::warn!(
            "the kernel refused SCHED_IDLE for the cache's upgrade thread; it runs at the normal priority"
        );
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
