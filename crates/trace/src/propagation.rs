//! Trace context in request headers: W3C `traceparent` (and its `tracestate`, which passes
//! through untouched), or B3 (`b3: {trace}-{span}-{sampled}` or the `X-B3-*` headers) where
//! no `traceparent` is present.
//!
//! Parsed as strictly as the W3C Trace Context spec asks (version 00: exactly 55 bytes,
//! lower-case hex, IDs not all zero; a later version may be longer, its first four fields
//! read alike): a malformed header starts a new trace rather than join a wrong one.

use http::{HeaderMap, HeaderName, HeaderValue};

/// `traceparent`.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// B3's single header.
pub const B3: HeaderName = HeaderName::from_static("b3");
const B3_TRACE_ID: HeaderName = HeaderName::from_static("x-b3-traceid");
const B3_SPAN_ID: HeaderName = HeaderName::from_static("x-b3-spanid");
const B3_SAMPLED: HeaderName = HeaderName::from_static("x-b3-sampled");
const B3_FLAGS: HeaderName = HeaderName::from_static("x-b3-flags");
const B3_PARENT: HeaderName = HeaderName::from_static("x-b3-parentspanid");

/// Which format a request's context came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `traceparent`.
    W3c,
    /// `b3` or `X-B3-*`.
    B3,
}

/// The context a request brought: its trace, the caller's span, the caller's sampling
/// decision (`None`: B3 deferred it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    /// The trace.
    pub trace_id: u128,
    /// The caller's span (the parent of ours).
    pub span_id: u64,
    /// The caller's decision; `None`: B3 deferred it to us.
    pub sampled: Option<bool>,
    /// The headers it came in.
    pub format: Format,
}

/// Reads the context of a request: `traceparent` first, B3 where it is absent. `None`: no
/// context, or a malformed one (a new trace starts).
pub fn extract(headers: &HeaderMap) -> Option<Parent> {
    if let Some(v) = headers.get(&TRACEPARENT) {
        // Several traceparent fields: invalid (W3C §3.2.1 allows one).
        if headers.get_all(&TRACEPARENT).iter().nth(1).is_some() {
            return None;
        }
        return traceparent(v.as_bytes());
    }
    if let Some(v) = headers.get(&B3) {
        return b3_single(v.as_bytes());
    }
    b3_multi(headers)
}

/// `{version}-{trace-id}-{parent-id}-{flags}` (W3C Trace Context §3.2).
fn traceparent(v: &[u8]) -> Option<Parent> {
    if v.len() < 55 {
        return None;
    }
    let version = hex_u128(&v[0..2])? as u8;
    // Version ff is invalid; version 00 is exactly 55 bytes; a later one may carry more
    // after a '-'.
    if version == 0xff || (version == 0 && v.len() != 55) || (v.len() > 55 && v[55] != b'-') {
        return None;
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let trace_id = hex_u128(&v[3..35])?;
    let span_id = hex_u128(&v[36..52])? as u64;
    let flags = hex_u128(&v[53..55])? as u8;
    (trace_id != 0 && span_id != 0).then_some(Parent {
        trace_id,
        span_id,
        sampled: Some(flags & 1 == 1),
        format: Format::W3c,
    })
}

/// `b3: {trace}-{span}[-{sampled}[-{parent}]]`, or a lone sampling state (`0`, `1`, `d`),
/// which carries no IDs and so no parent.
fn b3_single(v: &[u8]) -> Option<Parent> {
    let mut fields = v.split(|b| *b == b'-');
    let trace = fields.next()?;
    let span = fields.next()?;
    let sampled = match fields.next() {
        None => None,
        Some(b"1" | b"d") => Some(true),
        Some(b"0") => Some(false),
        Some(_) => return None,
    };
    b3_ids(trace, span, sampled)
}

/// `X-B3-TraceId`, `X-B3-SpanId`, `X-B3-Sampled` (`1`/`0`, or `true`/`false` of old
/// clients), `X-B3-Flags: 1` (debug: sampled).
fn b3_multi(headers: &HeaderMap) -> Option<Parent> {
    let trace = headers.get(&B3_TRACE_ID)?.as_bytes();
    let span = headers.get(&B3_SPAN_ID)?.as_bytes();
    let debug = headers.get(&B3_FLAGS).is_some_and(|f| f.as_bytes() == b"1");
    let sampled = match headers.get(&B3_SAMPLED).map(HeaderValue::as_bytes) {
        _ if debug => Some(true),
        None => None,
        Some(b"1" | b"true") => Some(true),
        Some(b"0" | b"false") => Some(false),
        Some(_) => return None,
    };
    b3_ids(trace, span, sampled)
}

/// B3's trace ID is 16 or 32 hex digits (a 64-bit one is the low half), its span ID 16.
fn b3_ids(trace: &[u8], span: &[u8], sampled: Option<bool>) -> Option<Parent> {
    if !(trace.len() == 16 || trace.len() == 32) || span.len() != 16 {
        return None;
    }
    let lower = |s: &[u8]| s.iter().all(|b| !b.is_ascii_uppercase());
    if !lower(trace) || !lower(span) {
        return None;
    }
    let trace_id = hex_u128(trace)?;
    let span_id = hex_u128(span)? as u64;
    (trace_id != 0 && span_id != 0).then_some(Parent {
        trace_id,
        span_id,
        sampled,
        format: Format::B3,
    })
}

/// Lower-case hex digits only (W3C: "HEXDIGLC"), at most 32.
fn hex_u128(s: &[u8]) -> Option<u128> {
    if s.is_empty() || s.len() > 32 {
        return None;
    }
    let mut n: u128 = 0;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        n = (n << 4) | u128::from(d);
    }
    Some(n)
}

