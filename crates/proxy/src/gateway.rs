//! Starting, reconfiguring and stopping the data plane.
//!
//! A [`Gateway`] serves one configuration [`Snapshot`] at a time and moves to the next with
//! [`Gateway::apply`], keeping what did not change:
//! - a listener whose name and address stay keeps its socket (never closed and rebound); its
//!   routes, upstreams, TLS acceptor and settings are swapped atomically, so new connections
//!   and new requests on open keep-alive and HTTP/2 connections use the new configuration,
//!   while requests in flight finish on the old one;
//! - a removed listener (or one whose address changed) stops accepting and drains its
//!   connections within `shutdown_timeout`;
//! - an upstream group whose definition did not change keeps its keep-alive pool and
//!   passive-health state;
//! - the offload engines are process-wide and rebuilt only when their own settings change;
//!   the old ones finish their jobs and go when the last handshake or body using them ends;
//! - a TLS acceptor is rebuilt only when its certificates' files or its settings changed, and
//!   keeps its session ticket keys, so tickets issued before a reload still resume.
//!
//! Everything that can fail (binding, TLS set-up, engines, the access log) is done before
//! anything is swapped: a reload either applies whole or changes nothing.

mod drain;
mod running;

use crate::ProxyError;
use crate::access_log::AccessLog;
use crate::handshakes::{HandshakeScheduler, HandshakeStats};
use crate::request::context::ListenerCtx;
use crate::request::filters::RouteGuards;
use crate::request::rate_limit::RedisStore;
use crate::request::rate_limit::takeover::Takeovers;
use crate::request::router::Router;
use crate::upstreams::dns::{Resolver, UpstreamSlot};
use arc_swap::ArcSwap;
use drain::drain;
use running::{RunningListener, spawn_listener, spawn_quic};
use sluice_config::{CompressOffload, Listener, ListenerKind, LogConfig, Snapshot};
use sluice_tls::{KeyOffload, TlsAcceptor, TlsIdentity};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::task::TaskTracker;

/// A running gateway: its listeners, upstream groups and engines, and the means to
/// reconfigure and stop it. Shared (`Arc`) between the signal handler and the admin API.
#[derive(Debug)]
pub struct Gateway {
    /// Serializes `apply` and `shutdown`.
    state: tokio::sync::Mutex<State>,
    /// What readers (the admin listener, the banner) see, swapped with each applied snapshot.
    view: ArcSwap<View>,
    metrics: Arc<crate::ProxyMetrics>,
    takeovers: Arc<Takeovers>,
}

/// The parts of the running configuration that readers need.
#[derive(Debug)]
struct View {
    snapshot: Arc<Snapshot>,
    addresses: Vec<(String, SocketAddr)>,
    key_offload: Arc<KeyOffload>,
    handshakes: Arc<HandshakeScheduler>,
    compressor: Arc<crate::Compressor>,
    cache: Arc<crate::ResponseCache>,
    tracer: Option<Arc<sluice_trace::Tracer>>,
    trace_counters: Arc<sluice_trace::Counters>,
    access_log: AccessLog,
    /// Connections of every listener, current and draining.
    trackers: Vec<TaskTracker>,
    /// Upstream groups in configuration order (their health).
    upstreams: Arc<[Arc<UpstreamSlot>]>,
    guards: Arc<RouteGuards>,
    redis: Option<Arc<RedisStore>>,
}

#[derive(Debug)]
struct State {
    snapshot: Arc<Snapshot>,
    listeners: Vec<RunningListener>,
    /// Removed listeners whose connections are still finishing.
    draining: Vec<TaskTracker>,
    /// Upstream groups by name, and in configuration order.
    upstreams: Arc<HashMap<String, Arc<UpstreamSlot>>>,
    groups: Arc<[Arc<UpstreamSlot>]>,
    /// `[resolver]`'s, while some server follows DNS.
    resolver: Option<Arc<Resolver>>,
    key_offload: Arc<KeyOffload>,
    key_identity: Vec<u8>,
    /// Where handshakes run; replaced when `[offload.handshakes]` changes.
    handshakes: Arc<HandshakeScheduler>,
    compressor: Arc<crate::Compressor>,
    compress_config: CompressOffload,
    /// The response cache; rebuilt (empty) only when `[cache]` changes.
    cache: Arc<crate::ResponseCache>,
    /// `[tracing]`'s exporter; started again only when `[tracing]` changes.
    tracer: Option<Arc<sluice_trace::Tracer>>,
    /// Its counters, kept across such changes.
    trace_counters: Arc<sluice_trace::Counters>,
    access_log: AccessLog,
    log_config: LogConfig,
    /// Rate limiters and authenticators by route, and the shared store's connection.
    guards: Arc<RouteGuards>,
    redis: Option<Arc<RedisStore>>,
    /// MQTT connections per client identifier, for the gateway's life.
    takeovers: Arc<Takeovers>,
    stopped: bool,
}

