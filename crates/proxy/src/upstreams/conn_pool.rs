//! Keep-alive HTTP/1.1 connections to one upstream group's servers: a connection is checked
//! out for one request and given back when that response's body has ended.
//!
//! The exchange itself is Sluice's own HTTP/1.1 (`http1::client`), driven by the request's
//! task: no task per upstream connection, no channel, and no buffer held by an idle
//! connection. The idle lists are per server (the balancer already chose one), and the
//! response body gives its connection back itself when it ends.
//!
//! What NGINX's `keepalive` does, an operator can expect here, with one difference: idle
//! connections per server are closed after `keepalive_timeout` idle, and `keepalive` of them
//! are kept that long; above that, a connection given back is kept while the traffic needs
//! it, as HAProxy's idle pool does (`Slot`): NGINX closes every connection given back beyond
//! `keepalive`, so with more requests in flight than that it opens a new connection every
//! few requests (at 256 in flight over `keepalive 64`: one per 2-3 requests, `bench/run`'s
//! HTTP/2 16 x 16 row). A request that meets a
//! connection the server has just closed is sent again on a fresh one (when the server closed
//! it before answering anything and no body was sent, so this is safe for every method); a
//! connection whose response was not read to the end, whose request was not written whole, or
//! that switched protocols, is never reused.

use crate::body::{BoxError, ProxyBody, empty};
use crate::clock::coarse_ms;
use crate::http1::client::{self, Exchange, Fields, SendError, WrittenFields};
use crate::upstreams::upstream_tls::UpstreamIo;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

/// Why an upstream request failed: the handler marks a server failed only for `Connect`.
#[derive(Debug)]
pub(crate) struct UpstreamError {
    connect: bool,
    source: BoxError,
}

impl UpstreamError {
    pub(crate) fn connect(source: BoxError) -> Self {
        UpstreamError {
            connect: true,
            source,
        }
    }

    pub(crate) fn request(source: BoxError) -> Self {
        UpstreamError {
            connect: false,
            source,
        }
    }

    /// The connection could not be made (refused, unreachable, timed out).
    pub(crate) fn is_connect(&self) -> bool {
        self.connect
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.connect {
            "connecting to the upstream server failed"
        } else {
            "the upstream request failed"
        })
    }
}

impl std::error::Error for UpstreamError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

struct Idle {
    io: UpstreamIo,
    /// When it went idle, on the coarse clock (`clock`): idle timeouts are seconds.
    since_ms: u64,
    /// The client connection it belongs to, when it was opened with a PROXY protocol
    /// header naming that client: then no other client's request may use it.
    owner: Option<SocketAddr>,
}

impl Idle {
    /// Still worth a request: the server has not closed it and it is not idle too long.
    fn usable(&mut self, idle_timeout: Duration) -> bool {
        u128::from(coarse_ms().saturating_sub(self.since_ms)) < idle_timeout.as_millis()
            && client::still_open(&mut self.io)
    }
}

/// One server's idle connections, most recently used last, and the fewest there were since
/// the sweeper last looked: that many were not needed all that while.
///
/// A connection given back is always kept (the in-flight requests that had them are what
/// bounds their number: keeping one never raises the count of connections above what the
/// traffic opened). Each sweep closes the surplus, oldest first, down to `keepalive`.
struct Slot<T> {
    list: Vec<T>,
    low: usize,
}

impl<T> Slot<T> {
    fn new() -> Self {
        Slot {
            list: Vec::new(),
            low: 0,
        }
    }

    /// The most recently used.
    fn pop(&mut self) -> Option<T> {
        let c = self.list.pop();
        self.low = self.low.min(self.list.len());
        c
    }

    /// The one at `i`.
    fn remove(&mut self, i: usize) -> T {
        let c = self.list.remove(i);
        self.low = self.low.min(self.list.len());
        c
    }

    /// Drops whatever `keep` says not to (the low then is at most what is left).
    fn retain(&mut self, keep: impl FnMut(&mut T) -> bool) {
        self.list.retain_mut(keep);
        self.low = self.low.min(self.list.len());
    }

