//! `[compression]` and `[offload.compress]` as loaded: the codecs, their levels and backends,
//! and the engines compression jobs run on.

use std::time::Duration;

/// A content coding the gateway can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentCoding {
    /// gzip.
    Gzip,
    /// brotli (`br`).
    Brotli,
    /// zstd.
    Zstd,
}

/// Which deflate implementation makes gzip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GzipBackend {
    /// ISA-L igzip (levels 0-3).
    Isal,
    /// zlib-rs (levels 1-9).
    ZlibRs,
}

/// One route's response compression.
#[derive(Debug, Clone, PartialEq)]
pub struct Compression {
    /// Compress at all.
    pub enabled: bool,
    /// Codings offered, server preference first.
    pub codecs: Vec<ContentCoding>,
    /// gzip level (the backend's scale).
    pub gzip_level: u32,
    /// gzip backend.
    pub gzip_backend: GzipBackend,
    /// brotli quality.
    pub brotli_level: u32,
    /// zstd level.
    pub zstd_level: u32,
    /// Smallest body compressed.
    pub min_length: u64,
    /// MIME types compressed (lower-case; `type/*` and `*` wildcards).
    pub types: Vec<String>,
    /// Input bytes per chunk job.
    pub chunk_size: usize,
    /// Bodies up to this size compress inline; `None`: a default per codec and level
    /// (`sluice_compress::Encoding::default_sw_threshold`), larger for faster codecs.
    pub sw_threshold: Option<u64>,
    /// Prime gzip chunks with the previous 32 KiB.
    pub dictionary: bool,
    /// Decompress gzip request bodies before forwarding them (off by default).
    pub decompress_requests: bool,
    /// Largest decompressed request body (→ 413).
    pub max_decompressed_bytes: u64,
}

/// The MIME types compressed by default: text, and the structured formats that are text.
pub const DEFAULT_COMPRESS_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/*+json",
    "application/javascript",
    "application/x-javascript",
    "application/xml",
    "application/*+xml",
    "application/wasm",
    "application/x-ndjson",
    "image/svg+xml",
    "image/x-icon",
    "font/ttf",
    "font/otf",
];

impl Default for Compression {
    fn default() -> Self {
        Compression {
            enabled: false,
            codecs: vec![
                ContentCoding::Zstd,
                ContentCoding::Brotli,
                ContentCoding::Gzip,
            ],
            gzip_level: 1,
            gzip_backend: GzipBackend::Isal,
            brotli_level: 4,
            zstd_level: 3,
            min_length: 256,
            types: DEFAULT_COMPRESS_TYPES
                .iter()
                .map(|t| t.to_string())
                .collect(),
            chunk_size: 128 * 1024,
            sw_threshold: None,
            dictionary: true,
            decompress_requests: false,
            max_decompressed_bytes: 10 << 20,
        }
    }
}

impl Compression {
    /// Whether `content_type` (a Content-Type header value) is one of [`Compression::types`].
    pub fn compresses_type(&self, content_type: &str) -> bool {
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let (ty, sub) = mime.split_once('/').unwrap_or((&mime, ""));
        self.types.iter().any(|t| {
            if t == "*" || *t == mime {
                return true;
            }
            let (tt, ts) = t.split_once('/').unwrap_or((t, ""));
            if tt != ty && tt != "*" {
                return false;
            }
            if ts == "*" {
                return true;
            }
            // `application/*+json` matches `application/ld+json`.
            ts.strip_prefix('*')
                .is_some_and(|suffix| sub.ends_with(suffix))
        })
    }
}

/// `[offload.compress]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressOffload {
    /// Engines before `inline`.
    pub engines: Vec<CompressEngineName>,
    /// Threads of the `pool` engine; `None`: one per CPU.
    pub pool_threads: Option<usize>,
    /// Capacity of the `pool` engine; `None`: 16 per thread.
    pub pool_capacity: Option<usize>,
    /// How long an engine may take with a chunk.
    pub deadline: Duration,
}

/// A configurable compression engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressEngineName {
    /// Dedicated threads.
    Pool,
}

impl Default for CompressOffload {
    fn default() -> Self {
        CompressOffload {
            engines: vec![CompressEngineName::Pool],
            pool_threads: None,
            pool_capacity: None,
            deadline: Duration::from_millis(200),
        }
    }
}
