//! One HTTP/1.1 client connection, served by its own task: read a head, run the request,
//! write the response, and again while the connection is kept alive.
//!
//! Everything happens on the connection's task: the request's handler future is polled
//! here, not spawned, and the request body is read here only when the upstream side asks for
//! it. Requests are answered in order; a pipelined request's bytes wait in the read buffer
//! until the response before it is written. Between requests the connection holds no buffer
//! (see `buffers`).

use super::buffers::{self, poll_read};
use super::decode::{Decoded, Decoder, check_chunked};
use super::head::{self, Framing, Parsed, Reject};
use super::response::{self, Writer, Written};
use super::upgrade::{Io, OnUpgrade, Upgraded};
use crate::body::{BadRequestBody, BoxError};
use crate::exchange::client_body::{self, BodySender, Demand};
use crate::exchange::{ClientBody, Service};
use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body::Frame;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use tokio::io::AsyncWriteExt;

/// Asks a connection to finish: at once when idle, else after the response in flight (sent
/// with `Connection: close`).
///
/// One waiter (the connection's read loop), so an `AtomicWaker`, not a `Notify`: the loop
/// polls this each time its read is pending, and a `Notify` waiter takes a mutex on every
/// poll (see `listen::wake_gate`).
#[derive(Debug, Default)]
pub(crate) struct Shutdown {
    requested: AtomicBool,
    waker: futures_util::task::AtomicWaker,
}

