//! Distributed tracing for Sluice (`[tracing]`): a request's context comes in as W3C
//! `traceparent` (or B3), the gateway records a SERVER span for the request and a child span
//! for each upstream attempt, mirror copy and the connection's TLS handshake, and the next hop
//! gets the context with the gateway's span as parent. Spans leave through a bounded queue to
//! an OpenTelemetry collector over OTLP/gRPC.
//!
//! Sampling is decided here, before the SDK is asked for anything (parent-based: a caller's
//! decision is followed; a trace started here is kept at `sample_ratio`, by trace ID, as
//! OpenTelemetry's `TraceIdRatioBased` does). A request that is not sampled gets a span ID
//! and the context passed on, and nothing else: no SDK span, no attributes, no child spans,
//! nothing queued. A sampled one is recorded by the OpenTelemetry SDK.

mod export;
pub mod propagation;

pub use export::Counters;
pub use opentelemetry::KeyValue;
pub use opentelemetry::trace::SpanKind;

use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, trace::Span as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SdkTracer, SdkTracerProvider, SpanExporter as _,
};
use sluice_config::TracingSettings;
use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;
use std::time::SystemTime;

/// One `[tracing]` in force: the SDK's provider and tracer, and the export counters.
pub struct Tracer {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    ids: RandomIdGenerator,
    settings: TracingSettings,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// Builds the exporter and starts its thread. Call within the tokio runtime: the gRPC
    /// channel's connection task is spawned on it (it connects lazily, so a collector that
    /// is down now is no error: its spans are counted as failed until it is up).
    /// `counters` carry over a reload that changes `[tracing]`.
    pub fn start(settings: &TracingSettings, counters: Arc<Counters>) -> Result<Tracer, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "tracing must start within the gateway's runtime".to_owned())?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.export_timeout)
            .build()
            .map_err(|e| {
                format!(
                    "[tracing] endpoint `{}`: {e}; give the collector's OTLP/gRPC address",
                    settings.endpoint
                )
            })?;
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .build();
        exporter.set_resource(&resource);
        let queue = export::Queue::start(exporter, settings.queue, runtime, counters.clone());
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            // The decision is made in `server` (a root span reaches the SDK only when kept);
            // children follow their recorded parent.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_id_generator(PresetIds::default())
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("sluice");
        Ok(Tracer {
            provider,
            tracer,
            ids: RandomIdGenerator::default(),
            settings: settings.clone(),
            counters,
        })
    }

    /// The settings it was started with (a reload keeps it while they are equal).
    pub fn settings(&self) -> &TracingSettings {
        &self.settings
    }

    /// What became of the spans.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Sends what is queued and waits for it, up to 30 s. It blocks: call it off the event
    /// loop (`spawn_blocking`), as the gRPC channel it waits for runs there.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
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
                let t = u128::from_be_bytes(self.ids.new_trace_id().to_bytes());
                (t, self.ratio_keeps(t))
            }
        };
        if !sampled {
            return RequestSpan {
                span: None,
                tracer: None,
                trace_id,
                span_id: u64::from_be_bytes(self.ids.new_span_id().to_bytes()),
                sampled: false,
                b3,
            };
        }
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from(trace_id),
                SpanId::from(p.span_id),
                TraceFlags::SAMPLED,
                true,
                TraceState::NONE,
            )),
            None => {
                // A root span: the SDK takes the trace ID the ratio was applied to.
                PRESET_TRACE_ID.with(|c| c.set(Some(trace_id)));
                Context::new()
            }
        };
        let span = self
            .tracer
            .span_builder(method_name(method))
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .start_with_context(&self.tracer, &cx);
        PRESET_TRACE_ID.with(|c| c.set(None));
        let sc = span.span_context();
        RequestSpan {
            trace_id: u128::from_be_bytes(sc.trace_id().to_bytes()),
            span_id: u64::from_be_bytes(sc.span_id().to_bytes()),
            sampled: true,
            b3,
            tracer: Some(self.tracer.clone()),
            span: Some(span),
        }
    }

    /// OpenTelemetry's `TraceIdRatioBased` rule (the low 63 bits of the trace ID against
    /// the ratio), for B3's deferred decisions.
    fn ratio_keeps(&self, trace_id: u128) -> bool {
        let bound = (self.settings.sample_ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
        ((trace_id as u64) >> 1) < bound
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        // Without waiting: the export thread sends what is queued, then ends.
        let _ = self.provider.shutdown();
    }
}

