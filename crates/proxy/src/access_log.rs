//! One line per request, written by a dedicated thread so that a slow disk or a full pipe
//! never stalls the event loop (lines are dropped and counted instead).

use sluice_config::{AccessLogFormat, AccessLogTarget, LogConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime};

/// Lines queued for the writer before new ones are dropped.
const QUEUE: usize = 16 * 1024;

/// The access log sink. Cloning shares it.
#[derive(Clone, Debug)]
pub struct AccessLog {
    tx: Option<SyncSender<String>>,
    format: AccessLogFormat,
    dropped: Arc<AtomicU64>,
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
        let writer: Box<dyn Write + Send> = match &config.access_log {
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
        let (tx, rx) = sync_channel::<String>(QUEUE);
        std::thread::Builder::new()
            .name("sluice-access-log".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::new(writer);
                while let Ok(line) = rx.recv() {
                    let _ = out.write_all(line.as_bytes());
                    // Flush when the queue is drained, so lines appear promptly but batch under load.
                    while let Ok(more) = rx.try_recv() {
                        let _ = out.write_all(more.as_bytes());
                    }
                    let _ = out.flush();
                }
            })?;
        Ok(AccessLog {
            tx: Some(tx),
            format: config.access_format,
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A sink that discards everything.
    pub fn off() -> Self {
        AccessLog {
            tx: None,
            format: AccessLogFormat::Text,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Lines dropped because the writer could not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn log(&self, e: &Entry) {
        let Some(tx) = &self.tx else { return };
        let line = match self.format {
            AccessLogFormat::Text => text_line(e),
            AccessLogFormat::Json => json_line(e),
        };
        if let Err(TrySendError::Full(_)) = tx.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
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
