//! A request head, parsed in place with `httparse` and checked against RFC 9112's framing
//! rules at least as strictly as NGINX and HAProxy.
//!
//! The head's bytes are split off the connection's read buffer and frozen; the request
//! target and every header value are slices of that one allocation (`Bytes::slice_ref`), so
//! nothing is copied but the header names `http::HeaderName` keeps in its own form.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};

/// Header fields parsed into an array on the stack: the listener's `max_header_fields` up to
/// this many costs no allocation (and the default is this, the limit of hyper, Apache's
/// `LimitRequestFields` and Envoy; HAProxy's is 101). A listener that allows more parses a
/// head with more fields a second time into the heap (`parse_many`).
pub(crate) const MAX_HEADERS: usize = 100;

/// How many fields a head's map has room for beyond its own: those the gateway adds on the
/// way through (forwarding headers upstream; `X-Request-Id`, `Alt-Svc`, a sticky cookie back).
pub(crate) const ADDED_FIELDS: usize = 6;

/// How a request's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: neither Content-Length nor Transfer-Encoding, or `Content-Length: 0`.
    None,
    /// `Content-Length: n`, n > 0.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed request head and what the connection must know about it.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) request: Request<()>,
    pub(crate) framing: Framing,
    /// The connection may carry another request after this one's response.
    pub(crate) keep_alive: bool,
    /// `Expect: 100-continue`: send `100 Continue` before reading the body.
    pub(crate) expect_continue: bool,
    /// `Connection: upgrade` with an `Upgrade` header: the connection may switch protocols.
    pub(crate) upgrade: bool,
}

/// Why a head was refused, with the status to answer before closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reject {
    pub(crate) status: StatusCode,
    pub(crate) reason: &'static str,
}

fn reject(status: StatusCode, reason: &'static str) -> Reject {
    Reject { status, reason }
}

fn bad(reason: &'static str) -> Reject {
    reject(StatusCode::BAD_REQUEST, reason)
}

/// What parsing the start of `buf` found.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A whole head, removed from the front of `buf`.
    Head(Box<Head>),
    /// Not all of it yet.
    Partial,
}

/// Whether `buf` holds the blank line that ends a head (CRLF CRLF, or LF LF, which httparse
/// also takes), looking only at what follows `from` (and the 3 bytes before it).
pub(crate) fn has_end(buf: &[u8], from: usize) -> bool {
    let start = from.saturating_sub(3);
    let tail = &buf[start.min(buf.len())..];
    tail.windows(2).any(|w| w == b"\n\n") || tail.windows(3).any(|w| w == b"\n\r\n")
}

/// What httparse found of a complete head, as offsets into the buffer: owned, so that the
/// parsed fields' borrow of the buffer ends before the head is split off it.
struct Scanned {
    len: usize,
    version: Option<u8>,
    method: Option<(usize, usize)>,
    path: Option<(usize, usize)>,
    ranges: FieldRanges,
}

/// What one pass of httparse over the buffer found. Not boxed: it lives once on the stack
/// of `parse`, and a box would cost every request an allocation.
#[allow(clippy::large_enum_variant)]
enum Scan {
    Head(Scanned),
    Partial,
    /// More fields than the array had room for.
    TooMany,
}

/// One pass of httparse over `buf` into `fields` (not zeroed: httparse writes the fields it
/// parses, its `_uninit` entry point, and only those are read; zeroing 100 fields and their
/// offsets per request cost more instructions than parsing a typical head).
#[inline(always)]
fn scan<'b>(
    buf: &'b [u8],
    fields: &mut [MaybeUninit<httparse::Header<'b>>],
) -> Result<Scan, Reject> {
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, fields) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(Scan::Partial),
        Err(httparse::Error::TooManyHeaders) => return Ok(Scan::TooMany),
        Err(e) => return Err(refused(e, buf)),
    };
    Ok(Scan::Head(Scanned {
        len,
        version: req.version,
        method: req.method.map(|m| range_in(buf, m.as_bytes())),
        path: req.path.map(|p| range_in(buf, p.as_bytes())),
        ranges: req
            .headers
            .iter()
            .map(|f| (range_in(buf, f.name.as_bytes()), range_in(buf, f.value)))
            .collect(),
    }))
}

