//! The few OTLP messages Sluice sends, in protobuf's wire format, written by hand
//! (`opentelemetry/proto/trace/v1/trace.proto`, `common/v1/common.proto`,
//! `collector/trace/v1/trace_service.proto`).
//!
//! Why by hand: through the OpenTelemetry SDK, a sampled request's spans cost about as much
//! CPU as the request itself (+104% per request at 100% sampling in `bench/run`): every
//! attribute became an owned `String` in a `KeyValue`, every span a `SpanData`, and the
//! exporter converted all of it again into `prost` structs before encoding. Here an attribute
//! is encoded once, where it is set, into the span's one buffer; a finished span is copied as
//! bytes into the export queue; an export request is a header and those bytes. The unit tests
//! decode what is written here with `opentelemetry-proto`'s generated types.

/// A protobuf field's tag byte: `field << 3 | wire type` (every field used here is < 16).
pub(crate) const fn tag(field: u8, wire: u8) -> u8 {
    (field << 3) | wire
}
pub(crate) const VARINT: u8 = 0;
pub(crate) const FIXED64: u8 = 1;
pub(crate) const LEN: u8 = 2;

/// `ScopeSpans.spans` (field 2): how each finished span sits in the export queue.
pub(crate) const SPAN_ENTRY: u8 = tag(2, LEN);

/// Appends `v` as a base-128 varint.
pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bytes [`varint`] writes for `v`.
pub(crate) const fn varint_len(v: u64) -> usize {
    // 1 byte per started 7 bits; 0 takes one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// A length-delimited field's header: its tag and the length that follows.
pub(crate) fn len_header(out: &mut Vec<u8>, field_tag: u8, len: usize) {
    out.push(field_tag);
    varint(out, len as u64);
}

/// A length-delimited field: its tag, the length and the bytes.
pub(crate) fn bytes_field(out: &mut Vec<u8>, field_tag: u8, bytes: &[u8]) {
    len_header(out, field_tag, bytes.len());
    out.extend_from_slice(bytes);
}

/// The size of a length-delimited field of `len` bytes (tag, length, bytes).
pub(crate) const fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// An attribute's value (`AnyValue`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

impl Value<'_> {
    /// The encoded `AnyValue`'s size. A oneof member is written even when it is its type's
    /// default (`false`, 0, ""): an `AnyValue` without one means "no value".
    fn encoded_len(self) -> usize {
        match self {
            Value::Str(s) => field_len(s.len()),
            Value::Int(i) => 1 + varint_len(i as u64),
            Value::Bool(_) => 2,
        }
    }

    fn encode(self, out: &mut Vec<u8>) {
        match self {
            // AnyValue.string_value = 1, bool_value = 2, int_value = 3 (int64: a negative
            // number is its two's complement as a 10-byte varint).
            Value::Str(s) => bytes_field(out, tag(1, LEN), s.as_bytes()),
            Value::Bool(b) => {
                out.push(tag(2, VARINT));
                out.push(u8::from(b));
            }
            Value::Int(i) => {
                out.push(tag(3, VARINT));
                varint(out, i as u64);
            }
        }
    }
}

/// Appends a `KeyValue { key = 1, value = 2 }` as field `field` of its message
/// (`Span.attributes` = 9, `Resource.attributes` = 1).
pub(crate) fn key_value(out: &mut Vec<u8>, field: u8, key: &str, value: Value<'_>) {
    let any = value.encoded_len();
    len_header(out, tag(field, LEN), field_len(key.len()) + field_len(any));
    bytes_field(out, tag(1, LEN), key.as_bytes());
    len_header(out, tag(2, LEN), any);
    value.encode(out);
}

/// `Span.attributes`.
pub(crate) const SPAN_ATTRIBUTES: u8 = 9;

/// `Span.SpanKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside the gateway (the TLS handshake).
    Internal = 1,
    /// A request the gateway serves.
    Server = 2,
    /// A request the gateway sends (an upstream attempt, a mirror copy).
    Client = 3,
}

/// A finished span's fixed fields; its attributes come encoded beside it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpanFields<'a> {
    pub(crate) trace_id: u128,
    pub(crate) span_id: u64,
    /// The parent span, and whether it is remote (the caller's, from a request header).
    pub(crate) parent: Option<(u64, bool)>,
    pub(crate) name: &'a str,
    pub(crate) kind: SpanKind,
    /// Unix time in nanoseconds.
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Status ERROR (else UNSET, as the semantic conventions ask of success).
    pub(crate) error: bool,
}

