//! Response compression as offload jobs.
//!
//! A body is compressed as a sequence of chunk jobs ([`BodyEncoder`] makes them, any engine
//! runs them with [`compress_chunk`]):
//!
//! - **gzip**: each chunk is raw-deflated from a fresh state, optionally primed with the
//!   previous 32 KiB of input as a dictionary (pigz's way of keeping the ratio), and ends
//!   with a full flush (byte-aligned, no final-block bit); only the last chunk finishes the
//!   deflate stream. The outputs concatenate into one deflate stream inside a single gzip
//!   member whose CRC-32 and length the encoder computes as bytes pass. (Several members
//!   back to back are not an option: some browsers stop after the first.) Backends: zlib-rs
//!   through flate2, and ISA-L's igzip through its low-level API.
//! - **zstd**: one frame per chunk; frames concatenate into a valid stream.
//! - **brotli**: one encoder per stream, flushed per chunk; its chunks run in order.
//!
//! gzip and zstd chunks carry no hidden state, so any engine can run them, in parallel, and
//! a chunk whose engine failed simply runs again elsewhere. [`negotiate`] picks the codec
//! from `Accept-Encoding`. [`Inflater`] decompresses gzip request bodies with a bound on the
//! output. This crate knows nothing of HTTP beyond that header's grammar.

mod calibration;
mod codec;
pub mod cost;
mod counters;
mod deflate;
mod encoder;
mod engines;
mod inflate;
mod isal;
mod job;
mod negotiate;

pub use calibration::calibrate;
pub use codec::{Codec, Encoding, GzipBackend};
pub use counters::{ByteCount, CompressCounters, SkipReason};
pub use encoder::BodyEncoder;
pub use engines::{CompressConfig, CompressEngine, build_dispatcher};
pub use inflate::{InflateError, Inflater};
pub use job::{ChunkJob, ChunkOutput, compress_chunk};
pub use negotiate::negotiate;

/// The highest ISA-L level (its levels are 0-3).
pub const ISAL_MAX_LEVEL: u32 = isal::MAX_LEVEL;

#[cfg(test)]
mod tests;
