//! Chunk jobs: one piece of a response body to compress, for any engine.

use crate::codec::{Codec, Encoding, GzipBackend};
use bytes::Bytes;
use sluice_offload::{EngineError, Job};
use std::io::Write as _;
use std::sync::{Arc, Mutex};

/// One chunk of a body to compress. gzip and zstd chunks carry everything they need (the
/// dictionary is the previous input), so any engine can run them, in any order, and a
/// chunk that fell back can simply run again. A brotli chunk continues its stream's
/// encoder, shared with the other chunks of that stream.
#[derive(Clone)]
pub struct ChunkJob {
    pub(crate) encoding: Encoding,
    /// The chunk's input as it arrived (several upstream frames are not copied together).
    pub(crate) input: Vec<Bytes>,
    pub(crate) dict: Bytes,
    pub(crate) last: bool,
    pub(crate) brotli: Option<(u64, Arc<Mutex<BrotliStream>>)>,
    /// Bytes the output starts with: the gzip member header for a body's first chunk
    /// (written into the output buffer before compressing, so that framing the output
    /// copies nothing).
    pub(crate) prefix: &'static [u8],
}

impl std::fmt::Debug for ChunkJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkJob")
            .field("codec", &self.encoding.codec)
            .field("input", &self.input_len())
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl ChunkJob {
    /// Input bytes.
    pub fn input_len(&self) -> usize {
        self.input.iter().map(Bytes::len).sum()
    }

    /// The encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }
}

impl Job for ChunkJob {
    type Output = ChunkOutput;

    fn batch_key(&self) -> u64 {
        self.encoding.codec as u64
    }

    fn inline_cost(&self) -> Option<std::time::Duration> {
        let ns = crate::cost::per_byte_ns(&self.encoding)? * self.input_len() as f64;
        Some(std::time::Duration::from_nanos(ns as u64))
    }
}

/// A compressed chunk and the engine that made it (for the per-engine byte counters).
#[derive(Debug, Clone)]
pub struct ChunkOutput {
    /// The compressed bytes (for gzip, raw deflate: the stage adds header and trailer).
    pub bytes: Vec<u8>,
    /// The engine's name.
    pub engine: &'static str,
}

/// A brotli encoder shared by the chunks of one stream, which must run in order. The
/// sequence number makes a chunk idempotent: if it runs twice (an engine missed its
/// deadline and the job fell back while the first run went on), the second run returns
/// the first one's output instead of feeding the encoder twice.
pub(crate) struct BrotliStream {
    encoder: Option<brotli::CompressorWriter<Vec<u8>>>,
    done: u64,
    last_output: Vec<u8>,
}

impl BrotliStream {
    pub(crate) fn new(level: u32) -> Self {
        BrotliStream {
            encoder: Some(brotli::CompressorWriter::new(
                Vec::new(),
                16 * 1024,
                level,
                22,
            )),
            done: 0,
            last_output: Vec::new(),
        }
    }
}

/// Output room reserved before compressing `total` input bytes: half, which text (what
/// `types` lets through) stays under; past it the buffer grows 64 KiB at a time. Not the
/// worst-case bound: the buffer becomes the response frame uncopied, and a frame waiting for
/// a slow client would hold the whole bound.
pub(crate) fn output_reserve(total: usize) -> usize {
    total / 2 + 1024
}

/// Compresses one chunk: what every engine runs. `engine` is recorded in the output.
pub fn compress_chunk(job: &ChunkJob, engine: &'static str) -> Result<ChunkOutput, EngineError> {
    let failed = |e: String| EngineError::Failed(format!("{}: {e}", job.encoding.codec.token()));
    let bytes = match job.encoding.codec {
        Codec::Gzip => {
            // One allocation: the prefix, then the room the backends reserve.
            let mut out = Vec::with_capacity(job.prefix.len() + output_reserve(job.input_len()));
            out.extend_from_slice(job.prefix);
            let level = job.encoding.level;
            let dict: &[u8] = if job.encoding.dictionary {
                &job.dict
            } else {
                &[]
            };
            match job.encoding.backend {
                GzipBackend::ZlibRs => {
                    crate::deflate::deflate(level, &job.input, dict, job.last, &mut out)
                }
                GzipBackend::Isal => {
                    crate::isal::deflate(level, &job.input, dict, job.last, &mut out)
                }
            }
            .map_err(failed)?;
            out
        }
        Codec::Zstd => {
            // One frame per chunk.
            let mut z = zstd::stream::Encoder::new(Vec::new(), job.encoding.level as i32)
                .map_err(|e| failed(e.to_string()))?;
            z.set_pledged_src_size(Some(job.input_len() as u64))
                .map_err(|e| failed(e.to_string()))?;
            for seg in &job.input {
                z.write_all(seg).map_err(|e| failed(e.to_string()))?;
            }
            z.finish().map_err(|e| failed(e.to_string()))?
        }
        Codec::Brotli => {
            let (seq, stream) = job
                .brotli
                .as_ref()
                .ok_or_else(|| failed("a brotli chunk without its stream".into()))?;
            let mut s = stream.lock().unwrap_or_else(|e| e.into_inner());
            if *seq == s.done {
                // Already run (see BrotliStream).
                s.last_output.clone()
            } else if *seq != s.done + 1 {
                // Out of order would corrupt the stream: the stage must keep one brotli
                // chunk in flight at a time ([`Encoding::in_order`]).
                return Err(failed(format!(
                    "brotli chunk {seq} run after chunk {}; chunks of a stream must run in order",
                    s.done
                )));
            } else {
                let mut enc = s
                    .encoder
                    .take()
                    .ok_or_else(|| failed("brotli stream already finished".into()))?;
                for seg in &job.input {
                    enc.write_all(seg).map_err(|e| failed(e.to_string()))?;
                }
                let out = if job.last {
                    enc.into_inner()
                } else {
                    enc.flush().map_err(|e| failed(e.to_string()))?;
                    let out = std::mem::take(enc.get_mut());
                    s.encoder = Some(enc);
                    out
                };
                s.done = *seq;
                s.last_output = out.clone();
                out
            }
        }
    };
    Ok(ChunkOutput { bytes, engine })
}
