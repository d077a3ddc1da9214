//! Request body framing: a Content-Length countdown or the chunked coding (RFC 9112 §7.1),
//! decoded from the connection's read buffer without copying the data.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

/// A chunk-size line (with its extensions) longer than this is refused: NGINX and HAProxy
/// bound it too, and a line that never ends must not grow the buffer.
const MAX_CHUNK_LINE: usize = 4096;

/// A malformed body: the client gets 400 and the connection closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed request body: {0}")]
pub(crate) struct BadFraming(pub(crate) &'static str);

/// What the decoder made of the buffer.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body has ended (after its trailers, if any).
    End,
    /// More bytes are needed.
    NeedMore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer fields up to an empty line.
    Trailers,
    Done,
}

/// The body decoder of one request.
#[derive(Debug)]
pub(crate) enum Decoder {
    Length(u64),
    Chunked(Chunk, /* trailer bytes allowed */ usize),
}

impl Decoder {
    pub(crate) fn length(n: u64) -> Self {
        Decoder::Length(n)
    }

    /// `max_trailers`: the most bytes the trailer section may take (the head limit).
    pub(crate) fn chunked(max_trailers: usize) -> Self {
        Decoder::Chunked(Chunk::Size, max_trailers)
    }

    /// Whether the body has been read to its end.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self, Decoder::Length(0) | Decoder::Chunked(Chunk::Done, _))
    }

    /// Takes the next piece of the body off the front of `buf`.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, BadFraming> {
        match self {
            Decoder::Length(0) => Ok(Decoded::End),
            Decoder::Length(left) => {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let n = (*left).min(buf.len() as u64) as usize;
                *left -= n as u64;
                Ok(Decoded::Data(buf.split_to(n).freeze()))
            }
            Decoder::Chunked(state, max_trailers) => loop {
                match *state {
                    Chunk::Size => {
                        let Some(line) = line(buf, MAX_CHUNK_LINE)? else {
                            return Ok(Decoded::NeedMore);
                        };
                        let size = chunk_size(&line)?;
                        *state = if size == 0 {
                            Chunk::Trailers
                        } else {
                            Chunk::Data(size)
                        };
                    }
                    Chunk::Data(left) => {
                        if buf.is_empty() {
                            return Ok(Decoded::NeedMore);
                        }
                        let n = left.min(buf.len() as u64) as usize;
                        *state = if left == n as u64 {
                            Chunk::DataEnd
                        } else {
                            Chunk::Data(left - n as u64)
                        };
                        return Ok(Decoded::Data(buf.split_to(n).freeze()));
                    }
                    Chunk::DataEnd => {
                        if buf.len() < 2 {
                            return Ok(Decoded::NeedMore);
                        }
                        if &buf[..2] != b"\r\n" {
                            return Err(BadFraming("chunk data not followed by CRLF"));
                        }
                        let _ = buf.split_to(2);
                        *state = Chunk::Size;
                    }
                    Chunk::Trailers => {
                        if buf.starts_with(b"\r\n") {
                            let _ = buf.split_to(2);
                            *state = Chunk::Done;
                            return Ok(Decoded::End);
                        }
                        let mut fields = [httparse::EMPTY_HEADER; 32];
                        let section = match httparse::parse_headers(buf, &mut fields) {
                            Ok(httparse::Status::Complete((n, fields))) => {
                                let mut map = HeaderMap::with_capacity(fields.len());
                                for f in fields.iter() {
                                    let name = HeaderName::from_bytes(f.name.as_bytes())
                                        .map_err(|_| BadFraming("invalid trailer name"))?;
                                    let value = HeaderValue::from_bytes(f.value)
                                        .map_err(|_| BadFraming("invalid trailer value"))?;
                                    map.append(name, value);
                                }
                                Some((n, map))
                            }
                            Ok(httparse::Status::Partial) => None,
                            Err(_) => return Err(BadFraming("malformed trailer section")),
                        };
                        let Some((n, map)) = section else {
                            if buf.len() > *max_trailers {
                                return Err(BadFraming("trailer section too large"));
                            }
                            return Ok(Decoded::NeedMore);
                        };
                        if n > *max_trailers {
                            return Err(BadFraming("trailer section too large"));
                        }
                        let _ = buf.split_to(n);
                        *state = Chunk::Done;
                        return Ok(Decoded::Trailers(map));
                    }
                    Chunk::Done => return Ok(Decoded::End),
                }
            },
        }
    }
}

