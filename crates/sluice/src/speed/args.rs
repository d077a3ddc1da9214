//! What `sluice speed` was asked (one type for both kinds of measurement).

/// What `sluice speed` was asked.
#[derive(Debug, Clone)]
pub(crate) struct SpeedArgs {
    pub(crate) algorithms: Vec<String>,
    pub(crate) engine: String,
    pub(crate) jobs: usize,
    pub(crate) seconds: f64,
    pub(crate) threads: Option<usize>,
    pub(crate) verify: String,
    pub(crate) json: bool,
    /// Compression level (gzip, br, zstd).
    pub(crate) level: Option<u32>,
    /// gzip backend: isal or zlib-rs.
    pub(crate) backend: String,
    /// Lanes per RSA-2048 mb batch (4 or 8); `None`: the default (8).
    pub(crate) mb_lanes: Option<usize>,
}
