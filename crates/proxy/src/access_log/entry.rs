//! One request's access log entry and its two line formats: `key=value` text and JSON (the
//! JSON is also what shippers send and what `/api/v1/requests` answers with).

use crate::text::{push_addr, push_u64};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What is logged about one request.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    pub(crate) time: Option<SystemTime>,
    pub(crate) client: Option<SocketAddr>,
    pub(crate) listener: Arc<str>,
    pub(crate) host: String,
    /// `'static` for the standard methods (no copy per request).
    pub(crate) method: std::borrow::Cow<'static, str>,
    pub(crate) path: String,
    pub(crate) protocol: &'static str,
    pub(crate) status: u16,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    pub(crate) duration: Duration,
    pub(crate) route: Option<String>,
    pub(crate) upstream: Option<SocketAddr>,
    pub(crate) upstream_time: Option<Duration>,
    pub(crate) tls_version: &'static str,
    /// The cipher suite's name: `'static` when read off a connection, owned when read back
    /// from the request log's store.
    pub(crate) tls_cipher: std::borrow::Cow<'static, str>,
    pub(crate) tls_resumed: Option<bool>,
    pub(crate) aborted: bool,
    /// The request's `X-Request-Id` (empty when the listener gives none).
    pub(crate) request_id: String,
    /// Its trace and span IDs (`[tracing]` on).
    pub(crate) trace: Option<(u128, u64)>,
    /// Who `[route.auth]` accepted it as.
    pub(crate) subject: Option<std::sync::Arc<str>>,
    /// Why `[route.auth]` refused it (`sluice_auth::Reason::name`).
    pub(crate) auth_refused: Option<&'static str>,
    /// Why the gateway refused the request before any route's policy ran (a path that
    /// normalization refused, a Host the SNI's certificate does not serve, ...).
    pub(crate) refused: Option<&'static str>,
    /// What `[route.waf]` did, when it did more than pass a request nothing matched.
    pub(crate) waf: Option<Box<super::WafRecord>>,
}

/// `d` in milliseconds with three decimals (microseconds, rounded), in integers: `{:.3}` on
/// a float went through the float formatter's exact mode (grisu, falling back to dragon).
fn push_ms(out: &mut String, d: Duration) {
    let us = (d.as_nanos() + 500) / 1000;
    push_u64(out, (us / 1000) as u64);
    let frac = (us % 1000) as u32;
    out.push('.');
    for digit in [frac / 100, frac / 10 % 10, frac % 10] {
        out.push(char::from(b'0' + digit as u8));
    }
}

fn push_or_dash(out: &mut String, s: &str) {
    out.push_str(if s.is_empty() { "-" } else { s });
}