/// The shared rate limits' Redis, as `/status`, `/metrics` and the dashboard show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStore {
    /// Its URL, any password replaced by `***`.
    pub url: String,
    /// Whether it is reached over TLS (`rediss://`).
    pub tls: bool,
    /// Whether it answers; while not, shared limits decide locally at rate /
    /// `expected_gateways`.
    pub up: bool,
    /// Times it became unreachable (the first failed connection at start included).
    pub outages: u64,
}

/// What a successful [`Gateway::apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Nothing differed from the running configuration (same revision): nothing was done.
    pub unchanged: bool,
    /// Listeners bound by this change.
    pub listeners_added: Vec<String>,
    /// Listeners that stopped accepting and are draining.
    pub listeners_removed: Vec<String>,
    /// Listeners whose TLS acceptor was rebuilt (certificates or TLS settings changed).
    pub tls_rebuilt: Vec<String>,
    /// Upstream groups kept with their pools and health state.
    pub upstreams_kept: usize,
    /// Upstream groups built new.
    pub upstreams_new: usize,
    /// Whether the private-key engines were rebuilt.
    pub crypto_engines_rebuilt: bool,
    /// Whether the compression engines were rebuilt.
    pub compress_engines_rebuilt: bool,
    /// Routing tables built (a change that touched no route builds none).
    pub routers_built: usize,
    /// Routing tables kept with some routes replaced in place (same hosts and paths).
    pub routers_updated: usize,
}

/// A change prepared but not yet visible.
struct Prepared {
    upstreams: Arc<HashMap<String, Arc<UpstreamSlot>>>,
    groups: Arc<[Arc<UpstreamSlot>]>,
    resolver: Option<Arc<Resolver>>,
    guards: Arc<RouteGuards>,
    redis: Option<Arc<RedisStore>>,
    key_offload: Arc<KeyOffload>,
    key_identity: Vec<u8>,
    handshakes: Arc<HandshakeScheduler>,
    compressor: Arc<crate::Compressor>,
    compress_config: CompressOffload,
    cache: Arc<crate::ResponseCache>,
    tracer: Option<Arc<sluice_trace::Tracer>>,
    access_log: AccessLog,
    /// Per listener of the new snapshot: an index into the old listeners to keep, or a new
    /// socket; and its new context.
    listeners: Vec<(Placement, Arc<ListenerCtx>)>,
    report: ApplyReport,
}

enum Placement {
    /// The running listener at this index, and a UDP socket when HTTP/3 starts on it now.
    Keep(usize, Option<UdpSocket>),
    /// A new listener's socket, and its UDP socket when it serves HTTP/3.
    Bind(TcpListener, Option<UdpSocket>),
}

/// The compression engines `snapshot` needs: none when no route compresses.
fn compress_config(snapshot: &Snapshot) -> CompressOffload {
    let mut compress = snapshot.offload.compress.clone();
    if !snapshot.routes.iter().any(|r| r.compression.enabled) {
        compress.engines.clear();
    }
    compress
}

impl Gateway {
    /// Binds every listener of `snapshot` and starts serving. Fails without serving anything
    /// if any listener cannot bind or set up TLS.
    pub async fn start(snapshot: Arc<Snapshot>) -> Result<Gateway, ProxyError> {
        let access_log = open_access_log(&snapshot.log)?;
        Self::start_with_log(snapshot, access_log).await
    }

    /// Like [`Gateway::start`], with an access log sink chosen by the caller (kept across
    /// reloads while `[log]` does not change).
    pub async fn start_with_log(
        snapshot: Arc<Snapshot>,
        access_log: AccessLog,
    ) -> Result<Gateway, ProxyError> {
        Self::start_inherited(snapshot, access_log, Vec::new()).await
    }

