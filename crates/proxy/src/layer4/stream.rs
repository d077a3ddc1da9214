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
use crate::addresses::Addresses;
use crate::listen::connection::Signals;
use crate::request::context::ListenerCtx;
use crate::upstreams::upstream::UpstreamGroup;
use sluice_config::TcpProxy;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Indexes into [`crate::TCP_OUTCOMES`].
const PROXIED: usize = 0;
const DENIED: usize = 1;
const BAD_HELLO: usize = 2;
const NO_UPSTREAM: usize = 3;
const UNAVAILABLE: usize = 4;

/// Serves one connection of a TCP listener to its end.
pub(crate) async fn serve(
    listener: Arc<ListenerCtx>,
    tcp: TcpStream,
    at: Addresses,
    signals: Signals,
    permit: Option<crate::handshakes::HandshakePermit>,
) {
    let sluice_config::ListenerKind::Tcp(proxy) = &listener.config.kind else {
        return;
    };
    let _ = tcp.set_nodelay(true);
    let (mut log, start) = opened(&listener, at, "TCP", "tcp");
    let finish =
        |log: Entry, status: u16, outcome: usize| end(&listener, log, start, status, outcome);
    // The connection's context for `relay`, once its log entry is complete.
    let tcp_conn = |log: Entry| TcpConn {
        listener: &listener,
        idle_timeout: proxy.idle_timeout,
        at,
        log,
        start,
        signals: &signals,
    };
    if !listener.config.acl.permits(at.client.ip()) {
        listener.metrics.denied();
        return finish(log, 403, DENIED);
    }
    let deadline = listener.config.header_read_timeout;
    if !proxy.passthrough.is_empty() {
        let mut tcp = tcp;
        let hello = tokio::select! {
            r = tokio::time::timeout(deadline, crate::layer4::client_hello::read(&mut tcp)) => r,
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
        let group = listener.upstreams[group].group();
        return proxied(relay(tcp_conn(log), group, tcp, &hello.bytes).await);
    }
    let Some(group) = proxy.upstream.map(|i| listener.upstreams[i].group()) else {
        return finish(log, 502, NO_UPSTREAM);
    };
    match &listener.tls {
        None => proxied(relay(tcp_conn(log), group, tcp, &[]).await),
        Some(acceptor) => {
            // Boxed: see `relay_keyed`.
            let Some((stream, info)) = Box::pin(crate::listen::connection::handshake(
                &listener, acceptor, tcp, at.client, &signals, permit,
            ))
            .await
            else {
                return;
            };
            handshaken(&mut log, "tls", &info);
            proxied(relay(tcp_conn(log), group, stream, &[]).await);
        }
    }
}

/// A TCP connection's end after [`relay`]: counted by outcome, and its access-log line.
fn proxied(relayed: Option<Relayed<'_>>) {
    if let Some(r) = relayed {
        let (status, outcome) = if r.connected {
            (200, PROXIED)
        } else {
            (502, UNAVAILABLE)
        };
        end(r.listener, r.log, r.start, status, outcome);
    }
}

/// A layer-4 connection's log entry as it opens (`method` and `protocol` name the listener's
/// kind), and when it opened.
pub(crate) fn opened(
    listener: &ListenerCtx,
    at: Addresses,
    method: &'static str,
    protocol: &'static str,
) -> (Entry, Instant) {
    let log = Entry {
        time: Some(SystemTime::now()),
        client: Some(at.client),
        listener: listener.name.clone(),
        method: method.into(),
        path: "-".into(),
        protocol,
        ..Entry::default()
    };
    (log, Instant::now())
}

/// A layer-4 connection's log entry after its TLS handshake: `protocol` (`tls`, `mqtts`),
/// the version, resumption, server name and cipher.
pub(crate) fn handshaken(log: &mut Entry, protocol: &'static str, info: &sluice_tls::TlsInfo) {
    log.protocol = protocol;
    log.tls_version = info.version;
    log.tls_resumed = Some(info.resumed);
    log.host = info.sni.clone().unwrap_or_default();
    log.tls_cipher = info.cipher.into();
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

/// A layer-4 connection's context: its listener, idle timeout and addresses, its log entry
/// and start, and the gateway's signals.
pub(crate) struct TcpConn<'a> {
    pub(crate) listener: &'a ListenerCtx,
    pub(crate) idle_timeout: std::time::Duration,
    pub(crate) at: Addresses,
    pub(crate) log: Entry,
    pub(crate) start: Instant,
    pub(crate) signals: &'a Signals,
}

/// How a relay ended, for its listener's count and log line.
pub(crate) struct Relayed<'a> {
    pub(crate) listener: &'a ListenerCtx,
    /// The log entry, with the server, bytes and upstream time filled in.
    pub(crate) log: Entry,
    pub(crate) start: Instant,
    /// A server was connected to (else none of the group could be).
    pub(crate) connected: bool,
}

