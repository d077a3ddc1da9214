//! Finished spans to the collector, off the request path: a bounded queue of encoded spans
//! that a request never waits on (full: the span is dropped and counted), and one thread that
//! sends them in batches to the collector over OTLP/gRPC or OTLP/HTTP ([`otlp_http`]).
//!
//! A collector outage is ridden out by the queue alone, bounded in spans (`queue`, 8,192 by
//! default) and counted beyond (`dropped_queue_full`); a batch whose export fails is dropped
//! and counted too, not retried. Spans are a sample to begin with (1% by default): a lost
//! minute of them costs a minute of samples, while holding them would hold memory in
//! proportion to the outage on the machine that serves the traffic.
//!
//! A finished span is appended, as protobuf bytes, to one buffer under a mutex (a copy, no
//! allocation once the buffer has grown); the thread takes the whole buffer at once, swapping
//! in the one it sent last. It sleeps until the first span of a batch arrives (the only time a
//! request thread wakes it, besides a batch reaching [`WAKE_BYTES`]), gathers for [`LINGER`],
//! and sends.

pub(crate) mod otlp_grpc;
mod otlp_http;

use crate::otlp::{self, Envelope};
use bytes::Bytes;
use sluice_config::{OtlpProtocol, TracingSettings};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A batch is sent at the latest this long after its first span.
const LINGER: Duration = Duration::from_millis(200);
/// A batch this large is sent at once.
const WAKE_BYTES: usize = 512 << 10;
/// Span bytes per export request at most (collectors refuse gRPC messages over 4 MiB by
/// default).
const REQUEST_BYTES: usize = 1 << 20;
/// How long [`Queue::flush`] waits.
const FLUSH_WAIT: Duration = Duration::from_secs(30);

/// What became of the spans, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Accepted by the collector.
    pub exported: AtomicU64,
    /// Dropped because the queue was full (the collector slow or down).
    pub dropped_queue_full: AtomicU64,
    /// Dropped because their export failed (refused, unreachable, timed out) or the collector
    /// rejected them.
    pub dropped_export_failed: AtomicU64,
    /// Export requests that failed.
    pub export_errors: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: usize) {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Spans waiting, and the flush and close requests.
#[derive(Debug, Default)]
struct Pending {
    /// `ScopeSpans.spans` entries, end to end.
    spans: Vec<u8>,
    count: usize,
    /// When the first of them came.
    since: Option<Instant>,
    flush_asked: u64,
    flush_done: u64,
    closed: bool,
}

/// The queue between the request threads and the export thread.
#[derive(Debug)]
pub(crate) struct Queue {
    pending: Mutex<Pending>,
    /// The export thread waits on it.
    wake: Condvar,
    /// [`Queue::flush`] waits on it.
    flushed: Condvar,
    capacity: usize,
    counters: Arc<Counters>,
}

impl Queue {
    /// Starts the export thread, which sends to `endpoint` (`http://` or `https://`, the
    /// system's roots trusted), each export bounded by `timeout`. Within the tokio runtime:
    /// the gRPC channel's connection task runs on it, and the thread blocks on each export in
    /// turn. The channel connects lazily: a collector that is down now is no error.
    pub(crate) fn start(
        settings: &TracingSettings,
        counters: Arc<Counters>,
    ) -> Result<(Arc<Queue>, std::thread::JoinHandle<()>), String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "tracing must start within the gateway's runtime".to_owned())?;
        let collector = {
            let _in = runtime.enter();
            Collector::new(settings)?
        };
        let queue = Arc::new(Queue::new(settings.queue, counters));
        let envelope = Envelope::new(&settings.service_name);
        let q = queue.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-trace-export".into())
            .spawn(move || export_loop(&q, collector, &envelope, &runtime))
            .map_err(|e| format!("starting the trace export thread: {e}"))?;
        Ok((queue, thread))
    }

    fn new(capacity: usize, counters: Arc<Counters>) -> Queue {
        Queue {
            pending: Mutex::default(),
            wake: Condvar::new(),
            flushed: Condvar::new(),
            capacity,
            counters,
        }
    }

    /// What became of its spans.
    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding it left whole spans or none: the bytes stay usable.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a finished span: `encode` appends its entry. Never blocks on the export; past
    /// the capacity the span is dropped and counted.
    pub(crate) fn push(&self, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut p = self.lock();
        if p.count >= self.capacity {
            drop(p);
            Counters::add(&self.counters.dropped_queue_full, 1);
            return;
        }
        let before = p.spans.len();
        encode(&mut p.spans);
        p.count += 1;
        // Wake the thread for the first span of a batch, and once when the batch is full:
        // a condition variable's notify is a system call, not to be made per span.
        let wake = p.count == 1 || (before < WAKE_BYTES && p.spans.len() >= WAKE_BYTES);
        if p.count == 1 {
            p.since = Some(Instant::now());
        }
        drop(p);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Sends what is queued and waits until it is sent (or failed), up to 30 s.
    pub(crate) fn flush(&self) {
        let mut p = self.lock();
        p.flush_asked += 1;
        let want = p.flush_asked;
        self.wake.notify_one();
        let deadline = Instant::now() + FLUSH_WAIT;
        while p.flush_done < want && !p.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            p = wait(&self.flushed, p, left);
        }
    }

    /// The tracer is gone: the thread sends what is queued and what spans still open bring,
    /// then ends once no span holds the queue.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
        self.flushed.notify_all();
    }
}

