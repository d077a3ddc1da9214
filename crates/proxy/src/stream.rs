//! Layer 4: a `kind = "tcp"` listener's connections, proxied as bytes to a server of an
//! upstream group — plain, after terminating TLS (the same acceptor, certificates and offload
//! engines as HTTPS), or passed through by the ClientHello's server name.
//!
//! What an NGINX `stream` operator expects: the group's balancer, passive health and
//! `max_conns` apply per connection; a server that refuses is marked failed and the next one
//! is tried (`proxy_next_upstream`); a connection with no byte either way for `idle_timeout`
//! closes (`proxy_timeout`); one side's end of stream is passed on as a half-close and the
//! other direction goes on; each connection ends with one access-log line whose status is
//! NGINX's stream `$status` (200 proxied, 400 bad ClientHello, 403 denied, 502 no server).

use crate::access_log::Entry;
use crate::connection::Signals;
use crate::handler::ListenerCtx;
use crate::upstream::UpstreamGroup;
use sluice_config::TcpProxy;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;

/// Bytes buffered per direction while splicing (NGINX's `proxy_buffer_size` is 16k).
const BUFFER: usize = 16 * 1024;

/// Indexes into [`crate::TCP_OUTCOMES`].
const PROXIED: usize = 0;
const DENIED: usize = 1;
const BAD_HELLO: usize = 2;
const NO_UPSTREAM: usize = 3;
const UNAVAILABLE: usize = 4;

/// Who a connection is from and to, after any PROXY protocol header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addresses {
    /// The client (the header's source when there was one).
    pub(crate) client: SocketAddr,
    /// The address it connected to (the header's destination when there was one).
    pub(crate) local: SocketAddr,
}

/// Serves one connection of a TCP listener to its end.
pub(crate) async fn serve(
    listener: Arc<ListenerCtx>,
    tcp: TcpStream,
    at: Addresses,
    signals: Signals,
) {
    let sluice_config::ListenerKind::Tcp(proxy) = &listener.config.kind else {
        return;
    };
    let _ = tcp.set_nodelay(true);
    let mut log = Entry {
        time: Some(SystemTime::now()),
        client: Some(at.client),
        listener: listener.name.clone(),
        method: "TCP".into(),
        path: "-".into(),
        protocol: "tcp",
        ..Entry::default()
    };
    let start = Instant::now();
    let finish =
        |log: Entry, status: u16, outcome: usize| end(&listener, log, start, status, outcome);
    if !listener.config.acl.permits(at.client.ip()) {
        listener.metrics.denied();
        return finish(log, 403, DENIED);
    }
    let deadline = listener.config.header_read_timeout;
    if !proxy.passthrough.is_empty() {
        let mut tcp = tcp;
        let hello = tokio::select! {
            r = tokio::time::timeout(deadline, crate::client_hello::read(&mut tcp)) => r,
            () = signals.force.cancelled() => return,
        };
        let hello = match hello {
            Ok(Ok(h)) => h,
            Ok(Err(why)) => {
                tracing::debug!(listener = %listener.name, client = %at.client, ?why, "ClientHello refused");
                return finish(log, 400, BAD_HELLO);
            }
            Err(_) => {
                tracing::debug!(listener = %listener.name, client = %at.client, "no ClientHello in header_read_timeout");
                return finish(log, 400, BAD_HELLO);
            }
        };
        log.protocol = "tls-passthrough";
        log.host = hello.server_name.clone().unwrap_or_default();
        let Some(group) = passthrough_group(proxy, hello.server_name.as_deref()) else {
            tracing::debug!(listener = %listener.name, client = %at.client, server_name = %log.host, "no passthrough upstream for this server name");
            return finish(log, 502, NO_UPSTREAM);
        };
        let group = listener.upstreams[group].clone();
        return relay(
            &listener,
            proxy,
            group,
            tcp,
            &hello.bytes,
            at,
            log,
            start,
            &signals,
        )
        .await;
    }
    let Some(group) = proxy.upstream.map(|i| listener.upstreams[i].clone()) else {
        return finish(log, 502, NO_UPSTREAM);
    };
    match &listener.tls {
        None => relay(&listener, proxy, group, tcp, &[], at, log, start, &signals).await,
        Some(acceptor) => {
            let Some((stream, info)) =
                crate::connection::handshake(&listener, acceptor, tcp, at.client, &signals).await
            else {
                return;
            };
            log.protocol = "tls";
            log.tls_version = info.version;
            log.tls_resumed = Some(info.resumed);
            log.host = info.sni.clone().unwrap_or_default();
            log.tls_cipher = info.cipher;
            relay(
                &listener,
                proxy,
                group,
                stream,
                &[],
                at,
                log,
                start,
                &signals,
            )
            .await;
        }
    }
}

