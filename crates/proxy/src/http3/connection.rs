//! One QUIC connection, served by its own task: its datagrams arrive from the endpoint over a
//! channel, its packets leave through the shared UDP socket, and its HTTP/3 requests run
//! through the same handler as HTTP/1.1 and HTTP/2 requests, polled here (not spawned), with
//! their bodies read from the streams only as the upstream side asks (the HTTP/1.1 server's
//! demand-driven channel), so QUIC's flow control slows a client whose upstream is slow.
//!
//! Every call into quiche while the handshake runs is made inside the connection's
//! `QuicHandshake`, so that the handshake's private-key operation goes to the offload layer
//! and wakes this task when it is done (see `sluice_tls::QuicHandshake`).

use super::message;
use crate::body::{BoxError, ProxyBody};
use crate::conn_state::ConnState;
use crate::exchange::ClientBody;
use crate::exchange::client_body::{BodySender, Demand, channel as body_channel};
use crate::listen::connection::Signals;
use crate::request::context::{ConnCtx, ListenerCtx};
use arc_swap::ArcSwap;
use bytes::{Buf, Bytes};
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::{Response, StatusCode};
use http_body::{Body, Frame};
use quiche::h3::{self, Header};
use sluice_tls::{QuicHandshake, TlsInfo};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

/// One UDP datagram for a connection.
#[derive(Debug)]
pub(crate) struct Datagram {
    pub(crate) data: Vec<u8>,
    pub(crate) from: SocketAddr,
}

/// What a connection's task starts from (made by the endpoint).
pub(crate) struct Setup {
    pub(crate) conn: quiche::Connection,
    pub(crate) handshake: QuicHandshake,
    /// Its place among the listener's handshakes in progress (for `quic_retry = "auto"`).
    pub(crate) half_open: HalfOpen,
    /// Its place under the listener's connection limits, given back when it ends.
    pub(crate) place: crate::listen::conn_limit::ConnSlot,
    pub(crate) datagrams: mpsc::Receiver<Datagram>,
    pub(crate) socket: Arc<UdpSocket>,
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) listener: Arc<ListenerCtx>,
    pub(crate) slot: Arc<ArcSwap<ListenerCtx>>,
    pub(crate) signals: Signals,
}

/// Counts a connection among the handshakes in progress until it is established or gone.
pub(crate) struct HalfOpen(Option<Arc<AtomicUsize>>);

impl HalfOpen {
    pub(crate) fn new(count: &Arc<AtomicUsize>) -> HalfOpen {
        count.fetch_add(1, Ordering::Relaxed);
        HalfOpen(Some(count.clone()))
    }