/// The entry's time as RFC 3339 with milliseconds (`2025-11-23T00:00:00.123Z`).
///
/// The date and time of day change once a second, so each thread keeps the last second it
/// wrote as text (NGINX keeps its log times the same way); formatting the calendar date for
/// every line was about 15% of the line's instructions.
fn push_time(out: &mut String, e: &Entry) {
    thread_local! {
        static SECOND: std::cell::RefCell<(u64, String)> =
            const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let t = e.time.unwrap_or_else(SystemTime::now);
    let Ok(since) = t.duration_since(SystemTime::UNIX_EPOCH) else {
        let _ = write!(out, "{}", humantime::format_rfc3339_millis(t));
        return;
    };
    SECOND.with(|cell| {
        let mut cell = cell.borrow_mut();
        let (second, text) = &mut *cell;
        if *second != since.as_secs() {
            let whole = t - Duration::from_nanos(u64::from(since.subsec_nanos()));
            text.clear();
            // `…T00:00:00Z`: kept without its `Z`.
            let _ = write!(text, "{}", humantime::format_rfc3339_seconds(whole));
            text.pop();
            *second = since.as_secs();
        }
        out.push_str(text);
    });
    let ms = since.subsec_millis();
    out.push('.');
    for digit in [ms / 100, ms / 10 % 10, ms % 10] {
        out.push(char::from(b'0' + digit as u8));
    }
    out.push('Z');
}

/// The text line, written piece by piece into one buffer (no temporary strings).
#[cfg(test)]
pub(crate) fn text_line(e: &Entry) -> String {
    let mut out = String::new();
    push_text_line(&mut out, e);
    out
}

/// Appends the text line of `e` to `out` (the access log formats into one buffer per
/// thread: a `String` per request was an allocation and a free on every request).
pub(crate) fn push_text_line(out: &mut String, e: &Entry) {
    // Room for the whole line (about 200 bytes besides the path, host and request ID, 75 more
    // with a trace), so that it is not regrown while written.
    out.reserve(320 + e.path.len() + e.host.len() + e.request_id.len());
    push_time(out, e);
    out.push(' ');
    match &e.client {
        Some(c) => push_addr(out, c),
        None => out.push('-'),
    }
    out.push(' ');
    out.push_str(&e.listener);
    out.push_str(" \"");
    out.push_str(&e.method);
    out.push(' ');
    out.push_str(&e.path);
    out.push(' ');
    out.push_str(e.protocol);
    out.push_str("\" ");
    push_u64(out, u64::from(e.status));
    out.push_str(" in=");
    push_u64(out, e.bytes_in);
    out.push_str(" out=");
    push_u64(out, e.bytes_out);
    out.push_str(" ms=");
    push_ms(out, e.duration);
    out.push_str(" host=");
    push_or_dash(out, &e.host);
    out.push_str(" route=");
    push_or_dash(out, e.route.as_deref().unwrap_or(""));
    out.push_str(" upstream=");
    match &e.upstream {
        Some(u) => push_addr(out, u),
        None => out.push('-'),
    }
    out.push_str(" up_ms=");
    match e.upstream_time {
        Some(d) => push_ms(out, d),
        None => out.push('-'),
    }
    out.push_str(" tls=");
    push_or_dash(out, e.tls_version);
    out.push_str(" cipher=");
    push_or_dash(out, &e.tls_cipher);
    out.push_str(" resumed=");
    out.push_str(match e.tls_resumed {
        Some(true) => "true",
        Some(false) => "false",
        None => "-",
    });
    if !e.request_id.is_empty() {
        out.push_str(" id=");
        out.push_str(&e.request_id);
    }
    if let Some((trace, span)) = e.trace {
        out.push_str(" trace_id=");
        sluice_trace::push_hex(out, trace, 32);
        out.push_str(" span_id=");
        sluice_trace::push_hex(out, u128::from(span), 16);
    }
    if let Some(subject) = &e.subject {
        out.push_str(" user=");
        // One field of the line: a subject's spaces and controls (a claim may hold any)
        // would split it.
        out.extend(subject.chars().map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        }));
    }
    if let Some(why) = e.auth_refused {
        out.push_str(" auth=");
        out.push_str(why);
    }
    if let Some(why) = e.refused {
        out.push_str(" refused=");
        out.push_str(why);
    }
    if let Some(waf) = &e.waf {
        waf.push_text(out);
    }
    if e.aborted {
        out.push_str(" aborted=true");
    }
    out.push('\n');
}