impl Shutdown {
    pub(crate) fn request(&self) {
        self.requested.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        std::future::poll_fn(|cx| {
            // Registered before the check: a request between the two still wakes us.
            self.waker.register(cx.waker());
            if self.requested() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// The connection's future (boxed by the caller) and its shutdown handle.
pub(crate) fn serve<S: Io + 'static, C: Service>(
    io: S,
    ctx: Arc<C>,
) -> (
    impl Future<Output = Result<(), BoxError>> + Send,
    Arc<Shutdown>,
) {
    let shutdown = Arc::new(Shutdown::default());
    let conn = Conn {
        io,
        rbuf: None,
        max_head: ctx.max_head(),
        max_fields: ctx.max_fields(),
        shutdown: shutdown.clone(),
    };
    (conn.run(ctx), shutdown)
}

struct Conn<S> {
    io: S,
    /// Bytes read and not yet parsed; `None` while idle.
    rbuf: Option<BytesMut>,
    max_head: usize,
    /// `max_header_fields`.
    max_fields: usize,
    shutdown: Arc<Shutdown>,
}

/// What a connection does after a response.
enum Next {
    KeepAlive,
    Close,
    /// Switched protocols: the stream goes to the request's tunnel.
    Upgrade(tokio::sync::oneshot::Sender<Upgraded>),
}

/// How a request body's reading ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyEnd {
    /// Read to its end: the next request's bytes follow.
    Read,
    /// The consumer went away first; the rest may still be in the socket.
    Abandoned,
    /// Malformed, or the client left: the connection cannot carry another request.
    Broken,
}

/// Reads a request body from the connection on the consumer's demand.
struct Pump {
    tx: BodySender,
    decoder: Decoder,
    /// `Expect: 100-continue` and no `100 Continue` written yet.
    expect_continue: bool,
    continue_written: usize,
    end: Option<BodyEnd>,
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

impl Pump {
    /// A body channel for a request with `length` (if known), and the pump that fills it.
    fn start(
        length: Option<u64>,
        decoder: Decoder,
        expect_continue: bool,
    ) -> (Option<Pump>, ClientBody) {
        let (tx, rx) = client_body::channel(length);
        let pump = Pump {
            tx,
            decoder,
            expect_continue,
            continue_written: 0,
            end: None,
        };
        (Some(pump), ClientBody::Http1(rx))
    }

    /// Delivers frames while they are wanted; `Ready` once the body has ended either way.
    /// `may_continue`: no response has started, so `100 Continue` may still be written.
    fn poll<S: Io>(
        &mut self,
        io: &mut S,
        rbuf: &mut Option<BytesMut>,
        may_continue: bool,
        cx: &mut Context<'_>,
    ) -> Poll<BodyEnd> {
        if let Some(end) = self.end {
            return Poll::Ready(end);
        }
        let end = ready!(self.poll_inner(io, rbuf, may_continue, cx));
        self.end = Some(end);
        Poll::Ready(end)
    }

    fn poll_inner<S: Io>(
        &mut self,
        io: &mut S,
        rbuf: &mut Option<BytesMut>,
        may_continue: bool,
        cx: &mut Context<'_>,
    ) -> Poll<BodyEnd> {
        loop {
            match self.tx.demand(cx) {
                Demand::Gone => return Poll::Ready(BodyEnd::Abandoned),
                Demand::Wait => return Poll::Pending,
                Demand::Frame => {}
            }
            let buf = rbuf.get_or_insert_with(buffers::take);
            if self.expect_continue && buf.is_empty() && may_continue {
                // The client waits for this before it sends the body (RFC 9110 §10.1.1).
                while self.continue_written < CONTINUE.len() {
                    match Pin::new(&mut *io).poll_write(cx, &CONTINUE[self.continue_written..]) {
                        Poll::Ready(Ok(n)) if n > 0 => self.continue_written += n,
                        Poll::Ready(_) => return self.fail(io_error("writing 100 Continue")),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                match Pin::new(&mut *io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return self.fail(Box::new(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            self.expect_continue = false;
            match self.decoder.decode(buf) {
                Ok(Decoded::Data(data)) => {
                    self.tx.send(Some(Ok(Frame::data(data))));
                    if self.decoder.is_done() {
                        self.tx.send(None);
                        return Poll::Ready(BodyEnd::Read);
                    }
                }
                Ok(Decoded::Trailers(t)) => {
                    self.tx.send(Some(Ok(Frame::trailers(t))));
                    self.tx.send(None);
                    return Poll::Ready(BodyEnd::Read);
                }
                Ok(Decoded::End) => {
                    self.tx.send(None);
                    return Poll::Ready(BodyEnd::Read);
                }
                Ok(Decoded::NeedMore) => match poll_read(io, buf, cx) {
                    Poll::Ready(Ok(0)) => {
                        return self.fail(io_error("the client closed before the body ended"));
                    }
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(e)) => return self.fail(Box::new(e)),
                    Poll::Pending => return Poll::Pending,
                },
                Err(bad) => {
                    tracing::debug!(error = %bad, "malformed request body");
                    return self.fail(Box::new(BadRequestBody(bad.to_string())));
                }
            }
        }
    }

    fn fail(&mut self, e: BoxError) -> Poll<BodyEnd> {
        self.tx.send(Some(Err(e)));
        Poll::Ready(BodyEnd::Broken)
    }

    /// After the response: whether the body was read to its end (what is buffered of it
    /// drained now).
    fn read_whole(&mut self, rbuf: &mut Option<BytesMut>) -> bool {
        match self.end {
            Some(BodyEnd::Read) => true,
            Some(BodyEnd::Broken) => false,
            _ => self.drain_buffered(rbuf),
        }
    }

    /// After the response: reads what is already buffered of the rest of the body, so a small
    /// body nobody read does not cost the connection. Whether the body's end was reached.
    fn drain_buffered(&mut self, rbuf: &mut Option<BytesMut>) -> bool {
        let Some(buf) = rbuf.as_mut() else {
            return false;
        };
        loop {
            match self.decoder.decode(buf) {
                Ok(Decoded::Data(_) | Decoded::Trailers(_)) => {
                    if self.decoder.is_done() {
                        return true;
                    }
                }
                Ok(Decoded::End) => return true,
                Ok(Decoded::NeedMore) | Err(_) => return false,
            }
        }
    }
}

fn io_error(what: &'static str) -> BoxError {
    Box::new(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, what))
}

impl<S: Io + 'static> Conn<S> {
    async fn run<C: Service>(mut self, ctx: Arc<C>) -> Result<(), BoxError> {
        loop {
            let head = match self.read_head().await {
                Ok(Some(head)) => head,
                Ok(None) => return Ok(()),
                Err(reject) => {
                    ctx.refused(reject.status, self.request_line());
                    self.refuse(reject).await;
                    return Ok(());
                }
            };
            match self.exchange(&ctx, *head).await? {
                Next::KeepAlive => {}
                Next::Close => {
                    let _ = self.io.shutdown().await;
                    return Ok(());
                }
                Next::Upgrade(tx) => {
                    let read_ahead = self.rbuf.take().map_or_else(Bytes::new, BytesMut::freeze);
                    let _ = tx.send(Upgraded {
                        io: Box::new(self.io),
                        read_ahead,
                    });
                    return Ok(());
                }
            }
            // Idle again: nothing buffered means no buffer held.
            if self.rbuf.as_ref().is_some_and(BytesMut::is_empty)
                && let Some(buf) = self.rbuf.take()
            {
                buffers::give(buf);
            }
        }
    }

    /// The next request head; `None` when the client closed (or the connection was asked to
    /// finish) between requests.
    async fn read_head(&mut self) -> Result<Option<Box<head::Head>>, Reject> {
        // How far the buffer was searched for the head's end: a head that arrives a byte at a
        // time is scanned once, not parsed again from its start on every read.
        let mut scanned = 0;
        loop {
            if let Some(buf) = self.rbuf.as_mut().filter(|b| !b.is_empty()) {
                // The first try parses at once (a head usually arrives whole).
                let ended = scanned == 0 || head::has_end(buf, scanned);
                scanned = buf.len();
                if ended || buf.len() >= self.max_head {
                    match head::parse(buf, self.max_head, self.max_fields)? {
                        Parsed::Head(head) => return Ok(Some(head)),
                        Parsed::Partial => {}
                    }
                }
            }
            let idle = self.rbuf.as_ref().is_none_or(BytesMut::is_empty);
            if idle && self.shutdown.requested() {
                return Ok(None);
            }
            let (io, rbuf, shutdown) = (&mut self.io, &mut self.rbuf, &*self.shutdown);
            let read = poll_fn(|cx| {
                let buf = rbuf.get_or_insert_with(buffers::take);
                let polled = poll_read(io, buf, cx);
                if polled.is_pending() && buf.is_empty() {
                    // Waiting for a request that has not begun: hold no buffer meanwhile.
                    if let Some(b) = rbuf.take() {
                        buffers::give(b);
                    }
                }
                polled
            });
            let n = tokio::select! {
                biased;
                r = read => r,
                () = shutdown.wait(), if idle => return Ok(None),
            };
            match n {
                Ok(0) | Err(_) => return Ok(None),
                Ok(_) => {}
            }
        }
    }

    /// The first line of what was read (the head refused), at most 512 bytes of it.
    fn request_line(&self) -> &[u8] {
        let buf = self.rbuf.as_deref().unwrap_or_default();
        head::first_line(&buf[..buf.len().min(512)])
    }

    /// Answers a head that was refused, then the connection closes.
    async fn refuse(&mut self, reject: Reject) {
        tracing::debug!(
            status = reject.status.as_u16(),
            reason = reject.reason,
            "request head refused"
        );
        let body = format!("{}\n", reject.reason);
        let mut out = Vec::with_capacity(160 + body.len());
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(reject.status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(reject.status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(
            b"\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: ",
        );
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(body.as_bytes());
        let _ = self.io.write_all(&out).await;
        let _ = self.io.flush().await;
        let _ = self.io.shutdown().await;
    }

    /// Writes a response with `writer` while the request's body (`pump`) may still stream in
    /// (full duplex).
    async fn write(
        &mut self,
        pump: &mut Option<Pump>,
        mut writer: Writer,
    ) -> std::io::Result<Written> {
        let (io, rbuf) = (&mut self.io, &mut self.rbuf);
        poll_fn(|cx| {
            if let Some(p) = pump.as_mut() {
                let _ = p.poll(io, rbuf, false, cx);
            }
            writer.poll(io, cx)
        })
        .await
    }

    /// One request and its response; what the connection does next.
    async fn exchange<C: Service>(
        &mut self,
        ctx: &Arc<C>,
        head: head::Head,
    ) -> Result<Next, BoxError> {
        let head::Head {
            request,
            framing,
            keep_alive,
            expect_continue,
            upgrade,
        } = head;
        let (parts, ()) = request.into_parts();
        if framing == Framing::Chunked
            && let Some(buf) = self.rbuf.as_ref().filter(|b| !b.is_empty())
            && let Err(bad) = check_chunked(buf, self.max_head)
        {
            let line = format!("{} {} HTTP/1.1", parts.method, parts.uri);
            ctx.refused(StatusCode::BAD_REQUEST, line.as_bytes());
            self.refuse(Reject {
                status: StatusCode::BAD_REQUEST,
                reason: bad.0,
            })
            .await;
            return Ok(Next::Close);
        }
        let method_head = parts.method == Method::HEAD;
        let version = parts.version;
        // Requests without a body (most) create no channel and no pump.
        let (mut pump, body) = match framing {
            Framing::None => (None, ClientBody::Empty),
            Framing::Length(n) => Pump::start(Some(n), Decoder::length(n), expect_continue),
            Framing::Chunked => Pump::start(None, Decoder::chunked(self.max_head), expect_continue),
        };
        let mut req = Request::from_parts(parts, body);
        let upgrade_tx = upgrade.then(|| OnUpgrade::offer(&mut req));

        // The handler runs here; the body is read as the upstream side asks for it. Boxed
        // per request (it is several KiB): an idle connection's future stays small.
        let resp = {
            let mut fut = ctx.clone().call(req);
            let (io, rbuf) = (&mut self.io, &mut self.rbuf);
            poll_fn(|cx| {
                if let Some(p) = pump.as_mut() {
                    let _ = p.poll(io, rbuf, true, cx);
                }
                fut.as_mut().poll(cx)
            })
            .await
        };
        let Ok(resp) = resp;
        let (rparts, rbody) = resp.into_parts();
        let status = rparts.status;
        let keep = keep_alive && !self.shutdown.requested();
        let plan = response::plan(method_head, version, status, &rparts.headers, &rbody, keep);
        let mut out = Vec::with_capacity(512);
        response::encode_head(&mut out, &rparts.headers, &plan, &rbody);
        drop(rparts);

        if status == StatusCode::SWITCHING_PROTOCOLS {
            let mut writer = Writer::new(out, rbody, response::Encoding::Empty);
            poll_fn(|cx| writer.poll(&mut self.io, cx)).await?;
            // A 101 the client did not ask for: nothing can follow it.
            return Ok(upgrade_tx.map_or(Next::Close, Next::Upgrade));
        }
        drop(upgrade_tx);

        let written = self
            .write(&mut pump, Writer::new(out, rbody, plan.encoding))
            .await?;
        let body_read = pump.as_mut().is_none_or(|p| p.read_whole(&mut self.rbuf));
        Ok(
            if plan.keep_alive && written == Written::Complete && body_read {
                Next::KeepAlive
            } else {
                Next::Close
            },
        )
    }
}