thread_local! {
    /// The trace ID `Tracer::server` chose for a root span, for the SDK to take.
    static PRESET_TRACE_ID: Cell<Option<u128>> = const { Cell::new(None) };
}

/// The SDK's ID generator, except that a root span's trace ID is the one `Tracer::server`
/// already applied the ratio to (set just before, on the same thread, taken once).
#[derive(Debug, Default)]
struct PresetIds(RandomIdGenerator);

impl IdGenerator for PresetIds {
    fn new_trace_id(&self) -> TraceId {
        PRESET_TRACE_ID
            .with(Cell::take)
            .map_or_else(|| self.0.new_trace_id(), TraceId::from)
    }

    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
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
    /// The SDK's span; `None` when the request is not sampled (nothing recorded).
    span: Option<opentelemetry_sdk::trace::Span>,
    /// For child spans; `None` when the request is not sampled.
    tracer: Option<SdkTracer>,
    trace_id: u128,
    span_id: u64,
    sampled: bool,
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
        self.tracer.is_some()
    }

    /// The trace ID and this span's ID (the access log's `trace_id` and `span_id`).
    pub fn ids(&self) -> (u128, u64) {
        (self.trace_id, self.span_id)
    }

    /// Sets attributes (ignored unless recording).
    pub fn set(&mut self, attributes: impl IntoIterator<Item = KeyValue>) {
        if let Some(s) = &mut self.span {
            s.set_attributes(attributes);
        }
    }

    /// Renames the span (`{method} {route}` once the route is known).
    pub fn rename(&mut self, name: String) {
        if let Some(s) = &mut self.span {
            s.update_name(name);
        }
    }

    /// A child span (an upstream attempt, a mirror copy, the handshake), or `None` when the
    /// request is not recorded.
    pub fn child(
        &self,
        name: &'static str,
        kind: SpanKind,
        start: Option<SystemTime>,
    ) -> Option<ChildSpan> {
        let (tracer, span) = (self.tracer.as_ref()?, self.span.as_ref()?);
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        let mut b = tracer.span_builder(name).with_kind(kind);
        if let Some(t) = start {
            b = b.with_start_time(t);
        }
        Some(ChildSpan {
            span: b.start_with_context(tracer, &cx),
        })
    }

    /// Writes the context for the next hop: `child`'s span as its parent (the attempt that
    /// carries the request), else this span's.
    pub fn inject(&self, child: Option<&ChildSpan>, headers: &mut http::HeaderMap) {
        let span_id = child.map_or(self.span_id, ChildSpan::span_id);
        propagation::inject(headers, self.trace_id, span_id, self.sampled, self.b3);
    }

    /// Ends the span with the response's status (5xx: an error, as semantic conventions
    /// say for a server span).
    pub fn end(self, status: u16, at: SystemTime) {
        let Some(mut span) = self.span else { return };
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 {
            span.set_attribute(KeyValue::new("error.type", status.to_string()));
            span.set_status(Status::error(""));
        }
        span.end_with_timestamp(at);
    }
}

/// A span under a request's span.
pub struct ChildSpan {
    span: opentelemetry_sdk::trace::Span,
}

impl ChildSpan {
    /// Its span ID (the next hop's parent).
    pub fn span_id(&self) -> u64 {
        u64::from_be_bytes(self.span.span_context().span_id().to_bytes())
    }

    /// Sets attributes.
    pub fn set(&mut self, attributes: impl IntoIterator<Item = KeyValue>) {
        self.span.set_attributes(attributes);
    }

    /// Marks it failed, with why.
    pub fn fail(&mut self, error_type: impl Into<opentelemetry::Value>) {
        self.span
            .set_attribute(KeyValue::new("error.type", error_type));
        self.span.set_status(Status::error(""));
    }

    /// Ends it now.
    pub fn end(mut self) {
        self.span.end();
    }

    /// Ends it at `at` (a span recorded after the fact, such as the handshake's).
    pub fn end_at(mut self, at: SystemTime) {
        self.span.end_with_timestamp(at);
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
