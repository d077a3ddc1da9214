//! Distributed tracing for Sluice (`[tracing]`): a request's context comes in as W3C
//! `traceparent` (or B3), the gateway records a SERVER span for the request and a child span
//! for each upstream attempt, mirror copy and the connection's TLS handshake, and the next hop
//! gets the context with the gateway's span as parent. Spans leave through a bounded queue to
//! an OpenTelemetry collector over OTLP/gRPC.
//!
//! The OpenTelemetry SDK records the spans and decides sampling (parent-based: a caller's
//! decision is followed; a trace started here is kept at `sample_ratio`, by trace ID). A
//! request that is not sampled gets a span ID and the context passed on, and nothing else:
//! no attributes are built, no child spans made, nothing queued.

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
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanExporter as _};
use sluice_config::TracingSettings;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

/// One `[tracing]` in force: the SDK's provider and tracer, and the export counters.
pub struct Tracer {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
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
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                settings.sample_ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("sluice");
        Ok(Tracer {
            provider,
            tracer,
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
        let cx = match parent {
            Some(p) => {
                // B3 may defer the decision to us: then the ratio decides, by trace ID, as
                // it does for a trace started here.
                let sampled = p.sampled.unwrap_or_else(|| self.ratio_keeps(p.trace_id));
                let flags = if sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                };
                Context::new().with_remote_span_context(SpanContext::new(
                    TraceId::from(p.trace_id),
                    SpanId::from(p.span_id),
                    flags,
                    true,
                    TraceState::NONE,
                ))
            }
            None => Context::new(),
        };
        let span = self
            .tracer
            .span_builder(Cow::Owned(method.to_owned()))
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .start_with_context(&self.tracer, &cx);
        let sc = span.span_context();
        RequestSpan {
            trace_id: u128::from_be_bytes(sc.trace_id().to_bytes()),
            span_id: u64::from_be_bytes(sc.span_id().to_bytes()),
            sampled: sc.is_sampled(),
            b3,
            tracer: span.is_recording().then(|| self.tracer.clone()),
            span,
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

/// A request's SERVER span, and the context it hands on.
pub struct RequestSpan {
    span: opentelemetry_sdk::trace::Span,
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
        if self.is_recording() {
            self.span.set_attributes(attributes);
        }
    }

    /// Renames the span (`{method} {route}` once the route is known).
    pub fn rename(&mut self, name: String) {
        if self.is_recording() {
            self.span.update_name(name);
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
        let tracer = self.tracer.as_ref()?;
        let cx = Context::new().with_remote_span_context(self.span.span_context().clone());
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
    pub fn end(mut self, status: u16, at: SystemTime) {
        if !self.is_recording() {
            return;
        }
        self.span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 {
            self.span
                .set_attribute(KeyValue::new("error.type", status.to_string()));
            self.span.set_status(Status::error(""));
        }
        self.span.end_with_timestamp(at);
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
    let mut buf = [0u8; 32];
    propagation::write_hex(&mut buf[32 - digits..], id);
    String::from_utf8_lossy(&buf[32 - digits..]).into_owned()
}
