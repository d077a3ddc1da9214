//! Upstream groups at run time: servers, balancer, passive health and the pooled client.

use crate::balance::{Balancer, Server};
use crate::body::{BoxError, ProxyBody};
use crate::conn_pool::{ConnPool, UpstreamError};
use http::{Request, Response, Uri};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use sluice_config::{Upstream, UpstreamProtocol};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// How a group talks to its servers.
enum Transport {
    /// HTTP/1.1: our keep-alive pool, one connection per request in flight.
    Http1(Arc<ConnPool>),
    /// HTTP/2 with prior knowledge: hyper-util's client, one multiplexed connection per
    /// server.
    H2(Box<Client<HttpConnector, ProxyBody>>),
}

/// One upstream group, shared by every request routed to it.
pub(crate) struct UpstreamGroup {
    pub(crate) config: Arc<Upstream>,
    pub(crate) servers: Vec<Server>,
    balancer: Balancer,
    transport: Transport,
    clock: Instant,
}

impl std::fmt::Debug for UpstreamGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamGroup")
            .field("name", &self.config.name)
            .field("servers", &self.servers)
            .finish()
    }
}

impl UpstreamGroup {
    pub(crate) fn new(config: Arc<Upstream>) -> Self {
        let transport = match config.protocol {
            UpstreamProtocol::Http1 => Transport::Http1(Arc::new(ConnPool::new(
                config.servers.len(),
                config.keepalive,
                config.keepalive_timeout,
                config.connect_timeout,
            ))),
            UpstreamProtocol::H2 => {
                let mut connector = HttpConnector::new();
                connector.set_connect_timeout(Some(config.connect_timeout));
                connector.set_nodelay(true);
                connector.enforce_http(true);
                let client = Client::builder(TokioExecutor::new())
                    .pool_idle_timeout(config.keepalive_timeout)
                    .pool_max_idle_per_host(config.keepalive)
                    .pool_timer(TokioTimer::new())
                    .timer(TokioTimer::new())
                    .http2_only(true)
                    .build(connector);
                Transport::H2(Box::new(client))
            }
        };
        let servers = config
            .servers
            .iter()
            .map(|s| Server::new(s.address.addr, s.weight.get()))
            .collect();
        UpstreamGroup {
            balancer: Balancer::new(config.balance, config.servers.len()),
            servers,
            transport,
            config,
            clock: Instant::now(),
        }
    }

    /// Sends `req` (origin-form URI, Host set) to server `index`.
    pub(crate) async fn send(
        &self,
        index: usize,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        let addr = self.servers[index].addr;
        match &self.transport {
            Transport::Http1(pool) => pool.send(index, addr, req).await,
            Transport::H2(client) => {
                // hyper-util's client picks its connection by the URI's authority.
                let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                *req.uri_mut() = Uri::builder()
                    .scheme("http")
                    .authority(crate::text::addr_string(&addr))
                    .path_and_query(pq)
                    .build()
                    .map_err(|e| UpstreamError::request(e.into()))?;
                match client.request(req).await {
                    Ok(resp) => Ok(resp.map(|b| b.map_err(BoxError::from).boxed())),
                    Err(e) => Err(if e.is_connect() {
                        UpstreamError::connect(e.into())
                    } else {
                        UpstreamError::request(e.into())
                    }),
                }
            }
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Picks a server not yet tried for this request and counts it active until the guard drops.
    pub(crate) fn pick(self: &Arc<Self>, client: IpAddr, tried: &[usize]) -> Option<ActiveGuard> {
        let i = self
            .balancer
            .pick(&self.servers, self.now_ms(), client, tried)?;
        self.servers[i].active.fetch_add(1, Ordering::Relaxed);
        Some(ActiveGuard {
            group: self.clone(),
            index: i,
        })
    }

    pub(crate) fn mark_failed(&self, index: usize) {
        let c = &self.config;
        if self.servers[index].failed(
            self.now_ms(),
            c.max_fails.get(),
            c.fail_timeout.as_millis() as u64,
        ) {
            tracing::warn!(
                upstream = %c.name,
                server = %self.servers[index].addr,
                skip_for = ?c.fail_timeout,
                "upstream server failed; skipping it for a while"
            );
        }
    }
}

/// Holds one server's active-request count up while a request uses it.
#[derive(Debug)]
pub(crate) struct ActiveGuard {
    pub(crate) group: Arc<UpstreamGroup>,
    pub(crate) index: usize,
}

impl ActiveGuard {
    pub(crate) fn server(&self) -> &Server {
        &self.group.servers[self.index]
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.server().active.fetch_sub(1, Ordering::Relaxed);
    }
}
