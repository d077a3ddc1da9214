//! Sluice's own HTTP/1.1 upstream side: one request written to a server connection and its
//! response read back, driven by whichever task polls it (the client request's own), with no
//! task per upstream connection and no channel between the two.
//!
//! hyper's client ran each upstream connection as a task of its own: a request crossed a
//! channel to it, the response came back through another, and every exchange cost two
//! task wake-ups and hyper's buffers for the connection's whole life. Here the request head is
//! encoded into one buffer, the body follows through the same framing writer as responses to
//! clients (`response::Writer`), the response head is parsed in place with `httparse` (header
//! values kept as slices of the read buffer), and the body is decoded from that buffer without
//! copies. The read buffer comes from the per-thread free list and goes back when the
//! response ends: a pooled idle connection holds only its socket.
//!
//! Full duplex: a request body still streaming when the response head arrives keeps being
//! written while the response body is read (a server may answer before it has read all of an
//! upload, and an echoing server needs both directions at once).

use super::buffers::{self, poll_read};
use super::decode::{Decoded, Decoder};
use super::head::range_in;
use super::response::{Encoding, Writer, Written};
use super::upgrade::{Io, Upgraded};
use crate::body::{BoxError, ProxyBody};
use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Method, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use std::future::poll_fn;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The largest response head accepted from a server (NGINX: "upstream sent too big header").
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// The most header fields a response head may carry.
const MAX_RESPONSE_FIELDS: usize = 128;

/// Why an exchange produced no response.
#[derive(Debug)]
pub(crate) enum SendError {
    /// A kept-alive connection turned out closed before the server answered anything, and
    /// nothing of a request body was sent: the request may go again on another connection,
    /// whatever its method (the server cannot have acted on it).
    Stale,
    Failed(BoxError),
}

/// A request's fields written as `name: value\r\n` lines (the head's framing fields left
/// out: the body's own framing goes with it, see [`encode_request`]).
#[derive(Debug)]
pub(crate) struct WrittenFields {
    pub(crate) lines: Vec<u8>,
    /// The Content-Length the request declared, if any.
    pub(crate) content_length: Option<u64>,
}