    /// The handshake finished.
    pub(crate) fn done(&mut self) {
        if let Some(c) = self.0.take() {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for HalfOpen {
    fn drop(&mut self) {
        self.done();
    }
}

/// HTTP/3 error codes (RFC 9114 §8.1).
const H3_NO_ERROR: u64 = 0x100;
const H3_GENERAL_PROTOCOL_ERROR: u64 = 0x101;
const H3_INTERNAL_ERROR: u64 = 0x102;
const H3_REQUEST_CANCELLED: u64 = 0x10c;

/// The most bytes of a request body read from a stream at once (one frame to the upstream).
const UPLOAD_CHUNK: usize = 16 * 1024;

/// The largest UDP payload sent (quiche's default maximum, safe on any path).
const MAX_DATAGRAM: usize = 1350;

type Handling = Pin<Box<dyn Future<Output = (u64, Response<ProxyBody>)> + Send>>;

/// A request stream's state on this side.
#[derive(Default)]
struct Stream {
    /// The request body on its way to the handler; `None` when it has none or it ended.
    upload: Option<BodySender>,
    /// quiche said the stream has body bytes to read, and they have not all been read.
    readable: bool,
    /// The client finished its side of the stream.
    finished: bool,
    /// The response head, when the stream had no room for it yet.
    head: Option<(Vec<Header>, bool)>,
    /// The response body being sent.
    body: Option<ProxyBody>,
    /// Bytes of the body the stream has not taken yet.
    pending: Bytes,
    /// The end of the body (with trailers, if any) is still to be written.
    end: Option<Option<Vec<Header>>>,
    /// The response has been written whole (or abandoned).
    responded: bool,
}

/// The buffer request bodies are read into, made when a stream first has body bytes: most
/// requests have none, and an idle connection should not hold 16 KiB for them.
fn upload_buf(buf: &mut Vec<u8>) -> &mut [u8] {
    if buf.is_empty() {
        buf.resize(UPLOAD_CHUNK, 0);
    }
    buf
}

/// Serves the connection to its end.
pub(crate) async fn serve(setup: Setup) {
    let Setup {
        conn,
        handshake,
        half_open,
        place: _place,
        datagrams,
        socket,
        local,
        peer,
        listener,
        slot,
        signals,
    } = setup;
    let deadline = Instant::now() + listener.config.header_read_timeout;
    let _open = listener.metrics.quic_opened();
    let mut driver = Driver {
        conn,
        h3: None,
        handshake,
        half_open,
        datagrams,
        socket,
        local,
        peer,
        listener,
        slot,
        signals: signals.clone(),
        ctx: None,
        timer: Box::pin(tokio::time::sleep_until(deadline)),
        handshake_deadline: deadline,
        requests: FuturesUnordered::new(),
        streams: HashMap::new(),
        out: vec![0; MAX_DATAGRAM],
        unsent: None,
        upload_buf: Vec::new(),
        goaway: false,
        highest_stream: None,
        unacked: Vec::new(),
    };
    let mut draining = signals.draining.clone();
    loop {
        tokio::select! {
            () = std::future::poll_fn(|cx| driver.poll(cx)) => break,
            () = signals.force.cancelled() => {
                driver.close(H3_NO_ERROR);
                break;
            }
            changed = draining.changed(), if !driver.goaway => {
                if changed.is_err() || *draining.borrow() {
                    driver.start_goaway();
                }
            }
        }
    }
}

struct Driver {
    conn: quiche::Connection,
    h3: Option<h3::Connection>,
    handshake: QuicHandshake,
    half_open: HalfOpen,
    datagrams: mpsc::Receiver<Datagram>,
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    peer: SocketAddr,
    listener: Arc<ListenerCtx>,
    slot: Arc<ArcSwap<ListenerCtx>>,
    signals: Signals,
    /// The connection as requests see it, once the handshake is done.
    ctx: Option<Arc<ConnCtx>>,
    timer: Pin<Box<Sleep>>,
    handshake_deadline: Instant,
    requests: FuturesUnordered<Handling>,
    streams: HashMap<u64, Stream>,
    out: Vec<u8>,
    /// A packet quiche produced that the socket had no room for yet: (length, destination).
    unsent: Option<(usize, SocketAddr)>,
    upload_buf: Vec<u8>,
    /// A GOAWAY was sent: no new requests; the connection closes when the last one ends.
    goaway: bool,
    highest_stream: Option<u64>,
    /// Streams answered whose last bytes the client may not have acknowledged yet: a close
    /// before they are would discard them (quiche sends nothing but the close after it).
    unacked: Vec<u64>,
}

impl Driver {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.ctx.is_none() {
            self.handshake.record(cx);
        }
        self.receive(cx);
        if self.timer.as_mut().poll(cx).is_ready() {
            self.conn.on_timeout();
            if self.ctx.is_none()
                && !self.conn.is_established()
                && Instant::now() >= self.handshake_deadline
            {
                tracing::debug!(peer = %self.peer, "QUIC handshake not finished in time");
                self.listener.metrics.handshake_failed();
                self.listener.handshakes.expired();
                self.close(0x1);
            }
        }
        if self.h3.is_none() && self.conn.is_established() {
            self.established();
        }
        // Events, request bodies and responses feed each other (a body read to its end lets
        // quiche report the stream finished; a finished response frees the stream): go round
        // until nothing moves.
        for _ in 0..16 {
            let mut moved = self.events();
            moved |= self.uploads(cx);
            moved |= self.handlers(cx);
            moved |= self.responses(cx);
            if !moved {
                break;
            }
        }
        if self.goaway || self.unacked.len() > 64 {
            // quiche collects a stream once both sides have ended it and every byte sent on
            // it is acknowledged; then asking for its capacity says it is unknown.
            let conn = &mut self.conn;
            self.unacked.retain(|&id| {
                !matches!(
                    conn.stream_capacity(id),
                    Err(quiche::Error::InvalidStreamState(_))
                )
            });
        }
        if self.goaway
            && self.streams.is_empty()
            && self.requests.is_empty()
            && self.unacked.is_empty()
        {
            self.close(H3_NO_ERROR);
        }
        self.flush(cx);
        self.arm_timer(cx);
        if self.conn.is_closed() {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Feeds quiche the datagrams that arrived.
    fn receive(&mut self, cx: &mut Context<'_>) {
        // A bounded batch, so that a busy connection leaves room for its own sending.
        for _ in 0..64 {
            match self.datagrams.poll_recv(cx) {
                Poll::Ready(Some(mut d)) => {
                    let info = quiche::RecvInfo {
                        from: d.from,
                        to: self.local,
                    };
                    let conn = &mut self.conn;
                    if let Err(e) = self.handshake.enter(|| conn.recv(&mut d.data, info)) {
                        tracing::debug!(peer = %self.peer, error = %e, "QUIC packet refused");
                    }
                }
                Poll::Ready(None) => {
                    // The endpoint is gone (its listener was removed): finish now.
                    self.close(H3_NO_ERROR);
                    return;
                }
                Poll::Pending => return,
            }
        }
        cx.waker().wake_by_ref();
    }

    /// The handshake finished: HTTP/3 starts.
    fn established(&mut self) {
        self.handshake.done();
        self.half_open.done();
        let resumed = self.conn.is_resumed();
        self.listener.metrics.quic_handshake(resumed);
        let mut config = match h3::Config::new() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "HTTP/3 settings");
                self.close(H3_INTERNAL_ERROR);
                return;
            }
        };
        config.set_max_field_section_size(self.listener.config.max_header_bytes as u64);
        match h3::Connection::with_transport(&mut self.conn, &config) {
            Ok(h3) => self.h3 = Some(h3),
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "HTTP/3 could not start");
                self.close(H3_INTERNAL_ERROR);
                return;
            }
        }
        let state = Arc::new(ConnState::new());
        self.ctx = Some(Arc::new(ConnCtx {
            listener: self.listener.clone(),
            slot: self.slot.clone(),
            peer: self.peer,
            peer_ip: crate::text::ip_value(self.peer.ip()),
            local: self.local,
            tls: Some(TlsInfo {
                version: "TLSv1.3",
                cipher: "",
                resumed,
                sni: self.conn.server_name().map(str::to_owned),
                h2: false,
                handshake: None,
                isolated: false,
                key_operation: None,
                // HTTP/3 listeners do not ask for client certificates (refused at load).
                client_cert: None,
            }),
            state,
            signals: self.signals.clone(),
        }));
    }

    /// HTTP/3 events: new requests, body bytes, ends and resets. Whether anything happened.
    fn events(&mut self) -> bool {
        let mut moved = false;
        while let Some(h3) = self.h3.as_mut() {
            match h3.poll(&mut self.conn) {
                Ok((id, h3::Event::Headers { list, more_frames })) => {
                    moved = true;
                    self.request(id, &list, more_frames);
                }
                Ok((id, h3::Event::Data)) => {
                    moved = true;
                    match self.streams.get_mut(&id) {
                        Some(s) if s.upload.is_some() => s.readable = true,
                        // Nobody wants these bytes (the handler answered already).
                        _ => {
                            let buf = upload_buf(&mut self.upload_buf);
                            while h3.recv_body(&mut self.conn, id, buf).is_ok() {}
                        }
                    }
                }
                Ok((id, h3::Event::Finished)) => {
                    moved = true;
                    if let Some(s) = self.streams.get_mut(&id) {
                        s.finished = true;
                    }
                }
                Ok((id, h3::Event::Reset(code))) => {
                    moved = true;
                    if let Some(tx) = self.streams.remove(&id).and_then(|mut s| s.upload.take()) {
                        let why = format!("the client reset the stream (code {code:#x})");
                        tx.send(Some(Err(why.into())));
                    }
                    let _ = self.conn.stream_shutdown(
                        id,
                        quiche::Shutdown::Write,
                        H3_REQUEST_CANCELLED,
                    );
                }
                Ok((_, h3::Event::PriorityUpdate | h3::Event::GoAway)) => {}
                Err(h3::Error::Done) => break,
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "HTTP/3 connection error");
                    self.close(H3_GENERAL_PROTOCOL_ERROR);
                    break;
                }
            }
        }
        moved
    }

    /// A request's header section arrived on stream `id`.
    fn request(&mut self, id: u64, list: &[Header], more_frames: bool) {
        let Some(ctx) = self.ctx.clone() else {
            return;
        };
        if self.goaway {
            // After GOAWAY a new request is refused unprocessed (RFC 9114 §5.2).
            let _ = self
                .conn
                .stream_shutdown(id, quiche::Shutdown::Write, 0x10b); // H3_REQUEST_REJECTED
            let _ = self.conn.stream_shutdown(id, quiche::Shutdown::Read, 0x10b);
            return;
        }
        self.highest_stream = Some(self.highest_stream.map_or(id, |h| h.max(id)));
        let mut stream = Stream::default();
        let body = if more_frames {
            let length = list
                .iter()
                .find(|h| quiche::h3::NameValue::name(*h) == b"content-length")
                .and_then(|h| std::str::from_utf8(quiche::h3::NameValue::value(h)).ok())
                .and_then(|v| v.parse().ok());
            let (tx, rx) = body_channel(length);
            stream.upload = Some(tx);
            ClientBody::Http1(rx)
        } else {
            stream.finished = true;
            ClientBody::Empty
        };
        match message::request(list, body) {
            Ok(req) => {
                self.requests.push(Box::pin(async move {
                    let Ok(resp) = crate::request::handler::handle(ctx, req).await;
                    (id, resp)
                }));
            }
            Err(message::Malformed(why)) => {
                tracing::debug!(peer = %self.peer, why, "malformed HTTP/3 request");
                stream.upload = None;
                let head = vec![
                    Header::new(b":status", StatusCode::BAD_REQUEST.as_str().as_bytes()),
                    Header::new(b"content-type", b"text/plain; charset=utf-8"),
                ];
                stream.head = Some((head, false));
                stream.pending = Bytes::from(format!("bad request: {why}\n"));
                stream.end = Some(None);
            }
        }
        self.streams.insert(id, stream);
    }

    /// Request bodies: read from the streams whose consumer asked for more. Whether any moved.
    fn uploads(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(h3) = self.h3.as_mut() else {
            return false;
        };
        let mut moved = false;
        for (&id, s) in &mut self.streams {
            while let Some(tx) = s.upload.as_ref() {
                match tx.demand(cx) {
                    Demand::Wait => break,
                    Demand::Gone => {
                        // The handler answered without the rest: stop the client sending it.
                        s.upload = None;
                        let _ = self
                            .conn
                            .stream_shutdown(id, quiche::Shutdown::Read, H3_NO_ERROR);
                        moved = true;
                    }
                    Demand::Frame if s.readable => {
                        let buf = upload_buf(&mut self.upload_buf);
                        match h3.recv_body(&mut self.conn, id, buf) {
                            Ok(n) => {
                                moved = true;
                                tx.send(Some(Ok(Frame::data(Bytes::copy_from_slice(&buf[..n])))));
                            }
                            Err(h3::Error::Done) => s.readable = false,
                            Err(e) => {
                                moved = true;
                                tx.send(Some(Err(Box::new(e) as BoxError)));
                                s.upload = None;
                            }
                        }
                    }
                    Demand::Frame if s.finished => {
                        moved = true;
                        tx.send(None);
                        s.upload = None;
                    }
                    Demand::Frame => break,
                }
            }
        }
        moved
    }

    /// Handlers that finished: their response heads go out. Whether any did.
    fn handlers(&mut self, cx: &mut Context<'_>) -> bool {
        let mut moved = false;
        while let Poll::Ready(Some((id, resp))) = self.requests.poll_next_unpin(cx) {
            moved = true;
            let Some(s) = self.streams.get_mut(&id) else {
                continue; // reset meanwhile
            };
            let head = message::response_head(resp.status(), resp.headers());
            let body = resp.into_body();
            let empty = body.is_end_stream();
            s.head = Some((head, empty));
            if empty {
                s.responded = true;
            } else {
                s.body = Some(body);
            }
        }
        moved
    }

    /// Response heads and bodies, as far as the streams take them. Whether any moved.
    fn responses(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(h3) = self.h3.as_mut() else {
            return false;
        };
        let mut moved = false;
        let mut finished = Vec::new();
        for (&id, s) in &mut self.streams {
            let mut out = Out {
                h3: &mut *h3,
                conn: &mut self.conn,
                id,
            };
            match out.head(s) {
                Sent::Moved => moved = true,
                Sent::Nothing => {}
                Sent::Blocked => continue,
                Sent::Failed => {
                    finished.push(id);
                    continue;
                }
            }
            moved |= out.body(s, cx);
            if s.responded && s.head.is_none() {
                if s.upload.is_some() {
                    // Answered before the body was read: the rest is not wanted.
                    let _ = self
                        .conn
                        .stream_shutdown(id, quiche::Shutdown::Read, H3_NO_ERROR);
                }
                finished.push(id);
            }
        }
        for id in finished {
            self.streams.remove(&id);
            self.unacked.push(id);
        }
        if self.streams.is_empty() && !self.upload_buf.is_empty() {
            // An idle connection holds no read buffer (NGINX frees its buffers the same way).
            self.upload_buf = Vec::new();
        }
        moved
    }

    /// Sends what quiche has to send.
    fn flush(&mut self, cx: &mut Context<'_>) {
        loop {
            if let Some((len, to)) = self.unsent {
                match self.socket.poll_send_to(cx, &self.out[..len], to) {
                    Poll::Ready(Ok(_)) => self.unsent = None,
                    Poll::Ready(Err(e)) => {
                        // Lost like any datagram; QUIC's recovery sends it again.
                        tracing::debug!(error = %e, "sending a QUIC packet");
                        self.unsent = None;
                    }
                    Poll::Pending => return,
                }
            }
            let (conn, out) = (&mut self.conn, &mut self.out);
            match self.handshake.enter(|| conn.send(out)) {
                Ok((len, info)) => self.unsent = Some((len, info.to)),
                Err(quiche::Error::Done) => return,
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "QUIC send failed");
                    let _ = self.conn.close(false, 0x1, b"");
                    return;
                }
            }
        }
    }

    fn arm_timer(&mut self, cx: &mut Context<'_>) {
        let mut at = match self.conn.timeout() {
            Some(t) => Instant::now() + t,
            None => Instant::now() + Duration::from_secs(3600),
        };
        if self.ctx.is_none() {
            at = at.min(self.handshake_deadline);
        }
        self.timer.as_mut().reset(at);
        if self.timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }

    /// Asks the client to open no more requests; those in flight finish.
    fn start_goaway(&mut self) {
        self.goaway = true;
        if let Some(h3) = self.h3.as_mut() {
            let next = self.highest_stream.map_or(0, |h| h + 4);
            let _ = h3.send_goaway(&mut self.conn, next);
        } else {
            self.close(H3_NO_ERROR);
        }
    }

    fn close(&mut self, code: u64) {
        let app = self.h3.is_some();
        let _ = self.conn.close(app, code, b"");
    }
}

