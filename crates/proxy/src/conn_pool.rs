//! Keep-alive HTTP/1.1 connections to one upstream group's servers: a connection is checked
//! out for one request and given back when that response's body has ended.
//!
//! This replaces hyper-util's legacy `Client` for HTTP/1.1 upstreams. That client hashes a
//! (scheme, authority) key and takes a pool-wide lock per request, and spawns a task per
//! request that waits for the connection to become idle again before returning it: about 3%
//! of a compressing gateway's CPU (perf, `bench/run`'s gzip row). Here the idle lists are
//! per server (the balancer already chose one), and the response body gives its connection
//! back itself when it ends.
//!
//! What NGINX's `keepalive` does, an operator can expect here: at most `keepalive` idle
//! connections per server, closed after `keepalive_timeout` idle; a request that meets a
//! connection the server has just closed is sent again on a fresh one (hyper hands back a
//! request that was never written, so this is safe for every method); a connection whose
//! response was not read to the end, or that switched protocols, is never reused.

use crate::body::{BoxError, ProxyBody};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

type Sender = http1::SendRequest<ProxyBody>;

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
    sender: Sender,
    since: Instant,
    /// The client connection it belongs to, when it was opened with a PROXY protocol
    /// header naming that client: then no other client's request may use it.
    owner: Option<SocketAddr>,
}

impl Idle {
    /// Still worth a request: the server has not closed it and it is not idle too long.
    fn usable(&self, idle_timeout: Duration) -> bool {
        !self.sender.is_closed() && self.since.elapsed() < idle_timeout
    }
}