/// Where a request head's fields come from: the request's own map, or lines written
/// already (`request::forward::write_forwardable`, the proxy's path without a second map).
#[derive(Clone, Copy)]
pub(crate) enum Fields<'a> {
    Map(&'a HeaderMap),
    Written(&'a WrittenFields),
}

/// The request head for `method target` with `fields` (hop-by-hop fields already removed),
/// framed for `body`: its exact length when known (`content-length: 0` only for methods
/// whose requests carry a body), else chunked. `Content-Length` and `Transfer-Encoding`
/// fields in a map are replaced by the framing the body actually has.
pub(crate) fn encode_request(
    method: &Method,
    target: &str,
    fields: Fields<'_>,
    body: &ProxyBody,
) -> (Vec<u8>, Encoding) {
    let (declared, room) = match fields {
        Fields::Map(headers) => (
            headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
                .and_then(|v| v.parse::<u64>().ok()),
            32 * headers.len(),
        ),
        Fields::Written(w) => (w.content_length, w.lines.len()),
    };
    let encoding = match body.size_hint().exact() {
        Some(0) if body.is_end_stream() => Encoding::Empty,
        Some(n) => Encoding::Length(n),
        None => declared.map_or(Encoding::Chunked, Encoding::Length),
    };
    let mut out = Vec::with_capacity(256 + room);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    match fields {
        Fields::Map(headers) => {
            for (name, value) in headers {
                if *name == header::CONTENT_LENGTH || *name == header::TRANSFER_ENCODING {
                    continue;
                }
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        Fields::Written(w) => out.extend_from_slice(&w.lines),
    }
    match encoding {
        Encoding::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Encoding::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Encoding::Empty
            if declared.is_some()
                || matches!(*method, Method::POST | Method::PUT | Method::PATCH) =>
        {
            // An empty upload says so (RFC 9110 §8.6: a server may otherwise wait or 411).
            out.extend_from_slice(b"content-length: 0\r\n");
        }
        Encoding::Empty | Encoding::Close => {}
    }
    out.extend_from_slice(b"\r\n");
    (out, encoding)
}

/// A response head from a server.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    /// The fields, less the hop-by-hop ones that [`parse_response`] keeps out (see there).
    pub(crate) headers: HeaderMap,
    /// What the parse saw of the fields that frame the body and keep the connection.
    facts: HeadFacts,
}

/// Noted while the fields are parsed (their names are looked at then anyway), so that the
/// framing and the connection's reuse are decided without hashed lookups of fields most
/// responses lack (five of them, ~450 instructions).
#[derive(Debug, Default, Clone, Copy)]
struct HeadFacts {
    /// `Connection` said `close`.
    close: bool,
    /// `Connection` said `keep-alive`.
    keep_alive: bool,
    /// A `Transfer-Encoding` field is there.
    transfer_encoding: bool,
    /// A `Content-Length` field is there.
    content_length: bool,
}

/// How the response body ends.
#[derive(Debug)]
enum Reading {
    Framed(Decoder),
    /// Until the server closes (no length, or a transfer coding other than chunked).
    UntilClose,
    Done,
}

/// One request on one connection, from the request head written to the response's end.
pub(crate) struct Exchange<S> {
    io: S,
    /// Bytes read and not yet consumed; `None` once the response has ended.
    buf: Option<BytesMut>,
    /// The request being written; `None` once it is complete (or abandoned).
    writer: Option<Writer>,
    /// Every byte of the request was written.
    request_complete: bool,
    reading: Reading,
    /// The server keeps the connection open after this response.
    keep_alive: bool,
    /// The request body failed after the response began: the server waits for the rest of
    /// a body that will never come, so what it has not sent yet never will be either.
    upload_failed: Option<BoxError>,
}

impl<S: Io> Exchange<S> {
    /// Writes `head` and `body` on `io` and reads the response head; `reused`: the
    /// connection served a request before (so a close before any answer means it was stale).
    pub(crate) async fn start(
        io: S,
        head: Vec<u8>,
        body: ProxyBody,
        encoding: Encoding,
        method: &Method,
        reused: bool,
    ) -> Result<(ResponseHead, Exchange<S>), SendError> {
        let has_body = encoding != Encoding::Empty;
        let mut x = Exchange {
            io,
            buf: Some(buffers::take()),
            writer: Some(Writer::new(head, body, encoding)),
            request_complete: false,
            upload_failed: None,
            reading: Reading::Done,
            keep_alive: false,
        };
        // Bytes of the response seen so far (none: the connection may have been stale).
        let mut answered = false;
        let head = poll_fn(|cx| {
            loop {
                if let Err(e) = x.poll_request(cx) {
                    return Poll::Ready(Err(SendError::Failed(e)));
                }
                let buf = x
                    .buf
                    .as_mut()
                    .expect("the buffer lives until the response ends");
                answered |= !buf.is_empty();
                match parse_response(buf) {
                    Ok(Some(head))
                        if head.status.is_informational()
                            && head.status != StatusCode::SWITCHING_PROTOCOLS =>
                    {
                        // 100 Continue, 102, 103: nothing to forward; the final answer follows.
                        continue;
                    }
                    Ok(Some(head)) => return Poll::Ready(Ok(head)),
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Err(SendError::Failed(e.into()))),
                }
                match poll_read(&mut x.io, buf, cx) {
                    Poll::Ready(Ok(0)) if reused && !answered && !has_body => {
                        return Poll::Ready(Err(SendError::Stale));
                    }
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(SendError::Failed(
                            "the server closed the connection before answering".into(),
                        )));
                    }
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(e)) if reused && !answered && !has_body && stale_error(&e) => {
                        return Poll::Ready(Err(SendError::Stale));
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(SendError::Failed(e.into()))),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await?;
        x.reading = framing(method, &head)?;
        x.keep_alive = keep_alive(&head) && !matches!(x.reading, Reading::UntilClose);
        Ok((head, x))
    }

    /// Moves the request along; `Err` only for a failure of the request body itself (the
    /// client's upload was malformed or too large), which the caller must answer. A write
    /// that fails ends the writing: the server may have answered already, so reading goes on.
    fn poll_request(&mut self, cx: &mut Context<'_>) -> Result<(), BoxError> {
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        match w.poll(&mut self.io, cx) {
            Poll::Pending => Ok(()),
            Poll::Ready(Ok(written)) => {
                let failed = w.take_error();
                self.writer = None;
                self.request_complete = written == Written::Complete;
                failed.map_or(Ok(()), Err)
            }
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, "writing the request upstream failed");
                self.writer = None;
                Ok(())
            }
        }
    }

    /// The next piece of the response body.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            // A request body still streaming goes on while the response is read.
            if let Err(e) = self.poll_request(cx) {
                tracing::debug!(error = %e, "the request body failed after the response began");
                self.upload_failed = Some(e);
            }
            let Some(buf) = self.buf.as_mut() else {
                return Poll::Ready(None);
            };
            match &mut self.reading {
                Reading::Done => {
                    self.finish_reading();
                    return Poll::Ready(None);
                }
                Reading::Framed(decoder) => match decoder.decode(buf) {
                    Ok(Decoded::Data(data)) => {
                        if !decoder.is_done() {
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        self.reading = Reading::Done;
                        return Poll::Ready(Some(Ok(Frame::data(detach_last(data)))));
                    }
                    Ok(Decoded::Trailers(t)) => {
                        self.reading = Reading::Done;
                        return Poll::Ready(Some(Ok(Frame::trailers(t))));
                    }
                    Ok(Decoded::End) => {
                        self.reading = Reading::Done;
                        continue;
                    }
                    Ok(Decoded::NeedMore) => {}
                    Err(bad) => {
                        self.fail();
                        return Poll::Ready(Some(Err(format!(
                            "malformed response body: {}",
                            bad.0
                        )
                        .into())));
                    }
                },
                Reading::UntilClose => {
                    if !buf.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(buf.split().freeze()))));
                    }
                }
            }
            if let Some(e) = self.upload_failed.take() {
                // What was already read has been delivered; waiting for more would wait for
                // ever (hyper aborts the connection here too). The response ends in an error,
                // so the client's connection closes instead of hanging.
                self.fail();
                return Poll::Ready(Some(Err(e)));
            }
            let buf = self.buf.as_mut().expect("checked above");
            let read = match self.reading {
                Reading::Framed(Decoder::Length(n)) => {
                    buffers::poll_read_body(&mut self.io, buf, n, cx)
                }
                _ => poll_read(&mut self.io, buf, cx),
            };
            match read {
                Poll::Ready(Ok(0)) => {
                    if matches!(self.reading, Reading::UntilClose) {
                        self.reading = Reading::Done;
                        continue;
                    }
                    self.fail();
                    return Poll::Ready(Some(Err(
                        "the server closed the connection before the response ended".into(),
                    )));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    self.fail();
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// The response has been read to its end.
    pub(crate) fn is_end_stream(&self) -> bool {
        matches!(self.reading, Reading::Done)
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match &self.reading {
            Reading::Done => SizeHint::with_exact(0),
            Reading::Framed(Decoder::Length(n)) => SizeHint::with_exact(*n),
            _ => SizeHint::default(),
        }
    }

    fn fail(&mut self) {
        self.keep_alive = false;
        self.reading = Reading::Done;
        self.finish_reading();
    }

    fn finish_reading(&mut self) {
        if let Some(buf) = self.buf.take() {
            if !buf.is_empty() {
                // Bytes past the response's end: the server is out of step.
                self.keep_alive = false;
            }
            buffers::give(buf);
        }
    }

    /// The connection, when the response was read to its end, the request was written
    /// whole, and the server keeps it open: ready for another request.
    pub(crate) fn into_reusable(mut self) -> Option<S> {
        if !self.is_end_stream() || self.writer.is_some() || !self.request_complete {
            return None;
        }
        self.finish_reading();
        self.keep_alive.then_some(self.io)
    }
}

impl<S: Io + 'static> Exchange<S> {
    /// After `101 Switching Protocols`: the connection, with what the server sent past the
    /// response head.
    pub(crate) fn into_upgraded(mut self) -> Upgraded {
        let read_ahead = self.buf.take().map_or_else(Bytes::new, BytesMut::freeze);
        Upgraded {
            io: Box::new(self.io),
            read_ahead,
        }
    }
}

