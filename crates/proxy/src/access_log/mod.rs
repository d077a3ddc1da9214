//! The access log: one entry per request (and per layer-4 connection), which goes
//! - to the file, stdout or stderr, buffered like NGINX's `access_log … buffer=`: lines are
//!   appended to a shared buffer and written by a dedicated thread when 64 KiB have gathered
//!   or 200 ms have passed, so that the event loop never waits on a disk or a pipe and the
//!   writer does not wake per request; a buffer that grows past 8 MiB (a stuck sink) drops
//!   lines and counts them;
//! - as JSON to each `[[log.ship]]` (a log store over HTTP, or syslog), through a bounded
//!   queue of its own ([`ship`]);
//! - into the in-memory request log that `/api/v1/requests` searches ([`recent`]).

mod entry;
pub(crate) mod recent;
mod ship;
mod waf;

pub(crate) use entry::Entry;
pub use recent::{Query, RequestLog, RequestLogStats};
pub use ship::ShipperSnapshot;
pub(crate) use waf::WafRecord;

use sluice_config::{AccessLogFormat, AccessLogTarget, LogConfig};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Gathered bytes that wake the writer early.
const FLUSH_AT: usize = 64 * 1024;
/// Pending bytes beyond which new lines are dropped.
const MAX_PENDING: usize = 8 << 20;

/// The access log sink. Cloning shares it.
#[derive(Clone, Debug)]
pub struct AccessLog {
    file: Option<Arc<FileSink>>,
    format: AccessLogFormat,
    ship: Option<Arc<ship::Shipping>>,
    recent: Arc<RequestLog>,
}

/// The file (or stdout/stderr) and its writer thread (none with `access_flush = "0s"`).
struct FileSink {
    pending: Mutex<Vec<u8>>,
    /// Longest a line waits before it is written (`[log] access_flush`); zero: each line is
    /// written by the request that logs it, and there is no writer thread.
    flush_every: Duration,
    wake: Condvar,
    sink: Mutex<Writer>,
    dropped: AtomicU64,
}

/// The writer's side: the output, and the buffer written last, emptied, which becomes the
/// next `pending` so that lines are gathered into a buffer that already has its room (a new
/// one regrew by doubling after every flush: ~300 instructions of copies per line).
struct Writer {
    out: Box<dyn Write + Send>,
    spare: Vec<u8>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

impl FileSink {
    fn open(config: &LogConfig) -> std::io::Result<Option<Arc<Self>>> {
        let sink: Box<dyn Write + Send> = match &config.access_log {
            AccessLogTarget::Off => return Ok(None),
            AccessLogTarget::Stdout => Box::new(std::io::stdout()),
            AccessLogTarget::Stderr => Box::new(std::io::stderr()),
            AccessLogTarget::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        };
        let file = Arc::new(FileSink {
            pending: Mutex::new(Vec::with_capacity(FLUSH_AT * 2)),
            flush_every: config.access_flush,
            wake: Condvar::new(),
            sink: Mutex::new(Writer {
                out: sink,
                spare: Vec::with_capacity(FLUSH_AT * 2),
            }),
            dropped: AtomicU64::new(0),
        });
        if file.flush_every.is_zero() {
            // `access_flush = "0s"`: the requests write their own lines (`write`); no writer.
            return Ok(Some(file));
        }
        let weak = Arc::downgrade(&file);
        std::thread::Builder::new()
            .name("sluice-access-log".into())
            .spawn(move || {
                while let Some(file) = weak.upgrade() {
                    {
                        let pending = file.pending.lock().unwrap_or_else(|e| e.into_inner());
                        if pending.len() < FLUSH_AT {
                            let _ = file.wake.wait_timeout(pending, file.flush_every);
                        }
                    }
                    file.flush();
                }
            })?;
        Ok(Some(file))
    }

    /// Writes out whatever is pending.
    fn flush(&self) {
        // Lock order: the writer, then (briefly) the pending lines; `write` takes only the
        // latter.
        let mut w = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        let Writer { out, spare } = &mut *w;
        std::mem::swap(
            spare,
            &mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()),
        );
        if !spare.is_empty() {
            let _ = out.write_all(spare);
        }
        let _ = out.flush();
        spare.clear();
        // A burst may have grown it to MAX_PENDING: that memory goes back.
        spare.shrink_to(FLUSH_AT * 2);
    }

