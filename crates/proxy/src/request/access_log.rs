//! One line per request, buffered like NGINX's `access_log … buffer=`: lines are appended to
//! a shared buffer and written by a dedicated thread when 64 KiB have gathered or 200 ms have
//! passed, so that the event loop never waits on a disk or a pipe and the writer does not wake
//! per request. A buffer that grows past 8 MiB (a stuck sink) drops lines and counts them.

use crate::text::{push_addr, push_u64};
use sluice_config::{AccessLogFormat, AccessLogTarget, LogConfig};
use std::fmt::Write as _;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

/// Gathered bytes that wake the writer early.
const FLUSH_AT: usize = 64 * 1024;
/// Longest a line waits before it is written.
const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// Pending bytes beyond which new lines are dropped.
const MAX_PENDING: usize = 8 << 20;

/// The access log sink. Cloning shares it.
#[derive(Clone, Debug)]
pub struct AccessLog {
    inner: Option<Arc<Inner>>,
    format: AccessLogFormat,
}

struct Inner {
    pending: Mutex<Vec<u8>>,
    wake: Condvar,
    sink: Mutex<Box<dyn Write + Send>>,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Writes out whatever is pending.
    fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        if !batch.is_empty() {
            let _ = sink.write_all(&batch);
        }
        let _ = sink.flush();
    }
}

impl Drop for Inner {
    /// A sink replaced by a reload (or the last one, at exit) writes out what it holds.
    fn drop(&mut self) {
        self.flush();
    }
}

/// What is logged about one request.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    pub(crate) time: Option<SystemTime>,
    pub(crate) client: Option<SocketAddr>,
    pub(crate) listener: Arc<str>,
    pub(crate) host: String,
    pub(crate) method: String,
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
    pub(crate) tls_cipher: String,
    pub(crate) tls_resumed: Option<bool>,
    pub(crate) aborted: bool,
    /// The request's `X-Request-Id` (empty when the listener gives none).
    pub(crate) request_id: String,
    /// Its trace and span IDs (`[tracing]` on).
    pub(crate) trace: Option<(u128, u64)>,
}

impl AccessLog {
    /// Opens the sink described by `config` and starts its writer thread.
    pub fn open(config: &LogConfig) -> std::io::Result<Self> {
        let sink: Box<dyn Write + Send> = match &config.access_log {
            AccessLogTarget::Off => return Ok(Self::off()),
            AccessLogTarget::Stdout => Box::new(std::io::stdout()),
            AccessLogTarget::Stderr => Box::new(std::io::stderr()),
            AccessLogTarget::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        };
        let inner = Arc::new(Inner {
            pending: Mutex::new(Vec::with_capacity(FLUSH_AT * 2)),
            wake: Condvar::new(),
            sink: Mutex::new(sink),
            dropped: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("sluice-access-log".into())
            .spawn(move || {
                while let Some(inner) = weak.upgrade() {
                    {
                        let pending = inner.pending.lock().unwrap_or_else(|e| e.into_inner());
                        if pending.len() < FLUSH_AT {
                            let _ = inner.wake.wait_timeout(pending, FLUSH_EVERY);
                        }
                    }
                    inner.flush();
                }
            })?;
        Ok(AccessLog {
            inner: Some(inner),
            format: config.access_format,
        })
    }

    /// A sink that discards everything.
    pub fn off() -> Self {
        AccessLog {
            inner: None,
            format: AccessLogFormat::Text,
        }
    }

    /// Lines dropped because the sink could not keep up.
    pub fn dropped(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.dropped.load(Ordering::Relaxed))
    }

    /// Writes out every line logged so far (at shutdown).
    pub fn flush(&self) {
        if let Some(inner) = &self.inner {
            inner.flush();
        }
    }

    pub(crate) fn log(&self, e: &Entry) {
        let Some(inner) = &self.inner else { return };
        let line = match self.format {
            AccessLogFormat::Text => text_line(e),
            AccessLogFormat::Json => json_line(e),
        };
        let mut pending = inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() + line.len() > MAX_PENDING {
            inner.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.extend_from_slice(line.as_bytes());
        if pending.len() >= FLUSH_AT {
            inner.wake.notify_one();
        }
    }
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

fn time(e: &Entry) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_millis(e.time.unwrap_or_else(SystemTime::now))
}

/// The text line, written piece by piece into one buffer (no temporary strings).
fn text_line(e: &Entry) -> String {
    let mut out = String::with_capacity(192 + e.path.len() + e.host.len());
    let _ = write!(out, "{}", time(e));
    out.push(' ');
    match &e.client {
        Some(c) => push_addr(&mut out, c),
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
    push_u64(&mut out, u64::from(e.status));
    out.push_str(" in=");
    push_u64(&mut out, e.bytes_in);
    out.push_str(" out=");
    push_u64(&mut out, e.bytes_out);
    out.push_str(" ms=");
    push_ms(&mut out, e.duration);
    out.push_str(" host=");
    push_or_dash(&mut out, &e.host);
    out.push_str(" route=");
    push_or_dash(&mut out, e.route.as_deref().unwrap_or(""));
    out.push_str(" upstream=");
    match &e.upstream {
        Some(u) => push_addr(&mut out, u),
        None => out.push('-'),
    }
    out.push_str(" up_ms=");
    match e.upstream_time {
        Some(d) => push_ms(&mut out, d),
        None => out.push('-'),
    }
    out.push_str(" tls=");
    push_or_dash(&mut out, e.tls_version);
    out.push_str(" cipher=");
    push_or_dash(&mut out, &e.tls_cipher);
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
        sluice_trace::push_hex(&mut out, trace, 32);
        out.push_str(" span_id=");
        sluice_trace::push_hex(&mut out, u128::from(span), 16);
    }
    if e.aborted {
        out.push_str(" aborted=true");
    }
    out.push('\n');
    out
}

fn json_line(e: &Entry) -> String {
    let v = serde_json::json!({
        "time": time(e).to_string(),
        "client": e.client.map(|c| c.to_string()),
        "listener": &*e.listener,
        "host": e.host,
        "method": e.method,
        "path": e.path,
        "protocol": e.protocol,
        "status": e.status,
        "bytes_in": e.bytes_in,
        "bytes_out": e.bytes_out,
        "duration_ms": e.duration.as_secs_f64() * 1000.0,
        "route": e.route,
        "upstream": e.upstream.map(|u| u.to_string()),
        "upstream_ms": e.upstream_time.map(|d| d.as_secs_f64() * 1000.0),
        "tls_version": (!e.tls_version.is_empty()).then_some(e.tls_version),
        "tls_cipher": (!e.tls_cipher.is_empty()).then_some(&e.tls_cipher),
        "tls_resumed": e.tls_resumed,
        "aborted": e.aborted,
        "request_id": (!e.request_id.is_empty()).then_some(&e.request_id),
        "trace_id": e.trace.map(|(t, _)| sluice_trace::hex(t, 32)),
        "span_id": e.trace.map(|(_, s)| sluice_trace::hex(u128::from(s), 16)),
    });
    let mut s = v.to_string();
    s.push('\n');
    s
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
        }
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
            tls_cipher: String::new(),
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