    /// Closes the connections no request needed since the last sweep, oldest first, but
    /// keeps `floor` (`keepalive`); the next period starts counting from here.
    fn trim(&mut self, floor: usize) {
        let surplus = self.low.min(self.list.len().saturating_sub(floor));
        self.list.drain(..surplus);
        self.low = self.list.len();
    }
}

/// How often surplus idle connections (beyond `keepalive`) are looked for: one unused for
/// that long is closed.
const SURPLUS_PERIOD: Duration = Duration::from_secs(2);

/// The idle connections of one upstream group, per server.
pub(crate) struct ConnPool {
    /// Indexed like the group's servers.
    idle: Vec<Mutex<Slot<Idle>>>,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    /// `send_proxy_protocol`: each connection starts with this header and serves one client.
    proxy_protocol: Option<sluice_config::ProxyProtocol>,
    /// `[upstream.tls]`.
    tls: Option<Arc<crate::upstreams::upstream_tls::UpstreamConnector>>,
    sweeper: std::sync::Once,
}

impl std::fmt::Debug for ConnPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnPool")
            .field("max_idle", &self.max_idle)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl ConnPool {
    pub(crate) fn new(
        servers: usize,
        max_idle: usize,
        idle_timeout: Duration,
        connect_timeout: Duration,
        proxy_protocol: Option<sluice_config::ProxyProtocol>,
        tls: Option<Arc<crate::upstreams::upstream_tls::UpstreamConnector>>,
    ) -> Self {
        ConnPool {
            idle: (0..servers).map(|_| Mutex::new(Slot::new())).collect(),
            max_idle,
            idle_timeout,
            connect_timeout,
            proxy_protocol,
            tls,
            sweeper: std::sync::Once::new(),
        }
    }

    /// Takes the idle connections `from` holds for its server `index` as server `to`'s (the
    /// same address in the group a DNS change built).
    pub(crate) fn adopt(&self, to: usize, from: &ConnPool, index: usize) {
        let taken = std::mem::take(
            &mut from.idle[index]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .list,
        );
        let mut slot = self.idle[to].lock().unwrap_or_else(|e| e.into_inner());
        slot.list.extend(taken);
    }

    /// Sends `req` (origin-form URI, Host set) to server `index` at `addr`, on an idle
    /// connection if one is alive, else on a new one. `written`: the request's fields as
    /// lines already (its map then unused). `at` is the client connection the request came
    /// on (what a PROXY protocol header says).
    ///
    /// Not an `async fn`: an async fn keeps each argument twice (and `req` beside its parts)
    /// in a future that is part of every proxied request's.
    pub(crate) fn send(
        self: &Arc<Self>,
        index: usize,
        addr: SocketAddr,
        req: Request<ProxyBody>,
        written: Option<WrittenFields>,
        at: crate::addresses::Addresses,
    ) -> impl Future<Output = Result<Response<ProxyBody>, UpstreamError>> + use<'_> {
        let owner = self.proxy_protocol.map(|_| at.client);
        let (parts, body) = req.into_parts();
        async move {
            let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
            let fields = written
                .as_ref()
                .map_or(Fields::Map(&parts.headers), Fields::Written);
            let mut body = Some(body);
            // Idle connections first, most recently used first (warm, least likely closed).
            while let Some(io) = self.checkout(index, owner) {
                let body = body.take().unwrap_or_else(empty);
                let (head, encoding) = client::encode_request(&parts.method, target, fields, &body);
                match Exchange::start(io, head, body, encoding, &parts.method, true).await {
                    Ok((head, x)) => return Ok(self.wrap(index, head, x, owner)),
                    // Closed by the server before it read anything, and no body was sent: the
                    // request goes again (an empty body again) on the next connection.
                    Err(SendError::Stale) => {}
                    Err(SendError::Failed(e)) => return Err(UpstreamError::request(e)),
                }
            }
            // Boxed: connecting (and a TLS handshake) is rare on kept-alive traffic, and its
            // future would otherwise be part of every request's.
            let io = Box::pin(self.connect(addr, at)).await?;
            let body = body.take().unwrap_or_else(empty);
            let (head, encoding) = client::encode_request(&parts.method, target, fields, &body);
            match Exchange::start(io, head, body, encoding, &parts.method, false).await {
                Ok((head, x)) => Ok(self.wrap(index, head, x, owner)),
                Err(SendError::Stale) => Err(UpstreamError::request(
                    "the server closed the connection before answering".into(),
                )),
                Err(SendError::Failed(e)) => Err(UpstreamError::request(e)),
            }
        }
    }

    fn checkout(&self, index: usize, owner: Option<SocketAddr>) -> Option<UpstreamIo> {
        let mut idle = self.idle[index].lock().unwrap_or_else(|e| e.into_inner());
        if owner.is_none() {
            while let Some(mut c) = idle.pop() {
                if c.usable(self.idle_timeout) {
                    return Some(c.io);
                }
                // Closed by the server or idle too long: dropped, which closes it.
            }
            return None;
        }
        // Connections that belong to one client each: this client's, if any.
        let timeout = self.idle_timeout;
        idle.retain(|c| c.usable(timeout));
        let i = idle.list.iter().rposition(|c| c.owner == owner)?;
        Some(idle.remove(i).io)
    }

    async fn connect(
        self: &Arc<Self>,
        addr: SocketAddr,
        at: crate::addresses::Addresses,
    ) -> Result<UpstreamIo, UpstreamError> {
        let failed = UpstreamError::connect;
        let tcp =
            match tokio::time::timeout(self.connect_timeout, tokio::net::TcpStream::connect(addr))
                .await
            {
                Ok(Ok(tcp)) => tcp,
                Ok(Err(e)) => return Err(failed(e.into())),
                Err(_) => {
                    return Err(failed(
                        format!("no connection within {:?}", self.connect_timeout).into(),
                    ));
                }
            };
        let _ = tcp.set_nodelay(true);
        let io = UpstreamIo::open(tcp, addr, self.proxy_protocol, at, self.tls.as_deref())
            .await
            .map_err(|e| failed(e.into()))?;
        self.sweeper.call_once(|| self.start_sweeper());
        Ok(io)
    }

    fn wrap(
        self: &Arc<Self>,
        index: usize,
        mut head: client::ResponseHead,
        exchange: Exchange<UpstreamIo>,
        owner: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        let mut resp = Response::new(());
        *resp.status_mut() = head.status;
        *resp.version_mut() = head.version;
        head.clean_headers();
        *resp.headers_mut() = head.headers;
        if head.status == StatusCode::SWITCHING_PROTOCOLS {
            // The connection now belongs to the tunnel.
            resp.extensions_mut()
                .insert(UpstreamUpgrade::new(exchange.into_upgraded()));
            return resp.map(|()| http_body_util::BodyExt::boxed(empty()));
        }
        let mut body = PooledBody {
            exchange: Some(exchange),
            give_back: (self.max_idle > 0).then(|| GiveBack {
                pool: Arc::downgrade(self),
                index,
                owner,
            }),
        };
        if body.is_end_stream() {
            // Nothing to read (HEAD, 204, 304): the connection is free now.
            body.release();
        }
        resp.map(|()| http_body_util::BodyExt::boxed(body))
    }

    fn give_back(&self, index: usize, io: UpstreamIo, owner: Option<SocketAddr>) {
        let mut idle = self.idle[index].lock().unwrap_or_else(|e| e.into_inner());
        idle.list.push(Idle {
            io,
            since_ms: coarse_ms(),
            owner,
        });
    }

    /// Closes connections idle past `keepalive_timeout` even when no request comes to find
    /// them, as NGINX does, and every `SURPLUS_PERIOD` those beyond `keepalive` that no
    /// request needed in that time; stops when the group is dropped (a reload).
    fn start_sweeper(self: &Arc<Self>) {
        let pool: Weak<Self> = Arc::downgrade(self);
        let every = (self.idle_timeout / 2).clamp(Duration::from_millis(50), SURPLUS_PERIOD);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut trimmed = tokio::time::Instant::now();
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else { return };
                let trim = trimmed.elapsed() >= SURPLUS_PERIOD;
                if trim {
                    trimmed = tokio::time::Instant::now();
                }
                for slot in &pool.idle {
                    let mut idle = slot.lock().unwrap_or_else(|e| e.into_inner());
                    idle.retain(|c| c.usable(pool.idle_timeout));
                    if trim {
                        idle.trim(pool.max_idle);
                    }
                }
            }
        });
    }
}