/// What a chunked decoder made of a body: its data, how it ended (with or without trailers,
/// or malformed; `None`: waiting for more), and the bytes it used.
#[cfg(any(test, feature = "fuzzing"))]
#[derive(Debug, PartialEq)]
struct Outcome {
    data: Vec<u8>,
    ended: Option<Result<bool, ()>>,
    used: usize,
}

/// Decodes `raw` as a chunked body given `step` bytes at a time (0: all at once).
#[cfg(any(test, feature = "fuzzing"))]
fn decode_in_steps(raw: &[u8], step: usize) -> Outcome {
    let mut decoder = Decoder::chunked(8192);
    let mut buf = BytesMut::new();
    let (mut fed, mut data, mut trailers) = (0, Vec::new(), false);
    loop {
        match decoder.decode(&mut buf) {
            Ok(Decoded::Data(d)) => {
                assert!(!d.is_empty(), "an empty data piece: {raw:?}");
                data.extend_from_slice(&d);
            }
            Ok(Decoded::Trailers(_)) => trailers = true,
            Ok(Decoded::End) => {
                assert!(decoder.is_done(), "{raw:?}");
                let used = fed - buf.len();
                return Outcome {
                    data,
                    ended: Some(Ok(trailers)),
                    used,
                };
            }
            Ok(Decoded::NeedMore) if fed == raw.len() => {
                let used = fed - buf.len();
                return Outcome {
                    data,
                    ended: None,
                    used,
                };
            }
            Ok(Decoded::NeedMore) => {
                let end = if step == 0 {
                    raw.len()
                } else {
                    (fed + step).min(raw.len())
                };
                buf.extend_from_slice(&raw[fed..end]);
                fed = end;
            }
            Err(_) => {
                return Outcome {
                    data,
                    ended: Some(Err(())),
                    used: 0,
                };
            }
        }
    }
}

/// Decodes `raw` as a chunked body all at once and a byte at a time, and panics unless both
/// give the same data, the same verdict (ended, malformed, or waiting for more) and use the
/// same bytes: a body split anywhere by the network must mean the same thing. A malformed
/// body may have given some data a byte at a time before the fault showed. The fuzz smoke
/// in the tests and `crates/proxy/fuzz` (libFuzzer) run it.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_invariants(raw: &[u8]) {
    let whole = decode_in_steps(raw, 0);
    assert!(whole.data.len() <= raw.len(), "{raw:?}");
    let bytewise = decode_in_steps(raw, 1);
    if whole.ended == Some(Err(())) {
        assert_eq!(bytewise.ended, Some(Err(())), "{raw:?}");
    } else {
        assert_eq!(whole, bytewise, "{raw:?}");
    }
}

/// Checks the chunked body bytes that arrived with a request's head, without consuming them:
/// a body already known to be malformed is refused before anything goes upstream, as NGINX
/// and HAProxy do when the whole request arrives at once. A body that goes bad later is found
/// as it streams (`server::Pump`).
pub(crate) fn check_chunked(buf: &[u8], max_trailers: usize) -> Result<(), BadFraming> {
    let mut copy = BytesMut::from(buf);
    let mut decoder = Decoder::chunked(max_trailers);
    loop {
        match decoder.decode(&mut copy)? {
            Decoded::Data(_) | Decoded::Trailers(_) if !decoder.is_done() => {}
            _ => return Ok(()),
        }
    }
}