    /// Like [`Gateway::start_with_log`], serving on sockets already bound (handed over by the
    /// process this one upgrades): a listener takes the inherited socket of its name when the
    /// socket is bound to its address (any port when the configured one is 0); the others
    /// bind as usual, and inherited sockets nobody takes are closed.
    pub async fn start_inherited(
        snapshot: Arc<Snapshot>,
        access_log: AccessLog,
        inherited: Vec<(String, std::net::TcpListener)>,
    ) -> Result<Gateway, ProxyError> {
        let metrics = Arc::new(crate::ProxyMetrics::default());
        let key_identity = KeyOffload::identity(&snapshot);
        let key_offload = KeyOffload::from_config(&snapshot).map_err(ProxyError::Offload)?;
        let compress = compress_config(&snapshot);
        let compressor = crate::Compressor::from_config(&compress, Default::default())
            .map_err(ProxyError::Offload)?;
        let mut state = State {
            snapshot: snapshot.clone(),
            listeners: Vec::new(),
            draining: Vec::new(),
            upstreams: Default::default(),
            groups: Arc::new([]),
            resolver: None,
            key_offload,
            key_identity,
            handshakes: HandshakeScheduler::start(&snapshot.offload.handshakes)
                .map_err(ProxyError::Offload)?,
            compressor,
            compress_config: compress,
            cache: crate::ResponseCache::new(&snapshot.cache, Default::default())
                .map_err(ProxyError::Offload)?,
            tracer: None,
            trace_counters: Default::default(),
            access_log: access_log.clone(),
            log_config: snapshot.log.clone(),
            guards: Arc::default(),
            redis: None,
            takeovers: Takeovers::new(),
            stopped: false,
        };
        let prepared = prepare(&state, &snapshot, &metrics, inherited).await?;
        commit(&mut state, snapshot.clone(), prepared);
        let view = ArcSwap::from_pointee(view_of(&state));
        Ok(Gateway {
            takeovers: state.takeovers.clone(),
            state: tokio::sync::Mutex::new(state),
            view,
            metrics,
        })
    }

    /// Moves the gateway to `snapshot`, keeping what did not change (see the module
    /// documentation). On error nothing has changed and the old configuration keeps serving.
    pub async fn apply(&self, snapshot: Arc<Snapshot>) -> Result<ApplyReport, ProxyError> {
        let mut state = self.state.lock().await;
        if state.stopped {
            return Err(ProxyError::Stopped);
        }
        if state.snapshot.revision == snapshot.revision {
            return Ok(ApplyReport {
                unchanged: true,
                ..ApplyReport::default()
            });
        }
        let prepared = prepare(&state, &snapshot, &self.metrics, Vec::new()).await?;
        let report = prepared.report.clone();
        commit(&mut state, snapshot, prepared);
        // The old view may hold the last reference to the old snapshot: freed at idle too.
        let old_view = self.view.swap(Arc::new(view_of(&state)));
        tokio::task::spawn_blocking(move || sluice_offload::idle::run_idle(move || drop(old_view)));
        Ok(report)
    }