/// The upstream side of a `101 Switching Protocols`, put in the response's extensions for
/// the handler's tunnel (extensions must be `Clone + Sync`, hence the shared slot).
#[derive(Clone)]
pub(crate) struct UpstreamUpgrade(Arc<Mutex<Option<crate::http1::Upgraded>>>);

impl UpstreamUpgrade {
    fn new(up: crate::http1::Upgraded) -> Self {
        UpstreamUpgrade(Arc::new(Mutex::new(Some(up))))
    }

    /// The upgraded connection (once).
    pub(crate) fn take(&self) -> Option<crate::http1::Upgraded> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

struct GiveBack {
    pool: Weak<ConnPool>,
    index: usize,
    owner: Option<SocketAddr>,
}

/// A response body that returns its connection to the pool when it has been read to the
/// end (and the request was written whole). Dropped earlier, or failed, it drops the
/// connection instead: the rest of the response would be in the way of the next one.
struct PooledBody {
    exchange: Option<Exchange<UpstreamIo>>,
    give_back: Option<GiveBack>,
}

impl PooledBody {
    fn release(&mut self) {
        let Some(x) = self.exchange.take() else {
            return;
        };
        if let Some(g) = self.give_back.take()
            && let Some(pool) = g.pool.upgrade()
            && let Some(io) = x.into_reusable()
        {
            pool.give_back(g.index, io, g.owner);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(x) = self.exchange.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(x.poll_frame(cx));
        match &frame {
            Some(Ok(_)) if !x.is_end_stream() => {}
            Some(Err(_)) => {
                self.give_back = None;
                self.exchange = None;
            }
            _ => self.release(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.exchange.as_ref().is_none_or(Exchange::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.exchange
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Exchange::size_hint)
    }
}

#[cfg(test)]
mod tests {
    use super::Slot;

    fn slot(n: u32) -> Slot<u32> {
        let mut s = Slot::new();
        s.list.extend(0..n);
        s.low = s.list.len();
        s
    }

    #[test]
    fn connections_the_traffic_used_are_kept_beyond_keepalive() {
        // 8 idle, keepalive 2: within the period, requests took 6 of them at once.
        let mut s = slot(8);
        for _ in 0..6 {
            s.pop();
        }
        s.list.extend(100..106);
        s.trim(2);
        assert_eq!(s.list.len(), 6, "only the 2 never needed are closed");
        assert_eq!(s.list[0], 100, "the oldest, 0 and 1, went");
    }

    #[test]
    fn unused_connections_are_closed_down_to_keepalive_and_no_further() {
        let mut s = slot(8);
        s.trim(3);
        assert_eq!(s.list, [5, 6, 7], "the most recently used are kept");
        s.trim(3);
        assert_eq!(
            s.list.len(),
            3,
            "keepalive's are kept until keepalive_timeout"
        );
    }

    #[test]
    fn each_period_counts_from_what_the_last_left() {
        let mut s = slot(4);
        s.pop();
        s.pop();
        s.list.extend([10, 11]);
        s.trim(0);
        assert_eq!(s.list, [10, 11], "two never needed");
        s.pop();
        s.trim(0);
        assert_eq!(
            s.list,
            Vec::<u32>::new(),
            "then the one left was not needed either"
        );
        s.retain(|_| true);
        assert_eq!(s.low, 0);
    }
}
