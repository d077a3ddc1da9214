//! Writing a response to an HTTP/1.1 client: the head encoded straight into one buffer, then
//! the body framed by Content-Length, chunked or the connection's close, each piece written
//! with the bytes queued before it in one vectored write (on TLS, `coalesce::Coalescing`
//! turns the pieces of one flush into one record). `Writer` frames request bodies on their way
//! upstream the same way (`client`).

use crate::body::ProxyBody;
use bytes::{Buf, Bytes};
use http::header::{self, HeaderMap};
use http::{StatusCode, Version};
use http_body::Body;
use std::cell::RefCell;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;
use tokio::io::AsyncWrite;

/// How a response body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// No body (HEAD, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client and no known length).
    Close,
}

/// The response's framing and whether the connection stays open after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) encoding: Encoding,
    pub(crate) keep_alive: bool,
    /// The response's status, the request's version and whether it was a HEAD: what the
    /// plan was decided from, which writing the head needs again.
    pub(crate) status: StatusCode,
    pub(crate) client: Version,
    pub(crate) head_request: bool,
}

/// Decides a response's framing (RFC 9112 §6.3) from its status, headers and body.
pub(crate) fn plan(
    head_request: bool,
    client: Version,
    status: StatusCode,
    headers: &HeaderMap,
    body: &ProxyBody,
    keep_alive: bool,
) -> Plan {
    let mut keep_alive = keep_alive
        && !headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|v| has_token(v.as_bytes(), b"close"));
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|v| v.parse::<u64>().ok());
    let encoding = if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Encoding::Empty
    } else if let Some(n) = declared {
        Encoding::Length(n)
    } else if let Some(n) = body.size_hint().exact() {
        Encoding::Length(n)
    } else if client == Version::HTTP_11 {
        Encoding::Chunked
    } else {
        keep_alive = false;
        Encoding::Close
    };
    Plan {
        encoding,
        keep_alive,
        status,
        client,
        head_request,
    }
}

pub(super) fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// Appends the status line and headers, then the framing and connection headers the plan
/// needs and a `date` when the response has none.
pub(crate) fn encode_head(out: &mut Vec<u8>, headers: &HeaderMap, plan: &Plan, body: &ProxyBody) {
    let Plan {
        status,
        client,
        head_request,
        ..
    } = *plan;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let no_length = status.is_informational() || status == StatusCode::NO_CONTENT;
    let mut has_date = false;
    let mut has_length = false;
    for (name, value) in headers {
        if *name == header::TRANSFER_ENCODING || (no_length && *name == header::CONTENT_LENGTH) {
            continue;
        }
        if *name == header::DATE {
            has_date = true;
        } else if *name == header::CONTENT_LENGTH {
            has_length = true;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        date(out);
        out.extend_from_slice(b"\r\n");
    }
    match plan.encoding {
        Encoding::Length(n) if !has_length => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Encoding::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Encoding::Empty if head_request && !has_length => {
            // A HEAD answer says what a GET's length would be, when the body knows it.
            if let Some(n) = body.size_hint().exact().filter(|n| *n > 0) {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        _ => {}
    }
    if status != StatusCode::SWITCHING_PROTOCOLS {
        if !plan.keep_alive {
            if !headers.contains_key(header::CONNECTION) {
                out.extend_from_slice(b"connection: close\r\n");
            }
        } else if client == Version::HTTP_10 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
}

thread_local! {
    /// The `date` value of the current second (formatting it per response cost ~1%).
    static DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((0, [0; 29])) };
}

/// Appends the current time as an HTTP date (29 bytes).
fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                d.1.copy_from_slice(text.as_bytes());
                d.0 = secs;
            }
        }
        out.extend_from_slice(&d.1);
    });
}

/// How writing a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Every byte the framing promised.
    Complete,
    /// The body failed or did not match its Content-Length: the connection must close, so the
    /// client sees the response was cut.
    Cut,
}

/// A response on its way out: queued bytes, then the body's frames as they come.
pub(crate) struct Writer {
    /// Head and chunk framing queued before `data`.
    out: Vec<u8>,
    /// How much of `out` is written.
    out_pos: usize,
    data: Bytes,
    /// After `data`: the CRLF that ends a chunk.
    tail: &'static [u8],
    body: Option<ProxyBody>,
    encoding: Encoding,
    finished: bool,
    written: Written,
    /// Why the body failed, for a caller that must answer it (a request body going upstream).
    error: Option<crate::body::BoxError>,
}

impl Writer {
    /// `out` holds the encoded head; `body` is dropped at once when the framing has none.
    pub(crate) fn new(out: Vec<u8>, body: ProxyBody, encoding: Encoding) -> Self {
        let empty = encoding == Encoding::Empty;
        Writer {
            out,
            out_pos: 0,
            data: Bytes::new(),
            tail: b"",
            body: (!empty).then_some(body),
            encoding,
            finished: empty,
            written: Written::Complete,
            error: None,
        }
    }

