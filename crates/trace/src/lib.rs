//! Distributed tracing for Sluice (`[tracing]`): a request's context comes in as W3C
//! `traceparent` (or B3), the gateway records a SERVER span for the request and a child span
//! for each upstream attempt, mirror copy and the connection's TLS handshake, and the next hop
//! gets the context with the gateway's span as parent. Spans leave through a bounded queue to
//! an OpenTelemetry collector over OTLP/gRPC.
//!
//! Sampling is parent-based: a caller's decision is followed; a trace started here is kept at
//! `sample_ratio`, by trace ID, as OpenTelemetry's `TraceIdRatioBased` does. A request that is
//! not sampled gets a span ID and the context passed on, and nothing else: no span, no
//! attributes, no child spans, nothing queued.
//!
//! A sampled request's spans are recorded here rather than through the OpenTelemetry SDK,
//! whose per-span allocations and conversions doubled the CPU a request costs (see `otlp`):
//! attributes are encoded as protobuf where they are set, and a finished span is bytes in the
//! export queue.

mod export;
pub mod logs;
mod otlp;
pub mod propagation;
mod span;

pub use export::Counters;
pub use otlp::SpanKind;
pub use span::Span;

use export::Queue;
use sluice_config::TracingSettings;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

/// One `[tracing]` in force: the export queue and its thread, and the counters.
pub struct Tracer {
    queue: Arc<Queue>,
    settings: TracingSettings,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// Starts the export thread. Call within the tokio runtime: the gRPC channel's
    /// connection task is spawned on it (it connects lazily, so a collector that is down now
    /// is no error: its spans are counted as failed until it is up). `counters` carry over a
    /// reload that changes `[tracing]`.
    pub fn start(settings: &TracingSettings, counters: Arc<Counters>) -> Result<Tracer, String> {
        let (queue, _thread) = Queue::start(settings, counters)?;
        Ok(Tracer {
            queue,
            settings: settings.clone(),
        })
    }

    /// The settings it was started with (a reload keeps it while they are equal).
    pub fn settings(&self) -> &TracingSettings {
        &self.settings
    }

    /// What became of the spans.
    pub fn counters(&self) -> &Arc<Counters> {
        self.queue.counters()
    }

    /// Sends what is queued and waits for it, up to 30 s. It blocks: call it off the event
    /// loop (`spawn_blocking`), as the gRPC channel it waits for runs there.
    pub fn flush(&self) {
        self.queue.flush();
    }

    /// The SERVER span of a request that arrived with `headers`, started at `start`.
    /// `method` names it until the route is known.
    pub fn server(
        &self,
        headers: &http::HeaderMap,
        method: &str,
        start: SystemTime,
    ) -> RequestSpan {
        let parent = propagation::extract(headers);
        let b3 = parent.is_some_and(|p| p.format == propagation::Format::B3);
        let (trace_id, sampled) = match parent {
            // B3 may defer the decision to us: then the ratio decides, as for a new trace.
            Some(p) => (
                p.trace_id,
                p.sampled.unwrap_or_else(|| self.ratio_keeps(p.trace_id)),
            ),
            None => {
                let t = span::new_trace_id();
                (t, self.ratio_keeps(t))
            }
        };
        if !sampled {
            return RequestSpan {
                span: None,
                trace_id,
                span_id: span::new_span_id(),
                b3,
            };
        }
        let span = Span::start(
            self.queue.clone(),
            trace_id,
            parent.map(|p| (p.span_id, true)),
            method_name(method),
            SpanKind::Server,
            start,
        );
        RequestSpan {
            trace_id,
            span_id: span.span_id,
            b3,
            span: Some(Box::new(span)),
        }
    }

    /// OpenTelemetry's `TraceIdRatioBased` rule (the low 63 bits of the trace ID against
    /// the ratio).
    fn ratio_keeps(&self, trace_id: u128) -> bool {
        let bound = (self.settings.sample_ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
        ((trace_id as u64) >> 1) < bound
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        // Without waiting: the export thread sends what is queued and what the spans still
        // open bring, then ends.
        self.queue.close();
    }
}

/// A span name without an allocation for the usual methods.
fn method_name(method: &str) -> Cow<'static, str> {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
    ];
    KNOWN
        .iter()
        .find(|m| **m == method)
        .map_or_else(|| Cow::Owned(method.to_owned()), |m| Cow::Borrowed(*m))
}

/// A request's SERVER span, and the context it hands on.
pub struct RequestSpan {
    /// The span; `None` when the request is not sampled (nothing recorded).
    span: Option<Box<Span>>,
    trace_id: u128,
    span_id: u64,
    /// The request came with B3: the next hop gets B3 too.
    b3: bool,
}

impl std::fmt::Debug for RequestSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RequestSpan({:032x}-{:016x})",
            self.trace_id, self.span_id
        )
    }
}

impl RequestSpan {
    /// Whether the span is recorded (sampled): only then are attributes worth building.
    pub fn is_recording(&self) -> bool {
        self.span.is_some()
    }