/// Parses a request head from the front of `buf`; `max` bounds its size in bytes and
/// `max_fields` its header fields (more is 431).
pub(crate) fn parse(buf: &mut BytesMut, max: usize, max_fields: usize) -> Result<Parsed, Reject> {
    skip_empty_lines(buf);
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let scanned = match scan(buf, &mut fields[..max_fields.min(MAX_HEADERS)])? {
        Scan::Head(scanned) => scanned,
        Scan::Partial => return partial(buf, max),
        Scan::TooMany if max_fields > MAX_HEADERS => match parse_many(buf, max_fields)? {
            Scan::Head(scanned) => scanned,
            Scan::Partial => return partial(buf, max),
            Scan::TooMany => return Err(too_many_fields()),
        },
        Scan::TooMany => return Err(too_many_fields()),
    };
    if scanned.len > max {
        return Err(reject(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request head too large",
        ));
    }
    let version = version_of(scanned.version)?;
    let (m0, m1) = scanned.method.ok_or_else(|| bad("no method"))?;
    let method = Method::from_bytes(&buf[m0..m1]).map_err(|_| bad("invalid method"))?;
    let path = scanned.path.ok_or_else(|| bad("no request target"))?;
    let bytes: Bytes = buf.split_to(scanned.len).freeze();
    let (uri, headers, facts, framing) =
        match checked(&bytes, path, &scanned.ranges, &method, version) {
            Ok(checked) => checked,
            Err(refused) => {
                restore(buf, &bytes);
                return Err(refused);
            }
        };
    let keep_alive = match version {
        Version::HTTP_11 => !facts.close,
        _ => facts.keep_alive && !facts.close,
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(Parsed::Head(Box::new(Head {
        request,
        framing,
        keep_alive,
        expect_continue: version == Version::HTTP_11 && facts.expect_continue,
        upgrade: version == Version::HTTP_11 && facts.upgrade_token && facts.upgrade_header,
    })))
}

/// A head with more fields than the stack array holds, on a listener that allows them
/// (`max_header_fields` above [`MAX_HEADERS`]): parsed again into the heap. Rare by design,
/// so the common head never pays for the allocation.
#[cold]
#[inline(never)]
fn parse_many(buf: &[u8], max_fields: usize) -> Result<Scan, Reject> {
    let mut fields = Vec::with_capacity(max_fields);
    fields.resize_with(max_fields, MaybeUninit::<httparse::Header<'_>>::uninit);
    scan(buf, &mut fields)
}

#[cold]
fn too_many_fields() -> Reject {
    reject(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "too many header fields",
    )
}

/// The head's target, fields and framing, or why it is refused.
#[inline(always)]
fn checked(
    bytes: &Bytes,
    path: (usize, usize),
    ranges: &FieldRanges,
    method: &Method,
    version: Version,
) -> Result<(Uri, HeaderMap, Facts, Framing), Reject> {
    let uri = request_target(method, bytes.slice(path.0..path.1))?;
    let (headers, facts) = fields_of(bytes, ranges)?;
    let framing = facts.framing(version)?;
    if *method == Method::CONNECT {
        // Tunnels are not offered: 405, the method known and not allowed here (RFC 9110
        // §15.5.6); Debian's NGINX 1.22 and HAProxy 2.6 answer 400.
        return Err(reject(
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT is not served",
        ));
    }
    Ok((uri, headers, facts, framing))
}

/// Puts a refused head back in front of `buf`, so that the connection can log its request
/// line (`Service::refused`); the connection closes after it.
#[cold]
fn restore(buf: &mut BytesMut, head: &Bytes) {
    let mut whole = BytesMut::with_capacity(head.len() + buf.len());
    whole.extend_from_slice(head);
    whole.extend_from_slice(buf);
    *buf = whole;
}

/// RFC 9112 §2.2: a server SHOULD ignore at least one empty line before a request line.
#[inline(always)]
fn skip_empty_lines(buf: &mut BytesMut) {
    let leading = buf
        .iter()
        .take(4)
        .take_while(|b| **b == b'\r' || **b == b'\n')
        .count();
    if leading > 0 {
        let _ = buf.split_to(leading);
    }
}

/// An incomplete head: wait for more, unless `buf` already holds `max` bytes (the target is
/// what is too long while the request line has not ended, else the head).
fn partial(buf: &BytesMut, max: usize) -> Result<Parsed, Reject> {
    if buf.len() < max {
        return Ok(Parsed::Partial);
    }
    Err(if !buf.contains(&b'\n') {
        reject(StatusCode::URI_TOO_LONG, "request target too long")
    } else {
        reject(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request head too large",
        )
    })
}

/// The answer to a head httparse refused (`head` is what it read).
#[cold]
fn refused(e: httparse::Error, head: &[u8]) -> Reject {
    match e {
        httparse::Error::TooManyHeaders => too_many_fields(),
        httparse::Error::Version => version_refused(head),
        _ => bad("malformed request head"),
    }
}

/// A request line whose version is not HTTP/1.0 or HTTP/1.1: 505 when it is a well-formed
/// version this gateway does not speak in HTTP/1 syntax (`HTTP/2.0`, `HTTP/0.9`; RFC 9110
/// §15.6.6), 400 when what stands there is not a version at all (`TEST`, `http/1.1`,
/// `HTTP\1.0`, nothing), as NGINX and HAProxy answer both.
fn version_refused(head: &[u8]) -> Reject {
    let mut words = first_line(head).split(|b| *b == b' ');
    let version = match (words.next(), words.next(), words.next(), words.next()) {
        (Some(_), Some(_), Some(v), None) => v,
        _ => return bad("malformed request line"),
    };
    match version {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            reject(
                StatusCode::HTTP_VERSION_NOT_SUPPORTED,
                "unsupported HTTP version",
            )
        }
        _ => bad("malformed HTTP version"),
    }
}

/// The first line of `head` (the request line), without its line end.
pub(super) fn first_line(head: &[u8]) -> &[u8] {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// HTTP/1.0 or HTTP/1.1 (505 otherwise).
#[inline(always)]
fn version_of(minor: Option<u8>) -> Result<Version, Reject> {
    match minor {
        Some(0) => Ok(Version::HTTP_10),
        Some(1) => Ok(Version::HTTP_11),
        _ => Err(reject(
            StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            "unsupported HTTP version",
        )),
    }
}

/// The head's fields as a map, cut from `bytes` at `ranges`, and what they say about framing
/// and the connection.
#[inline(always)]
fn fields_of(bytes: &Bytes, ranges: &FieldRanges) -> Result<(HeaderMap, Facts), Reject> {
    // Room for the fields the proxy adds upstream (`X-Forwarded-*`, `X-Real-IP`,
    // `X-Request-Id`, `traceparent`): a map filled to its capacity would grow, rehashing
    // every field, on the first of them.
    let mut headers = HeaderMap::with_capacity(ranges.len() + ADDED_FIELDS);
    let mut facts = Facts::default();
    for &((n0, n1), (v0, v1)) in ranges {
        let name =
            super::names::header_name(&bytes[n0..n1]).map_err(|_| bad("invalid field name"))?;
        let value = parsed_value(bytes.slice(v0..v1));
        if (name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING)
            && line_has_tab(bytes, n1)
        {
            // httparse trims tabs around values; NGINX refuses a framing field that has one
            // ("\tchunked" is 501 there), so no parser behind us can read it differently.
            return Err(bad("a tab in a framing field"));
        }
        facts.note(&name, &value)?;
        headers.append(name, value);
    }
    Ok((headers, facts))
}

/// Parses `raw` as pipelined request heads, one after another, and panics if what the parser
/// accepts breaks an invariant the proxy relies on: a head is taken whole and only from what
/// was there; framed one way only (one Content-Length equal to the length, or a
/// Transfer-Encoding and no Content-Length); one Host at most; no CR, LF or NUL in a value.
/// The fuzz smoke below and `crates/proxy/fuzz` (libFuzzer) run it.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_invariants(raw: &[u8]) {
    let mut buf = BytesMut::from(raw);
    while !buf.is_empty() {
        let before = buf.len();
        let Ok(Parsed::Head(h)) = parse(&mut buf, 8192, MAX_HEADERS) else {
            return;
        };
        assert!(buf.len() < before, "a head consumed nothing: {raw:?}");
        let headers = h.request.headers();
        let lengths = headers.get_all(header::CONTENT_LENGTH).iter().count();
        let codings = headers.get_all(header::TRANSFER_ENCODING).iter().count();
        match h.framing {
            Framing::Chunked => assert!(lengths == 0 && codings >= 1, "{raw:?}"),
            Framing::Length(n) => {
                assert!(lengths == 1 && codings == 0, "{raw:?}");
                let v = headers[header::CONTENT_LENGTH].to_str().ok();
                assert_eq!(v.and_then(|v| v.parse().ok()), Some(n), "{raw:?}");
            }
            Framing::None => assert!(lengths <= 1 && codings == 0, "{raw:?}"),
        }
        assert!(headers.get_all(header::HOST).iter().count() <= 1, "{raw:?}");
        for (_, v) in headers {
            assert!(
                !v.as_bytes().iter().any(|b| matches!(b, b'\r' | b'\n' | 0)),
                "{raw:?}"
            );
        }
    }
}

/// Whether the field line whose name ends at `from` has a tab before its end.
fn line_has_tab(head: &[u8], from: usize) -> bool {
    head[from..]
        .iter()
        .take_while(|b| **b != b'\n' && **b != b'\r')
        .any(|b| *b == b'\t')
}

/// Whether `host` is a Host value NGINX would take (`ngx_http_validate_host`): not empty, no
/// path separator, no control byte or space, no empty label (`..`). Anything else could name
/// a file path or a different server to a component behind the gateway.
fn valid_host(host: &[u8]) -> bool {
    !host.is_empty()
        && !host.windows(2).any(|w| w == b"..")
        && host
            .iter()
            .all(|&b| b > 0x20 && b != 0x7f && b != b'/' && b != b'\\')
}

/// Where a head's field names and values lie in its buffer, kept across the split that
/// ends the parser's borrow; inline up to 32 fields, most heads' size, without being zeroed.
pub(super) type FieldRanges = smallvec::SmallVec<[((usize, usize), (usize, usize)); 32]>;

/// Where `part` (a slice of `buf`) lies in `buf`.
pub(super) fn range_in(buf: &[u8], part: &[u8]) -> (usize, usize) {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    (start, start + part.len())
}

/// A field value httparse has accepted, as a `HeaderValue`, without validating its bytes
/// a second time.
///
/// httparse accepts in a value exactly the bytes `HeaderValue` does: HTAB, SP to `~`, and
/// obs-text (0x80-0xFF); never CR, LF, NUL, DEL or another control byte (its parsers are
/// used with their default, strict configuration here and in `client`).
/// `parsed_values_are_valid_header_values` checks every byte against both. Validating
/// them again was ~430 instructions of every proxied response head.
#[expect(
    unsafe_code,
    reason = "skips the byte validation httparse has just made of the same value"
)]
pub(super) fn parsed_value(value: Bytes) -> HeaderValue {
    debug_assert!(HeaderValue::from_bytes(&value).is_ok(), "{value:?}");
    // SAFETY: `from_maybe_shared_unchecked` requires bytes that `HeaderValue` would accept;
    // `value` is a field value httparse accepted, and httparse accepts only such bytes
    // (above, and the test named there).
    unsafe { HeaderValue::from_maybe_shared_unchecked(value) }
}

