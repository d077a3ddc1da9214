//! A compressed response body decoded for the rules (`inspect_response`): an upstream that
//! answers a client's `Accept-Encoding: gzip` with a gzip body would otherwise show the
//! rules compressed bytes, and CRS's data-leak rules (950-959) could never match it. The
//! client still gets the bytes the upstream sent; only the rules see them decoded.
//!
//! Decoding runs in the response's job on a WAF thread (at idle priority, never on the event
//! loop) and stops at the route's `response_body_limit` of decoded bytes, so a body that
//! decompresses a thousandfold costs what an uncompressed body at the limit costs.

use http::HeaderMap;
use http::header::CONTENT_ENCODING;
use std::borrow::Cow;
use std::io::Read;

/// zstd's largest window accepted (8 MiB, RFC 9659's bound for `Content-Encoding: zstd`):
/// a frame that asks for more would make the decoder allocate it (128 MiB by default).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// The body as the rules see it: decoded as `Content-Encoding` says (`gzip`, `deflate`, `br`,
/// `zstd`, and a list of them, last applied first undone), up to `limit` bytes. A body held
/// back in part (longer than the limit) decodes to its start. An encoding not listed here,
/// or a body that does not decode at all, is left as it came: the rules see what was sent,
/// as before decoding existed, rather than nothing.
pub(crate) fn for_rules<'a>(headers: &HeaderMap, body: &'a [u8], limit: usize) -> Cow<'a, [u8]> {
    let mut codings = headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .peekable();
    if body.is_empty() || codings.peek().is_none() {
        return Cow::Borrowed(body);
    }
    let codings: Vec<&str> = codings.collect();
    let mut data = Cow::Borrowed(body);
    for coding in codings.iter().rev() {
        match decode(coding, &data, limit) {
            Some(decoded) => data = Cow::Owned(decoded),
            None => return Cow::Borrowed(body),
        }
    }
    data
}

/// `data` decoded by `coding`, up to `limit` bytes; `None` for a coding this does not know
/// or data that yields nothing.
fn decode(coding: &str, data: &[u8], limit: usize) -> Option<Vec<u8>> {
    let lower = coding.to_ascii_lowercase();
    match lower.as_str() {
        "gzip" | "x-gzip" => prefix(flate2::read::MultiGzDecoder::new(data), limit),
        // RFC 9110's `deflate` is zlib's format; some servers send raw deflate instead.
        "deflate" => prefix(flate2::read::ZlibDecoder::new(data), limit)
            .or_else(|| prefix(flate2::read::DeflateDecoder::new(data), limit)),
        "br" => prefix(brotli_decompressor::Decompressor::new(data, 4096), limit),
        "zstd" => {
            let mut d = zstd::stream::read::Decoder::with_buffer(data).ok()?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX).ok()?;
            prefix(d, limit)
        }
        _ => None,
    }
}

/// What `reader` yields, up to `limit` bytes. An error ends it with what was decoded before
/// it: a body held back in part ends mid-stream, and its start is what the rules inspect.
fn prefix(reader: impl Read, limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let _ = reader
        .take(u64::try_from(limit).unwrap_or(u64::MAX))
        .read_to_end(&mut out);
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn headers(encoding: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_ENCODING, encoding.parse().unwrap());
        h
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn raw_deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    const PAGE: &[u8] = b"<html>You have an error in your SQL syntax near ORA-00933</html>";

    #[test]
    fn each_coding_is_undone_for_the_rules() {
        let zstd = zstd::stream::encode_all(PAGE, 3).unwrap();
        for (coding, body) in [
            ("gzip", gzip(PAGE)),
            ("X-GZIP", gzip(PAGE)),
            ("deflate", zlib(PAGE)),
            ("deflate", raw_deflate(PAGE)),
            ("zstd", zstd),
            ("identity", PAGE.to_vec()),
        ] {
            assert_eq!(
                &*for_rules(&headers(coding), &body, 1 << 20),
                PAGE,
                "{coding}"
            );
        }
        // Applied gzip then zlib: undone in the other order.
        let both = zlib(&gzip(PAGE));
        assert_eq!(&*for_rules(&headers("gzip, deflate"), &both, 1 << 20), PAGE);
    }

    #[test]
    fn brotli_is_undone_for_the_rules() {
        let brotli = |data: &[u8]| {
            let mut e = Vec::new();
            let mut w = brotli::CompressorWriter::new(&mut e, 4096, 5, 22);
            w.write_all(data).unwrap();
            drop(w);
            e
        };
        assert_eq!(&*for_rules(&headers("br"), &brotli(PAGE), 1 << 20), PAGE);
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| i.to_string().into_bytes())
            .collect();
        let e = brotli(&big);
        let start = for_rules(&headers("br"), &e[..e.len() / 2], 4 << 20);
        assert!(
            start.len() > 1000 && big.starts_with(&start),
            "a cut stream decodes to its start: {}",
            start.len()
        );
    }

    #[test]
    fn decoding_stops_at_the_limit_and_a_cut_stream_gives_its_start() {
        let big: Vec<u8> = PAGE.iter().copied().cycle().take(1 << 20).collect();
        let z = gzip(&big);
        assert!(z.len() < 64 << 10, "compresses well");
        let seen = for_rules(&headers("gzip"), &z, 4096);
        assert_eq!(&*seen, &big[..4096], "never more than the limit");
        let cut = for_rules(&headers("gzip"), &z[..z.len() / 2], 2 << 20);
        assert!(cut.len() > 4096 && big.starts_with(&cut), "{}", cut.len());
    }

    #[test]
    fn what_does_not_decode_is_seen_as_sent() {
        let h = headers("gzip");
        assert_eq!(&*for_rules(&h, PAGE, 1 << 20), PAGE, "not gzip at all");
        let unknown = headers("compress");
        assert_eq!(&*for_rules(&unknown, b"\x1f\x9d..", 1 << 20), b"\x1f\x9d..");
        assert_eq!(&*for_rules(&HeaderMap::new(), PAGE, 1 << 20), PAGE);
    }
}
