//! Raw deflate of one chunk with zlib-rs (through flate2).

use flate2::{Compress, Compression, FlushCompress, Status};
use std::cell::RefCell;

thread_local! {
    /// One compressor per thread and level, reset between chunks: zlib's state is about
    /// 256 KiB, too much to allocate per chunk.
    static ZLIB: RefCell<Vec<(u32, Compress)>> = const { RefCell::new(Vec::new()) };
}

/// Raw-deflates `input` (primed with the last 32 KiB of `dict`) at zlib `level` (1-9),
/// ending with a full flush, or the final block when `last`. Appends to `out`.
pub(crate) fn deflate(
    level: u32,
    input: &[u8],
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
        let flush = if last {
            FlushCompress::Finish
        } else {
            FlushCompress::Full
        };
        let start_in = c.total_in();
        out.reserve(input.len() + input.len() / 16 + 1024);
        loop {
            let consumed = (c.total_in() - start_in) as usize;
            let status = c
                .compress_vec(&input[consumed..], out, flush)
                .map_err(|e| format!("zlib-rs deflate: {e}"))?;
            let all_in = (c.total_in() - start_in) as usize == input.len();
            let room_left = out.len() < out.capacity();
            match status {
                Status::StreamEnd => return Ok(()),
                // A full flush is complete once all input is in and output did not fill up.
                Status::Ok | Status::BufError if !last && all_in && room_left => return Ok(()),
                _ => out.reserve(64 * 1024),
            }
        }
    })
}