/// The request target (RFC 9112 §3.2): origin form, absolute form, or `*` for OPTIONS.
fn request_target(method: &Method, target: Bytes) -> Result<Uri, Reject> {
    let first = target.first().copied();
    match first {
        Some(b'/') => {}
        Some(b'*') if target.len() == 1 && *method == Method::OPTIONS => {}
        Some(b'*') => return Err(bad("'*' is the target of OPTIONS only")),
        Some(_) if *method == Method::CONNECT => {}
        Some(_) => {
            // Absolute form: a scheme is required (an authority alone is CONNECT's form).
            let lower = target.to_ascii_lowercase();
            if !(lower.starts_with(b"http://") || lower.starts_with(b"https://")) {
                return Err(bad("request target is not origin or absolute form"));
            }
        }
        None => return Err(bad("empty request target")),
    }
    Uri::from_maybe_shared(target).map_err(|_| bad("invalid request target"))
}

/// What the framing and connection headers said, gathered over all fields.
#[derive(Default)]
struct Facts {
    content_length: Option<u64>,
    chunked: bool,
    transfer_encoding: bool,
    hosts: u8,
    close: bool,
    keep_alive: bool,
    upgrade_token: bool,
    upgrade_header: bool,
    expect_continue: bool,
}

impl Facts {
    fn note(&mut self, name: &HeaderName, value: &HeaderValue) -> Result<(), Reject> {
        if *name == header::CONTENT_LENGTH {
            // One field, one value: duplicates (even equal ones, as NGINX) and lists are
            // refused, so no two parsers on the path can disagree on the length.
            if self.content_length.is_some() {
                return Err(bad("more than one Content-Length"));
            }
            self.content_length = Some(content_length(value.as_bytes())?);
        } else if *name == header::TRANSFER_ENCODING {
            for coding in list(value.as_bytes()) {
                if self.chunked {
                    // Nothing may follow `chunked`, and it comes once.
                    return Err(bad("chunked is not the final transfer coding"));
                }
                if coding.eq_ignore_ascii_case(b"chunked") {
                    self.chunked = true;
                } else {
                    return Err(reject(
                        StatusCode::NOT_IMPLEMENTED,
                        "transfer coding not implemented",
                    ));
                }
            }
            self.transfer_encoding = true;
        } else if *name == header::HOST {
            self.hosts = self.hosts.saturating_add(1);
            if self.hosts > 1 {
                return Err(bad("more than one Host"));
            }
            if !valid_host(value.as_bytes()) {
                return Err(bad("invalid Host"));
            }
        } else if *name == header::CONNECTION {
            for token in list(value.as_bytes()) {
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    self.upgrade_token = true;
                }
            }
        } else if *name == header::UPGRADE {
            self.upgrade_header = true;
        } else if *name == header::EXPECT {
            self.expect_continue = value.as_bytes().eq_ignore_ascii_case(b"100-continue");
        }
        Ok(())
    }

    fn framing(&self, version: Version) -> Result<Framing, Reject> {
        if self.transfer_encoding {
            if version == Version::HTTP_10 {
                // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding is faulty framing.
                return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
            }
            if self.content_length.is_some() {
                // §6.3: a request smuggling vector; refused rather than guessed.
                return Err(bad("both Content-Length and Transfer-Encoding"));
            }
            if !self.chunked {
                return Err(bad("Transfer-Encoding without chunked"));
            }
            return Ok(Framing::Chunked);
        }
        Ok(match self.content_length {
            None | Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
        })
    }
}