/// The idle connections of one upstream group, per server.
pub(crate) struct ConnPool {
    /// Indexed like the group's servers.
    idle: Vec<Mutex<Vec<Idle>>>,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    /// `send_proxy_protocol`: each connection starts with this header and serves one client.
    proxy_protocol: Option<sluice_config::ProxyProtocol>,
    /// `[upstream.tls]`.
    tls: Option<Arc<crate::upstream_tls::UpstreamConnector>>,
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
        tls: Option<Arc<crate::upstream_tls::UpstreamConnector>>,
    ) -> Self {
        ConnPool {
            idle: (0..servers).map(|_| Mutex::new(Vec::new())).collect(),
            max_idle,
            idle_timeout,
            connect_timeout,
            proxy_protocol,
            tls,
            sweeper: std::sync::Once::new(),
        }
    }

    /// Sends `req` (origin-form URI, Host set) to server `index` at `addr`, on an idle
    /// connection if one is alive, else on a new one. `at` is the client connection the
    /// request came on (what a PROXY protocol header says).
    pub(crate) async fn send(
        self: &Arc<Self>,
        index: usize,
        addr: SocketAddr,
        mut req: Request<ProxyBody>,
        at: crate::stream::Addresses,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        let owner = self.proxy_protocol.map(|_| at.client);
        // Idle connections first, most recently used first (warm, least likely closed).
        while let Some(mut sender) = self.checkout(index, owner) {
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(self.wrap(index, sender, resp, owner)),
                Err(mut e) => match e.take_message() {
                    // Never written (the server closed this connection meanwhile): the
                    // request is intact, try the next connection.
                    Some(back) => req = back,
                    None => return Err(UpstreamError::request(e.into_error().into())),
                },
            }
        }
        let mut sender = self.connect(addr, at).await?;
        match sender.send_request(req).await {
            Ok(resp) => Ok(self.wrap(index, sender, resp, owner)),
            Err(e) => Err(UpstreamError::request(e.into())),
        }
    }

    fn checkout(&self, index: usize, owner: Option<SocketAddr>) -> Option<Sender> {
        let mut idle = self.idle[index].lock().unwrap_or_else(|e| e.into_inner());
        if owner.is_none() {
            while let Some(c) = idle.pop() {
                if c.usable(self.idle_timeout) {
                    return Some(c.sender);
                }
                // Closed by the server or idle too long: dropping the sender ends its task.
            }
            return None;
        }
        // Connections that belong to one client each: this client's, if any.
        idle.retain(|c| c.usable(self.idle_timeout));
        let i = idle.iter().rposition(|c| c.owner == owner)?;
        Some(idle.remove(i).sender)
    }

    async fn connect(
        self: &Arc<Self>,
        addr: SocketAddr,
        at: crate::stream::Addresses,
    ) -> Result<Sender, UpstreamError> {
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
        let io = crate::upstream_tls::UpstreamIo::open(
            tcp,
            addr,
            self.proxy_protocol,
            at,
            self.tls.as_deref(),
        )
        .await
        .map_err(|e| failed(e.into()))?;
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| failed(e.into()))?;
        tokio::spawn(async move {
            // Ends when the server closes, on an error, or once the pool drops the sender.
            // `with_upgrades`: a 101 response hands the connection to the tunnel.
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(%addr, error = %e, "upstream connection ended with an error");
            }
        });
        self.sweeper.call_once(|| self.start_sweeper());
        Ok(sender)
    }

    fn wrap(
        self: &Arc<Self>,
        index: usize,
        sender: Sender,
        resp: Response<Incoming>,
        owner: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        // A 101's connection now belongs to the tunnel; with no idle room, keep nothing.
        let reusable = resp.status() != StatusCode::SWITCHING_PROTOCOLS && self.max_idle > 0;
        let (parts, body) = resp.into_parts();
        let mut body = PooledBody {
            body,
            give_back: reusable.then(|| GiveBack {
                pool: Arc::downgrade(self),
                index,
                sender,
                owner,
            }),
        };
        if body.body.is_end_stream() {
            // Nothing to read (HEAD, 204, 304): the connection is free now.
            body.release();
        }
        Response::from_parts(parts, http_body_util::BodyExt::boxed(body))
    }

    fn give_back(&self, index: usize, sender: Sender, owner: Option<SocketAddr>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle[index].lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(Idle {
                sender,
                since: Instant::now(),
                owner,
            });
        }
    }

    /// Closes connections idle past `keepalive_timeout` even when no request comes to find
    /// them, as NGINX does; stops when the group is dropped (a reload).
    fn start_sweeper(self: &Arc<Self>) {
        let pool: Weak<Self> = Arc::downgrade(self);
        let every = (self.idle_timeout / 2).max(Duration::from_millis(50));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else { return };
                for list in &pool.idle {
                    let mut idle = list.lock().unwrap_or_else(|e| e.into_inner());
                    idle.retain(|c| c.usable(pool.idle_timeout));
                }
            }
        });
    }
}

struct GiveBack {
    pool: Weak<ConnPool>,
    index: usize,
    sender: Sender,
    owner: Option<SocketAddr>,
}

/// A response body that returns its connection to the pool when it has been read to the
/// end. Dropped earlier, or failed, it drops the connection instead (hyper closes it: the
/// rest of the response would be in the way of the next one).
struct PooledBody {
    body: Incoming,
    give_back: Option<GiveBack>,
}

impl PooledBody {
    fn release(&mut self) {
        if let Some(g) = self.give_back.take()
            && let Some(pool) = g.pool.upgrade()
        {
            if g.sender.is_ready() {
                pool.give_back(g.index, g.sender, g.owner);
            } else {
                // The connection task has not yet taken in the end of the response; it
                // will at its next poll. Rare: wait for it off this path.
                let mut sender = g.sender;
                tokio::spawn(async move {
                    let ready = tokio::time::timeout(Duration::from_secs(1), sender.ready()).await;
                    if matches!(ready, Ok(Ok(()))) {
                        pool.give_back(g.index, sender, g.owner);
                    }
                });
            }
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
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        match &frame {
            None => self.release(),
            Some(Ok(_)) if self.body.is_end_stream() => self.release(),
            Some(Ok(_)) => {}
            Some(Err(_)) => self.give_back = None,
        }
        Poll::Ready(frame.map(|f| f.map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