/// What sending a response's head did.
enum Sent {
    Moved,
    /// No head waiting (sent before).
    Nothing,
    /// The stream cannot take it yet: kept for the next round.
    Blocked,
    /// The stream is gone: it is finished.
    Failed,
}

/// One stream's response going out (`Driver::responses`).
struct Out<'a> {
    h3: &'a mut h3::Connection,
    conn: &'a mut quiche::Connection,
    id: u64,
}

impl Out<'_> {
    /// The response's head, if one waits.
    fn head(&mut self, s: &mut Stream) -> Sent {
        let Some((head, fin)) = s.head.take() else {
            return Sent::Nothing;
        };
        match self.h3.send_response(self.conn, self.id, &head, fin) {
            Ok(()) => Sent::Moved,
            Err(h3::Error::StreamBlocked | h3::Error::Done) => {
                s.head = Some((head, fin));
                Sent::Blocked
            }
            Err(e) => {
                tracing::debug!(error = %e, "sending an HTTP/3 response head");
                Sent::Failed
            }
        }
    }

    /// The response's body and its end (trailers, or an empty final frame), as far as the
    /// stream takes them and the body has frames ready. Whether any moved.
    fn body(&mut self, s: &mut Stream, cx: &mut Context<'_>) -> bool {
        let mut moved = false;
        loop {
            if !s.pending.is_empty() {
                match self.h3.send_body(self.conn, self.id, &s.pending, false) {
                    Ok(n) => {
                        moved |= n > 0;
                        s.pending.advance(n);
                        if !s.pending.is_empty() {
                            return moved;
                        }
                    }
                    Err(h3::Error::Done) => return moved,
                    Err(e) => {
                        tracing::debug!(error = %e, "sending an HTTP/3 response body");
                        s.body = None;
                        s.end = None;
                        s.responded = true;
                        return moved;
                    }
                }
            }
            if let Some(trailers) = s.end.take() {
                return self.end(s, trailers) || moved;
            }
            let Some(body) = s.body.as_mut() else {
                return moved;
            };
            match Pin::new(body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    moved = true;
                    match frame.into_data() {
                        Ok(data) => s.pending = data,
                        Err(frame) => {
                            if let Ok(t) = frame.into_trailers() {
                                s.body = None;
                                s.end = Some(Some(message::fields(&t)));
                            }
                        }
                    }
                }
                Poll::Ready(None) => {
                    moved = true;
                    s.body = None;
                    s.end = Some(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    // The upstream failed mid-body: the client must not take a truncated
                    // body for a whole one.
                    tracing::debug!(error = %e, "response body failed; resetting the stream");
                    let _ = self.conn.stream_shutdown(
                        self.id,
                        quiche::Shutdown::Write,
                        H3_INTERNAL_ERROR,
                    );
                    s.body = None;
                    s.responded = true;
                    return moved;
                }
                Poll::Pending => return moved,
            }
        }
    }

    /// The stream's end: its trailers, or an empty final DATA frame. Whether it went.
    fn end(&mut self, s: &mut Stream, trailers: Option<Vec<Header>>) -> bool {
        let sent = match &trailers {
            Some(t) => self
                .h3
                .send_additional_headers(self.conn, self.id, t, true, true),
            None => self.h3.send_body(self.conn, self.id, b"", true).map(|_| ()),
        };
        match sent {
            Ok(()) => {
                s.responded = true;
                true
            }
            Err(h3::Error::Done | h3::Error::StreamBlocked) => {
                s.end = Some(trailers);
                false
            }
            Err(_) => {
                s.responded = true;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_open_counts_until_done_or_dropped() {
        let n = Arc::new(AtomicUsize::new(0));
        let mut a = HalfOpen::new(&n);
        let b = HalfOpen::new(&n);
        assert_eq!(n.load(Ordering::Relaxed), 2);
        a.done();
        a.done();
        assert_eq!(n.load(Ordering::Relaxed), 1, "done once only");
        drop(b);
        drop(a);
        assert_eq!(n.load(Ordering::Relaxed), 0);
    }
}
