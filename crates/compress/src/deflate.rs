//! Raw deflate of one chunk with zlib-rs (through flate2).

use flate2::{Compress, Compression, FlushCompress, Status};
use std::cell::RefCell;

thread_local! {
    /// One compressor per thread and level, reset between chunks: zlib's state is about
    /// 256 KiB, too much to allocate per chunk.
    static ZLIB: RefCell<Vec<(u32, Compress)>> = const { RefCell::new(Vec::new()) };
}

/// Raw-deflates the segments of `input` (primed with the last 32 KiB of `dict`) at zlib
/// `level` (1-9), ending with a full flush, or the final block when `last`. Appends to
/// `out`.
pub(crate) fn deflate(
    level: u32,
    input: &[bytes::Bytes],
    dict: &[u8],
    last: bool,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    ZLIB.with_borrow_mut(|cache| {
        let i = match cache.iter().position(|(l, _)| *l == level) {
            Some(i) => {
                cache[i].1.reset();
                i
            }
            None => {
                cache.push((level, Compress::new(Compression::new(level), false)));
                cache.len() - 1
            }
        };
        let c = &mut cache[i].1;
        if !dict.is_empty() {
            c.set_dictionary(&dict[dict.len().saturating_sub(32 * 1024)..])
                .map_err(|e| format!("zlib-rs set_dictionary: {e}"))?;
        }
        // `out` comes sized by `compress_chunk` (`output_reserve`); it grows below if needed.
        let n = input.len();
        for (i, seg) in input.iter().enumerate() {
            let flush = if i + 1 < n {
                FlushCompress::None
            } else if last {
                FlushCompress::Finish
            } else {
                FlushCompress::Full
            };
            segment(c, seg, flush, out)?;
        }
        if n == 0 {
            segment(
                c,
                &[],
                if last {
                    FlushCompress::Finish
                } else {
                    FlushCompress::Full
                },
                out,
            )?;
        }
        Ok(())
    })
}

/// Feeds one segment; with `Full` or `Finish`, until everything is out.
fn segment(
    c: &mut Compress,
    seg: &[u8],
    flush: FlushCompress,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let start_in = c.total_in();
    loop {
        if out.len() == out.capacity() {
            out.reserve(64 * 1024);
        }
        let consumed = (c.total_in() - start_in) as usize;
        let status = c
            .compress_vec(&seg[consumed..], out, flush)
            .map_err(|e| format!("zlib-rs deflate: {e}"))?;
        let all_in = (c.total_in() - start_in) as usize == seg.len();
        let room_left = out.len() < out.capacity();
        match (status, flush) {
            (Status::StreamEnd, _) => return Ok(()),
            // Without a flush, done once the segment is consumed.
            (_, FlushCompress::None) if all_in => return Ok(()),
            // A full flush is complete once all input is in and output did not fill up.
            (Status::Ok | Status::BufError, FlushCompress::Full) if all_in && room_left => {
                return Ok(());
            }
            _ => out.reserve(64 * 1024),
        }
    }
}
