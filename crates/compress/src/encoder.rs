//! One response body's encoder: cuts the body into chunk jobs and frames their outputs.

use crate::codec::{Codec, Encoding};
use crate::job::{BrotliStream, ChunkJob};
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::{Arc, Mutex};

/// The gzip member header: magic, deflate, no flags, no mtime, no extra flags, OS unknown.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
const HISTORY: usize = 32 * 1024;

/// Turns a body, chunk by chunk, into jobs, and their outputs into the encoded body.
///
/// Call [`BodyEncoder::job`] for every piece of input in order (the last with `last`),
/// run the jobs on any engines (gzip and zstd jobs are independent and may run in
/// parallel), and pass each output to [`BodyEncoder::frame`] in the same order. For gzip
/// the encoder writes one member: the header before the first chunk, the CRC-32 and
/// length, which it computes as input passes, after the last.
pub struct BodyEncoder {
    encoding: Encoding,
    crc: crc32fast::Hasher,
    len: u64,
    /// The last 32 KiB of input (a slice of the input itself when a segment is that long).
    history: Bytes,
    brotli: Option<Arc<Mutex<BrotliStream>>>,
    seq: u64,
    header_sent: bool,
    finished: bool,
}

impl std::fmt::Debug for BodyEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyEncoder")
            .field("encoding", &self.encoding)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl BodyEncoder {
    /// An encoder for one body.
    pub fn new(encoding: Encoding) -> Self {
        BodyEncoder {
            encoding,
            crc: crc32fast::Hasher::new(),
            len: 0,
            history: Bytes::new(),
            brotli: (encoding.codec == Codec::Brotli)
                .then(|| Arc::new(Mutex::new(BrotliStream::new(encoding.level)))),
            seq: 0,
            header_sent: false,
            finished: false,
        }
    }

    /// The encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Input bytes seen so far.
    pub fn input_len(&self) -> u64 {
        self.len
    }

    /// The job for the next piece of input; `last` for the final one (which may be empty).
    pub fn job(&mut self, input: Bytes, last: bool) -> ChunkJob {
        self.job_segments(vec![input], last)
    }

    /// The job for the next piece of input given as the segments it arrived in (they are
    /// compressed in order without being copied together).
    pub fn job_segments(&mut self, input: Vec<Bytes>, last: bool) -> ChunkJob {
        self.seq += 1;
        let gzip = self.encoding.codec == Codec::Gzip;
        let dict = if gzip && self.encoding.dictionary {
            self.history.clone()
        } else {
            Bytes::new()
        };
        if gzip {
            for seg in &input {
                self.crc.update(seg);
            }
            // The last chunk primes nothing: no history (a 32 KiB copy for every body that
            // fits one chunk, which is most of them).
            if self.encoding.dictionary && !last {
                self.history = tail(&self.history, &input);
            }
        }
        self.len += input.iter().map(|b| b.len() as u64).sum::<u64>();
        // The member header rides in the first job's output (see `frame`).
        let prefix: &'static [u8] = if gzip && !self.header_sent {
            self.header_sent = true;
            &GZIP_HEADER
        } else {
            &[]
        };
        ChunkJob {
            encoding: self.encoding,
            input,
            dict,
            last,
            brotli: self.brotli.clone().map(|b| (self.seq, b)),
            prefix,
        }
    }

    /// The encoded bytes for a job's output, framed: for gzip, the trailer after the last
    /// chunk (the header is already in the first job's output, which the job wrote there).
    /// Outputs must come in the order their jobs were made. The output buffer becomes the
    /// frame without a copy (copying it into a fresh buffer with the header in front was
    /// 3% of a compressed 100 KiB response's CPU time).
    pub fn frame(&mut self, mut output: Vec<u8>, last: bool) -> Bytes {
        if self.encoding.codec == Codec::Gzip && last && !self.finished {
            self.finished = true;
            output.extend_from_slice(&self.crc.clone().finalize().to_le_bytes());
            output.extend_from_slice(&(self.len as u32).to_le_bytes());
        }
        output.into()
    }
}

/// The last [`HISTORY`] bytes of `before` followed by `segments`: a slice, without copying,
/// when the last segment alone is long enough.
fn tail(before: &Bytes, segments: &[Bytes]) -> Bytes {
    if let Some(last) = segments.last()
        && last.len() >= HISTORY
    {
        return last.slice(last.len() - HISTORY..);
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut need = HISTORY;
    for seg in segments.iter().rev() {
        if need == 0 {
            break;
        }
        let take = seg.len().min(need);
        parts.push(&seg[seg.len() - take..]);
        need -= take;
    }
    if need > 0 {
        let take = before.len().min(need);
        parts.push(&before[before.len() - take..]);
    }
    let mut out = BytesMut::with_capacity(HISTORY - need.min(HISTORY));
    for p in parts.iter().rev() {
        out.put_slice(p);
    }
    out.freeze()
}
