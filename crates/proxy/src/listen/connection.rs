//! Serving one client connection: TLS handshake, HTTP/1.1 or HTTP/2 by ALPN, and the
//! connection's timers (request head deadline, keep-alive idle, graceful shutdown).

use crate::conn_state::{ConnState, Timeout};
use crate::listen::h2_streams::StreamSet;
use crate::listen::wake_gate::WakeGate;
use crate::request::context::{ConnCtx, ListenerCtx};
use arc_swap::ArcSwap;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioIo, TokioTimer};
use sluice_tls::TlsInfo;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long a draining gateway waits for the next request on an idle connection before it
/// closes it (bounded by `header_read_timeout`). See `run`.
const DRAIN_IDLE_GRACE: Duration = Duration::from_secs(1);

/// Bytes gathered before a TLS write: one full-size TLS record.
const TLS_WRITE_BUFFER: usize = 16 * 1024;

/// Wraps the client stream to notice when a new request head starts arriving.
struct Watched<S> {
    inner: S,
    state: Arc<ConnState>,
    http1: bool,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.http1 && buf.filled().len() > before {
            self.state.bytes_read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A cleartext client socket that reads what the client already sent before it closes, so the
/// close is a FIN and not a reset (NGINX's lingering close, without the waiting): a socket
/// closed with unread bytes sends RST, which can destroy a response still in the client's
/// receive path (e.g. after an invalid HTTP/2 preface, or a pipelined request on a closing
/// HTTP/1.1 connection). Bounded and non-blocking: at most 8 reads of what is already there.
struct Lingering(TcpStream);

impl Drop for Lingering {
    fn drop(&mut self) {
        let mut buf = [0u8; 1024];
        for _ in 0..8 {
            match self.0.try_read(&mut buf) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

pub(crate) use crate::signals::Signals;

/// Serves one accepted connection to the end.
///
/// `listener` is the listener's context when the connection was accepted (its TLS acceptor and
/// timers); `slot` holds the listener's current context, which each request reads, so that a
/// reload reaches requests on connections opened before it.
pub(crate) async fn serve(
    listener: Arc<ListenerCtx>,
    slot: Arc<ArcSwap<ListenerCtx>>,
    tcp: TcpStream,
    at: crate::addresses::Addresses,
    signals: Signals,
    permit: Option<crate::handshakes::HandshakePermit>,
) {
    let peer = at.client;
    let _ = tcp.set_nodelay(true);
    let state = Arc::new(ConnState::new());
    let cfg = &listener.config;
    if let Some(acceptor) = &listener.tls {
        let Some((stream, info)) =
            handshake(&listener, acceptor, tcp, peer, &signals, permit).await
        else {
            return;
        };
        let h2 = info.h2;
        // Coalesce hyper's writes (HTTP/2 writes a frame header and its data separately) so
        // that one flush becomes one TLS record and one send(2), not several.
        // Reads that would only wait ask the socket, not BoringSSL (one per request).
        let stream = sluice_tls::QuietReads::new(stream);
        let stream = crate::listen::coalesce::Coalescing::new(stream, TLS_WRITE_BUFFER);
        let stream = if h2 { stream.defer_flushes() } else { stream };
        let io = Watched {
            inner: stream,
            state: state.clone(),
            http1: !h2,
        };
        let ctx = Arc::new(ConnCtx {
            listener: listener.clone(),
            slot,
            peer,
            peer_ip: crate::text::ip_value(peer.ip()),
            local: at.local,
            tls: Some(info),
            state: state.clone(),
            signals: signals.clone(),
        });
        // ALPN decided the protocol: an h2 connection that then sends an HTTP/1.1 request is
        // a connection error (RFC 9113 §3.4), not a request.
        let proto = if h2 { Proto::Http2 } else { Proto::Http1 };
        run(proto, io, ctx, signals).await;
    } else {
        // Cleartext: HTTP/1.1, or HTTP/2 with prior knowledge (h2c), as the listener allows.
        let proto = match (cfg.http1, cfg.h2) {
            (true, true) => {
                // Prior-knowledge h2 is told by its preface, peeked before anything is read.
                // A connection that sends nothing is idle: the keep-alive timeout bounds it,
                // and a drain closes it after the grace a keep-alive connection gets.
                let grace = DRAIN_IDLE_GRACE.min(cfg.header_read_timeout);
                let mut draining = signals.draining.clone();
                let sniffed = tokio::select! {
                    r = sniff_h2(&tcp, cfg.keepalive_timeout) => r,
                    () = signals.force.cancelled() => None,
                    () = async {
                        let _ = draining.wait_for(|d| *d).await;
                        tokio::time::sleep(grace).await;
                    } => None,
                };
                match sniffed {
                    Some(true) => Proto::Http2,
                    Some(false) => Proto::Http1,
                    None => return,
                }
            }
            (false, true) => Proto::Http2,
            _ => Proto::Http1,
        };
        let io = Watched {
            inner: Lingering(tcp),
            state: state.clone(),
            http1: cfg.http1,
        };
        let ctx = Arc::new(ConnCtx {
            listener: listener.clone(),
            slot,
            peer,
            peer_ip: crate::text::ip_value(peer.ip()),
            local: at.local,
            tls: None,
            state: state.clone(),
            signals: signals.clone(),
        });
        run(proto, io, ctx, signals).await;
    }
}

/// The TLS handshake of a listener's connection (HTTP or TCP), on the handshake scheduler's
/// threads, within `header_read_timeout`, counted; `None` (logged at debug) when it fails,
/// times out, or the gateway forces its connections closed. `permit`, the connection's place
/// among the handshakes in progress, is given back when the handshake ends.
pub(crate) async fn handshake(
    listener: &ListenerCtx,
    acceptor: &sluice_tls::TlsAcceptor,
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    signals: &Signals,
    permit: Option<crate::handshakes::HandshakePermit>,
) -> Option<(
    tokio_boring::SslStream<sluice_tls::OffloadIo<crate::handshakes::Homed>>,
    TlsInfo,
)> {
    let (acceptor, deadline) = (acceptor.clone(), listener.config.header_read_timeout);
    // On the handshake threads when enough are in progress, else on this loop (counted),
    // where a lone handshake signs its key in place too (`accept_placed`).
    let isolated = listener.handshakes.hand_off();
    let alone = !isolated && listener.handshakes.isolated();
    let began = (std::time::SystemTime::now(), std::time::Instant::now());
    let accepting = async move {
        let mut tcp = crate::handshakes::Homed::new(tcp);
        if isolated {
            tcp.rehome()
                .map_err(
                    |e| tracing::debug!(error = %e, "moving a socket to the handshake threads"),
                )
                .ok()?;
        }
        Some(tokio::time::timeout(deadline, acceptor.accept_placed(tcp, alone)).await)
    };
    let accepted = tokio::select! {
        r = listener.handshakes.run(accepting, isolated) => r??,
        () = signals.force.cancelled() => return None,
    };
    drop(permit);
    let stream = match accepted {
        Ok(Ok(mut s)) => {
            if isolated && let Err(e) = s.get_mut().get_mut().rehome() {
                tracing::debug!(listener = %listener.name, %peer, error = %e, "moving a socket back from the handshake threads");
                return None;
            }
            s
        }
        Ok(Err(e)) => {
            listener.metrics.handshake_failed();
            tracing::debug!(listener = %listener.name, %peer, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            listener.metrics.handshake_failed();
            listener.handshakes.expired();
            tracing::debug!(listener = %listener.name, %peer, "TLS handshake timed out");
            return None;
        }
    };
    let mut info = TlsInfo::from_ssl(stream.ssl());
    info.handshake = Some((began.0, began.1.elapsed()));
    info.isolated = isolated;
    listener.metrics.handshake(info.version, info.resumed);
    if stream.ssl().selected_alpn_protocol() == Some(sluice_tls::live::ACME_TLS_ALPN) {
        // An ACME CA's TLS-ALPN-01 validation: the handshake was the answer (RFC 8737 §3).
        tracing::info!(listener = %listener.name, %peer, "answered an ACME tls-alpn-01 validation");
        let mut stream = stream;
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
        return None;
    }
    Some((stream, info))
}

/// What a connection speaks, when known before its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Http1,
    Http2,
}

fn http2_builder(cfg: &sluice_config::Listener, streams: StreamSet) -> http2::Builder<StreamSet> {
    let mut b = http2::Builder::new(streams);
    b.timer(TokioTimer::new())
        // Extended CONNECT (RFC 8441, WebSocket over HTTP/2) is not offered until it is
        // tunnelled upstream; browsers then open an HTTP/1.1 connection for WebSockets.
        .max_header_list_size(cfg.max_header_bytes as u32);
    b
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A served HTTP connection of either protocol: polled to the end, or asked to finish its
/// requests in flight and close.
enum Served<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming>,
{
    /// Sluice's own HTTP/1.1 (`crate::http1`).
    Http1(
        Pin<Box<dyn std::future::Future<Output = Result<(), BoxError>> + Send>>,
        Arc<crate::http1::Shutdown>,
    ),
    /// hyper's HTTP/2 server, and its streams (run in this task: `h2_streams`).
    Http2(Pin<Box<http2::Connection<I, S, StreamSet>>>, StreamSet),
}

impl<I, S> Served<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = crate::body::ProxyBody>,
    S::Future: Send + 'static,
{
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Served::Http1(c, _) => c.as_mut().poll(cx),
            Served::Http2(c, streams) => streams
                .poll(cx, |cx| c.as_mut().poll(cx))
                .map_err(Into::into),
        }
    }

    fn graceful_shutdown(&mut self) {
        match self {
            Served::Http1(_, shutdown) => shutdown.request(),
            Served::Http2(c, _) => c.as_mut().graceful_shutdown(),
        }
    }
}

/// The HTTP/2 connection preface (RFC 9113 §3.4): how a cleartext client says it speaks h2.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a cleartext client opens with the HTTP/2 preface, from its first bytes (peeked:
/// they stay in the socket). `None` when the client sent nothing in time or closed.
async fn sniff_h2(tcp: &TcpStream, within: Duration) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 24];
    loop {
        let n = tokio::time::timeout_at(deadline, tcp.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if buf[..n] != H2_PREFACE[..n] {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        // A preface split across packets: wait for the rest (rare; h2 clients send it whole).
        tokio::time::sleep(Duration::from_millis(1)).await;
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}

/// The connection served by `proto`'s server.
fn served<S>(
    proto: Proto,
    io: Watched<S>,
    ctx: Arc<ConnCtx>,
) -> Served<
    TokioIo<Watched<S>>,
    impl hyper::service::HttpService<
        hyper::body::Incoming,
        ResBody = crate::body::ProxyBody,
        Future: Send + 'static,
    >,
>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let listener = ctx.listener.clone();
    let mut http2 = None;
    let http1 = match proto {
        Proto::Http1 => Some(crate::http1::serve(io, ctx.clone())),
        Proto::Http2 => {
            http2 = Some(io);
            None
        }
    };
    // The handler's future goes to hyper boxed (`Service::call`): hyper moves each stream's
    // future into its executor (`h2_streams`, which boxes it again), and a boxed future is a
    // pointer to move, not several KiB.
    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
        crate::exchange::Service::call(ctx.clone(), req.map(crate::exchange::ClientBody::http2))
    });
    match (http1, http2) {
        (Some((fut, shutdown)), _) => Served::Http1(Box::pin(fut), shutdown),
        (None, Some(io)) => {
            let streams = StreamSet::default();
            Served::Http2(
                Box::pin(
                    http2_builder(&listener.config, streams.clone())
                        .serve_connection(TokioIo::new(io), service),
                ),
                streams,
            )
        }
        (None, None) => unreachable!("one protocol was chosen"),
    }
}

/// Draining (shutdown, a removed listener, a binary upgrade) must not close a keep-alive
/// connection at the moment its client sends the next request on it (the request would fail:
/// the classic keep-alive race). So a draining connection is closed while a request is in
/// flight (that response goes out with `Connection: close`, or as the last stream before
/// GOAWAY, and then it closes), or after it has been idle for `DRAIN_IDLE_GRACE`. A
/// connection accepted just before the drain is the same case: its first request is on the
/// way.
struct Drain {
    since: Option<Instant>,
    /// Asked to finish and close: the connection's future ends the loop.
    closing: bool,
    /// While draining and idle: a tick of our own re-checks the grace.
    timer: Option<tokio::time::Interval>,
    tick: Duration,
    idle_grace: Duration,
}

impl Drain {
    fn new(keepalive: Duration, head_timeout: Duration) -> Self {
        Drain {
            since: None,
            closing: false,
            timer: None,
            tick: (keepalive.min(head_timeout) / 4)
                .clamp(Duration::from_millis(50), Duration::from_secs(1)),
            idle_grace: DRAIN_IDLE_GRACE.min(head_timeout),
        }
    }

    fn start(&mut self, state: &ConnState) {
        self.since = Some(Instant::now());
        state.draining.store(true, Ordering::Relaxed);
    }

    /// At the loop's top: notices a drain, and asks `close` when a request is in flight or
    /// the connection has been idle for the grace.
    fn check(&mut self, state: &ConnState, draining: bool, close: impl FnOnce()) {
        if !self.closing && self.since.is_none() && draining {
            self.start(state);
        }
        let Some(since) = self.since.filter(|_| !self.closing) else {
            return;
        };
        let idle_ms = state
            .now_ms()
            .saturating_sub(state.last_request_ms.load(Ordering::Relaxed));
        let idle = Duration::from_millis(idle_ms).min(since.elapsed());
        if state.inflight.load(Ordering::Relaxed) != 0 || idle >= self.idle_grace {
            self.closing = true;
            close();
        } else if self.timer.is_none() {
            let mut t = tokio::time::interval(self.tick);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            self.timer = Some(t);
        }
    }
}

async fn run<S>(proto: Proto, io: Watched<S>, ctx: Arc<ConnCtx>, mut signals: Signals)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cfg = &ctx.listener.config;
    let (keepalive, head_timeout) = (cfg.keepalive_timeout, cfg.header_read_timeout);
    let state = ctx.state.clone();
    let mut conn = served(proto, io, ctx);
    // Keep-alive and header-read timeouts: the listener's sweep wakes this connection only
    // when one is due (a timer per connection cost every idle connection a wake-up a
    // second). While draining, a tick of our own re-checks the drain's grace.
    signals.idle.watch_http(&state, keepalive, head_timeout);
    let mut drain = Drain::new(keepalive, head_timeout);
    let gate = WakeGate::new();
    loop {
        drain.check(&state, *signals.draining.borrow(), || {
            conn.graceful_shutdown()
        });
        // The connection's own future is polled on every wake; the signals beside it only
        // when one of them woke the task (`WakeGate`): each is a Notify waiter underneath,
        // and a Notify waiter takes a mutex on every poll.
        let woke = {
            let (draining, closing) = (drain.since.is_some(), drain.closing);
            let mut side = std::pin::pin!(async {
                tokio::select! {
                    () = signals.force.cancelled() => Signal::Force,
                    changed = signals.draining.changed(), if !draining => {
                        Signal::Draining { sender_gone: changed.is_err() }
                    }
                    () = state.request_seen.notified(), if draining && !closing => {
                        Signal::Recheck
                    }
                    _ = async { drain.timer.as_mut().expect("armed while draining").tick().await },
                        if drain.timer.is_some() && !closing => Signal::Recheck,
                    () = state.due.notified(), if !closing && !draining => Signal::Due,
                }
            });
            let mut fresh = true;
            std::future::poll_fn(|cx| {
                if let Poll::Ready(result) = conn.poll(cx) {
                    return Poll::Ready(Woke::Served(result));
                }
                gate.poll(cx, side.as_mut(), std::mem::take(&mut fresh))
                    .map(Woke::Signal)
            })
            .await
        };
        match woke {
            Woke::Served(result) => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "client connection ended with an error");
                }
                return;
            }
            Woke::Signal(Signal::Force) => return,
            Woke::Signal(Signal::Draining { sender_gone: true }) => drain.start(&state),
            Woke::Signal(Signal::Draining { sender_gone: false } | Signal::Recheck) => {}
            Woke::Signal(Signal::Due) => {
                match state.timeout(
                    keepalive.as_millis() as u64,
                    head_timeout.as_millis() as u64,
                ) {
                    Some(Timeout::Head) => {
                        tracing::debug!(
                            "request head not received in time; closing the connection"
                        );
                        return;
                    }
                    Some(Timeout::KeepAlive) => {
                        drain.closing = true;
                        conn.graceful_shutdown();
                    }
                    None => {}
                }
            }
        }
    }
}

/// What a wake-up of a connection's loop (`run`) found: its connection ended, or a signal.
enum Woke<T> {
    Served(T),
    Signal(Signal),
}

/// What woke a connection's loop other than its own future (`run`).
enum Signal {
    /// The shutdown deadline passed: close at once.
    Force,
    /// The drain flag changed (read at the loop's top), or its sender is gone (draining).
    Draining { sender_gone: bool },
    /// While draining: a request arrived, or the grace tick; the loop's top re-checks.
    Recheck,
    /// The sweep says a keep-alive or head timeout may be due.
    Due,
}