/// Connects to a server of `group` (the next one when one refuses), sends the PROXY header
/// and `replay`, then splices the two until both directions have ended. The server is the
/// one the group's balancer gives the client's address; see [`relay_keyed`].
pub(crate) async fn relay<'a, C>(
    conn: TcpConn<'a>,
    group: Arc<UpstreamGroup>,
    client: C,
    replay: &[u8],
) -> Option<Relayed<'a>>
where
    C: AsyncRead + AsyncWrite + crate::layer4::splice::FinOnClose + Unpin,
{
    let key = group.client_key(conn.at.client.ip());
    relay_keyed(conn, key, group, client, replay).await
}

/// [`relay`] to the server the group's balancer gives `key` (a consistent hash ring: the
/// same key, the same server while it is up). `None`: the gateway stopped it.
pub(crate) async fn relay_keyed<'a, C>(
    conn: TcpConn<'a>,
    key: u64,
    group: Arc<UpstreamGroup>,
    client: C,
    replay: &[u8],
) -> Option<Relayed<'a>>
where
    C: AsyncRead + AsyncWrite + crate::layer4::splice::FinOnClose + Unpin,
{
    relay_greeted(conn, key, group, client, replay, None).await
}

/// What a protocol reads of the server's first bytes before the splice (MQTT 5's CONNACK,
/// whose Server Keep Alive sets the connection's idle timeout). What it read is passed on to
/// the client as it was.
pub(crate) trait Greeting: Sync {
    /// Reads from `up` into `read`; the idle timeout from then on, where it sets one.
    fn greet<'g>(
        &'g self,
        up: &'g mut crate::upstreams::upstream_tls::UpstreamIo,
        read: &'g mut Vec<u8>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Duration>> + Send + 'g>>;
}

/// [`relay_keyed`], with `greeting` read from the server before the splice. The log's
/// bytes count everything: `replay` (already read from the client) and the greeting too.
pub(crate) async fn relay_greeted<'a, C>(
    conn: TcpConn<'a>,
    key: u64,
    group: Arc<UpstreamGroup>,
    mut client: C,
    replay: &[u8],
    greeting: Option<&dyn Greeting>,
) -> Option<Relayed<'a>>
where
    C: AsyncRead + AsyncWrite + crate::layer4::splice::FinOnClose + Unpin,
{
    let TcpConn {
        listener,
        mut idle_timeout,
        at,
        mut log,
        start,
        signals,
    } = conn;
    let mut tried = Vec::with_capacity(2);
    let (upstream, server) = loop {
        // The steps before the splice are boxed: the connection spends its life splicing,
        // and its task's size is that of its largest step.
        let server = match Box::pin(group.acquire(key, &tried, None)).await {
            Ok(s) => s,
            Err(busy) => {
                if busy != crate::upstreams::upstream::Busy::NoServer {
                    tracing::warn!(upstream = %group.config.name, ?busy, "every upstream server is at max_conns");
                }
                log.upstream_time = Some(start.elapsed());
                return Some(Relayed {
                    listener,
                    log,
                    start,
                    connected: false,
                });
            }
        };
        tried.push(server.index);
        let addr = server.server().addr;
        log.upstream = Some(addr);
        let connect = Box::pin(tokio::time::timeout(
            group.config.connect_timeout,
            TcpStream::connect(addr),
        ));
        let connected = tokio::select! {
            r = connect => r,
            () = signals.force.cancelled() => return None,
        };
        let failure = match connected {
            Ok(Ok(up)) => {
                let _ = up.set_nodelay(true);
                match Box::pin(hello_upstream(up, &group, addr, at, replay)).await {
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
    let mut upstream = upstream;
    let mut greeted = Vec::new();
    if let Some(g) = greeting {
        let idle = tokio::select! {
            idle = g.greet(&mut upstream, &mut greeted) => idle,
            () = signals.force.cancelled() => return None,
        };
        idle_timeout = idle.unwrap_or(idle_timeout);
        if !greeted.is_empty() {
            // A CONNACK's few bytes: the client's socket buffer takes them at once.
            let _ = client.write_all(&greeted).await;
        }
    }
    let (sent, received) =
        crate::layer4::splice::splice(client, upstream, idle_timeout, signals).await;
    drop(server);
    log.bytes_in = replay.len() as u64 + sent;
    log.bytes_out = greeted.len() as u64 + received;
    Some(Relayed {
        listener,
        log,
        start,
        connected: true,
    })
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
) -> std::io::Result<crate::upstreams::upstream_tls::UpstreamIo> {
    let proxy = group.config.send_proxy_protocol;
    let mut up =
        crate::upstreams::upstream_tls::UpstreamIo::open(up, addr, proxy, at, group.tls.as_deref())
            .await?;
    if !replay.is_empty() {
        up.write_all(replay).await?;
    }
    Ok(up)
}
