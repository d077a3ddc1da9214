//! Shipping the access log to log stores (`[[log.ship]]`): over HTTP in batches of JSON
//! lines, Elasticsearch `_bulk` bodies or OTLP logs ([`http`]), or to syslog as RFC 5424
//! messages over UDP, TCP or TLS ([`syslog`]).
//!
//! An outage of the store is ridden out in memory, bounded: the queue holds `queue` bytes
//! (8 MiB by default, about 18,000 lines; size it for the outage to be survived, such as
//! `queue = "256m"` for ten minutes at 1,000 lines/s) and the lines beyond are dropped and
//! counted, never spilled to disk. The access log file, when configured, is already the
//! record on disk of every line; a spill file would be a second copy written on the request
//! path's disk at the moment the store is down, competing with it.
//!
//! A request thread only appends its line (already framed for the shipper) to the shipper's
//! queue, a byte buffer bounded by `queue`: when the store is slow or down the queue fills
//! and further lines are dropped and counted, so a request never waits on a log store. Each
//! shipper is a task on one thread of their own (with its own runtime, so that a reload or
//! a busy event loop does not hold the sends): it takes a batch when `batch` lines have
//! gathered or `flush` has passed, sends it, and on failure keeps the batch and retries with
//! exponential back-off (100 ms doubling to 30 s) while new lines queue behind it. A store
//! that answers that it will never take a batch (a 4xx other than 408 and 429) has the batch
//! dropped and counted as rejected rather than retried forever.

mod http;
mod syslog;

use super::entry::Entry;
use sluice_config::{LogShip, ShipSink, SyslogTransport};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The first wait after a failed send; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Bytes that wake a shipper before its batch has `batch` lines.
const WAKE_AT: usize = 1 << 20;

/// Every shipper of one `[log]` configuration, and the thread that runs them.
#[derive(Debug)]
pub(crate) struct Shipping {
    settings: Vec<LogShip>,
    shippers: Vec<Arc<Shipper>>,
}

