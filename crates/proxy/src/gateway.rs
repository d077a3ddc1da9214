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
mod prepare;
mod running;
mod state;

use crate::ProxyError;
use crate::access_log::AccessLog;
use crate::handshakes::{HandshakeScheduler, HandshakeStats};
use crate::request::context::ListenerCtx;
use crate::request::filters::RouteGuards;
use crate::request::rate_limit::RedisStore;
use crate::request::rate_limit::takeover::Takeovers;
use crate::upstreams::dns::UpstreamSlot;
use arc_swap::ArcSwap;
use drain::drain;
use prepare::{Placement, Prepared, prepare};
use running::{RunningListener, spawn_listener, spawn_quic};
use sluice_config::{ListenerKind, LogConfig, Snapshot};
use sluice_tls::KeyOffload;
pub use state::ApplyReport;
use state::{State, access_log_error, compress_config};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
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
    let engines = prepared.engines;
    state.key_offload = engines.key_offload;
    state.handshakes = engines.handshakes;
    state.key_identity = prepared.key_identity;
    state.compressor = engines.compressor;
    state.compress_config = prepared.compress_config;
    state.cache = engines.cache;
    state.tracer = engines.tracer;
    // `prepare` kept the old sink when `[log]` did not change.
    state.access_log = engines.access_log;
    state.log_config = state.snapshot.log.clone();
}