    /// Gathers `line` for the writer thread; with `access_flush = "0s"` writes it out from
    /// the calling thread, as NGINX's unbuffered `access_log` does (a `write` per request on
    /// the event loop): the line is in the file before the response's last bytes leave, so
    /// a client that reads the log after its response finds it whole (the writer thread's
    /// write could be read half done, cut at a page of the file).
    fn write(&self, line: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() + line.len() > MAX_PENDING {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.extend_from_slice(line.as_bytes());
        if self.flush_every.is_zero() {
            drop(pending);
            self.flush();
        } else if pending.len() >= FLUSH_AT {
            self.wake.notify_one();
        }
    }
}

impl Drop for FileSink {
    /// A sink replaced by a reload (or the last one, at exit) writes out what it holds.
    fn drop(&mut self) {
        self.flush();
    }
}

thread_local! {
    /// The text line being written, reused by the thread's requests.
    static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}
/// What [`LINE`] keeps between requests at most.
const LINE_KEPT: usize = 1024;

impl AccessLog {
    /// Opens the sinks described by `config` and starts their threads, with a request log
    /// of its own.
    pub fn open(config: &LogConfig) -> std::io::Result<Self> {
        Ok(AccessLog {
            file: FileSink::open(config)?,
            format: config.access_format,
            ship: ship::Shipping::start(&config.ship)?,
            recent: Arc::new(RequestLog::new(config.request_log_bytes)),
        })
    }

    /// The sinks of `config` (a reload changed `[log]`), keeping this log's recent requests
    /// (resized to the new bound).
    pub fn reopen(&self, config: &LogConfig) -> std::io::Result<Self> {
        self.recent.set_budget(config.request_log_bytes);
        let ship = match &self.ship {
            Some(s) if s.settings() == config.ship.as_slice() => Some(s.clone()),
            _ => ship::Shipping::start(&config.ship)?,
        };
        Ok(AccessLog {
            file: FileSink::open(config)?,
            format: config.access_format,
            ship,
            recent: self.recent.clone(),
        })
    }

    /// A sink that discards everything.
    pub fn off() -> Self {
        AccessLog {
            file: None,
            format: AccessLogFormat::Text,
            ship: None,
            recent: Arc::new(RequestLog::new(0)),
        }
    }

    /// Lines dropped because the file sink could not keep up.
    pub fn dropped(&self) -> u64 {
        self.file
            .as_ref()
            .map_or(0, |f| f.dropped.load(Ordering::Relaxed))
    }

    /// The recent requests kept in memory.
    pub fn recent(&self) -> &RequestLog {
        &self.recent
    }

    /// Each shipper's counters, in configuration order.
    pub fn shippers(&self) -> Vec<ShipperSnapshot> {
        self.ship
            .as_ref()
            .map(|s| s.snapshots())
            .unwrap_or_default()
    }

    /// Writes out every line logged so far (at shutdown); shippers get up to two seconds to
    /// send theirs.
    pub fn flush(&self) {
        const WAIT: Duration = Duration::from_secs(2);
        if let Some(file) = &self.file {
            file.flush();
        }
        if let Some(ship) = &self.ship {
            ship.drain(WAIT);
        }
    }

    /// Logs `e`: its line to the file and the shippers, a copy into the request log.
    pub(crate) fn log(&self, e: &Entry) {
        let json = (self.ship.is_some()
            || (self.file.is_some() && self.format == AccessLogFormat::Json))
            .then(|| entry::json_line(e));
        if let Some(file) = &self.file {
            match (&json, self.format) {
                (Some(j), AccessLogFormat::Json) => file.write(j),
                _ => LINE.with_borrow_mut(|line| {
                    line.clear();
                    entry::push_text_line(line, e);
                    file.write(line);
                    // A long path's line does not keep its memory for the thread's life.
                    line.shrink_to(LINE_KEPT);
                }),
            }
        }
        if let (Some(ship), Some(json)) = (&self.ship, &json) {
            ship.push(e, json);
        }
        self.recent.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(path: &std::path::Path, flush: Duration) -> LogConfig {
        LogConfig {
            level: "info".into(),
            access_log: AccessLogTarget::File(path.to_path_buf()),
            access_format: AccessLogFormat::Json,
            access_flush: flush,
            request_log_bytes: 0,
            ship: Vec::new(),
        }
    }

    fn entry(path: &str) -> Entry {
        Entry {
            path: path.into(),
            status: 200,
            ..Entry::default()
        }
    }

    /// `access_flush = "0s"`: the line is in the file when `log` returns (the request's own
    /// thread wrote it); otherwise it waits for the writer thread.
    #[test]
    fn a_zero_flush_writes_the_line_before_log_returns_and_the_default_batches() {
        let dir = tempfile::tempdir().unwrap();
        let at_once = dir.path().join("at-once.log");
        let log = AccessLog::open(&config(&at_once, Duration::ZERO)).unwrap();
        for i in 0..3 {
            log.log(&entry(&format!("/line-{i}")));
            let text = std::fs::read_to_string(&at_once).unwrap();
            assert_eq!(text.lines().count(), i + 1, "{text}");
            assert!(text.ends_with("}\n") && text.contains(&format!("/line-{i}")));
        }
        let batched = dir.path().join("batched.log");
        let log = AccessLog::open(&config(&batched, Duration::from_secs(3600))).unwrap();
        log.log(&entry("/waits"));
        assert_eq!(std::fs::read_to_string(&batched).unwrap(), "");
        log.flush();
        assert!(
            std::fs::read_to_string(&batched)
                .unwrap()
                .contains("/waits")
        );
    }
}
