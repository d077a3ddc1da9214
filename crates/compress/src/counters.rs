//! What compression did: bytes in and out per codec and engine, responses compressed and
//! skipped by reason. Updated by the proxy's compression stage, read by `/metrics`.

use crate::Codec;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a response was not compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The client accepts none of the configured codings.
    NotAccepted,
    /// HEAD, or a status without a body (1xx, 204, 304).
    NoBody,
    /// The response already has a Content-Encoding.
    AlreadyEncoded,
    /// `Cache-Control: no-transform`.
    NoTransform,
    /// A Range request or a 206 response.
    Range,
    /// A Content-Type not in `types`.
    Type,
    /// Shorter than `min_length`.
    TooShort,
    /// An upgraded connection (WebSocket).
    Upgrade,
}

impl SkipReason {
    /// Every reason, for exporting zeros.
    pub const ALL: [SkipReason; 8] = [
        SkipReason::NotAccepted,
        SkipReason::NoBody,
        SkipReason::AlreadyEncoded,
        SkipReason::NoTransform,
        SkipReason::Range,
        SkipReason::Type,
        SkipReason::TooShort,
        SkipReason::Upgrade,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::NotAccepted => "not_accepted",
            SkipReason::NoBody => "no_body",
            SkipReason::AlreadyEncoded => "already_encoded",
            SkipReason::NoTransform => "no_transform",
            SkipReason::Range => "range",
            SkipReason::Type => "type",
            SkipReason::TooShort => "too_short",
            SkipReason::Upgrade => "upgrade",
        }
    }
}

/// Compression counters of one gateway.
#[derive(Debug, Default)]
pub struct CompressCounters {
    compressed: [AtomicU64; 3],
    skipped: [AtomicU64; 8],
    failed: AtomicU64,
    bytes: Mutex<Vec<ByteCount>>,
}

/// Bytes in and out for one codec on one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteCount {
    /// The codec.
    pub codec: Codec,
    /// The engine's name.
    pub engine: &'static str,
    /// Uncompressed bytes.
    pub bytes_in: u64,
    /// Compressed bytes.
    pub bytes_out: u64,
}

fn codec_index(c: Codec) -> usize {
    match c {
        Codec::Gzip => 0,
        Codec::Brotli => 1,
        Codec::Zstd => 2,
    }
}

impl CompressCounters {
    /// A response is being compressed with `codec`.
    pub fn compressed(&self, codec: Codec) {
        self.compressed[codec_index(codec)].fetch_add(1, Ordering::Relaxed);
    }

    /// A response was passed through.
    pub fn skipped(&self, reason: SkipReason) {
        let i = SkipReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.skipped[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A body's compression failed on every engine (the response was cut short).
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A chunk went through `engine`.
    pub fn chunk(&self, codec: Codec, engine: &'static str, bytes_in: usize, bytes_out: usize) {
        let mut all = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match all
            .iter_mut()
            .position(|b| b.codec == codec && b.engine == engine)
        {
            Some(i) => &mut all[i],
            None => {
                all.push(ByteCount {
                    codec,
                    engine,
                    bytes_in: 0,
                    bytes_out: 0,
                });
                all.last_mut().expect("just pushed")
            }
        };
        entry.bytes_in += bytes_in as u64;
        entry.bytes_out += bytes_out as u64;
    }

    /// Responses compressed with `codec`.
    pub fn compressed_count(&self, codec: Codec) -> u64 {
        self.compressed[codec_index(codec)].load(Ordering::Relaxed)
    }

    /// Responses skipped for `reason`.
    pub fn skipped_count(&self, reason: SkipReason) -> u64 {
        let i = SkipReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.skipped[i].load(Ordering::Relaxed)
    }

    /// Bodies whose compression failed.
    pub fn failed_count(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Bytes per codec and engine.
    pub fn bytes(&self) -> Vec<ByteCount> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
