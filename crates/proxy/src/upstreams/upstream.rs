//! Upstream groups at run time: servers, balancer, passive health and the pooled client.

use crate::body::{BoxError, ProxyBody};
use crate::hash::hash_ip;
use crate::upstreams::balance::{Balancer, PickCx, Server};
use crate::upstreams::conn_pool::{ConnPool, UpstreamError};
use crate::upstreams::request_key::key_hash;
use crate::upstreams::sticky::StickyCookies;
use futures_util::future::Either;
use http::{Request, Response, Uri};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use sluice_config::{Balance, Upstream, UpstreamProtocol};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

/// How a group talks to its servers.
enum Transport {
    /// HTTP/1.1: our keep-alive pool, one connection per request in flight.
    Http1(Arc<ConnPool>),
    /// HTTP/2 with prior knowledge: hyper-util's client, one multiplexed connection per
    /// server.
    H2(Box<Client<crate::upstreams::upstream_tls::H2Connect, ProxyBody>>),
}

/// One upstream group, shared by every request routed to it.
pub(crate) struct UpstreamGroup {
    pub(crate) config: Arc<Upstream>,
    /// `[upstream.tls]`: how connections to the servers start TLS.
    pub(crate) tls: Option<Arc<crate::upstreams::upstream_tls::UpstreamConnector>>,
    pub(crate) servers: Vec<Server>,
    balancer: Balancer,
    transport: Transport,
    /// The group's clock for latency (peak EWMA's nanoseconds).
    clock: Instant,
    /// The group's clock for down marks, ejections and health (milliseconds since this, on
    /// the coarse clock: `crate::clock`), started with `clock`.
    clock_ms: u64,
    /// Requests in flight across the group (the bound of `consistent_hash`).
    in_flight: AtomicUsize,
    /// `[upstream.sticky]`.
    pub(crate) sticky: Option<StickyCookies>,
    /// Requests sent to a server marked down because none was up (fail open).
    fail_open: AtomicU64,
    /// Retries to this group stay within it.
    pub(crate) budget: crate::upstreams::retry::RetryBudget,
    /// Outlier ejections, and those `max_ejected_percent` refused.
    ejections: AtomicU64,
    ejections_capped: AtomicU64,
    /// Wall-clock time of `clock`'s start, to date health changes.
    started: SystemTime,
    /// Requests waiting for a server under `max_conns`, and their wake-up.
    waiting: AtomicUsize,
    freed: tokio::sync::Notify,
}

/// Why no server could be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// None left to try (all tried).
    NoServer,
    /// Every server at `max_conns` and the queue full.
    QueueFull,
    /// Waited `queue_timeout` without a server freeing up.
    QueueTimeout,
}

impl std::fmt::Debug for UpstreamGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamGroup")
            .field("name", &self.config.name)
            .field("servers", &self.servers)
            .finish()
    }
}

/// The TLS connector to `config`'s servers, where it has `[upstream.tls]`.
fn connector(config: &Upstream) -> Option<Arc<crate::upstreams::upstream_tls::UpstreamConnector>> {
    // HTTP/2 over TLS is chosen by ALPN: offer `h2` (and only that) to h2 groups.
    let alpn: Option<&[u8]> = (config.protocol == UpstreamProtocol::H2).then_some(b"\x02h2");
    config.tls.as_ref().map(|t| {
        Arc::new(
            crate::upstreams::upstream_tls::UpstreamConnector::new(t, alpn).unwrap_or_else(|e| {
                // The CA was parsed at load; this is out of memory or the like. Fail
                // closed: a connector that trusts nothing refuses every server.
                tracing::error!(upstream = %config.name, error = %e, "cannot set up TLS to the upstream; its connections will fail");
                let nothing = sluice_config::UpstreamTls {
                    server_name: None,
                    ca: None,
                    verify: true,
                    client_identity: None,
                };
                crate::upstreams::upstream_tls::UpstreamConnector::new(&nothing, None)
                    .unwrap_or_else(|_| std::process::abort())
            }),
        )
    })
}