/// A Content-Length value: 1 to 18 digits, nothing else (no sign, space or list).
fn content_length(v: &[u8]) -> Result<u64, Reject> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(bad("invalid Content-Length"));
    }
    Ok(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// The non-empty elements of a comma-separated field value, trimmed.
fn list(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> Result<Head, Reject> {
        let mut buf = BytesMut::from(raw.as_bytes());
        match parse(&mut buf, 8192, MAX_HEADERS)? {
            Parsed::Head(h) => Ok(*h),
            Parsed::Partial => panic!("partial: {raw:?}"),
        }
    }

    fn status(raw: &str) -> u16 {
        match head(raw) {
            Ok(_) => 0,
            Err(r) => r.status.as_u16(),
        }
    }

    /// What `parsed_value` relies on: a value byte httparse accepts in a request or a
    /// response is one `HeaderValue` accepts, for every byte, alone and amid others.
    #[test]
    fn parsed_values_are_valid_header_values() {
        /// The value of the field `x-v` holding `value`, where httparse accepts the head.
        fn parsed(request: bool, value: &[u8]) -> Option<Vec<u8>> {
            let start: &[u8] = if request {
                b"GET / HTTP/1.1\r\nx-v: "
            } else {
                b"HTTP/1.1 200 OK\r\nx-v: "
            };
            let raw = [start, value, b"\r\n\r\n"].concat();
            let mut fields = [httparse::EMPTY_HEADER; 4];
            let done = if request {
                httparse::Request::new(&mut fields).parse(&raw)
            } else {
                httparse::Response::new(&mut fields).parse(&raw)
            };
            matches!(done, Ok(httparse::Status::Complete(_))).then(|| fields[0].value.to_vec())
        }
        let mut accepted = 0;
        for b in 0..=255u8 {
            for value in [
                vec![b],
                vec![b'a', b, b'z'],
                vec![b'a'; 40].into_iter().chain([b]).collect(),
            ] {
                for request in [true, false] {
                    if let Some(got) = parsed(request, &value) {
                        assert!(
                            HeaderValue::from_bytes(&got).is_ok(),
                            "byte {b:#x}: {got:?}"
                        );
                        accepted += 1;
                    }
                }
            }
        }
        // Not vacuous: the visible bytes and obs-text are accepted.
        assert!(accepted > 2 * 3 * 200, "{accepted}");
        // And the parse itself yields the same value as the checked constructor.
        let h = head("GET / HTTP/1.1\r\nHost: x\r\nx-v: a\tb \x7e\r\n\r\n").unwrap();
        assert_eq!(
            h.request.headers()["x-v"],
            HeaderValue::from_static("a\tb ~")
        );
    }

    #[test]
    fn a_simple_head_parses_into_slices_of_the_buffer() {
        let raw = "GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-One: 1\r\nx-one: 2\r\n\r\nNEXT";
        let mut buf = BytesMut::from(raw.as_bytes());
        let Parsed::Head(h) = parse(&mut buf, 8192, MAX_HEADERS).unwrap() else {
            panic!()
        };
        assert_eq!(&buf[..], b"NEXT", "the next request's bytes stay");
        let r = &h.request;
        assert_eq!(r.method(), Method::GET);
        assert_eq!(r.uri().path(), "/a");
        assert_eq!(r.uri().query(), Some("b=c"));
        assert_eq!(r.version(), Version::HTTP_11);
        assert_eq!(r.headers()["host"], "x");
        let ones: Vec<_> = r.headers().get_all("x-one").iter().collect();
        assert_eq!(ones, ["1", "2"]);
        assert_eq!(h.framing, Framing::None);
        assert!(h.keep_alive && !h.upgrade && !h.expect_continue);
    }

    #[test]
    fn an_incomplete_head_is_partial_until_the_limit() {
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n"[..]);
        assert!(matches!(
            parse(&mut buf, 8192, MAX_HEADERS),
            Ok(Parsed::Partial)
        ));
        let mut buf = BytesMut::from(format!("GET /{} HTTP/1.1", "a".repeat(100)).as_bytes());
        assert_eq!(parse(&mut buf, 64, MAX_HEADERS).unwrap_err().status, 414);
        let mut buf =
            BytesMut::from(format!("GET / HTTP/1.1\r\nx: {}", "a".repeat(100)).as_bytes());
        assert_eq!(parse(&mut buf, 64, MAX_HEADERS).unwrap_err().status, 431);
        let fields: String = (0..101).map(|i| format!("x{i}: 1\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{fields}\r\n")), 431);
    }

    /// `max_header_fields`: below the stack array's size, and above it (the heap pass), the
    /// limit is the listener's, exactly.
    #[test]
    fn the_field_limit_is_the_listeners() {
        let with = |n: usize, limit: usize| {
            let fields: String = (0..n).map(|i| format!("x{i}: 1\r\n")).collect();
            let mut buf = BytesMut::from(format!("GET / HTTP/1.1\r\n{fields}\r\n").as_bytes());
            match parse(&mut buf, 1 << 20, limit) {
                Ok(Parsed::Head(h)) => Ok(h.request.headers().len()),
                Ok(Parsed::Partial) => panic!("partial"),
                Err(r) => Err(r.status.as_u16()),
            }
        };
        assert_eq!(with(10, 10), Ok(10));
        assert_eq!(with(11, 10), Err(431));
        assert_eq!(with(100, 100), Ok(100));
        assert_eq!(with(101, 100), Err(431));
        assert_eq!(with(101, 300), Ok(101));
        assert_eq!(with(300, 300), Ok(300));
        assert_eq!(with(301, 300), Err(431));
    }

    #[test]
    fn the_end_of_a_head_is_found_across_reads() {
        let raw = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(has_end(raw, 0));
        assert!(!has_end(&raw[..raw.len() - 1], 0));
        // The blank line split between two reads is still seen.
        assert!(has_end(raw, raw.len() - 2));
        assert!(has_end(b"GET / HTTP/1.1\nHost: x\n\n", 20));
        assert!(!has_end(b"GET / HTTP/1.1\r\nHost: x\r\n", 0));
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n").unwrap();
        assert_eq!(h.framing, Framing::Length(12));
        let h = head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(h.framing, Framing::None);
        let h = head("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n").unwrap();
        assert_eq!(h.framing, Framing::Chunked);
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        for raw in [
            // Content-Length twice, equal or not, or as a list.
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
            // Both framings.
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            // chunked not last, twice, or in HTTP/1.0.
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            // Obsolete line folding, whitespace before the colon, bare CR.
            "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nX\x01A: 1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nX-A: \x00\r\n\r\n",
            // Two Hosts; a target that is neither origin nor absolute form.
            "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            "GET x/y HTTP/1.1\r\nHost: x\r\n\r\n",
            // Hosts NGINX refuses; tabs around a framing field's value (NGINX refuses those).
            "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a..b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost:\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\t\r\n\r\n",
            "GET * HTTP/1.1\r\nHost: x\r\n\r\n",
            // Request line shapes.
            "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /\r\n\r\n",
            "GET / FOO/1.1\r\nHost: x\r\n\r\n",
        ] {
            let s = status(raw);
            assert!(s >= 400, "{raw:?} was accepted");
        }
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"),
            501
        );
        assert_eq!(status("GET / HTTP/1.2\r\nHost: x\r\n\r\n"), 505);
        // A well-formed version not spoken here is 505; no version at all is a bad request.
        for raw in [
            "GET / HTTP/2.0\r\n\r\n",
            "GET / HTTP/0.9\r\nHost: x\r\n\r\n",
        ] {
            assert_eq!(status(raw), 505, "{raw:?}");
        }
        for raw in [
            "GET / TEST\r\nHost: x\r\n\r\n",
            "GET / 1.1\r\nHost: x\r\n\r\n",
            "GET / JUNK/1.0\r\nHost: x\r\n\r\n",
            "GET \\index.html HTTP\\1.0\r\nHost: x\r\n\r\n",
            "GET / \r\nHost: x\r\n\r\n",
            "GET / http/1.1\r\nHost: x\r\n\r\n",
            "GET / HTTP/11\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.1 x\r\nHost: x\r\n\r\n",
        ] {
            assert_eq!(status(raw), 400, "{raw:?}");
        }
        // Tabs elsewhere, and the usual Host forms, are fine.
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a.b:8080\r\nX-A:\t1\r\n\r\n"),
            0
        );
        assert_eq!(status("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), 0);
        assert_eq!(status("CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n"), 405);
    }

    #[test]
    fn connection_tokens_decide_keep_alive_and_upgrade() {
        assert!(
            !head("GET / HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n")
                .unwrap()
                .keep_alive
        );
        assert!(!head("GET / HTTP/1.0\r\n\r\n").unwrap().keep_alive);
        assert!(
            head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .keep_alive
        );
        let h = head("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n").unwrap();
        assert!(h.upgrade && h.keep_alive);
        assert!(
            !head("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n")
                .unwrap()
                .upgrade
        );
        let h =
            head("PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n")
                .unwrap();
        assert!(h.expect_continue);
    }

    #[test]
    fn leading_empty_lines_and_absolute_targets_are_accepted() {
        let h = head("\r\nGET http://x/p HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(h.request.uri().path(), "/p");
        assert_eq!(h.request.uri().host(), Some("x"));
        let h = head("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(h.request.uri(), "*");
    }

    /// A deterministic mutation search (a fuzz smoke that runs in every test run): heads
    /// built from valid requests with bytes flipped, inserted and removed never panic the
    /// parser, and whatever it accepts keeps the framing invariants the proxy relies on
    /// (`check_invariants`, which `crates/proxy/fuzz` runs under libFuzzer).
    #[test]
    fn mutated_heads_never_break_the_framing_invariants() {
        let seeds: [&[u8]; 4] = [
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /u HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
            b"POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.0\r\nConnection: keep-alive, upgrade\r\nUpgrade: ws\r\n\r\n",
        ];
        let alphabet = b"\r\n :,;\t\x00\x7f\x80aZ0-chunkedContent-LengthTransfer-Encoding";
        for raw in super::super::mutated(&seeds, alphabet, 0x9e37_79b9_7f4a_7c15u64) {
            check_invariants(&raw);
        }
    }
}