/// A close or reset that a kept-alive connection meets when the server had already closed it.
fn stale_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

/// Whether a pooled idle connection is still open: the server has neither closed it nor
/// sent anything unasked. Costs no system call while the socket has no event pending.
pub(crate) fn still_open<S: Io>(io: &mut S) -> bool {
    let mut probe = [0u8; 1];
    let mut rb = tokio::io::ReadBuf::new(&mut probe);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    matches!(
        tokio::io::AsyncRead::poll_read(Pin::new(io), &mut cx, &mut rb),
        Poll::Pending
    )
}

/// The last piece of a body of known length, copied out of the read buffer when it is small.
/// HTTP/2 keeps the last DATA frame it sent until the connection's next write (h2's
/// `last_data_frame`), so on an idle connection a slice would keep the whole read buffer
/// (8 KiB or more) allocated; copied, the buffer goes back to the free list at once. Larger
/// pieces are most of their buffer anyway and are not copied.
fn detach_last(data: Bytes) -> Bytes {
    if data.len() <= DETACH_LAST_MAX {
        Bytes::copy_from_slice(&data)
    } else {
        data
    }
}

/// The largest last piece [`detach_last`] copies.
const DETACH_LAST_MAX: usize = 4 * 1024;

/// Parses a response head off the front of `buf`; `None` while incomplete.
fn parse_response(buf: &mut BytesMut) -> Result<Option<ResponseHead>, &'static str> {
    if buf.is_empty() {
        return Ok(None);
    }
    // Not zeroed: see `head::parse`.
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_FIELDS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD => {
            return Err("the server sent a response head larger than 64 KiB");
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err("the server sent more than 128 response header fields");
        }
        Err(_) => return Err("the server sent a malformed response head"),
    };
    let version = match resp.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or("the server sent an invalid status code")?;
    let nfields = resp.headers.len();
    // The head's fields are slices of a copy of the head, not of the read buffer: whoever
    // keeps a header value (HTTP/2's HPACK table indexes response fields for the life of the
    // connection, the response cache for the life of an entry) then keeps a few hundred
    // bytes, not the whole buffer. The copy has the buffer's layout, so each field is cut
    // from it at the offsets httparse found in the buffer (no array of offsets between).
    let bytes = Bytes::copy_from_slice(&buf[..len]);
    // `Connection: keep-alive` (or `close`) and `Keep-Alive` concern this connection only, and
    // the proxy strips them before the response goes on (`forward::strip_hop_by_hop`): read
    // here and kept out of the map, they cost neither an insert nor a hashed removal (1,500
    // instructions of a proxied request, most answers carry `Connection: keep-alive`). A
    // `Connection` naming other fields stays, for the proxy to strip those too, and so does
    // all of a `101`'s, which the client gets as it came.
    let switching = status == StatusCode::SWITCHING_PROTOCOLS;
    let mut facts = HeadFacts::default();
    let mut headers = HeaderMap::with_capacity(nfields + super::head::ADDED_FIELDS);
    for f in resp.headers.iter() {
        let raw = f.name.as_bytes();
        let value = range_in(buf, f.value);
        // (A length test passes over most names.)
        match raw.len() {
            // (The tokens are noted whether or not the field is then kept.)
            10 if raw.eq_ignore_ascii_case(b"connection")
                && facts.read_connection(f.value)
                && !switching =>
            {
                continue;
            }
            10 if raw.eq_ignore_ascii_case(b"keep-alive") && !switching => continue,
            14 if raw.eq_ignore_ascii_case(b"content-length") => facts.content_length = true,
            17 if raw.eq_ignore_ascii_case(b"transfer-encoding") => {
                facts.transfer_encoding = true;
            }
            _ => {}
        }
        let name =
            super::names::header_name(raw).map_err(|_| "the server sent an invalid header name")?;
        headers.append(
            name,
            super::head::parsed_value(bytes.slice(value.0..value.1)),
        );
    }
    buf.advance(len);
    Ok(Some(ResponseHead {
        status,
        version,
        headers,
        facts,
    }))
}