impl SpanFields<'_> {
    /// The `Span` message's size with `attributes` bytes of encoded attributes.
    fn encoded_len(&self, attributes: usize) -> usize {
        let parent = if self.parent.is_some() { 10 } else { 0 };
        let status = if self.error { 4 } else { 0 };
        // trace_id 18, span_id 10, kind 2, start 9, end 9, flags 6.
        18 + 10 + parent + field_len(self.name.len()) + 2 + 9 + 9 + attributes + status + 6
    }

    /// Appends the span as a `ScopeSpans.spans` entry.
    pub(crate) fn encode_entry(&self, attributes: &[u8], out: &mut Vec<u8>) {
        let len = self.encoded_len(attributes.len());
        out.reserve(field_len(len));
        len_header(out, SPAN_ENTRY, len);
        let start = out.len();
        // trace_id = 1, span_id = 2, parent_span_id = 4: big-endian bytes, as in traceparent.
        bytes_field(out, tag(1, LEN), &self.trace_id.to_be_bytes());
        bytes_field(out, tag(2, LEN), &self.span_id.to_be_bytes());
        if let Some((parent, _)) = self.parent {
            bytes_field(out, tag(4, LEN), &parent.to_be_bytes());
        }
        bytes_field(out, tag(5, LEN), self.name.as_bytes());
        out.push(tag(6, VARINT));
        out.push(self.kind as u8);
        // start_time_unix_nano = 7, end_time_unix_nano = 8: fixed64, little-endian.
        out.push(tag(7, FIXED64));
        out.extend_from_slice(&self.start.to_le_bytes());
        out.push(tag(8, FIXED64));
        out.extend_from_slice(&self.end.to_le_bytes());
        out.extend_from_slice(attributes);
        if self.error {
            // status = 15: Status { code = 3: STATUS_CODE_ERROR = 2 }.
            out.extend_from_slice(&[tag(15, LEN), 2, tag(3, VARINT), 2]);
        }
        // flags = 16 (fixed32; its tag takes two bytes): the W3C flags (sampled) in bits
        // 0-7, bit 8 "whether the parent is remote is known", bit 9 "it is".
        let remote = self.parent.is_some_and(|(_, r)| r);
        let flags: u32 = 0x01 | 0x100 | if remote { 0x200 } else { 0 };
        // The tag: (16 << 3) | 5 = 133, a two-byte varint.
        out.extend_from_slice(&[0x85, 0x01]);
        out.extend_from_slice(&flags.to_le_bytes());
        debug_assert_eq!(out.len() - start, len, "the span's announced length");
    }
}

/// The `Resource` and `InstrumentationScope` every export request carries, encoded once.
#[derive(Debug, Clone)]
pub(crate) struct Envelope {
    /// `ResourceSpans.resource` (field 1), with its tag and length.
    resource: Vec<u8>,
    /// `ScopeSpans.scope` (field 1), with its tag and length.
    scope: Vec<u8>,
}

impl Envelope {
    pub(crate) fn new(service_name: &str) -> Envelope {
        let mut attrs = Vec::new();
        key_value(&mut attrs, 1, "service.name", Value::Str(service_name));
        key_value(&mut attrs, 1, "telemetry.sdk.name", Value::Str("sluice"));
        key_value(&mut attrs, 1, "telemetry.sdk.language", Value::Str("rust"));
        key_value(
            &mut attrs,
            1,
            "telemetry.sdk.version",
            Value::Str(env!("CARGO_PKG_VERSION")),
        );
        let mut resource = Vec::new();
        bytes_field(&mut resource, tag(1, LEN), &attrs);
        let mut inner = Vec::new();
        bytes_field(&mut inner, tag(1, LEN), b"sluice");
        bytes_field(
            &mut inner,
            tag(2, LEN),
            env!("CARGO_PKG_VERSION").as_bytes(),
        );
        let mut scope = Vec::new();
        bytes_field(&mut scope, tag(1, LEN), &inner);
        Envelope { resource, scope }
    }