/// The JSON line: written by hand in a fixed order, `time` first (an Elasticsearch shipper
/// renames it to `@timestamp` in place), without building a `serde_json::Value` per request.
pub(crate) fn json_line(e: &Entry) -> String {
    let mut out = String::with_capacity(384 + e.path.len() + e.host.len());
    out.push_str("{\"time\":\"");
    push_time(&mut out, e);
    out.push_str("\",\"client\":");
    match &e.client {
        Some(c) => {
            out.push('"');
            push_addr(&mut out, c);
            out.push('"');
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"listener\":");
    push_json_str(&mut out, &e.listener);
    out.push_str(",\"host\":");
    push_json_str(&mut out, &e.host);
    out.push_str(",\"method\":");
    push_json_str(&mut out, &e.method);
    out.push_str(",\"path\":");
    push_json_str(&mut out, &e.path);
    out.push_str(",\"protocol\":");
    push_json_str(&mut out, e.protocol);
    out.push_str(",\"status\":");
    push_u64(&mut out, u64::from(e.status));
    out.push_str(",\"bytes_in\":");
    push_u64(&mut out, e.bytes_in);
    out.push_str(",\"bytes_out\":");
    push_u64(&mut out, e.bytes_out);
    out.push_str(",\"duration_ms\":");
    push_ms(&mut out, e.duration);
    out.push_str(",\"route\":");
    push_json_opt(&mut out, e.route.as_deref());
    out.push_str(",\"upstream\":");
    match &e.upstream {
        Some(u) => {
            out.push('"');
            push_addr(&mut out, u);
            out.push('"');
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"upstream_ms\":");
    match e.upstream_time {
        Some(d) => push_ms(&mut out, d),
        None => out.push_str("null"),
    }
    out.push_str(",\"tls_version\":");
    push_json_opt(&mut out, Some(e.tls_version).filter(|v| !v.is_empty()));
    out.push_str(",\"tls_cipher\":");
    push_json_opt(&mut out, Some(&*e.tls_cipher).filter(|v| !v.is_empty()));
    out.push_str(",\"tls_resumed\":");
    out.push_str(match e.tls_resumed {
        Some(true) => "true",
        Some(false) => "false",
        None => "null",
    });
    out.push_str(",\"aborted\":");
    out.push_str(if e.aborted { "true" } else { "false" });
    out.push_str(",\"request_id\":");
    push_json_opt(
        &mut out,
        Some(e.request_id.as_str()).filter(|v| !v.is_empty()),
    );
    if let Some(subject) = &e.subject {
        out.push_str(",\"subject\":");
        push_json_str(&mut out, subject);
    }
    if let Some(why) = e.auth_refused {
        out.push_str(",\"auth_refused\":");
        push_json_str(&mut out, why);
    }
    if let Some(why) = e.refused {
        out.push_str(",\"refused\":");
        push_json_str(&mut out, why);
    }
    if let Some(waf) = &e.waf {
        waf.push_json(&mut out, push_json_str);
    }
    match e.trace {
        Some((trace, span)) => {
            out.push_str(",\"trace_id\":\"");
            sluice_trace::push_hex(&mut out, trace, 32);
            out.push_str("\",\"span_id\":\"");
            sluice_trace::push_hex(&mut out, u128::from(span), 16);
            out.push_str("\"}\n");
        }
        None => out.push_str(",\"trace_id\":null,\"span_id\":null}\n"),
    }
    out
}

fn push_json_opt(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_json_str(out, s),
        None => out.push_str("null"),
    }
}

/// `s` as a JSON string: quotes, backslashes and control characters escaped (RFC 8259 §7).
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f | 0x7f => "",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(esc);
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            time: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_763_856_000_123)),
            client: Some("10.0.255.7:54321".parse().unwrap()),
            listener: "https".into(),
            host: "example.com".into(),
            method: "GET".into(),
            path: "/a?b=c".into(),
            protocol: "HTTP/1.1",
            status: 200,
            bytes_in: 0,
            bytes_out: 18_446_744_073_709_551_615,
            duration: Duration::from_nanos(1_234_567),
            route: Some("all".into()),
            upstream: Some("[::1]:8080".parse().unwrap()),
            upstream_time: Some(Duration::from_nanos(999_999_500)),
            tls_version: "TLSv1.3",
            tls_cipher: "TLS_AES_128_GCM_SHA256".into(),
            tls_resumed: Some(false),
            aborted: false,
            request_id: String::new(),
            trace: None,
            subject: None,
            auth_refused: None,
            refused: None,
            waf: None,
        }
    }

    #[test]
    fn the_authenticated_subject_and_a_refusal_are_logged() {
        let e = Entry {
            subject: Some("alice smith\n".into()),
            ..entry()
        };
        assert!(
            text_line(&e).ends_with(" user=alice_smith_\n"),
            "{}",
            text_line(&e)
        );
        let json: serde_json::Value = serde_json::from_str(&json_line(&e)).unwrap();
        assert_eq!(json["subject"], "alice smith\n");
        let e = Entry {
            auth_refused: Some("jwt_expired"),
            ..entry()
        };
        assert!(text_line(&e).ends_with(" auth=jwt_expired\n"));
        let json: serde_json::Value = serde_json::from_str(&json_line(&e)).unwrap();
        assert_eq!(json["auth_refused"], "jwt_expired");
        assert!(
            !text_line(&entry()).contains(" user=") && !json_line(&entry()).contains("subject")
        );
    }

    #[test]
    fn trace_and_span_ids_are_logged_when_tracing_gives_them() {
        let mut e = entry();
        assert!(json_line(&e).contains("\"trace_id\":null"));
        assert!(!text_line(&e).contains("trace_id="));
        e.trace = Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0xab));
        let json: serde_json::Value = serde_json::from_str(&json_line(&e)).unwrap();
        assert_eq!(json["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(json["span_id"], "00000000000000ab");
        assert!(
            text_line(&e)
                .contains(" trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00000000000000ab")
        );
    }

    #[test]
    fn json_lines_parse_and_escape_what_json_must_escape() {
        let e = Entry {
            listener: "a\"b\\c".into(),
            path: "/p?q=\u{1}\t\r\n\u{7f}é".into(),
            route: None,
            upstream_time: None,
            ..entry()
        };
        let line = json_line(&e);
        assert!(line.starts_with("{\"time\":\"2025-11-23T00:00:00.123Z\","));
        assert!(line.ends_with("}\n") && !line[..line.len() - 1].contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["listener"], "a\"b\\c");
        assert_eq!(v["path"], "/p?q=\u{1}\t\r\n\u{7f}é");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes_out"], 18_446_744_073_709_551_615u64);
        assert_eq!(v["duration_ms"], 1.235);
        assert_eq!(v["upstream_ms"], serde_json::Value::Null);
        assert_eq!(v["route"], serde_json::Value::Null);
        assert_eq!(v["client"], "10.0.255.7:54321");
        assert_eq!(v["tls_resumed"], false);
        assert_eq!(v.as_object().unwrap().len(), 21);
    }

    #[test]
    fn the_request_id_is_logged_when_there_is_one() {
        let e = Entry {
            request_id: "0123abcd".into(),
            ..entry()
        };
        assert!(text_line(&e).ends_with(" resumed=false id=0123abcd\n"));
        let json: serde_json::Value = serde_json::from_str(&json_line(&e)).unwrap();
        assert_eq!(json["request_id"], "0123abcd");
        assert!(!text_line(&entry()).contains(" id="));
    }

    #[test]
    fn text_lines_keep_their_format() {
        assert_eq!(
            text_line(&entry()),
            "2025-11-23T00:00:00.123Z 10.0.255.7:54321 https \"GET /a?b=c HTTP/1.1\" 200 in=0 \
             out=18446744073709551615 ms=1.235 host=example.com route=all upstream=[::1]:8080 \
             up_ms=1000.000 tls=TLSv1.3 cipher=TLS_AES_128_GCM_SHA256 resumed=false\n"
        );
        let bare = Entry {
            client: None,
            upstream: None,
            upstream_time: None,
            route: None,
            tls_resumed: None,
            duration: Duration::ZERO,
            aborted: true,
            ..entry()
        };
        let line = text_line(&Entry {
            host: String::new(),
            tls_version: "",
            tls_cipher: "".into(),
            ..bare
        });
        assert!(
            line.ends_with(
                " 200 in=0 out=18446744073709551615 ms=0.000 host=- route=- upstream=- up_ms=- \
                 tls=- cipher=- resumed=- aborted=true\n"
            ),
            "{line}"
        );
        assert!(line.contains(" - https "), "{line}");
    }

    #[test]
    fn times_read_as_humantime_writes_them() {
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_000_000);
        // Within one second, across seconds and back (other threads' seconds do not leak
        // in: the cache is per thread), a day boundary, the epoch.
        for t in [
            base + Duration::from_nanos(999_999_999),
            base,
            base + Duration::from_millis(7),
            base + Duration::from_millis(1_001),
            base + Duration::from_millis(999),
            base + Duration::from_secs(86_399 - 1_764_000_000 % 86_400) + Duration::from_millis(5),
            base + Duration::from_secs(86_400 - 1_764_000_000 % 86_400),
            SystemTime::UNIX_EPOCH,
        ] {
            let mut got = String::new();
            push_time(
                &mut got,
                &Entry {
                    time: Some(t),
                    ..Entry::default()
                },
            );
            assert_eq!(got, humantime::format_rfc3339_millis(t).to_string());
        }
    }

    #[test]
    fn milliseconds_round_to_the_microsecond_like_the_float_format() {
        for nanos in [
            0u64,
            499,
            500,
            1_000,
            999_499,
            999_500,
            12_345_678_901,
            7_000_000,
        ] {
            let mut s = String::new();
            push_ms(&mut s, Duration::from_nanos(nanos));
            let micros = (nanos + 500) / 1000;
            assert_eq!(s, format!("{:.3}", micros as f64 / 1000.0), "{nanos} ns");
        }
    }

    #[test]
    fn addresses_print_as_display_does() {
        for a in [
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "127.0.0.1:8443",
            "[2001:db8::1]:443",
            "[fe80::1%3]:80",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            let mut s = String::new();
            push_addr(&mut s, &addr);
            assert_eq!(s, addr.to_string());
            assert_eq!(crate::text::ip_string(addr.ip()), addr.ip().to_string());
        }
    }
}