/// Writes the context the next hop sees: `traceparent` with `span_id` as its parent (the
/// gateway's span for that hop), and, where the request came with B3, `b3` alike (the
/// `X-B3-*` headers removed: one B3 form, consistent with the W3C one). `tracestate` is
/// left as it came (the gateway adds no entry of its own).
pub fn inject(headers: &mut HeaderMap, trace_id: u128, span_id: u64, sampled: bool, b3: bool) {
    let mut buf = [0u8; 55];
    buf[..3].copy_from_slice(b"00-");
    write_hex(&mut buf[3..35], trace_id);
    buf[35] = b'-';
    write_hex(&mut buf[36..52], u128::from(span_id));
    buf[52] = b'-';
    buf[53] = b'0';
    buf[54] = if sampled { b'1' } else { b'0' };
    headers.insert(TRACEPARENT, header_value(&buf));
    if b3 {
        for h in [B3_TRACE_ID, B3_SPAN_ID, B3_SAMPLED, B3_FLAGS, B3_PARENT] {
            headers.remove(h);
        }
        let mut b = [0u8; 50];
        write_hex(&mut b[..32], trace_id);
        b[32] = b'-';
        write_hex(&mut b[33..49], u128::from(span_id));
        b[49] = b'-';
        let mut v = b.to_vec();
        v.push(if sampled { b'1' } else { b'0' });
        headers.insert(B3, header_value(&v));
    }
}

/// Lower-case hex of `n`, right-aligned to fill `out` (zeros before its 32 digits, and its
/// high digits cut where `out` is shorter).
///
/// Two digits per byte from a table: a digit at a time with a 128-bit shift each was ~180
/// instructions for 32 digits, and every proxied request makes a 32-digit request ID.
pub fn write_hex(out: &mut [u8], n: u128) {
    let mut end = out.len();
    for byte in n.to_le_bytes() {
        let pair = HEX_PAIRS[usize::from(byte)];
        match end {
            0 => return,
            1 => {
                out[0] = pair[1];
                return;
            }
            _ => {
                out[end - 2..end].copy_from_slice(&pair);
                end -= 2;
            }
        }
    }
    out[..end].fill(b'0');
}

/// A byte's two lowercase hex digits, for every byte.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [HEX[i >> 4], HEX[i & 15]];
        i += 1;
    }
    t
};

