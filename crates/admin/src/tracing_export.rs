//! `[tracing]` on the admin listener: what became of the spans (`sluice_tracing_*`, and
//! `/status`'s `tracing`): a collector that is slow or down shows here as drops, never as
//! slower requests.

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// The `sluice_tracing_*` families (none while `[tracing]` never was on).
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
    let Some(settings) = &s.gateway.snapshot().tracing else {
        return;
    };
    let c = s.gateway.trace_counters();
    out.family_by(
        "sluice_tracing_spans_total",
        Kind::Counter,
        "Finished spans by outcome: exported, or dropped because the export queue was full or their export failed.",
        "outcome",
        [
            ("exported", &c.exported),
            ("dropped_queue_full", &c.dropped_queue_full),
            ("dropped_export_failed", &c.dropped_export_failed),
        ]
        .map(|(outcome, n)| (outcome, n.load(Ordering::Relaxed))),
    );
    out.single(
        "sluice_tracing_export_errors_total",
        Kind::Counter,
        "Export requests to the collector that failed (refused, unreachable or timed out).",
        c.export_errors.load(Ordering::Relaxed),
    );
    out.single(
        "sluice_tracing_sample_ratio",
        Kind::Gauge,
        "Share of the traces started at this gateway that are recorded.",
        settings.sample_ratio,
    );
}

/// `/status`'s `tracing` (null while off).
pub(crate) fn status(s: &Sources) -> Value {
    let Some(settings) = &s.gateway.snapshot().tracing else {
        return Value::Null;
    };
    let c = s.gateway.trace_counters();
    json!({
        "endpoint": settings.endpoint,
        "sample_ratio": settings.sample_ratio,
        "trace_url": settings.trace_url,
        "exported": c.exported.load(Ordering::Relaxed),
        "dropped_queue_full": c.dropped_queue_full.load(Ordering::Relaxed),
        "dropped_export_failed": c.dropped_export_failed.load(Ordering::Relaxed),
        "export_errors": c.export_errors.load(Ordering::Relaxed),
    })
}