/// Waits on `cv` for at most `left` (a poisoned lock's data stays usable: see `lock`).
fn wait<'a>(cv: &Condvar, p: MutexGuard<'a, Pending>, left: Duration) -> MutexGuard<'a, Pending> {
    cv.wait_timeout(p, left)
        .unwrap_or_else(|e| e.into_inner())
        .0
}

/// The export thread.
fn export_loop(
    queue: &Arc<Queue>,
    mut collector: Collector,
    envelope: &Envelope,
    runtime: &tokio::runtime::Handle,
) {
    let mut spare = Vec::new();
    loop {
        let mut p = queue.lock();
        // Asleep until a span, a flush or the close.
        while p.count == 0 && p.flush_asked == p.flush_done && !p.closed {
            p = queue.wake.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        // Gather for LINGER after the first span, unless full, flushed or closed; closed and
        // empty, wait as long for the spans still open.
        let deadline = p.since.unwrap_or_else(Instant::now) + LINGER;
        while p.spans.len() < WAKE_BYTES && p.flush_asked == p.flush_done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || (p.closed && p.count > 0) {
                break;
            }
            p = wait(&queue.wake, p, left);
        }
        let flush = p.flush_asked;
        let closed = p.closed;
        let count = std::mem::take(&mut p.count);
        p.since = None;
        let batch = std::mem::replace(&mut p.spans, std::mem::take(&mut spare));
        drop(p);
        for (spans, n) in otlp::chunks(&batch, REQUEST_BYTES) {
            let body = Bytes::from(envelope.request(spans));
            match runtime.block_on(collector.export(body)) {
                Ok((0, _)) => Counters::add(&queue.counters.exported, n),
                Ok((rejected, why)) => {
                    let rejected = usize::try_from(rejected).unwrap_or(n).min(n);
                    Counters::add(&queue.counters.exported, n - rejected);
                    Counters::add(&queue.counters.dropped_export_failed, rejected);
                    tracing::debug!(rejected, why, "the collector rejected spans");
                }
                Err(e) => {
                    Counters::add(&queue.counters.dropped_export_failed, n);
                    Counters::add(&queue.counters.export_errors, 1);
                    tracing::debug!(error = %e, spans = n, "trace export failed");
                }
            }
        }
        spare = batch;
        spare.clear();
        // Keep a batch's worth, not the largest burst's.
        spare.shrink_to(WAKE_BYTES * 2);
        let mut p = queue.lock();
        if p.flush_done != flush {
            p.flush_done = flush;
            queue.flushed.notify_all();
        }
        // Closed, nothing left and no span open (only this thread holds the queue): done.
        if closed && count == 0 && p.count == 0 && Arc::strong_count(queue) == 1 {
            return;
        }
    }
}

/// The collector: its gRPC `TraceService` (sent bytes already encoded, with the headers as
/// metadata), or its OTLP/HTTP endpoint.
enum Collector {
    Grpc(otlp_grpc::GrpcExporter),
    Http {
        collector: otlp_http::HttpCollector,
        timeout: Duration,
    },
}

const TRACES_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

impl Collector {
    /// Within the runtime (the channel's task is spawned on it).
    fn new(s: &TracingSettings) -> Result<Collector, String> {
        let endpoint = &s.endpoint;
        let bad = |e: &dyn std::fmt::Display| {
            format!(
                "[tracing] endpoint `{endpoint}`: {e}; give the collector's OTLP address, such as \"http://127.0.0.1:4317\" (gRPC) or \"http://127.0.0.1:4318\" (protocol = \"http/protobuf\")"
            )
        };
        if s.protocol == OtlpProtocol::HttpProtobuf {
            let url = endpoint.parse().map_err(|e| bad(&e))?;
            let collector = otlp_http::HttpCollector::new(
                url,
                &s.headers,
                s.ca.as_deref(),
                s.client_identity.as_ref(),
            )
            .map_err(|e| bad(&e))?;
            return Ok(Collector::Http {
                collector,
                timeout: s.export_timeout,
            });
        }
        let grpc = otlp_grpc::GrpcExporter::new(
            endpoint,
            s.export_timeout,
            &s.headers,
            (s.ca.as_deref(), s.client_identity.as_ref()),
            TRACES_PATH,
        )
        .map_err(|e| bad(&e))?;
        Ok(Collector::Grpc(grpc))
    }

    /// One `Export`: the spans the collector rejected, and why.
    async fn export(&mut self, body: Bytes) -> Result<(u64, String), String> {
        match self {
            Collector::Http { collector, timeout } => {
                tokio::time::timeout(*timeout, collector.export(body))
                    .await
                    .map_err(|_| format!("no answer within {timeout:?}"))?
            }
            Collector::Grpc(grpc) => grpc.export(body).await.map_err(|e| e.message),
        }
    }
}

#[cfg(test)]
mod tests;