    /// The configuration being served.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.view.load().snapshot.clone()
    }

    /// Where each listener is bound (useful with port 0), in configuration order.
    pub fn addresses(&self) -> Vec<(String, SocketAddr)> {
        self.view.load().addresses.clone()
    }

    /// The bound address of the listener called `name`.
    pub fn local_addr(&self, name: &str) -> Option<SocketAddr> {
        self.view
            .load()
            .addresses
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
    }

    /// The listening sockets, by listener name, for handing over to a new process (binary
    /// upgrade). The descriptors stay owned by the gateway.
    pub async fn listening_fds(&self) -> Vec<(String, std::os::fd::RawFd)> {
        self.state
            .lock()
            .await
            .listeners
            .iter()
            .map(|l| (l.name.clone(), l.fd))
            .collect()
    }

    /// Connections currently open, draining listeners' included.
    pub fn open_connections(&self) -> usize {
        self.view.load().trackers.iter().map(TaskTracker::len).sum()
    }

    /// What the data plane counted.
    pub fn metrics(&self) -> Arc<crate::ProxyMetrics> {
        self.metrics.clone()
    }

    /// The authenticator of route `name` (a route with `[route.auth]`).
    pub fn authenticator(&self, name: &str) -> Option<Arc<sluice_auth::Authenticator>> {
        self.view.load().guards.auth.get(name).cloned()
    }

    /// The configuration's Lua states and dictionaries (`None`: no route has a script).
    pub fn lua(&self) -> Option<Arc<sluice_lua::LuaRuntime>> {
        self.view.load().guards.lua.clone()
    }

    /// The configuration's firewall (`None`: no route has `[route.waf]`).
    pub fn waf(&self) -> Option<Arc<sluice_waf::WafRuntime>> {
        self.view.load().guards.waf.clone()
    }

    /// Each authenticated route's counters, sorted by route.
    pub fn authentication(&self) -> Vec<(String, Arc<sluice_auth::AuthCounters>)> {
        let view = self.view.load();
        let mut out: Vec<_> = view
            .guards
            .auth
            .iter()
            .map(|(name, a)| (name.clone(), a.counters.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Each rate-limited route's counts: (route, [passed, delayed, rejected], checks decided
    /// locally because Redis could not answer, calls to Redis); sorted by route.
    pub fn rate_limits(&self) -> Vec<(String, [u64; 3], u64, u64)> {
        let view = self.view.load();
        let mut out: Vec<_> = view
            .guards
            .limiters
            .iter()
            .map(|(name, l)| {
                (
                    name.clone(),
                    std::array::from_fn(|i| l.counts[i].load(std::sync::atomic::Ordering::Relaxed)),
                    l.fell_back.load(std::sync::atomic::Ordering::Relaxed),
                    l.redis_calls.load(std::sync::atomic::Ordering::Relaxed),
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// MQTT connections closed by newer ones with their client identifier
    /// (`max_connections_per_client_id`).
    pub fn mqtt_takeovers(&self) -> crate::TakeoverCounts {
        self.takeovers.counts()
    }

    /// The shared rate-limit store as `/status` shows it; `None` when not used.
    pub fn rate_limit_redis(&self) -> Option<SharedStore> {
        self.view.load().redis.as_ref().map(|r| SharedStore {
            url: r.shown_url().to_owned(),
            tls: r.tls(),
            up: r.is_up(),
            outages: r.outages(),
        })
    }

    /// Every upstream group's health, in configuration order.
    pub fn upstream_health(&self) -> Vec<crate::UpstreamHealth> {
        self.view
            .load()
            .upstreams
            .iter()
            .map(|slot| {
                let mut h = slot.group().health();
                h.dns = slot.dns_report();
                h
            })
            .collect()
    }

    /// The TLS private-key offload (its engines' counters).
    pub fn key_offload(&self) -> Arc<KeyOffload> {
        self.view.load().key_offload.clone()
    }

    /// Handshakes in progress, their limit, the expired, and the handshake threads' nice.
    pub fn handshake_stats(&self) -> HandshakeStats {
        self.view.load().handshakes.stats()
    }

    /// What the TLS private-key engines did.
    pub fn crypto_counters(&self) -> Vec<sluice_offload::CountersSnapshot> {
        self.view.load().key_offload.counters()
    }

    /// The response compression service (counters for `/metrics`).
    pub fn compressor(&self) -> Arc<crate::Compressor> {
        self.view.load().compressor.clone()
    }

    /// The response cache (its counters, size and purges).
    pub fn cache(&self) -> Arc<crate::ResponseCache> {
        self.view.load().cache.clone()
    }

    /// What became of the spans `[tracing]` recorded (kept across reloads).
    pub fn trace_counters(&self) -> Arc<sluice_trace::Counters> {
        self.view.load().trace_counters.clone()
    }

    /// `[tracing]` in force, if any (tests flush it).
    pub fn tracer(&self) -> Option<Arc<sluice_trace::Tracer>> {
        self.view.load().tracer.clone()
    }

    /// The access log sink.
    pub fn access_log(&self) -> AccessLog {
        self.view.load().access_log.clone()
    }

    /// Stops accepting, lets in-flight requests finish for up to `deadline`, then closes
    /// what is left. Returns whether everything finished in time. Later calls to `apply`
    /// fail.
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        self.shutdown_keeping_streams(deadline, deadline).await
    }

    /// [`Gateway::shutdown`], except that long-lived relays get `streams` (at least
    /// `deadline`) before they are closed: the layer-4 listeners' connections (TCP and MQTT)
    /// and, on HTTP listeners, the relays that outlived their requests (WebSocket tunnels,
    /// MQTT over WebSocket). After an upgrade the old process keeps relaying them while the
    /// new one takes the new connections.
    pub async fn shutdown_keeping_streams(&self, deadline: Duration, streams: Duration) -> bool {
        let mut state = self.state.lock().await;
        state.stopped = true;
        for l in &state.listeners {
            l.stop_accepting();
        }
        for l in &mut state.listeners {
            let _ = (&mut l.accept).await;
        }
        let streams = streams.max(deadline);
        let drains = state.listeners.iter().flat_map(|l| {
            let layer4 = !matches!(l.ctx.load().config.kind, ListenerKind::Http);
            let within = if layer4 { streams } else { deadline };
            [
                drain(l.connections.clone(), l.force.clone(), within),
                drain(l.streams.tasks.clone(), l.streams.force.clone(), streams),
            ]
        });
        let clean = futures_util::future::join_all(drains).await;
        // Listeners a reload removed: their own timers force them (see `commit`).
        for t in &state.draining {
            t.wait().await;
        }
        state.access_log.flush();
        clean.into_iter().all(|c| c)
    }
}

fn open_access_log(config: &LogConfig) -> Result<AccessLog, ProxyError> {
    AccessLog::open(config).map_err(access_log_error(config))
}

/// What opening `config`'s access log failed with, naming its target.
fn access_log_error(config: &LogConfig) -> impl FnOnce(std::io::Error) -> ProxyError + '_ {
    |source| ProxyError::AccessLog {
        path: format!("{:?}", config.access_log),
        source,
    }
}

fn view_of(state: &State) -> View {
    View {
        snapshot: state.snapshot.clone(),
        addresses: state
            .listeners
            .iter()
            .map(|l| (l.name.clone(), l.bound))
            .collect(),
        key_offload: state.key_offload.clone(),
        handshakes: state.handshakes.clone(),
        compressor: state.compressor.clone(),
        cache: state.cache.clone(),
        tracer: state.tracer.clone(),
        trace_counters: state.trace_counters.clone(),
        access_log: state.access_log.clone(),
        guards: state.guards.clone(),
        redis: state.redis.clone(),
        upstreams: state.groups.clone(),
        trackers: state
            .listeners
            .iter()
            .map(|l| l.connections.clone())
            .chain(state.draining.iter().cloned())
            .collect(),
    }
}

/// Builds everything `snapshot` needs that the running state cannot lend, without touching
/// the running state. At start (`state` has no listeners yet, and its engines were just built
/// for `snapshot`), `inherited` sockets are used before binding new ones.
async fn prepare(
    state: &State,
    snapshot: &Arc<Snapshot>,
    metrics: &Arc<crate::ProxyMetrics>,
    mut inherited: Vec<(String, std::net::TcpListener)>,
) -> Result<Prepared, ProxyError> {
    let first = state.listeners.is_empty() && Arc::ptr_eq(&state.snapshot, snapshot);
    let mut report = ApplyReport::default();

    // The shared store: kept while its URL and TLS stay; limiters kept while their limit stays.
    let redis = match &state.redis {
        Some(r) if r.serves(&snapshot.rate_limit_store) => Some(r.clone()),
        _ => RedisStore::start(&snapshot.rate_limit_store),
    };
    // What carries over (engines, upstream groups, rate limiters) is found by passes over
    // every certificate, upstream and route: with 40,000 routes, milliseconds of pointer
    // chasing that requests would wait behind on the event loop. At idle priority instead.
    let (key_identity, compress, kept, limiters, waf) = {
        let (snapshot, old_groups, old_guards, redis) = (
            snapshot.clone(),
            state.upstreams.clone(),
            state.guards.clone(),
            redis.clone(),
        );
        at_idle(move || {
            let kept: Vec<Option<Arc<UpstreamSlot>>> = snapshot
                .upstreams
                .iter()
                .map(|u| {
                    // The same object (a fleet change to a route keeps every upstream's
                    // `Arc`) needs no field-by-field comparison.
                    old_groups
                        .get(&u.name)
                        .filter(|old| old.serves(u, &snapshot.resolver))
                        .cloned()
                })
                .collect();
            let limiters = crate::request::rate_limit::build(
                &snapshot.routes,
                &snapshot.rate_limit_store,
                redis.as_ref(),
                &old_guards.limiters,
            );
            // What the routes' encodings cost inline, once each (the dashboard's CPU saved).
            crate::request::compression::calibrate(&snapshot.routes);
            // Rule sets compiled anew (a rule or data file may have changed) before anything
            // is swapped: a broken rule fails the apply and the old sets keep serving.
            let waf = sluice_waf::WafRuntime::build(
                &snapshot.waf,
                &snapshot.routes,
                old_guards.waf.as_deref(),
            );
            (
                KeyOffload::identity(&snapshot),
                compress_config(&snapshot),
                kept,
                limiters,
                waf,
            )
        })
        .await?
    };
    let waf = waf.map_err(ProxyError::Waf)?.map(Arc::new);
    // The password-hashing pool, kept while `[auth]` stays (a new one: every authenticator
    // is made again on it, and the old pool's threads end with its last check).
    let hashing = if state.guards.hashing.settings() == snapshot.auth {
        state.guards.hashing.clone()
    } else {
        Arc::new(sluice_auth::HashPool::new(snapshot.auth))
    };
    // Authenticators read their files here (small ones) and start their JWKS fetches and
    // file watchers on this runtime.
    let guards = Arc::new(RouteGuards {
        limiters,
        auth: sluice_auth::build(&snapshot.routes, &state.guards.auth, &hashing)
            .map_err(ProxyError::Auth)?,
        hashing,
        // Scripts compiled into new states, unless nothing Lua sees changed.
        lua: sluice_lua::LuaRuntime::build(
            &snapshot.lua,
            &snapshot.routes,
            state.guards.lua.as_ref(),
        )
        .map_err(ProxyError::Lua)?,
        waf,
    });
    let key_offload = if first || key_identity == state.key_identity {
        state.key_offload.clone()
    } else {
        report.crypto_engines_rebuilt = true;
        KeyOffload::from_config(snapshot).map_err(ProxyError::Offload)?
    };
    // A new scheduler for new connections; handshakes in progress finish on the old one,
    // which goes when the last of them does.
    let handshakes = if state.snapshot.offload.handshakes == snapshot.offload.handshakes {
        state.handshakes.clone()
    } else {
        HandshakeScheduler::start(&snapshot.offload.handshakes).map_err(ProxyError::Offload)?
    };
    let compressor = if first || compress == state.compress_config {
        state.compressor.clone()
    } else {
        report.compress_engines_rebuilt = true;
        crate::Compressor::from_config(&compress, state.compressor.counters())
            .map_err(ProxyError::Offload)?
    };
    let cache = if *state.cache.settings() == snapshot.cache {
        state.cache.clone()
    } else {
        let rebuilt = crate::ResponseCache::new(&snapshot.cache, state.cache.counters())
            .map_err(ProxyError::Offload)?;
        rebuilt.store.take_purges_from(&state.cache.store);
        rebuilt
    };
    let tracer = match (&state.tracer, &snapshot.tracing) {
        (_, None) => None,
        (Some(t), Some(s)) if t.settings() == s => Some(t.clone()),
        (_, Some(s)) => Some(Arc::new(
            sluice_trace::Tracer::start(s, state.trace_counters.clone())
                .map_err(ProxyError::Tracing)?,
        )),
    };
    let access_log = if first || snapshot.log == state.log_config {
        state.access_log.clone()
    } else {
        state
            .access_log
            .reopen(&snapshot.log)
            .map_err(access_log_error(&snapshot.log))?
    };

    let (upstreams, groups, resolver) = upstream_groups(state, snapshot, kept, &mut report).await?;

    let routers = routers(state, snapshot, &mut report).await?;
    let old_gates = (state.listeners.first()).map(|l| l.ctx.load_full().mqtt_gates.clone());
    let mqtt_gates = Arc::new(
        crate::layer4::mqtt_ws::gates(
            snapshot,
            old_gates.as_deref(),
            &guards.hashing,
            redis.as_ref(),
        )
        .map_err(ProxyError::Auth)?,
    );
    let mut listeners = Vec::with_capacity(snapshot.listeners.len());
    let mut plan_tables = Vec::new();
    for (l, router) in snapshot.listeners.iter().zip(routers) {
        let old = state
            .listeners
            .iter()
            .position(|o| o.name == l.name && o.configured == l.address);
        let old_ctx = old.map(|i| state.listeners[i].ctx.load_full());
        let tls = tls_for(snapshot, l, &key_offload, old_ctx.as_deref(), &mut report)?;
        let placement = placement(state, l, old, &mut inherited).await?;
        if !first && matches!(placement, Placement::Bind(..)) {
            report.listeners_added.push(l.name.clone());
        }
        let plans = crate::request::filters::plans_for(&mut plan_tables, &router, &guards);
        let mqtt_auth =
            crate::layer4::mqtt_auth::authenticator(l, old_ctx.as_deref(), &guards.hashing)
                .map_err(ProxyError::Auth)?;
        let mqtt_rates = crate::request::rate_limit::connect_rates::ConnectRates::build(
            l,
            old_ctx.as_deref().and_then(|o| o.mqtt_rates.as_deref()),
            &snapshot.rate_limit_store,
            redis.as_ref(),
        );
        let ctx = Arc::new(ListenerCtx {
            name: Arc::from(l.name.as_str()),
            config: l.clone(),
            router,
            tls,
            handshakes: handshakes.clone(),
            upstreams: groups.clone(),
            access_log: access_log.clone(),
            metrics: metrics.clone(),
            compressor: compressor.clone(),
            cache: cache.clone(),
            tracer: tracer.clone(),
            plans,
            alt_svc: crate::request::context::AltSvc::new(l.http3, l.address.port()),
            mqtt_auth,
            mqtt_rates,
            takeovers: state.takeovers.clone(),
            mqtt_bridge: crate::layer4::mqtt_ws::bridge,
            mqtt_gates: mqtt_gates.clone(),
        });
        listeners.push((placement, ctx));
    }
    for old in &state.listeners {
        let kept = listeners.iter().any(
            |(p, _)| matches!(p, Placement::Keep(i, _) if state.listeners[*i].name == old.name),
        );
        if !kept {
            report.listeners_removed.push(old.name.clone());
        }
    }
    Ok(Prepared {
        upstreams,
        groups,
        resolver,
        guards,
        redis,
        key_offload,
        key_identity,
        handshakes,
        compressor,
        compress_config: compress,
        cache,
        tracer,
        access_log,
        listeners,
        report,
    })
}

/// Upstream groups by name, the same in configuration order, and their DNS resolver.
type Groups = (
    Arc<HashMap<String, Arc<UpstreamSlot>>>,
    Arc<[Arc<UpstreamSlot>]>,
    Option<Arc<Resolver>>,
);

/// The upstream groups of `snapshot`, in its order, and by name: the running group where
/// `kept` has it, else a new one (its health checks and DNS lookups start as tasks of this
/// runtime); and the DNS resolver they share.
async fn upstream_groups(
    state: &State,
    snapshot: &Snapshot,
    kept: Vec<Option<Arc<UpstreamSlot>>>,
    report: &mut ApplyReport,
) -> Result<Groups, ProxyError> {
    let all_kept = kept.iter().all(Option::is_some) && kept.len() == state.upstreams.len();
    // The DNS resolver: the running one while `[resolver]` stays, none while no server
    // follows a name.
    let follows = snapshot
        .upstreams
        .iter()
        .any(|u| u.servers.iter().any(|s| s.resolve));
    let resolver = match &state.resolver {
        _ if !follows => None,
        Some(r) if r.config == snapshot.resolver => Some(r.clone()),
        _ => Some(Arc::new(
            Resolver::new(&snapshot.resolver).map_err(ProxyError::Resolver)?,
        )),
    };
    // New groups start here: their health checks and DNS lookups are tasks of this runtime.
    let mut groups: Vec<Arc<UpstreamSlot>> = Vec::with_capacity(kept.len());
    for (kept, u) in kept.into_iter().zip(&snapshot.upstreams) {
        match kept {
            Some(slot) => {
                report.upstreams_kept += 1;
                groups.push(slot);
            }
            None => {
                report.upstreams_new += 1;
                let seed = state.upstreams.get(&u.name).map(Arc::as_ref);
                groups.push(UpstreamSlot::start(u.clone(), resolver.as_ref(), seed).await);
            }
        }
    }
    let groups: Arc<[Arc<UpstreamSlot>]> = groups.into();
    // Every group kept and none removed: the same names, the same map.
    let upstreams = if all_kept {
        state.upstreams.clone()
    } else {
        Arc::new(
            snapshot
                .upstreams
                .iter()
                .zip(groups.iter())
                .map(|(u, g)| (u.name.clone(), g.clone()))
                .collect(),
        )
    };
    Ok((upstreams, groups, resolver))
}

/// Where listener `l` of the new configuration runs: the running listener `old` (with HTTP/3's
/// UDP socket bound when HTTP/3 starts on it now), else a new socket, the one `sluice
/// upgrade` handed over under its name when there is one.
async fn placement(
    state: &State,
    l: &Listener,
    old: Option<usize>,
    inherited: &mut Vec<(String, std::net::TcpListener)>,
) -> Result<Placement, ProxyError> {
    let bind_udp = |at: SocketAddr| {
        crate::http3::bind(at).map_err(|source| ProxyError::Bind {
            listener: l.name.clone(),
            address: at,
            source,
        })
    };
    Ok(match old {
        Some(i) => {
            let running = &state.listeners[i];
            let udp = if l.http3 && running.quic.is_none() {
                Some(bind_udp(running.bound)?)
            } else {
                None
            };
            Placement::Keep(i, udp)
        }
        None => {
            let bind_error = |source| ProxyError::Bind {
                listener: l.name.clone(),
                address: l.address,
                source,
            };
            let handed_over = inherited.iter().position(|(name, s)| {
                name == &l.name
                    && s.local_addr().is_ok_and(|a| {
                        a == l.address || (l.address.port() == 0 && a.ip() == l.address.ip())
                    })
            });
            let socket = match handed_over {
                Some(i) => {
                    let (_, s) = inherited.swap_remove(i);
                    s.set_nonblocking(true).map_err(bind_error)?;
                    TcpListener::from_std(s).map_err(bind_error)?
                }
                None => TcpListener::bind(l.address).await.map_err(bind_error)?,
            };
            // HTTP/3 on the same port number as the TCP socket (a port 0 resolved).
            let udp = match (l.http3, socket.local_addr()) {
                (true, Ok(at)) => Some(bind_udp(at)?),
                _ => None,
            };
            Placement::Bind(socket, udp)
        }
    })
}

/// Each listener's routing table, in listener order: the old one where its routes are the
/// same objects (a change elsewhere, an upstream, costs no table), the old index with the
/// new routes where only what the index does not hold changed, else built once per distinct
/// route list (listeners that share every route share one table). All of it, comparisons of
/// tens of thousands of routes included, runs on a thread at idle priority, so that applying
/// a large table never holds up a request.
async fn routers(
    state: &State,
    snapshot: &Arc<Snapshot>,
    report: &mut ApplyReport,
) -> Result<Vec<Arc<Router>>, ProxyError> {
    let old: Vec<Arc<Router>> = state
        .listeners
        .iter()
        .map(|o| o.ctx.load().router.clone())
        .collect();
    let snapshot = snapshot.clone();
    let (routers, built, updated) = at_idle(move || Router::for_listeners(&snapshot, old)).await?;
    report.routers_built += built;
    report.routers_updated += updated;
    Ok(routers)
}

/// Runs `work` at idle priority (see `sluice_offload::idle`) without blocking the event loop.
async fn at_idle<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ProxyError> {
    match tokio::task::spawn_blocking(move || sluice_offload::idle::run_idle(work)).await {
        Ok(r) => Ok(r),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(ProxyError::Stopped),
    }
}

/// The TLS acceptor of listener `l`: the old one when nothing it was built from changed,
/// else a new one that keeps the old one's ticket keys where it can.
fn tls_for(
    snapshot: &Snapshot,
    l: &Listener,
    key_offload: &Arc<KeyOffload>,
    old: Option<&ListenerCtx>,
    report: &mut ApplyReport,
) -> Result<Option<TlsAcceptor>, ProxyError> {
    let Some(identity) = TlsIdentity::of(snapshot, l) else {
        return Ok(None);
    };
    let previous = old.and_then(|o| o.tls.as_ref());
    if let Some(p) = previous
        && *p.identity() == identity
        && Arc::ptr_eq(p.key_offload(), key_offload)
    {
        return Ok(Some(p.clone()));
    }
    let acceptor =
        TlsAcceptor::rebuild(snapshot, l, key_offload.clone(), previous).map_err(|source| {
            ProxyError::Tls {
                listener: l.name.clone(),
                source,
            }
        })?;
    if old.is_some() {
        report.tls_rebuilt.push(l.name.clone());
    }
    Ok(Some(acceptor))
}

/// Makes a prepared change visible. Cannot fail.
fn commit(state: &mut State, snapshot: Arc<Snapshot>, prepared: Prepared) {
    let shutdown_timeout = snapshot.global.shutdown_timeout;
    let mut old: Vec<Option<RunningListener>> = std::mem::take(&mut state.listeners)
        .into_iter()
        .map(Some)
        .collect();
    let mut running = Vec::with_capacity(prepared.listeners.len());
    // What the change replaced: freed at idle priority, not on the event loop (an old table
    // of 40,000 routes is hundreds of thousands of frees).
    let mut garbage: Vec<Arc<ListenerCtx>> = Vec::new();
    for (placement, ctx) in prepared.listeners {
        if let Some(tls) = &ctx.tls {
            tls.start_ticket_rotation(
                ctx.config
                    .tls
                    .as_ref()
                    .map_or(Duration::from_secs(3600), |t| t.ticket_key_rotation),
            );
        }
        match placement {
            Placement::Keep(i, udp) => {
                let mut l = old[i]
                    .take()
                    .expect("each old listener is kept at most once");
                if !ctx.config.http3
                    && let Some(q) = l.quic.take()
                {
                    // HTTP/3 switched off: no new QUIC connections; those open finish.
                    q.abort();
                }
                garbage.push(l.ctx.swap(ctx));
                if let Some(udp) = udp {
                    l.quic = Some(spawn_quic(udp, &l));
                }
                running.push(l);
            }
            Placement::Bind(socket, udp) => {
                let mut l = spawn_listener(socket, ctx);
                if let Some(udp) = udp {
                    l.quic = Some(spawn_quic(udp, &l));
                }
                running.push(l);
            }
        }
    }
    for l in old.into_iter().flatten() {
        tracing::info!(listener = %l.name, address = %l.bound, "listener removed; draining its connections");
        l.stop_accepting();
        let (tracker, force) = (l.connections.clone(), l.force.clone());
        tokio::spawn(drain(tracker, force, shutdown_timeout));
        let streams = l.streams.clone();
        tokio::spawn(drain(
            streams.tasks.clone(),
            streams.force,
            shutdown_timeout,
        ));
        state.draining.push(l.connections);
        state.draining.push(streams.tasks);
    }
    state.draining.retain(|t| !t.is_empty());
    state.listeners = running;
    let old_snapshot = std::mem::replace(&mut state.snapshot, snapshot);
    tokio::task::spawn_blocking(move || {
        sluice_offload::idle::run_idle(move || drop((garbage, old_snapshot)));
    });
    state.upstreams = prepared.upstreams;
    state.groups = prepared.groups;
    state.resolver = prepared.resolver;
    state.guards = prepared.guards;
    state.redis = prepared.redis;
    (state.takeovers).use_store(state.redis.clone(), &state.snapshot);
    state.key_offload = prepared.key_offload;
    state.handshakes = prepared.handshakes;
    state.key_identity = prepared.key_identity;
    state.compressor = prepared.compressor;
    state.compress_config = prepared.compress_config;
    state.cache = prepared.cache;
    state.tracer = prepared.tracer;
    // `prepare` kept the old sink when `[log]` did not change.
    state.access_log = prepared.access_log;
    state.log_config = state.snapshot.log.clone();
}