/// The group for a ClientHello's server name: exact names, then wildcards, then the
/// listener's `upstream`.
fn passthrough_group(proxy: &TcpProxy, name: Option<&str>) -> Option<usize> {
    name.and_then(|n| {
        proxy
            .passthrough
            .iter()
            .find(|(p, _)| p.matches(n))
            .map(|(_, g)| *g)
    })
    .or(proxy.upstream)
}

/// Connects to a server of `group` (the next one when one refuses), sends the PROXY header
/// and `replay`, then splices the two until both directions have ended.
#[allow(clippy::too_many_arguments)]
async fn relay<C>(
    listener: &ListenerCtx,
    proxy: &TcpProxy,
    group: Arc<UpstreamGroup>,
    client: C,
    replay: &[u8],
    at: Addresses,
    mut log: Entry,
    start: Instant,
    signals: &Signals,
) where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let key = group.client_key(at.client.ip());
    let mut tried = Vec::with_capacity(2);
    let (upstream, server) = loop {
        let server = match group.acquire(key, &tried, None).await {
            Ok(s) => s,
            Err(busy) => {
                if busy != crate::upstream::Busy::NoServer {
                    tracing::warn!(upstream = %group.config.name, ?busy, "every upstream server is at max_conns");
                }
                log.upstream_time = Some(start.elapsed());
                return end(listener, log, start, 502, UNAVAILABLE);
            }
        };
        tried.push(server.index);
        let addr = server.server().addr;
        log.upstream = Some(addr);
        let connect = tokio::time::timeout(group.config.connect_timeout, TcpStream::connect(addr));
        let connected = tokio::select! {
            r = connect => r,
            () = signals.force.cancelled() => return,
        };
        let failure = match connected {
            Ok(Ok(up)) => {
                let _ = up.set_nodelay(true);
                match hello_upstream(up, &group, addr, at, replay).await {
                    Ok(up) => {
                        server.server().succeeded();
                        group.outcome(server.index, false);
                        break (up, server);
                    }
                    Err(e) => e.to_string(),
                }
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no connection in {:?}", group.config.connect_timeout),
        };
        group.mark_failed(server.index);
        group.outcome(server.index, true);
        listener.metrics.upstream_error(0);
        tracing::warn!(upstream = %group.config.name, %addr, error = %failure, "connecting to the upstream server failed");
    };
    log.upstream_time = Some(start.elapsed());
    let (sent, received) = splice(client, upstream, proxy.idle_timeout, signals).await;
    drop(server);
    log.bytes_in = sent;
    log.bytes_out = received;
    end(listener, log, start, 200, PROXIED);
}

/// A connection's end: counted by outcome, and its access-log line.
fn end(listener: &ListenerCtx, mut log: Entry, start: Instant, status: u16, outcome: usize) {
    listener.metrics.tcp(outcome);
    log.status = status;
    log.duration = start.elapsed();
    listener.access_log.log(&log);
}

/// A new server connection made ready for the client's bytes: PROXY header and TLS as the
/// group asks, then the bytes to replay.
async fn hello_upstream(
    up: TcpStream,
    group: &UpstreamGroup,
    addr: SocketAddr,
    at: Addresses,
    replay: &[u8],
) -> std::io::Result<crate::upstream_tls::UpstreamIo> {
    let proxy = group.config.send_proxy_protocol;
    let mut up =
        crate::upstream_tls::UpstreamIo::open(up, addr, proxy, at, group.tls.as_deref()).await?;
    if !replay.is_empty() {
        up.write_all(replay).await?;
    }
    Ok(up)
}

/// Copies both ways until both have ended (a half-close is passed on), an error, `idle`
/// with no byte either way, or the gateway's forced close. Returns the bytes sent by the
/// client and by the server.
async fn splice<C, U>(client: C, upstream: U, idle: Duration, signals: &Signals) -> (u64, u64)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let activity = signals.idle.watch(idle);
    let mut client = Counted::new(client, activity.clone());
    let mut upstream = Counted::new(upstream, activity.clone());
    {
        let copy =
            tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, BUFFER, BUFFER);
        tokio::select! {
            r = copy => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "TCP connection ended with an error");
                }
            }
            () = signals.force.cancelled() => {}
            () = activity.expired.notified() => {
                tracing::debug!(?idle, "TCP connection idle; closing it");
            }
        }
    }
    (client.read, upstream.read)
}

/// A stream that counts the bytes read from it and notes when any I/O last moved bytes.
struct Counted<S> {
    inner: S,
    read: u64,
    activity: Arc<crate::idle_sweep::Activity>,
}

impl<S> Counted<S> {
    fn new(inner: S, activity: Arc<crate::idle_sweep::Activity>) -> Self {
        Counted {
            inner,
            read: 0,
            activity,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read += n as u64;
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