fn header_value(bytes: &[u8]) -> HeaderValue {
    // Hex digits and '-' only: always a valid value.
    HeaderValue::from_bytes(bytes).expect("hex digits and '-' make a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every width from none to past 32 digits, for values with digits in every position.
    #[test]
    fn hex_is_what_format_writes_right_aligned() {
        for n in [
            0u128,
            1,
            0xab,
            0x0123_4567_89ab_cdef,
            u128::MAX,
            0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
        ] {
            for width in 0..=40 {
                let mut out = vec![b'?'; width];
                write_hex(&mut out, n);
                let full = format!("{n:040x}");
                assert_eq!(
                    std::str::from_utf8(&out).unwrap(),
                    &full[40 - width..],
                    "{n:#x} in {width}"
                );
            }
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read() {
        let p = extract(&headers(&[("traceparent", TP)])).unwrap();
        assert_eq!(p.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(p.span_id, 0x00f067aa0ba902b7);
        assert_eq!(p.sampled, Some(true));
        assert_eq!(p.format, Format::W3c);
        let unsampled = TP.replace("-01", "-00");
        assert_eq!(
            extract(&headers(&[("traceparent", &unsampled)]))
                .unwrap()
                .sampled,
            Some(false)
        );
    }

    #[test]
    fn malformed_traceparents_start_a_new_trace() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            // upper case, zero IDs, version ff, version 00 with more, wrong separators
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(extract(&headers(&[("traceparent", bad)])), None, "{bad}");
        }
        // Two traceparent fields.
        assert_eq!(
            extract(&headers(&[("traceparent", TP), ("traceparent", TP)])),
            None
        );
        // A later version may be longer.
        let v1 = format!("01{}-more", &TP[2..]);
        assert!(extract(&headers(&[("traceparent", &v1)])).is_some());
    }

    #[test]
    fn b3_single_and_multi_are_read_when_there_is_no_traceparent() {
        let p = extract(&headers(&[(
            "b3",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
        )]))
        .unwrap();
        assert_eq!(p.trace_id, 0x80f198ee56343ba864fe8b2a57d3eff7);
        assert_eq!(p.span_id, 0xe457b5a2e4d86bd1);
        assert_eq!((p.sampled, p.format), (Some(true), Format::B3));
        // 64-bit trace ID, deferred sampling.
        let p = extract(&headers(&[("b3", "64fe8b2a57d3eff7-e457b5a2e4d86bd1")])).unwrap();
        assert_eq!((p.trace_id, p.sampled), (0x64fe8b2a57d3eff7, None));
        // A lone sampling state carries no parent.
        assert_eq!(extract(&headers(&[("b3", "0")])), None);
        let p = extract(&headers(&[
            ("x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7"),
            ("x-b3-spanid", "e457b5a2e4d86bd1"),
            ("x-b3-sampled", "0"),
        ]))
        .unwrap();
        assert_eq!(p.sampled, Some(false));
        // traceparent wins over B3.
        let p = extract(&headers(&[
            ("traceparent", TP),
            ("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"),
        ]))
        .unwrap();
        assert_eq!(p.format, Format::W3c);
    }

    #[test]
    fn injected_context_reads_back() {
        let mut h = headers(&[("x-b3-spanid", "e457b5a2e4d86bd1"), ("tracestate", "a=1")]);
        inject(&mut h, 0x4bf92f3577b34da6a3ce929d0e0e4736, 0xab, true, true);
        assert_eq!(
            h["traceparent"],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00000000000000ab-01"
        );
        assert_eq!(
            h["b3"],
            "4bf92f3577b34da6a3ce929d0e0e4736-00000000000000ab-1"
        );
        assert!(h.get("x-b3-spanid").is_none());
        assert_eq!(h["tracestate"], "a=1");
        let p = traceparent(h["traceparent"].as_bytes()).unwrap();
        assert_eq!((p.span_id, p.sampled), (0xab, Some(true)));
        let mut h = HeaderMap::new();
        inject(&mut h, 1, 2, false, false);
        assert!(h["traceparent"].as_bytes().ends_with(b"-00"));
        assert!(h.get("b3").is_none());
    }
}