/// Parses `raw` as a response head and panics if what the parser accepts breaks an invariant
/// the proxy relies on: framed one way only (a Content-Length equal to the length read, or a
/// Transfer-Encoding and no Content-Length), a connection framed twice never reused, no CR,
/// LF or NUL in a value, the framing fields noted as the map has them. The fuzz smoke in the
/// tests and `crates/proxy/fuzz` (libFuzzer) run it.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_invariants(raw: &[u8]) {
    let mut buf = BytesMut::from(raw);
    let Ok(Some(mut head)) = parse_response(&mut buf) else {
        return;
    };
    // What the parse noted is what the fields say.
    let h = &head.headers;
    assert_eq!(
        head.facts.transfer_encoding,
        h.contains_key(header::TRANSFER_ENCODING),
        "{raw:?}"
    );
    assert_eq!(
        head.facts.content_length,
        h.contains_key(header::CONTENT_LENGTH),
        "{raw:?}"
    );
    let Ok(reading) = framing(&Method::GET, &head) else {
        return;
    };
    // What the connection does after this response (`read_head`): reused only if the headers
    // allow it and the body is framed.
    let reuse = keep_alive(&head) && !matches!(reading, Reading::UntilClose);
    let had_length = head.headers.contains_key(header::CONTENT_LENGTH);
    head.clean_headers();
    let h = &head.headers;
    let codings = h.get_all(header::TRANSFER_ENCODING).iter().count();
    match reading {
        Reading::Framed(Decoder::Length(n)) => {
            assert_eq!(codings, 0, "{raw:?}");
            for v in h.get_all(header::CONTENT_LENGTH) {
                assert!(
                    v.to_str()
                        .unwrap()
                        .split(',')
                        .all(|p| p.trim().parse::<u64>() == Ok(n)),
                    "{raw:?}"
                );
            }
        }
        Reading::Framed(Decoder::Chunked(..)) => {
            assert!(
                codings >= 1 && !h.contains_key(header::CONTENT_LENGTH),
                "{raw:?}"
            );
        }
        Reading::UntilClose | Reading::Done => {}
    }
    if codings > 0 && had_length {
        assert!(!reuse, "framed twice, yet reused: {raw:?}");
    }
    for (_, v) in h {
        assert!(
            !v.as_bytes().iter().any(|b| matches!(b, b'\r' | b'\n' | 0)),
            "{raw:?}"
        );
    }
}

