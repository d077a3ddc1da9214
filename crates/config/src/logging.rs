//! `[log]`: diagnostics, the access log, the shippers that send it to a log store or syslog,
//! and the in-memory log of recent requests.

use std::path::PathBuf;
use std::time::Duration;

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    /// No access log.
    Off,
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// Appended to this file.
    File(PathBuf),
}

/// Access log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// `key=value` pairs, one line per request.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// tracing filter directive.
    pub level: String,
    /// Where the access log goes.
    pub access_log: AccessLogTarget,
    /// Its format.
    pub access_format: AccessLogFormat,
    /// Longest a line waits in memory before it is written; zero writes each line as it is
    /// logged (what a tool that reads the file after each request needs, such as the CRS
    /// regression runner).
    pub access_flush: Duration,
    /// Memory kept for the most recent requests (`/api/v1/requests`); 0 keeps none.
    pub request_log_bytes: usize,
    /// `[[log.ship]]`: where else each access log line goes, as JSON.
    pub ship: Vec<LogShip>,
}

/// How long a line waits for others unless `[log] access_flush` says otherwise: lines are
/// written in batches, not one `write` each, and a reader sees them within this.
pub const DEFAULT_ACCESS_FLUSH: Duration = Duration::from_millis(200);

/// The memory the request log gets unless `[log] request_log` says otherwise: about 20,000
/// requests of a typical size (a kept request costs ~400 bytes with its host and path).
pub const DEFAULT_REQUEST_LOG_BYTES: usize = 8 << 20;

/// One `[[log.ship]]`: a log store or syslog server that receives every access log line.
#[derive(Debug, Clone, PartialEq)]
pub struct LogShip {
    /// Its name in metrics and `/status`.
    pub name: String,
    /// Where and how the lines go.
    pub sink: ShipSink,
    /// Bytes waiting to be sent at most; lines beyond are dropped and counted.
    pub queue_bytes: usize,
    /// Lines in one HTTP batch at most.
    pub batch_lines: usize,
    /// Longest a line waits for its batch to fill.
    pub flush_every: Duration,
    /// Deadline of one send (connect, write and, over HTTP, the answer).
    pub timeout: Duration,
}

/// A shipper's destination.
#[derive(Debug, Clone, PartialEq)]
pub enum ShipSink {
    /// POSTed in batches to an HTTP endpoint.
    Http {
        /// `http://` or `https://host:port/path?query`.
        url: http::Uri,
        /// The body's shape.
        format: HttpLogFormat,
        /// Headers sent with every batch (such as `Authorization`).
        headers: Vec<(String, String)>,
        /// `https://`: PEM of the CA certificates trusted for the store (`None`: the
        /// system's roots).
        ca: Option<Vec<u8>>,
        /// `https://`: the client certificate presented to the store.
        client_identity: Option<crate::client_tls::ClientIdentity>,
    },
    /// RFC 5424 messages to a syslog server.
    Syslog {
        /// The server, `host:port` (a name is resolved at each connection).
        address: String,
        /// How messages travel.
        transport: SyslogTransport,
        /// The facility code (16 for `local0`).
        facility: u8,
        /// APP-NAME of every message.
        app_name: String,
    },
}

/// How syslog messages travel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogTransport {
    /// `udp://`: one datagram per message (RFC 5426).
    Udp,
    /// `tcp://`: octet-counted frames (RFC 6587 §3.4.1).
    Tcp,
    /// `tls://`: octet-counted frames over TLS (RFC 5425), the server's certificate checked
    /// against `ca` (or the system's roots) and the host name.
    Tls {
        /// PEM of the CAs trusted for the server.
        ca: Option<Vec<u8>>,
        /// The client certificate presented when the server asks (RFC 5425 §4.2).
        client_identity: Option<crate::client_tls::ClientIdentity>,
    },
}

/// The body of an HTTP shipper's batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpLogFormat {
    /// One JSON object per line (`application/x-ndjson`): Loki's, VictoriaLogs',
    /// Vector's and most HTTP inputs'.
    JsonLines,
    /// Elasticsearch's (and OpenSearch's) `_bulk` API: a `create` action before each line.
    Elasticsearch {
        /// The index (or data stream) the lines go to.
        index: String,
    },
    /// OpenTelemetry's OTLP logs (`ExportLogsServiceRequest`): each line a log record whose
    /// body is the line, for any OpenTelemetry collector, over HTTP/protobuf (a POST of
    /// `application/x-protobuf`) or gRPC (`LogsService/Export`).
    Otlp {
        /// The transport.
        protocol: crate::tracing::OtlpProtocol,
    },
}

/// Syslog facility names (RFC 5424 §6.2.1) and their codes.
pub const SYSLOG_FACILITIES: &[(&str, u8)] = &[
    ("kern", 0),
    ("user", 1),
    ("mail", 2),
    ("daemon", 3),
    ("auth", 4),
    ("syslog", 5),
    ("lpr", 6),
    ("news", 7),
    ("uucp", 8),
    ("cron", 9),
    ("authpriv", 10),
    ("ftp", 11),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];
