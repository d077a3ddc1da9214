//! `[tracing]`.

use super::Cx;
use crate::TracingSettings;
use crate::raw::RawTracing;
use crate::tracing::OtlpProtocol;

impl Cx<'_> {
    pub(super) fn tracing(&mut self, raw: &RawTracing) -> Option<TracingSettings> {
        let mut s = TracingSettings::default();
        let endpoint = raw.endpoint.get_ref();
        match endpoint.parse::<http::Uri>() {
            Ok(u)
                if matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some() =>
            {
                s.endpoint = endpoint.trim_end_matches('/').to_owned();
            }
            _ => {
                self.err_at(
                    &raw.endpoint,
                    format!(
                        "[tracing] endpoint `{endpoint}` is not an http:// or https:// address"
                    ),
                    "give the collector's OTLP/gRPC address, such as \"http://127.0.0.1:4317\" (or its OTLP/HTTP one with protocol = \"http/protobuf\")",
                );
                return None;
            }
        }
        self.tracing_transport(raw, &mut s)?;
        if let Some(name) = &raw.service_name {
            if name.get_ref().is_empty() {
                self.err_at(
                    name,
                    "[tracing] service_name is empty".to_owned(),
                    "name the service the spans belong to, such as \"sluice\"",
                );
            }
            s.service_name = name.get_ref().clone();
        }
        if let Some(p) = &raw.sample_percent {
            if (0.0..=100.0).contains(p.get_ref()) {
                s.sample_ratio = p.get_ref() / 100.0;
            } else {
                self.err_at(
                    p,
                    format!(
                        "[tracing] sample_percent {} is not a percentage",
                        p.get_ref()
                    ),
                    "use 0 to 100, fractions allowed (such as 0.5)",
                );
            }
        }
        if let Some(q) = &raw.queue {
            if *q.get_ref() == 0 {
                self.err_at(
                    q,
                    "[tracing] queue must hold at least one span".to_owned(),
                    "give the most spans waiting for export, such as 8192",
                );
            }
            s.queue = (*q.get_ref()).max(1) as usize;
        }
        if let Some(t) = self.duration(raw.export_timeout.as_ref()) {
            s.export_timeout = t;
        }
        if let Some(u) = &raw.trace_url {
            if !u.get_ref().contains("{trace_id}") {
                self.err_at(
                    u,
                    "[tracing] trace_url has no {trace_id} in it".to_owned(),
                    "give your trace UI's address of one trace, such as \"http://jaeger:16686/trace/{trace_id}\"",
                );
            }
            s.trace_url = Some(u.get_ref().clone());
        }
        Some(s)
    }

    /// `protocol`, `headers`, `ca`, `client_cert` and `client_key`: how spans reach the
    /// collector.
    fn tracing_transport(&mut self, raw: &RawTracing, s: &mut TracingSettings) -> Option<()> {
        s.protocol = self
            .choice(
                raw.protocol.as_ref(),
                "protocol",
                &[
                    ("grpc", OtlpProtocol::Grpc),
                    ("http/protobuf", OtlpProtocol::HttpProtobuf),
                ],
            )
            .unwrap_or(OtlpProtocol::Grpc);
        // OTLP/HTTP: a bare collector address gets the signal's path, as the OpenTelemetry
        // SDKs do with OTEL_EXPORTER_OTLP_ENDPOINT.
        if s.protocol == OtlpProtocol::HttpProtobuf
            && s.endpoint
                .parse::<http::Uri>()
                .is_ok_and(|u| u.path() == "/")
        {
            s.endpoint.push_str("/v1/traces");
        }
        for (k, v) in raw.headers.iter().flatten() {
            if http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).is_err()
                || http::HeaderValue::from_str(v.get_ref()).is_err()
            {
                self.err_at(
                    v,
                    format!("[tracing] header `{k}` is not a valid HTTP header"),
                    "use a token name and a visible-ASCII value, such as \"x-api-key\" = \"...\"",
                );
                return None;
            }
            s.headers
                .push((k.to_ascii_lowercase(), v.get_ref().clone()));
        }
        let https = s.endpoint.starts_with("https://");
        for at in [&raw.ca, &raw.client_cert].into_iter().flatten() {
            if !https {
                self.err_at(
                    at,
                    "[tracing] `ca` and `client_cert` are for an https:// endpoint",
                    "remove them, or give the collector's https:// address",
                );
                return None;
            }
        }
        if let Some(at) = &raw.ca {
            s.ca = Some(self.ca_pem("[tracing]", at)?);
        }
        s.client_identity = self
            .client_identity(
                "[tracing]",
                raw.client_cert.as_ref(),
                raw.client_key.as_ref(),
            )
            .ok()?;
        Some(())
    }
}