impl Shipping {
    /// Starts the shippers of `settings` on a thread of their own; `None` when there are none.
    pub(crate) fn start(settings: &[LogShip]) -> std::io::Result<Option<Arc<Self>>> {
        if settings.is_empty() {
            return Ok(None);
        }
        let shippers: Vec<Arc<Shipper>> = settings
            .iter()
            .map(|s| Arc::new(Shipper::new(s.clone())))
            .collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let tasks = shippers.clone();
        std::thread::Builder::new()
            .name("sluice-log-ship".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let handles: Vec<_> = tasks.into_iter().map(|s| tokio::spawn(run(s))).collect();
                    for h in handles {
                        let _ = h.await;
                    }
                });
            })?;
        Ok(Some(Arc::new(Shipping {
            settings: settings.to_vec(),
            shippers,
        })))
    }

    pub(crate) fn settings(&self) -> &[LogShip] {
        &self.settings
    }

    /// Queues `e`'s line (`json`, with its newline) on every shipper.
    pub(crate) fn push(&self, e: &Entry, json: &str) {
        for s in &self.shippers {
            s.push(e, json);
        }
    }

    pub(crate) fn snapshots(&self) -> Vec<ShipperSnapshot> {
        self.shippers.iter().map(|s| s.snapshot()).collect()
    }

    /// Asks every shipper to send what it holds now, and waits up to `wait` for the queues
    /// to empty (at shutdown).
    pub(crate) fn drain(&self, wait: Duration) {
        for s in &self.shippers {
            s.flush_now.store(true, Ordering::Relaxed);
            s.wake.notify_one();
        }
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline
            && self
                .shippers
                .iter()
                .any(|s| s.queued_bytes() > 0 || s.sending.load(Ordering::Relaxed))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Shipping {
    /// A configuration replaced by a reload (or the last, at exit): its shippers send what
    /// they hold (one try each) and their thread ends.
    fn drop(&mut self) {
        for s in &self.shippers {
            s.closed.store(true, Ordering::Relaxed);
            s.wake.notify_one();
        }
    }
}

/// One shipper's queue and counters.
#[derive(Debug)]
struct Shipper {
    settings: LogShip,
    queue: Mutex<Queue>,
    wake: Notify,
    closed: AtomicBool,
    flush_now: AtomicBool,
    sending: AtomicBool,
    counters: Counters,
    last_error: Mutex<Option<String>>,
}

/// Lines waiting, each ending with `\n` (JSON escapes its newlines; syslog headers have none).
#[derive(Debug, Default)]
struct Queue {
    bytes: Vec<u8>,
    lines: usize,
    /// When the oldest waiting line came.
    since: Option<Instant>,
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    dropped: AtomicU64,
    rejected: AtomicU64,
    batches: AtomicU64,
    failures: AtomicU64,
}

/// A shipper's state for `/metrics` and `/status`.
#[derive(Debug, Clone)]
pub struct ShipperSnapshot {
    /// Its name.
    pub name: String,
    /// `http` or `syslog`.
    pub kind: &'static str,
    /// Where it sends (the url as configured).
    pub target: String,
    /// Lines the store took.
    pub sent: u64,
    /// Lines dropped because the queue was full.
    pub dropped: u64,
    /// Lines the store refused for good (a 4xx answer, an item error in a bulk answer, a
    /// datagram the network would not take).
    pub rejected: u64,
    /// Batches sent.
    pub batches: u64,
    /// Sends that failed (each retried).
    pub failures: u64,
    /// Bytes waiting now.
    pub queued_bytes: usize,
    /// Its bound.
    pub queue_limit: usize,
    /// The last failure, if the last send failed.
    pub last_error: Option<String>,
}

impl Shipper {
    fn new(settings: LogShip) -> Self {
        Shipper {
            settings,
            queue: Mutex::default(),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            flush_now: AtomicBool::new(false),
            sending: AtomicBool::new(false),
            counters: Counters::default(),
            last_error: Mutex::new(None),
        }
    }

    fn push(&self, e: &Entry, json: &str) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.bytes.len();
        match &self.settings.sink {
            ShipSink::Http { .. } => q.bytes.extend_from_slice(json.as_bytes()),
            ShipSink::Syslog {
                facility, app_name, ..
            } => syslog::frame(&mut q.bytes, e, *facility, app_name, json),
        }
        if q.bytes.len() > self.settings.queue_bytes {
            q.bytes.truncate(before);
            drop(q);
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.lines += 1;
        if q.since.is_none() {
            q.since = Some(Instant::now());
        }
        let full = q.lines >= self.settings.batch_lines || q.bytes.len() >= WAKE_AT;
        drop(q);
        if full {
            self.wake.notify_one();
        }
    }

    fn queued_bytes(&self) -> usize {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bytes
            .len()
    }

    fn snapshot(&self) -> ShipperSnapshot {
        let c = &self.counters;
        let (kind, target) = match &self.settings.sink {
            ShipSink::Http { url, .. } => ("http", url.to_string()),
            ShipSink::Syslog {
                address, transport, ..
            } => (
                "syslog",
                format!(
                    "{}://{address}",
                    match transport {
                        SyslogTransport::Udp => "udp",
                        SyslogTransport::Tcp => "tcp",
                        SyslogTransport::Tls { .. } => "tls",
                    }
                ),
            ),
        };
        ShipperSnapshot {
            name: self.settings.name.clone(),
            kind,
            target,
            sent: c.sent.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            queued_bytes: self.queued_bytes(),
            queue_limit: self.settings.queue_bytes,
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// The oldest `batch` lines (all of them when `all`), taken off the queue.
    fn take_batch(&self, all: bool) -> Option<Batch> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.lines == 0 {
            return None;
        }
        let n = if all {
            q.lines
        } else {
            q.lines.min(self.settings.batch_lines)
        };
        let bytes = if n == q.lines {
            q.since = None;
            std::mem::take(&mut q.bytes)
        } else {
            let end = q
                .bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(n - 1)
                .map_or(q.bytes.len(), |(i, _)| i + 1);
            let rest = q.bytes.split_off(end);
            q.since = Some(Instant::now());
            std::mem::replace(&mut q.bytes, rest)
        };
        q.lines -= n;
        Some(Batch {
            bytes: bytes.into(),
            lines: n,
        })
    }

    /// Whether a batch should go now, and otherwise how long until the oldest line is due.
    fn due(&self) -> Result<(), Duration> {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = q.since else {
            return Err(self.settings.flush_every);
        };
        if q.lines >= self.settings.batch_lines || q.bytes.len() >= WAKE_AT {
            return Ok(());
        }
        match self.settings.flush_every.checked_sub(since.elapsed()) {
            Some(left) if !left.is_zero() => Err(left),
            _ => Ok(()),
        }
    }

    fn failed(&self, why: String) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(shipper = %self.settings.name, "log shipping failed: {why}");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }
}

/// Lines taken off a queue together.
pub(crate) struct Batch {
    /// The lines, each ending with `\n`.
    pub(crate) bytes: bytes::Bytes,
    pub(crate) lines: usize,
}

impl Batch {
    /// Each line without its `\n`.
    pub(crate) fn lines(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty())
    }
}