    /// An `ExportTraceServiceRequest` of `spans`: [`SPAN_ENTRY`]s end to end, as the queue
    /// holds them.
    pub(crate) fn request(&self, spans: &[u8]) -> Vec<u8> {
        let scope_spans = self.scope.len() + spans.len();
        let resource_spans = self.resource.len() + field_len(scope_spans);
        let mut out = Vec::with_capacity(field_len(resource_spans));
        // ExportTraceServiceRequest.resource_spans = 1 { resource = 1, scope_spans = 2
        // { scope = 1, spans = 2 } }.
        len_header(&mut out, tag(1, LEN), resource_spans);
        out.extend_from_slice(&self.resource);
        len_header(&mut out, tag(2, LEN), scope_spans);
        out.extend_from_slice(&self.scope);
        out.extend_from_slice(spans);
        out
    }
}

/// Reads a varint at `*at`, moving past it.
fn read_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of a message: `(field number, value)`, the value a varint's number or a
/// length-delimited field's bytes (fixed-size fields are skipped). `None` at the end or
/// where the bytes are not a message.
fn fields(buf: &[u8]) -> impl Iterator<Item = (u64, Field<'_>)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        loop {
            if at >= buf.len() {
                return None;
            }
            let key = read_varint(buf, &mut at)?;
            let (field, wire) = (key >> 3, (key & 7) as u8);
            match wire {
                VARINT => return Some((field, Field::Varint(read_varint(buf, &mut at)?))),
                LEN => {
                    let len = usize::try_from(read_varint(buf, &mut at)?).ok()?;
                    let bytes = buf.get(at..at.checked_add(len)?)?;
                    at += len;
                    return Some((field, Field::Bytes(bytes)));
                }
                FIXED64 => at += 8,
                5 => at += 4,
                _ => return None,
            }
        }
    })
}

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// What an `ExportTraceServiceResponse` says was refused: `partial_success` (field 1) {
/// `rejected_spans` = 1, `error_message` = 2 }. `(0, "")` when all were accepted.
pub(crate) fn rejected(response: &[u8]) -> (u64, String) {
    let mut out = (0, String::new());
    for (field, value) in fields(response) {
        if let (1, Field::Bytes(partial)) = (field, value) {
            for (f, v) in fields(partial) {
                match (f, v) {
                    (1, Field::Varint(n)) => out.0 = n,
                    (2, Field::Bytes(m)) => out.1 = String::from_utf8_lossy(m).into_owned(),
                    _ => {}
                }
            }
        }
    }
    out
}

