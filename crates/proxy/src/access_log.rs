//! One line per request, buffered like NGINX's `access_log … buffer=`: lines are appended to
//! a shared buffer and written by a dedicated thread when 64 KiB have gathered or 200 ms have
//! passed, so that the event loop never waits on a disk or a pipe and the writer does not wake
//! per request. A buffer that grows past 8 MiB (a stuck sink) drops lines and counts them.

use sluice_config::{AccessLogFormat, AccessLogTarget, LogConfig};
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

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

fn time(e: &Entry) -> String {
    humantime::format_rfc3339_millis(e.time.unwrap_or_else(SystemTime::now)).to_string()
}

fn text_line(e: &Entry) -> String {
    let dash = || "-".to_owned();
    format!(
        "{time} {client} {listener} \"{method} {path} {proto}\" {status} in={bin} out={bout} ms={dur} host={host} route={route} upstream={up} up_ms={up_ms} tls={tls} cipher={cipher} resumed={resumed}{aborted}\n",
        time = time(e),
        client = e.client.map_or_else(dash, |c| c.to_string()),
        listener = e.listener,
        method = e.method,
        path = e.path,
        proto = e.protocol,
        status = e.status,
        bin = e.bytes_in,
        bout = e.bytes_out,
        dur = ms(e.duration),
        host = if e.host.is_empty() { "-" } else { &e.host },
        route = e.route.as_deref().unwrap_or("-"),
        up = e.upstream.map_or_else(dash, |u| u.to_string()),
        up_ms = e.upstream_time.map_or_else(dash, ms),
        tls = if e.tls_version.is_empty() {
            "-"
        } else {
            e.tls_version
        },
        cipher = if e.tls_cipher.is_empty() {
            "-"
        } else {
            &e.tls_cipher
        },
        resumed = e.tls_resumed.map_or_else(dash, |r| r.to_string()),
        aborted = if e.aborted { " aborted=true" } else { "" },
    )
}

fn json_line(e: &Entry) -> String {
    let v = serde_json::json!({
        "time": time(e),
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
    });
    let mut s = v.to_string();
    s.push('\n');
    s
}