    /// The recorded span, to set attributes on; `None` when not sampled.
    pub fn recording(&mut self) -> Option<&mut Span> {
        self.span.as_deref_mut()
    }

    /// The trace ID and this span's ID (the access log's `trace_id` and `span_id`).
    pub fn ids(&self) -> (u128, u64) {
        (self.trace_id, self.span_id)
    }

    /// A child span (an upstream attempt, a mirror copy, the handshake), or `None` when the
    /// request is not recorded.
    pub fn child(
        &self,
        name: &'static str,
        kind: SpanKind,
        start: Option<SystemTime>,
    ) -> Option<ChildSpan> {
        let span = self.span.as_ref()?;
        Some(ChildSpan(Box::new(span.child(name, kind, start))))
    }

    /// Writes the context for the next hop: `child`'s span as its parent (the attempt that
    /// carries the request), else this span's.
    pub fn inject(&self, child: Option<&ChildSpan>, headers: &mut http::HeaderMap) {
        let span_id = child.map_or(self.span_id, |c| c.0.span_id);
        // Sampled exactly when recorded.
        let sampled = self.span.is_some();
        propagation::inject(headers, self.trace_id, span_id, sampled, self.b3);
    }

    /// Ends the span with the response's status (5xx: an error, as semantic conventions
    /// say for a server span).
    pub fn end(self, status: u16, at: SystemTime) {
        let Some(mut span) = self.span else { return };
        span.int("http.response.status_code", i64::from(status));
        if status >= 500 {
            span.fail_status(status);
        }
        span.finish(span::unix_nanos(at));
    }
}

/// A span under a request's span; attributes through `Deref` to [`Span`].
pub struct ChildSpan(Box<Span>);

impl std::ops::Deref for ChildSpan {
    type Target = Span;
    fn deref(&self) -> &Span {
        &self.0
    }
}

impl std::ops::DerefMut for ChildSpan {
    fn deref_mut(&mut self) -> &mut Span {
        &mut self.0
    }
}

impl ChildSpan {
    /// Ends it now.
    pub fn end(self) {
        // Dropping the span ends it now.
        drop(self);
    }

    /// Ends it at `at` (a span recorded after the fact, such as the handshake's).
    pub fn end_at(mut self, at: SystemTime) {
        self.0.finish(span::unix_nanos(at));
    }
}

/// Lower-case hex of a trace ID (32 digits) or span ID (16), as the access log writes them.
pub fn hex(id: u128, digits: usize) -> String {
    let mut s = String::with_capacity(digits);
    push_hex(&mut s, id, digits);
    s
}

/// [`hex`] appended to `out`, without a `String` of its own.
pub fn push_hex(out: &mut String, id: u128, digits: usize) {
    let digits = digits.min(32);
    let mut buf = [0u8; 32];
    propagation::write_hex(&mut buf[32 - digits..], id);
    // Hex digits only: always ASCII.
    out.push_str(std::str::from_utf8(&buf[32 - digits..]).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracer(ratio: f64) -> Tracer {
        let settings = TracingSettings {
            // Nothing listens there: exports fail (counted), which these tests do not look at.
            endpoint: "http://127.0.0.1:9".into(),
            sample_ratio: ratio,
            ..TracingSettings::default()
        };
        Tracer::start(&settings, Arc::default()).unwrap()
    }

    fn with(traceparent: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert("traceparent", traceparent.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn a_callers_decision_is_followed_and_new_traces_are_kept_by_their_id() {
        let none = tracer(0.0);
        let now = SystemTime::now();
        let root = none.server(&http::HeaderMap::new(), "GET", now);
        assert!(!root.is_recording());
        assert!(root.child("x", SpanKind::Internal, None).is_none());
        let mut h = http::HeaderMap::new();
        root.inject(None, &mut h);
        assert!(h["traceparent"].to_str().unwrap().ends_with("-00"));
        // A sampled caller is followed even at 0%, in its trace.
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let joined = none.server(&with(tp), "GET", now);
        assert!(joined.is_recording());
        assert_eq!(joined.ids().0, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_ne!(joined.ids().1, 0x00f067aa0ba902b7);
        let child = joined.child("upstream", SpanKind::Client, None).unwrap();
        let mut h = http::HeaderMap::new();
        joined.inject(Some(&child), &mut h);
        assert_eq!(
            h["traceparent"].to_str().unwrap(),
            format!(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01",
                hex(u128::from(child.span_id()), 16)
            )
        );
        // And an unsampled caller even at 100%.
        let all = tracer(1.0);
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!all.server(&with(tp), "GET", now).is_recording());
        // At 50%, about half of the new traces are kept, and exactly those whose ID the
        // ratio keeps: the SDK recorded the trace ID the decision was made on.
        let half = tracer(0.5);
        let mut kept = 0;
        for _ in 0..2000 {
            let s = half.server(&http::HeaderMap::new(), "POST", now);
            assert_eq!(s.is_recording(), half.ratio_keeps(s.ids().0));
            kept += usize::from(s.is_recording());
        }
        assert!((800..=1200).contains(&kept), "{kept} of 2000 kept at 50%");
    }
}