    /// Writes what is queued and the body's frames until the body ends (`Ready`) or has
    /// nothing yet (`Pending`, after flushing what was written).
    pub(crate) fn poll<S: AsyncWrite + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<Written>> {
        loop {
            ready!(self.poll_queued(io, cx))?;
            if self.finished {
                self.body = None;
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                return Poll::Ready(Ok(self.written));
            }
            let Some(body) = self.body.as_mut() else {
                self.finished = true;
                continue;
            };
            match Pin::new(body).poll_frame(cx) {
                Poll::Pending => {
                    // Nothing more now: what was gathered goes out before waiting.
                    ready!(Pin::new(&mut *io).poll_flush(cx))?;
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.queue_data(data),
                    Err(frame) => {
                        if let (Encoding::Chunked, Ok(trailers)) =
                            (self.encoding, frame.into_trailers())
                        {
                            self.out.extend_from_slice(b"0\r\n");
                            for (name, value) in &trailers {
                                self.out.extend_from_slice(name.as_str().as_bytes());
                                self.out.extend_from_slice(b": ");
                                self.out.extend_from_slice(value.as_bytes());
                                self.out.extend_from_slice(b"\r\n");
                            }
                            self.out.extend_from_slice(b"\r\n");
                            self.finished = true;
                        }
                    }
                },
                Poll::Ready(None) => {
                    match self.encoding {
                        Encoding::Chunked => self.out.extend_from_slice(b"0\r\n\r\n"),
                        Encoding::Length(left) if left > 0 => self.written = Written::Cut,
                        _ => {}
                    }
                    self.finished = true;
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(error = %e, "body failed; cutting the message");
                    self.error = Some(e);
                    self.written = Written::Cut;
                    self.finished = true;
                }
            }
        }
    }

    /// Why the body failed, once the writer is `Ready` with `Cut`.
    pub(crate) fn take_error(&mut self) -> Option<crate::body::BoxError> {
        self.error.take()
    }

    fn queue_data(&mut self, mut data: Bytes) {
        if data.is_empty() {
            return;
        }
        match &mut self.encoding {
            Encoding::Length(left) => {
                if data.len() as u64 > *left {
                    data.truncate(*left as usize);
                    self.written = Written::Cut;
                    self.finished = true;
                }
                *left -= data.len() as u64;
            }
            Encoding::Chunked => {
                let mut hex = [0u8; 16];
                let n = hex_len(data.len(), &mut hex);
                self.out.extend_from_slice(&hex[..n]);
                self.out.extend_from_slice(b"\r\n");
                self.tail = b"\r\n";
            }
            Encoding::Close | Encoding::Empty => {}
        }
        self.data = data;
    }

    /// Writes `out`, `data` and `tail`, in one vectored write where the stream takes it.
    fn poll_queued<S: AsyncWrite + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let head = &self.out[self.out_pos..];
            if head.is_empty() && self.data.is_empty() && self.tail.is_empty() {
                self.out.clear();
                self.out_pos = 0;
                return Poll::Ready(Ok(()));
            }
            let slices = [
                IoSlice::new(head),
                IoSlice::new(&self.data),
                IoSlice::new(self.tail),
            ];
            let mut n = ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            let from_head = n.min(head.len());
            self.out_pos += from_head;
            n -= from_head;
            let from_data = n.min(self.data.len());
            self.data.advance(from_data);
            n -= from_data;
            self.tail = &self.tail[n.min(self.tail.len())..];
        }
    }
}