/// What a send came to.
pub(crate) enum Sent {
    /// Taken, but for `rejected` lines the store refused (bulk item errors).
    Ok { rejected: usize },
    /// Refused for good (the store will not take this batch however often it is sent).
    Rejected(String),
    /// Failed for now; try again.
    Retry(String),
}

/// A connection to the sink, kept between batches.
enum Sink {
    Http(Box<http::Client>),
    Syslog(syslog::Client),
}

impl Sink {
    async fn send(&mut self, batch: &Batch) -> Sent {
        match self {
            Sink::Http(c) => c.send(batch).await,
            Sink::Syslog(c) => c.send(batch).await,
        }
    }
}

/// One shipper's task: batches off the queue, each sent until it is taken or refused.
async fn run(s: Arc<Shipper>) {
    let mut sink = match &s.settings.sink {
        ShipSink::Http {
            url,
            format,
            headers,
            ca,
            client_identity,
        } => Sink::Http(Box::new(http::Client::new(
            url.clone(),
            format.clone(),
            headers,
            (ca.clone(), client_identity.clone()),
            s.settings.timeout,
        ))),
        ShipSink::Syslog {
            address, transport, ..
        } => Sink::Syslog(syslog::Client::new(
            address.clone(),
            transport,
            s.settings.timeout,
        )),
    };
    loop {
        let closing = s.closed.load(Ordering::Relaxed);
        let now = s.flush_now.swap(false, Ordering::Relaxed) || closing;
        if !now && let Err(wait) = s.due() {
            tokio::select! {
                () = s.wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
            continue;
        }
        s.sending.store(true, Ordering::Relaxed);
        while let Some(batch) = s.take_batch(false) {
            send(&s, &mut sink, &batch, closing).await;
        }
        s.sending.store(false, Ordering::Relaxed);
        if closing {
            return;
        }
    }
}

/// Sends `batch` until it is taken or refused; `once` (closing) tries it a single time.
async fn send(s: &Shipper, sink: &mut Sink, batch: &Batch, once: bool) {
    let mut backoff = FIRST_BACKOFF;
    let c = &s.counters;
    loop {
        match sink.send(batch).await {
            Sent::Ok { rejected } => {
                c.sent
                    .fetch_add((batch.lines - rejected) as u64, Ordering::Relaxed);
                c.rejected.fetch_add(rejected as u64, Ordering::Relaxed);
                c.batches.fetch_add(1, Ordering::Relaxed);
                *s.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                return;
            }
            Sent::Rejected(why) => {
                c.rejected.fetch_add(batch.lines as u64, Ordering::Relaxed);
                s.failed(why);
                return;
            }
            Sent::Retry(why) => {
                s.failed(why);
                if once || s.closed.load(Ordering::Relaxed) {
                    c.dropped.fetch_add(batch.lines as u64, Ordering::Relaxed);
                    return;
                }
                // A reload or shutdown ends the wait; the batch then gets one more try.
                let until = tokio::time::Instant::now() + backoff;
                while tokio::time::Instant::now() < until && !s.closed.load(Ordering::Relaxed) {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = s.wake.notified() => {}
                    }
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
