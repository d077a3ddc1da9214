//! Upstream groups at run time: servers, balancer, passive health and the pooled client.

use crate::balance::{Balancer, Server};
use crate::body::ProxyBody;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use sluice_config::{Upstream, UpstreamProtocol};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// One upstream group, shared by every request routed to it.
pub(crate) struct UpstreamGroup {
    pub(crate) config: Arc<Upstream>,
    pub(crate) servers: Vec<Server>,
    balancer: Balancer,
    pub(crate) client: Client<HttpConnector, ProxyBody>,
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
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_idle_timeout(config.keepalive_timeout)
            .pool_max_idle_per_host(config.keepalive)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new());
        if config.protocol == UpstreamProtocol::H2 {
            builder.http2_only(true);
        }
        let client = builder.build(connector);
        let servers = config
            .servers
            .iter()
            .map(|s| Server::new(s.address.addr, s.weight.get()))
            .collect();
        UpstreamGroup {
            balancer: Balancer::new(config.balance, config.servers.len()),
            servers,
            client,
            config,
            clock: Instant::now(),
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