/// One CRLF-terminated line off the front of `buf` (without the CRLF), if complete.
fn line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, BadFraming> {
    match buf.iter().position(|b| *b == b'\n') {
        Some(i) if i > max => Err(BadFraming("chunk line too long")),
        Some(i) => {
            if i == 0 || buf[i - 1] != b'\r' {
                return Err(BadFraming("chunk line not ended by CRLF"));
            }
            let mut l = buf.split_to(i + 1);
            l.truncate(i - 1);
            Ok(Some(l))
        }
        None if buf.len() > max => Err(BadFraming("chunk line too long")),
        None => Ok(None),
    }
}

/// `chunk-size [ chunk-ext ]`: hex digits (at most 15, so no overflow: 2^60 bytes), then
/// optional whitespace and `;`-led extensions of visible characters, which are ignored.
fn chunk_size(line: &[u8]) -> Result<u64, BadFraming> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(BadFraming("chunk size is not hexadecimal"));
    }
    if digits > 15 {
        return Err(BadFraming("chunk size too large"));
    }
    let rest = &line[digits..];
    let ext = rest.trim_ascii_start();
    if !ext.is_empty() && ext[0] != b';' {
        return Err(BadFraming("invalid bytes after the chunk size"));
    }
    if ext
        .iter()
        .any(|&b| !(b == b'\t' || (b' '..=b'~').contains(&b)))
    {
        return Err(BadFraming("invalid chunk extension"));
    }
    let mut n = 0u64;
    for &d in &line[..digits] {
        n = n * 16 + u64::from((d as char).to_digit(16).unwrap_or(0));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bytes_that_came_with_the_head_are_checked_without_being_taken() {
        for ok in [
            &b""[..],
            b"3\r\nab",
            b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n",
        ] {
            assert_eq!(
                check_chunked(ok, 1024),
                Ok(()),
                "{:?}",
                String::from_utf8_lossy(ok)
            );
        }
        for bad in [
            &b"0x3\r\nabc"[..],
            b"3\r\nabcX0\r\n\r\n",
            b"-1\r\n",
            b" 3\r\nabc\r\n",
        ] {
            assert!(
                check_chunked(bad, 1024).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// The data, the trailers, and what is left in the buffer.
    type Outcome = (Vec<u8>, Option<HeaderMap>, Vec<u8>);

    /// Decodes all of `raw` (fed in pieces of `step` bytes).
    fn run(raw: &[u8], step: usize) -> Result<Outcome, BadFraming> {
        let mut d = Decoder::chunked(1024);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut trailers = None;
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Decoded::Data(b) => out.extend_from_slice(&b),
                Decoded::Trailers(t) => trailers = Some(t),
                Decoded::End => return Ok((out, trailers, buf.to_vec())),
                Decoded::NeedMore => {
                    assert!(fed < raw.len(), "needs more than the whole input");
                    let end = (fed + step).min(raw.len());
                    buf.extend_from_slice(&raw[fed..end]);
                    fed = end;
                }
            }
        }
    }

    #[test]
    fn chunks_decode_whole_or_byte_by_byte() {
        let raw = b"5\r\nhello\r\n6;name=value\r\n world\r\n0\r\n\r\nGET";
        for step in [1, 2, 7, raw.len()] {
            let (data, trailers, rest) = run(raw, step).unwrap();
            assert_eq!(data, b"hello world");
            assert!(trailers.is_none());
            assert!(b"GET".starts_with(&rest), "step {step}: {rest:?}");
        }
    }

    #[test]
    fn trailers_come_as_a_header_map() {
        let (data, trailers, _) = run(b"3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-B: 2\r\n\r\n", 4).unwrap();
        assert_eq!(data, b"abc");
        let t = trailers.unwrap();
        assert_eq!(t["x-sum"], "1");
        assert_eq!(t["x-b"], "2");
    }

    #[test]
    fn malformed_chunks_are_refused() {
        for raw in [
            &b"g\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"-5\r\nhello\r\n0\r\n\r\n",
            b"1000000000000000\r\n",
            b"5 x\r\nhello\r\n0\r\n\r\n",
            b"5;a\x01\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\r\n0\r\nX-Bad Name: 1\r\n\r\n",
            b"0\r\nX-A: 1\r\n folded\r\n\r\n",
        ] {
            assert!(
                run(raw, 3).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(raw)
            );
        }
        let long = format!("5;{}\r\n", "a".repeat(MAX_CHUNK_LINE + 10));
        assert!(run(long.as_bytes(), 512).is_err());
        // Whitespace before an extension is allowed (BWS), as in NGINX.
        assert_eq!(run(b"5 ;x\r\nhello\r\n0\r\n\r\n", 3).unwrap().0, b"hello");
    }

    #[test]
    fn content_length_counts_down_and_leaves_the_rest() {
        let mut d = Decoder::length(5);
        let mut buf = BytesMut::from(&b"hel"[..]);
        assert_eq!(
            d.decode(&mut buf).unwrap(),
            Decoded::Data(Bytes::from_static(b"hel"))
        );
        assert_eq!(d.decode(&mut buf).unwrap(), Decoded::NeedMore);
        buf.extend_from_slice(b"loGET");
        assert_eq!(
            d.decode(&mut buf).unwrap(),
            Decoded::Data(Bytes::from_static(b"lo"))
        );
        assert!(d.is_done());
        assert_eq!(d.decode(&mut buf).unwrap(), Decoded::End);
        assert_eq!(&buf[..], b"GET");
    }

    /// Mutated chunked bodies (sizes, extensions, trailers, the next request behind), bytes
    /// flipped, inserted and removed: decoded whole and a byte at a time, the same.
    #[test]
    fn mutated_chunked_bodies_decode_the_same_whole_and_byte_by_byte() {
        let seeds: [&[u8]; 4] = [
            b"5\r\nhello\r\n0\r\n\r\nGET",
            b"3;ext=\"v\"\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n",
            b"1\r\nx\r\n0\r\n",
            b"ffffffffffffffff\r\n",
        ];
        let alphabet = b"\r\n ;=\"\t\x000129afAFxX-:";
        for raw in super::super::mutated(&seeds, alphabet, 0x853c_49e6_748f_ea9bu64) {
            check_invariants(&raw);
        }
        // Not vacuous: a whole body ends with its data and leaves the next request alone.
        let whole = decode_in_steps(b"5\r\nhello\r\n0\r\n\r\nGET", 0);
        assert_eq!(whole.data, b"hello");
        assert_eq!((whole.ended, whole.used), (Some(Ok(false)), 15));
        let half = decode_in_steps(b"5\r\nhel", 0);
        assert_eq!((half.data.as_slice(), half.ended), (&b"hel"[..], None));
    }

    /// Random chunked bodies, split at random points: the same data and trailers as when fed
    /// whole, and nothing of the next request consumed (a fuzz smoke for the decoder).
    #[test]
    fn random_chunked_bodies_decode_the_same_in_any_split() {
        let mut next = super::super::xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..super::super::fuzz_iterations(2_000) {
            let mut raw = Vec::new();
            let mut want = Vec::new();
            for _ in 0..(next() % 5) {
                let n = 1 + (next() % 40) as usize;
                let data: Vec<u8> = (0..n).map(|_| (next() % 256) as u8).collect();
                raw.extend_from_slice(format!("{n:x}").as_bytes());
                if next().is_multiple_of(2) {
                    raw.extend_from_slice(b" ;ext=\"v\"");
                }
                raw.extend_from_slice(b"\r\n");
                raw.extend_from_slice(&data);
                raw.extend_from_slice(b"\r\n");
                want.extend_from_slice(&data);
            }
            raw.extend_from_slice(b"0\r\n");
            let trailer = next().is_multiple_of(2);
            if trailer {
                raw.extend_from_slice(b"X-T: 1\r\n");
            }
            raw.extend_from_slice(b"\r\nGET");
            let step = 1 + (next() % 17) as usize;
            let (data, trailers, rest) = run(&raw, step).unwrap();
            assert_eq!(data, want);
            assert_eq!(trailers.is_some(), trailer);
            assert!(b"GET".starts_with(&rest), "{rest:?}");
        }
    }
}
