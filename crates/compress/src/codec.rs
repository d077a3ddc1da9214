//! Codecs, their levels and backends.

/// A content coding Sluice produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// `gzip`: one gzip member of full-flushed deflate chunks.
    Gzip,
    /// `br`: one brotli stream, flushed per chunk.
    Brotli,
    /// `zstd`: concatenated zstd frames, one per chunk.
    Zstd,
}

impl Codec {
    /// The `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Brotli => "br",
            Codec::Zstd => "zstd",
        }
    }

    /// The codec for a `Content-Encoding` token.
    pub fn from_token(token: &str) -> Option<Self> {
        match token.to_ascii_lowercase().as_str() {
            "gzip" | "x-gzip" => Some(Codec::Gzip),
            "br" => Some(Codec::Brotli),
            "zstd" => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// The levels the codec accepts.
    pub fn levels(self) -> std::ops::RangeInclusive<u32> {
        match self {
            Codec::Gzip => 1..=9,
            Codec::Brotli => 0..=11,
            Codec::Zstd => 1..=19,
        }
    }
}

/// Which deflate implementation makes gzip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GzipBackend {
    /// zlib-rs (through flate2): zlib's levels 1-9 and ratios, faster than zlib.
    ZlibRs,
    /// ISA-L igzip: levels 0-3 (1-9 are mapped down), several times faster.
    Isal,
}

impl GzipBackend {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            GzipBackend::ZlibRs => "zlib-rs",
            GzipBackend::Isal => "isal",
        }
    }
}

/// How one response is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoding {
    /// The codec.
    pub codec: Codec,
    /// Its level.
    pub level: u32,
    /// The deflate implementation (gzip only).
    pub backend: GzipBackend,
    /// Prime each gzip chunk with the previous 32 KiB of input (pigz's way of keeping the
    /// ratio of one stream); chunks stay independent jobs since the dictionary is input.
    pub dictionary: bool,
}

impl Encoding {
    /// Whether the chunks of one body must run one after another: brotli's chunks continue
    /// one encoder, so the stage keeps a single brotli chunk in flight; gzip and zstd
    /// chunks are independent and run side by side on the pool.
    pub fn in_order(&self) -> bool {
        self.codec == Codec::Brotli
    }
}