/// How the group reaches its servers: a pool of HTTP/1.1 connections, or an HTTP/2 client
/// (kept from `old` for the same definition, with its connections).
fn transport(
    config: &Upstream,
    old: Option<&UpstreamGroup>,
    tls: &Option<Arc<crate::upstreams::upstream_tls::UpstreamConnector>>,
) -> Transport {
    match (config.protocol, old.map(|o| &o.transport)) {
        (UpstreamProtocol::H2, Some(Transport::H2(client))) => Transport::H2(client.clone()),
        (protocol, _) => match protocol {
            UpstreamProtocol::Http1 => Transport::Http1(Arc::new(ConnPool::new(
                config.servers.len(),
                config.keepalive,
                config.keepalive_timeout,
                config.connect_timeout,
                config.send_proxy_protocol,
                tls.clone(),
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
                    .build(crate::upstreams::upstream_tls::H2Connect {
                        http: connector,
                        tls: tls.clone(),
                    });
                Transport::H2(Box::new(client))
            }
        },
    }
}

impl UpstreamGroup {
    /// The group of `config`. With `old` (the group a DNS change replaces), what servers at
    /// the same address knew carries over: passive health, outlier ejection, latency, active
    /// checks' verdict and idle connections; and the HTTP/2 client with its connections.
    pub(crate) fn new(config: Arc<Upstream>, old: Option<&UpstreamGroup>) -> Self {
        // The same definition but for servers: the same TLS to them.
        let tls = match old {
            Some(o) => o.tls.clone(),
            None => connector(&config),
        };
        let transport = transport(&config, old, &tls);
        let servers: Vec<Server> = config
            .servers
            .iter()
            .map(|s| Server::named(s.address.name.clone(), s.address.addr, s.weight.get()))
            .collect();
        if let Some(old) = old {
            for (i, s) in servers.iter().enumerate() {
                let Some(j) = old.servers.iter().position(|o| o.addr == s.addr) else {
                    continue;
                };
                s.carry_from(&old.servers[j]);
                if let (Transport::Http1(to), Transport::Http1(from)) = (&transport, &old.transport)
                {
                    to.adopt(i, from, j);
                }
            }
        }
        let sticky = config.sticky.clone().map(|s| {
            let names: Vec<&str> = config
                .servers
                .iter()
                .map(|s| s.address.name.as_str())
                .collect();
            StickyCookies::new(s, &config.name, &names)
        });
        let budget = crate::upstreams::retry::RetryBudget::new(
            config.retry_budget_percent,
            config.retry_budget_min_per_second,
        );
        UpstreamGroup {
            tls,
            budget,
            sticky,
            balancer: Balancer::new(config.balance, &servers, config.hash_balance_factor),
            servers,
            transport,
            config,
            // Servers' times are on the group's clock: the one they carried over from.
            clock: old.map_or_else(Instant::now, |o| o.clock),
            clock_ms: old.map_or_else(crate::clock::coarse_ms, |o| o.clock_ms),
            started: old.map_or_else(SystemTime::now, |o| o.started),
            waiting: AtomicUsize::new(0),
            freed: tokio::sync::Notify::new(),
            in_flight: AtomicUsize::new(0),
            fail_open: count_of(old, |o| &o.fail_open),
            ejections: count_of(old, |o| &o.ejections),
            ejections_capped: count_of(old, |o| &o.ejections_capped),
        }
    }

    /// Sends `req` (origin-form URI, Host set) to server `index`. `written`: its fields as
    /// lines already (HTTP/1.1 groups only; `req`'s map is then unused). Not an `async fn`:
    /// the future is the transport's own (an async fn would keep `req` a second time beside
    /// it).
    pub(crate) fn send(
        &self,
        index: usize,
        mut req: Request<ProxyBody>,
        written: Option<crate::http1::client::WrittenFields>,
        at: crate::addresses::Addresses,
    ) -> impl Future<Output = Result<Response<ProxyBody>, UpstreamError>> + use<'_> {
        let addr = self.servers[index].addr;
        debug_assert!(
            written.is_none() || matches!(self.transport, Transport::Http1(_)),
            "an h2 request's fields are its map"
        );
        match &self.transport {
            Transport::Http1(pool) => Either::Left(pool.send(index, addr, req, written, at)),
            Transport::H2(client) => Either::Right(async move {
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
            }),
        }
    }

    /// Whole seconds for the retry budget, on the coarse clock (`clock`): the budget, made
    /// with the group, compares them only with each other.
    pub(crate) fn now_s(&self) -> u64 {
        crate::clock::coarse_ms() / 1_000
    }

    pub(crate) fn now_ms(&self) -> u64 {
        crate::clock::coarse_ms().saturating_sub(self.clock_ms)
    }

    /// The request's balancing key: the client address for `ip_hash`, `hash_on` for
    /// `consistent_hash` (the client address when the request lacks it), 0 for the others.
    pub(crate) fn hash_key(&self, req: &http::request::Parts, client: IpAddr) -> u64 {
        match self.config.balance {
            Balance::IpHash => hash_ip(client),
            Balance::ConsistentHash => {
                key_hash(&self.config.hash_on, 0, &req.uri, &req.headers, client)
            }
            _ => 0,
        }
    }

    /// The balancing key of a layer-4 connection, which has nothing but its client address
    /// (what a request without its `hash_on` key hashes on, so that an HTTP and a TCP
    /// listener sharing a group send a client to the same server).
    pub(crate) fn client_key(&self, client: IpAddr) -> u64 {
        match self.config.balance {
            Balance::IpHash | Balance::ConsistentHash => hash_ip(client),
            _ => 0,
        }
    }

    /// Picks a server not yet tried for this request and counts it active until the guard
    /// drops. `key` is [`Self::hash_key`]'s; `prefer` the server a sticky cookie names, taken
    /// when it is up and not yet tried.
    pub(crate) fn pick(
        self: &Arc<Self>,
        key: u64,
        tried: &[usize],
        prefer: Option<usize>,
    ) -> Option<ActiveGuard> {
        let i = self.choose(key, tried, prefer)?;
        Some(self.take(i))
    }

    /// The server a pick would take, without taking it.
    fn choose(&self, key: u64, tried: &[usize], prefer: Option<usize>) -> Option<usize> {
        // A group whose only servers follow a name that never resolved.
        if self.servers.is_empty() {
            return None;
        }
        let cx = PickCx {
            now_ms: self.now_ms(),
            // Only peak EWMA reads it: the others spare the precise clock's read.
            now_ns: if self.config.balance == Balance::PeakEwma {
                self.clock.elapsed().as_nanos() as u64
            } else {
                0
            },
            key,
            tried,
            in_flight: self.in_flight.load(Ordering::Relaxed),
        };
        let i =
            match prefer.filter(|&i| !tried.contains(&i) && self.servers[i].available(cx.now_ms)) {
                Some(i) => i,
                None => self.balancer.pick(&self.servers, &cx)?,
            };
        if !self.servers[i].available(cx.now_ms) {
            self.fail_open.fetch_add(1, Ordering::Relaxed);
        }
        Some(i)
    }

    /// Counts server `i` active until the guard drops.
    fn take(self: &Arc<Self>, i: usize) -> ActiveGuard {
        self.servers[i].active.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        ActiveGuard {
            group: self.clone(),
            index: i,
        }
    }

    /// A server for the request, like [`Self::pick`], but within `max_conns`: when every
    /// server is at its limit the request waits in the group's queue (at most `queue` of
    /// them, each at most `queue_timeout`) for one to free up.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        key: u64,
        tried: &[usize],
        prefer: Option<usize>,
    ) -> Result<ActiveGuard, Busy> {
        let Some(max) = self.config.max_conns else {
            return self.pick(key, tried, prefer).ok_or(Busy::NoServer);
        };
        let deadline = tokio::time::Instant::now() + self.config.queue_timeout;
        let mut queued = false;
        let leave = |queued: bool| {
            if queued {
                self.waiting.fetch_sub(1, Ordering::AcqRel);
            }
        };
        loop {
            // Registered before looking, so that a server freed in between is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            // Looked at without taking: a guard taken and dropped here would wake this very
            // waiter and spin.
            let Some(chosen) = self.choose(key, tried, prefer) else {
                leave(queued);
                return Err(Busy::NoServer);
            };
            if self.servers[chosen].active.load(Ordering::Relaxed) < max {
                leave(queued);
                return Ok(self.take(chosen));
            }
            // The balancer's choice is full: any other usable server under the limit (a
            // scan, but only while the group is saturated).
            let now = self.now_ms();
            let other = (0..self.servers.len()).find(|&i| {
                !tried.contains(&i)
                    && self.servers[i].available(now)
                    && self.servers[i].active.load(Ordering::Relaxed) < max
            });
            if let Some(i) = other {
                leave(queued);
                return Ok(self.take(i));
            }
            if !queued {
                if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.config.queue {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    return Err(Busy::QueueFull);
                }
                queued = true;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                leave(queued);
                return Err(Busy::QueueTimeout);
            }
        }
    }

    /// Each server's health, for the admin API, `/status` and `/metrics`.
    pub(crate) fn health(&self) -> UpstreamHealth {
        let now_ms = self.now_ms();
        let fail_timeout_ms = self.config.fail_timeout.as_millis() as u64;
        let to_system = |ms: u64| self.started + std::time::Duration::from_millis(ms);
        UpstreamHealth {
            name: self.config.name.clone(),
            checked: self.config.health_check.is_some(),
            fail_open: self.fail_open.load(Ordering::Relaxed),
            ejections: self.ejections.load(Ordering::Relaxed),
            ejections_capped: self.ejections_capped.load(Ordering::Relaxed),
            queued: self.waiting.load(Ordering::Relaxed),
            servers: self
                .servers
                .iter()
                .map(|s| {
                    let h = s.health(now_ms, fail_timeout_ms, to_system);
                    ServerHealthReport {
                        address: s.name.clone(),
                        up: h.up,
                        reason: h.reason,
                        since: h.since,
                        in_flight: s.active.load(Ordering::Relaxed),
                    }
                })
                .collect(),
            dns: None,
        }
    }

    /// Feeds a server's response time to `peak_ewma` (a no-op for the other balancers).
    pub(crate) fn observe_latency(&self, index: usize, rtt: std::time::Duration) {
        if self.config.balance == Balance::PeakEwma {
            let now = self.clock.elapsed().as_nanos() as u64;
            self.servers[index].observe_latency(now, rtt.as_nanos() as u64);
        }
    }

    /// Feeds the result of one attempt on server `index` to outlier ejection (a 5xx, a
    /// connect error, a timeout or a broken response is a failure).
    pub(crate) fn outcome(&self, index: usize, failed: bool) {
        let Some(o) = &self.config.outlier else {
            return;
        };
        let server = &self.servers[index];
        if !server.outlier.record(failed, o.consecutive_failures.get()) {
            if !failed && server.outlier.returned() {
                tracing::info!(upstream = %self.config.name, server = %server.addr, "upstream server is back from ejection and answering");
            }
            return;
        }
        let now = self.now_ms();
        if server.outlier.ejected(now) {
            return;
        }
        let ejected = self
            .servers
            .iter()
            .filter(|s| s.outlier.ejected(now))
            .count();
        if ejected >= crate::upstreams::outlier::cap(self.servers.len(), o.max_ejected_percent) {
            self.ejections_capped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(upstream = %self.config.name, server = %server.addr, ejected, max_ejected_percent = o.max_ejected_percent, "upstream server keeps failing but too many are ejected already; keeping it");
            return;
        }
        let e = server.outlier.eject(
            now,
            o.base_ejection.as_millis() as u64,
            o.max_ejection.as_millis() as u64,
        );
        self.ejections.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            upstream = %self.config.name,
            server = %server.addr,
            failures = o.consecutive_failures.get(),
            ejection = e.nth,
            for_ms = e.duration_ms,
            "upstream server failed live traffic repeatedly; ejected"
        );
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

/// A group's counter carried over from the group it replaces.
fn count_of(old: Option<&UpstreamGroup>, c: impl Fn(&UpstreamGroup) -> &AtomicU64) -> AtomicU64 {
    AtomicU64::new(old.map_or(0, |o| c(o).load(Ordering::Relaxed)))
}

/// An upstream group's health, as the admin listener shows it.
#[derive(Debug, Clone)]
pub struct UpstreamHealth {
    /// The upstream's name.
    pub name: String,
    /// Whether active health checks run for it.
    pub checked: bool,
    /// Requests sent to a server marked down because none was up.
    pub fail_open: u64,
    /// Outlier ejections since the group started.
    pub ejections: u64,
    /// Ejections `max_ejected_percent` did not allow.
    pub ejections_capped: u64,
    /// Requests waiting for a server under `max_conns`.
    pub queued: usize,
    /// Its servers, in configuration order (a name that follows DNS: one per address).
    pub servers: Vec<ServerHealthReport>,
    /// Following DNS, when a server has `resolve = true`.
    pub dns: Option<DnsReport>,
}

/// What `/status` and `/metrics` show of a group that follows DNS.
#[derive(Debug, Clone, Default)]
pub struct DnsReport {
    /// Each followed name and its addresses now.
    pub names: Vec<(String, Vec<std::net::SocketAddr>)>,
    /// Lookups done.
    pub lookups: u64,
    /// Lookups that failed (the last good addresses kept).
    pub failures: u64,
    /// Times the group's servers changed.
    pub changes: u64,
    /// The last failure, if the last lookup of some name failed.
    pub last_error: Option<String>,
}

/// One server's health.
#[derive(Debug, Clone)]
pub struct ServerHealthReport {
    /// The address as configured.
    pub address: String,
    /// In use (`"up"`) or skipped (`"down"`).
    pub up: bool,
    /// Why: the health check's last result, or the passive mark.
    pub reason: String,
    /// When the state last changed.
    pub since: SystemTime,
    /// Requests in flight to it.
    pub in_flight: usize,
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
        self.group.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.group.waiting.load(Ordering::Acquire) > 0 {
            self.group.freed.notify_one();
        }
    }
}