/// How the response body is delimited (RFC 9112 §6.3). A `Content-Length` beside a transfer
/// coding is removed (the coding wins and the connection is not reused); conflicting lengths
/// are refused, as NGINX does ("upstream sent duplicate header line").
fn framing(method: &Method, head: &ResponseHead) -> Result<Reading, SendError> {
    let status = head.status;
    if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Reading::Done);
    }
    if head.facts.transfer_encoding {
        let codings: Vec<&[u8]> = head
            .headers
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|c| !c.is_empty())
            .collect();
        let Some(last) = codings.last() else {
            // An empty Transfer-Encoding: framing by a Content-Length beside it would leave
            // the header claiming a coding that is not there (found by fuzzing); NGINX refuses
            // a Transfer-Encoding other than `chunked` (502) and so do we.
            return Err(SendError::Failed(
                "the server sent an empty Transfer-Encoding".into(),
            ));
        };
        return Ok(if last.eq_ignore_ascii_case(b"chunked") {
            Reading::Framed(Decoder::chunked(MAX_RESPONSE_HEAD))
        } else {
            Reading::UntilClose
        });
    }
    if !head.facts.content_length {
        return Ok(Reading::UntilClose);
    }
    let mut length = None;
    for v in head.headers.get_all(header::CONTENT_LENGTH) {
        for part in v.as_bytes().split(|b| *b == b',').map(<[u8]>::trim_ascii) {
            let n = std::str::from_utf8(part)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| {
                    SendError::Failed("the server sent an invalid Content-Length".into())
                })?;
            if length.is_some_and(|l| l != n) {
                return Err(SendError::Failed(
                    "the server sent conflicting Content-Length values".into(),
                ));
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(Reading::UntilClose, |n| Reading::Framed(Decoder::length(n))))
}

/// Whether the server keeps the connection open after this response.
fn keep_alive(head: &ResponseHead) -> bool {
    let said = head.facts;
    let framed_twice = said.transfer_encoding && said.content_length;
    !framed_twice
        && match head.version {
            Version::HTTP_11 => !said.close,
            _ => said.keep_alive && !said.close,
        }
}

impl HeadFacts {
    /// Notes the tokens of one `Connection` value; true when it has no token but `close`
    /// and `keep-alive` (and so names no other field to remove).
    fn read_connection(&mut self, value: &[u8]) -> bool {
        let mut only_these = true;
        for token in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if !token.is_empty() {
                only_these = false;
            }
        }
        only_these
    }
}

impl ResponseHead {
    /// Sanitises the head for the rest of the gateway: a `Content-Length` that a transfer
    /// coding overrides is dropped (the client gets the framing Sluice chooses).
    pub(crate) fn clean_headers(&mut self) {
        if self.facts.transfer_encoding && self.facts.content_length {
            self.headers.remove(header::CONTENT_LENGTH);
            self.facts.content_length = false;
        }
    }
}

#[cfg(test)]
mod tests;