/// Splits the queue's bytes into export requests of at most `max` bytes of spans (a span
/// larger than that goes alone), at span boundaries: `(bytes, spans)`.
pub(crate) fn chunks(queue: &[u8], max: usize) -> impl Iterator<Item = (&[u8], usize)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= queue.len() {
            return None;
        }
        let start = at;
        let mut n = 0;
        while at < queue.len() {
            let mut next = at + 1;
            let len = read_varint(queue, &mut next).and_then(|l| usize::try_from(l).ok());
            // The queue holds only what `encode_entry` wrote; anything else ends it here.
            let Some(end) = len
                .and_then(|l| next.checked_add(l))
                .filter(|&e| e <= queue.len())
            else {
                let good = &queue[start..at];
                at = queue.len();
                return (n > 0).then_some((good, n));
            };
            if n > 0 && end - start > max {
                break;
            }
            at = end;
            n += 1;
        }
        (n > 0).then(|| (&queue[start..at], n))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind as ProtoKind;
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
    use prost::Message;

    fn span(out: &mut Vec<u8>, span_id: u64, parent: Option<(u64, bool)>, error: bool) {
        let mut attrs = Vec::new();
        key_value(&mut attrs, SPAN_ATTRIBUTES, "url.path", Value::Str("/a/ü"));
        key_value(&mut attrs, SPAN_ATTRIBUTES, "empty", Value::Str(""));
        key_value(&mut attrs, SPAN_ATTRIBUTES, "server.port", Value::Int(8443));
        key_value(&mut attrs, SPAN_ATTRIBUTES, "negative", Value::Int(-2));
        key_value(&mut attrs, SPAN_ATTRIBUTES, "zero", Value::Int(0));
        key_value(
            &mut attrs,
            SPAN_ATTRIBUTES,
            "tls.resumed",
            Value::Bool(false),
        );
        key_value(
            &mut attrs,
            SPAN_ATTRIBUTES,
            "long",
            Value::Str(&"x".repeat(300)),
        );
        SpanFields {
            trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            span_id,
            parent,
            name: "GET api",
            kind: SpanKind::Server,
            start: 1_700_000_000_123_456_789,
            end: 1_700_000_000_223_456_789,
            error,
        }
        .encode_entry(&attrs, out);
    }

    #[test]
    fn what_is_written_decodes_as_otlp() {
        let mut queue = Vec::new();
        span(&mut queue, 0x00f067aa0ba902b7, Some((0x1111, true)), true);
        span(&mut queue, 0x2222, None, false);
        let body = Envelope::new("edge-1").request(&queue);
        let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        assert_eq!(req.resource_spans.len(), 1);
        let rs = &req.resource_spans[0];
        let res = rs.resource.as_ref().unwrap();
        let service = res
            .attributes
            .iter()
            .find(|kv| kv.key == "service.name")
            .unwrap();
        assert_eq!(
            service.value.as_ref().unwrap().value,
            Some(any_value::Value::StringValue("edge-1".into()))
        );
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().unwrap().name, "sluice");
        assert_eq!(ss.spans.len(), 2);
        let s = &ss.spans[0];
        assert_eq!(
            s.trace_id,
            0x4bf92f3577b34da6a3ce929d0e0e4736u128.to_be_bytes()
        );
        assert_eq!(s.span_id, 0x00f067aa0ba902b7u64.to_be_bytes());
        assert_eq!(s.parent_span_id, 0x1111u64.to_be_bytes());
        assert_eq!(s.name, "GET api");
        assert_eq!(s.kind, ProtoKind::Server as i32);
        assert_eq!(s.start_time_unix_nano, 1_700_000_000_123_456_789);
        assert_eq!(s.end_time_unix_nano, 1_700_000_000_223_456_789);
        assert_eq!(s.status.as_ref().unwrap().code, StatusCode::Error as i32);
        assert_eq!(s.flags, 0x301);
        let attr = |k: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(
            attr("url.path"),
            Some(any_value::Value::StringValue("/a/ü".into()))
        );
        assert_eq!(
            attr("empty"),
            Some(any_value::Value::StringValue(String::new()))
        );
        assert_eq!(attr("server.port"), Some(any_value::Value::IntValue(8443)));
        assert_eq!(attr("negative"), Some(any_value::Value::IntValue(-2)));
        assert_eq!(attr("zero"), Some(any_value::Value::IntValue(0)));
        assert_eq!(
            attr("tls.resumed"),
            Some(any_value::Value::BoolValue(false))
        );
        assert_eq!(
            attr("long"),
            Some(any_value::Value::StringValue("x".repeat(300)))
        );
        assert_eq!(s.attributes.len(), 7);
        let root = &ss.spans[1];
        assert!(root.parent_span_id.is_empty());
        assert_eq!(root.status, None);
        assert_eq!(root.flags, 0x101);
    }

    #[test]
    fn varint_lengths_match_what_is_written() {
        for v in [0, 1, 127, 128, 16383, 16384, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            let mut at = 0;
            assert_eq!(read_varint(&out, &mut at), Some(v));
        }
    }

    #[test]
    fn the_queue_is_cut_into_requests_at_span_boundaries() {
        let mut queue = Vec::new();
        for i in 1..=10 {
            span(&mut queue, i, None, false);
        }
        let one = queue.len() / 10;
        // Three spans fit under 3.5 spans' bytes: 3 + 3 + 3 + 1.
        let parts: Vec<_> = chunks(&queue, one * 7 / 2).collect();
        assert_eq!(parts.iter().map(|p| p.1).collect::<Vec<_>>(), [3, 3, 3, 1]);
        assert_eq!(parts.iter().map(|p| p.0.len()).sum::<usize>(), queue.len());
        for (bytes, n) in parts {
            let req =
                ExportTraceServiceRequest::decode(Envelope::new("s").request(bytes).as_slice())
                    .unwrap();
            assert_eq!(req.resource_spans[0].scope_spans[0].spans.len(), n);
        }
        // A span larger than the limit goes alone rather than not at all.
        assert_eq!(chunks(&queue, 1).map(|p| p.1).collect::<Vec<_>>(), [1; 10]);
        assert_eq!(chunks(&[], 100).count(), 0);
    }

    #[test]
    fn a_partial_success_is_read_from_the_response() {
        let accepted = ExportTraceServiceResponse::default().encode_to_vec();
        assert_eq!(rejected(&accepted), (0, String::new()));
        let partial = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: 7,
                error_message: "too old".into(),
            }),
        }
        .encode_to_vec();
        assert_eq!(rejected(&partial), (7, "too old".into()));
        // Garbage is no rejection (and no panic).
        assert_eq!(rejected(&[0xff, 0xff, 0x0a, 0x80]), (0, String::new()));
    }
}
