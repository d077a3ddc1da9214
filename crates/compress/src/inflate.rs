//! Streaming gzip decompression of request bodies, with a bound on the output.

use bytes::Bytes;
use std::io::Write as _;

/// Why a compressed request body was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InflateError {
    /// Decompressed, it would exceed the limit (a decompression bomb, or just too big).
    #[error("the decompressed request body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// Not valid gzip, or cut short.
    #[error("the request body is not valid gzip: {0}")]
    Malformed(String),
}

/// Decompresses a gzip body (one or more members) as it arrives, never holding more than
/// about 1 MiB of output per input piece however well the input compresses: input is fed
/// in 1 KiB slices (deflate expands at most about 1032:1) and the total is checked after
/// each.
pub struct Inflater {
    decoder: flate2::write::MultiGzDecoder<Vec<u8>>,
    limit: u64,
    total: u64,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("limit", &self.limit)
            .field("total", &self.total)
            .finish()
    }
}

impl Inflater {
    /// An inflater that refuses more than `limit` decompressed bytes.
    pub fn new(limit: u64) -> Self {
        Inflater {
            decoder: flate2::write::MultiGzDecoder::new(Vec::new()),
            limit,
            total: 0,
        }
    }

    fn take(&mut self) -> Result<Bytes, InflateError> {
        let out = std::mem::take(self.decoder.get_mut());
        self.total += out.len() as u64;
        if self.total > self.limit {
            return Err(InflateError::TooLarge { limit: self.limit });
        }
        Ok(out.into())
    }

    /// Feeds compressed bytes; returns what they decompress to so far.
    pub fn push(&mut self, input: &[u8]) -> Result<Bytes, InflateError> {
        let mut out = Vec::new();
        for piece in input.chunks(1024) {
            self.decoder
                .write_all(piece)
                .map_err(|e| InflateError::Malformed(e.to_string()))?;
            out.extend_from_slice(&self.take()?);
        }
        Ok(out.into())
    }

    /// The end of the input: the rest of the output, or an error if the stream was cut short.
    pub fn finish(&mut self) -> Result<Bytes, InflateError> {
        self.decoder
            .try_finish()
            .map_err(|e| InflateError::Malformed(e.to_string()))?;
        self.take()
    }
}
