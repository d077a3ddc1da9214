//! Finished spans to the collector, off the request path: a bounded queue that a request
//! never waits on (full: the span is dropped and counted), and one thread that sends them in
//! batches through the OTLP exporter (the SDK's `BatchSpanProcessor` does the same, but its
//! drop count is only logged at shutdown; an operator needs it on `/metrics`).

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Spans per export request at most.
const BATCH: usize = 512;
/// A batch is sent at the latest this long after its first span.
const LINGER: Duration = Duration::from_millis(200);

/// What became of the spans, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Accepted by the collector.
    pub exported: AtomicU64,
    /// Dropped because the queue was full (the collector slow or down).
    pub dropped_queue_full: AtomicU64,
    /// Dropped because their export failed (refused, unreachable, timed out).
    pub dropped_export_failed: AtomicU64,
    /// Export requests that failed.
    pub export_errors: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: usize) {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

enum Msg {
    Span(Box<SpanData>),
    /// Send what is queued, then answer.
    Flush(SyncSender<()>),
}

/// The span processor: `on_end` queues, the export thread sends.
#[derive(Debug)]
pub(crate) struct Queue {
    tx: SyncSender<Msg>,
    counters: Arc<Counters>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Queue {
    /// Starts the export thread. `runtime` drives the exporter's gRPC channel (tonic's
    /// connection task lives on it); the thread blocks on each export in turn.
    pub(crate) fn start<E: SpanExporter + 'static>(
        exporter: E,
        capacity: usize,
        runtime: tokio::runtime::Handle,
        counters: Arc<Counters>,
    ) -> Queue {
        let (tx, rx) = sync_channel(capacity);
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-trace-export".into())
            .spawn(move || export_loop(exporter, rx, runtime, c))
            .expect("spawning the trace export thread");
        Queue {
            tx,
            counters,
            thread: Mutex::new(Some(thread)),
        }
    }
}

fn export_loop<E: SpanExporter>(
    exporter: E,
    rx: Receiver<Msg>,
    runtime: tokio::runtime::Handle,
    counters: Arc<Counters>,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH);
    let mut first: Option<Instant> = None;
    let send = |batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let n = batch.len();
        match runtime.block_on(exporter.export(std::mem::take(batch))) {
            Ok(()) => Counters::add(&counters.exported, n),
            Err(e) => {
                Counters::add(&counters.dropped_export_failed, n);
                Counters::add(&counters.export_errors, 1);
                tracing::debug!(error = %e, spans = n, "trace export failed");
            }
        }
    };
    loop {
        let wait = first.map_or(Duration::from_secs(3600), |t| {
            LINGER.saturating_sub(t.elapsed())
        });
        match rx.recv_timeout(wait) {
            Ok(Msg::Span(s)) => {
                first.get_or_insert_with(Instant::now);
                batch.push(*s);
                if batch.len() >= BATCH {
                    send(&mut batch);
                    first = None;
                }
            }
            Ok(Msg::Flush(done)) => {
                while let Ok(Msg::Span(s)) = rx.try_recv() {
                    batch.push(*s);
                }
                send(&mut batch);
                first = None;
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&mut batch);
                first = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&mut batch);
                return;
            }
        }
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        match self.tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                Counters::add(&self.counters.dropped_queue_full, 1);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (tx, rx) = sync_channel(1);
        self.tx
            .send(Msg::Flush(tx))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| OTelSdkError::Timeout(Duration::from_secs(30)))
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        // Never waits: a reload that replaces `[tracing]` runs on the event loop. What is
        // queued still goes out: the thread sends it when this processor, the last sender,
        // is dropped, and then ends.
        let _ = self.thread.lock().map(|mut t| t.take());
        Ok(())
    }
}
