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

    /// The `sw_threshold` a route gets when it sets none: bodies up to this many bytes
    /// compress on the event loop instead of going to an engine.
    ///
    /// Handing a job to a `pool` thread costs a wake-up each way and, where the pool shares
    /// its cores with the event loops (a saturated gateway), two context switches that buy
    /// nothing; `bench/run` measured the hand-off at 5-20 µs per job. It pays when a job
    /// is long enough to hurt the other connections on the loop. The threshold therefore
    /// follows the codec's speed: each entry keeps an inline job under about 160 µs, what the
    /// former flat 16 KiB allowed for brotli's default level. `sluice speed <codec> --level L
    /// --engine inline` on the bundled corpus (one Xeon core): ISA-L levels 0-2 about
    /// 950-1,050 MB/s (128 KiB: ~130 µs), zlib-rs level 1 470 MB/s and zstd levels 1-3
    /// 530-630 MB/s (64 KiB: ~105-140 µs), zlib-rs level 2 and ISA-L level 3 340-400 MB/s
    /// (32 KiB: ~80-100 µs), the rest at most 190 MB/s (16 KiB; zlib-rs level 6 130 MB/s,
    /// brotli level 4 100 MB/s). An accelerator engine with a cheap round trip would want
    /// a lower value; set `sw_threshold` then.
    pub fn default_sw_threshold(&self) -> u64 {
        const KIB: u64 = 1024;
        match (self.codec, self.backend, self.level) {
            (Codec::Gzip, GzipBackend::Isal, 0..=2) => 128 * KIB,
            (Codec::Gzip, GzipBackend::Isal, _) => 32 * KIB,
            (Codec::Gzip, GzipBackend::ZlibRs, 0..=1) | (Codec::Zstd, _, 0..=3) => 64 * KIB,
            (Codec::Gzip, GzipBackend::ZlibRs, 2) => 32 * KIB,
            _ => 16 * KIB,
        }
    }
}
