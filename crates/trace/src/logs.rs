//! OTLP logs (`opentelemetry/proto/logs/v1/logs.proto`, `collector/logs/v1/
//! logs_service.proto`): the access log's lines as log records, for the log shipper's
//! `format = "otlp"`. An `ExportLogsServiceRequest` has the trace request's shape (resource,
//! scope, then the records as field 2), so it shares the trace envelope; each record's body
//! is the line as it is (its JSON fields stay one string a collector can parse).

pub use crate::export::otlp_grpc::{ExportError, GrpcExporter};
use crate::otlp::{
    Envelope, FIXED64, LEN, SPAN_ENTRY, VARINT, bytes_field, field_len, len_header, tag,
};

/// The logs service's `Export` method, for [`GrpcExporter::new`].
pub const LOGS_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// The records an `ExportLogsServiceResponse` says were rejected (its `partial_success`,
/// shaped as the trace service's).
pub fn rejected(answer: &[u8]) -> u64 {
    crate::otlp::rejected(answer).0
}

/// `SeverityNumber.SEVERITY_NUMBER_INFO`.
const INFO: u8 = 9;

/// Encodes export requests of access log lines for one service.
#[derive(Debug, Clone)]
pub struct LogEncoder {
    envelope: Envelope,
}

impl LogEncoder {
    /// For `service.name` `service_name`.
    pub fn new(service_name: &str) -> Self {
        LogEncoder {
            envelope: Envelope::new(service_name),
        }
    }

    /// An `ExportLogsServiceRequest` of `records`: each its time (Unix nanoseconds) and its
    /// body (UTF-8).
    pub fn request<'a>(&self, records: impl Iterator<Item = (u64, &'a str)>) -> Vec<u8> {
        let mut entries = Vec::new();
        for (time_ns, body) in records {
            // LogRecord { time_unix_nano = 1, severity_number = 2, severity_text = 3,
            // body = 5 (AnyValue.string_value = 1), observed_time_unix_nano = 11 }.
            let any = field_len(body.len());
            let record = 9 + 2 + field_len(4) + field_len(any) + 9;
            len_header(&mut entries, SPAN_ENTRY, record);
            entries.push(tag(1, FIXED64));
            entries.extend_from_slice(&time_ns.to_le_bytes());
            entries.push(tag(2, VARINT));
            entries.push(INFO);
            bytes_field(&mut entries, tag(3, LEN), b"INFO");
            len_header(&mut entries, tag(5, LEN), any);
            bytes_field(&mut entries, tag(1, LEN), body.as_bytes());
            // Field 11 is past the one-byte tags: 11 << 3 | 1 = 89 still fits in one byte.
            entries.push((11 << 3) | FIXED64);
            entries.extend_from_slice(&time_ns.to_le_bytes());
        }
        self.envelope.request(&entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message as _;

    #[test]
    fn records_decode_with_the_generated_types() {
        let e = LogEncoder::new("edge");
        let lines = [
            (1_700_000_000_123_000_000u64, r#"{"time":"x","status":200}"#),
            (1_700_000_001_000_000_000, "second"),
        ];
        let bytes = e.request(lines.iter().copied());
        let req = ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap();
        let rl = &req.resource_logs[0];
        let service = rl
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .find(|a| a.key == "service.name")
            .unwrap();
        assert_eq!(
            service.value.as_ref().unwrap().value,
            Some(Value::StringValue("edge".into()))
        );
        let records = &rl.scope_logs[0].log_records;
        assert_eq!(records.len(), 2);
        for (r, (t, body)) in records.iter().zip(lines) {
            assert_eq!(r.time_unix_nano, t);
            assert_eq!(r.observed_time_unix_nano, t);
            assert_eq!(r.severity_number, 9);
            assert_eq!(r.severity_text, "INFO");
            assert_eq!(
                r.body.as_ref().unwrap().value,
                Some(Value::StringValue(body.into()))
            );
        }
        assert_eq!(rl.scope_logs[0].scope.as_ref().unwrap().name, "sluice");
    }
}