/// Writes `n` in lower-case hexadecimal into `out`; the number of digits.
fn hex_len(n: usize, out: &mut [u8; 16]) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = ((usize::BITS - n.leading_zeros()).div_ceil(4)).max(1) as usize;
    for (i, slot) in out[..digits].iter_mut().enumerate() {
        *slot = DIGITS[(n >> (4 * (digits - 1 - i))) & 0xf];
    }
    digits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::BoxError;
    use http_body::Frame;
    use http_body_util::{BodyExt, Full, StreamBody};

    fn boxed_stream(frames: Vec<Frame<Bytes>>) -> ProxyBody {
        let s = futures_util::stream::iter(frames.into_iter().map(Ok::<_, BoxError>));
        StreamBody::new(s).boxed()
    }

    async fn write(
        client: Version,
        status: StatusCode,
        headers: HeaderMap,
        body: ProxyBody,
        head_req: bool,
    ) -> (String, Plan, Written) {
        let plan = plan(head_req, client, status, &headers, &body, true);
        let mut out = Vec::new();
        encode_head(&mut out, &headers, &plan, &body);
        let mut w = Writer::new(out, body, plan.encoding);
        let mut sink = Vec::new();
        let written = std::future::poll_fn(|cx| w.poll(&mut sink, cx))
            .await
            .unwrap();
        let text = String::from_utf8(sink).unwrap();
        // The date is the only varying part.
        let text = regex::Regex::new("date: [^\r]*\r\n")
            .unwrap()
            .replace(&text, "")
            .into_owned();
        (text, plan, written)
    }

    #[tokio::test]
    async fn a_known_length_becomes_content_length() {
        let body = Full::new(Bytes::from_static(b"hello"))
            .map_err(|n| match n {})
            .boxed();
        let (text, plan, w) = write(
            Version::HTTP_11,
            StatusCode::OK,
            HeaderMap::new(),
            body,
            false,
        )
        .await;
        assert_eq!(text, "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
        assert!(plan.keep_alive);
        assert_eq!(w, Written::Complete);
    }

    #[tokio::test]
    async fn an_unknown_length_is_chunked_with_trailers_or_close_delimited_for_http_1_0() {
        let frames = || {
            let mut t = HeaderMap::new();
            t.insert("x-sum", "9".parse().unwrap());
            vec![
                Frame::data(Bytes::from(vec![b'a'; 26])),
                Frame::data(Bytes::from_static(b"b")),
                Frame::trailers(t),
            ]
        };
        let (text, _, w) = write(
            Version::HTTP_11,
            StatusCode::OK,
            HeaderMap::new(),
            boxed_stream(frames()),
            false,
        )
        .await;
        let a = "a".repeat(26);
        assert_eq!(
            text,
            format!(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1a\r\n{a}\r\n1\r\nb\r\n0\r\nx-sum: 9\r\n\r\n"
            )
        );
        assert_eq!(w, Written::Complete);
        let (text, plan, _) = write(
            Version::HTTP_10,
            StatusCode::OK,
            HeaderMap::new(),
            boxed_stream(frames()),
            false,
        )
        .await;
        assert_eq!(
            text,
            format!("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{a}b")
        );
        assert!(!plan.keep_alive);
    }

    #[tokio::test]
    async fn bodiless_answers_send_no_body() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        let body = || {
            Full::new(Bytes::from_static(b"hello"))
                .map_err(|n| match n {})
                .boxed()
        };
        let (text, _, _) = write(Version::HTTP_11, StatusCode::OK, h.clone(), body(), true).await;
        assert_eq!(text, "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", "HEAD");
        let (text, _, _) = write(
            Version::HTTP_11,
            StatusCode::NO_CONTENT,
            h.clone(),
            body(),
            false,
        )
        .await;
        assert_eq!(text, "HTTP/1.1 204 No Content\r\n\r\n");
        let (text, _, _) =
            write(Version::HTTP_11, StatusCode::NOT_MODIFIED, h, body(), false).await;
        assert_eq!(
            text,
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn a_body_longer_or_shorter_than_its_length_is_cut() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "3".parse().unwrap());
        let long = boxed_stream(vec![Frame::data(Bytes::from_static(b"hello"))]);
        let (text, _, w) = write(Version::HTTP_11, StatusCode::OK, h.clone(), long, false).await;
        assert!(text.ends_with("\r\n\r\nhel"), "{text}");
        assert_eq!(w, Written::Cut);
        h.insert(header::CONTENT_LENGTH, "9".parse().unwrap());
        let short = boxed_stream(vec![Frame::data(Bytes::from_static(b"hello"))]);
        assert_eq!(
            write(Version::HTTP_11, StatusCode::OK, h, short, false)
                .await
                .2,
            Written::Cut
        );
    }

    #[tokio::test]
    async fn connection_close_and_http_1_0_keep_alive_are_said() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "close".parse().unwrap());
        let empty = || Full::new(Bytes::new()).map_err(|n| match n {}).boxed();
        let (text, plan, _) = write(Version::HTTP_11, StatusCode::OK, h, empty(), false).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        );
        assert!(!plan.keep_alive);
        let (text, plan, _) = write(
            Version::HTTP_10,
            StatusCode::OK,
            HeaderMap::new(),
            empty(),
            false,
        )
        .await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: keep-alive\r\n\r\n"
        );
        assert!(plan.keep_alive);
    }

    #[test]
    fn chunk_sizes_are_hex() {
        let mut b = [0u8; 16];
        for (n, s) in [
            (0usize, "0"),
            (1, "1"),
            (15, "f"),
            (16, "10"),
            (0x1a2b, "1a2b"),
            (usize::MAX, "ffffffffffffffff"),
        ] {
            let k = hex_len(n, &mut b);
            assert_eq!(std::str::from_utf8(&b[..k]).unwrap(), s);
        }
    }
}
