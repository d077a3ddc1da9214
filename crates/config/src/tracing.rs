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
    /// How spans travel to the collector.
    pub protocol: OtlpProtocol,
    /// Headers (or gRPC metadata) sent with every export, such as a vendor's API key.
    pub headers: Vec<(String, String)>,
    /// `https://`: PEM of the CAs trusted for the collector (`None`: the system's roots).
    pub ca: Option<Vec<u8>>,
    /// `https://`: the client certificate presented to the collector.
    pub client_identity: Option<crate::client_tls::ClientIdentity>,
}

/// OTLP's two transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `grpc`: the `TraceService/Export` call (port 4317).
    Grpc,
    /// `http/protobuf`: a POST of the same message to `/v1/traces` (port 4318).
    HttpProtobuf,
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
            protocol: OtlpProtocol::Grpc,
            headers: Vec::new(),
            ca: None,
            client_identity: None,
        }
    }
}
