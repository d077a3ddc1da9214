//! `[tracing]`: OpenTelemetry spans to a collector.

use std::time::Duration;

/// `[tracing]` as loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// The collector's OTLP/gRPC endpoint (`http://127.0.0.1:4317`).
    pub endpoint: String,
    /// `service.name` of every span.
    pub service_name: String,
    /// Share of the traces started here (no sampled parent), 0.0-1.0.
    pub sample_ratio: f64,
    /// Finished spans waiting for export at most; beyond, dropped and counted.
    pub queue: usize,
    /// Deadline of one export.
    pub export_timeout: Duration,
    /// The operator's trace UI with `{trace_id}` in it, if given.
    pub trace_url: Option<String>,
}

impl Default for TracingSettings {
    fn default() -> Self {
        TracingSettings {
            endpoint: String::new(),
            service_name: "sluice".into(),
            sample_ratio: 0.01,
            queue: 8192,
            export_timeout: Duration::from_secs(5),
            trace_url: None,
        }
    }
}
