//! Building what a snapshot needs before anything running changes ([`prepare`]): what
//! carries over from the running state and what is made anew (engines, upstream groups,
//! routing tables, each listener's context and socket). A failure here leaves the running
//! configuration as it was; `commit` (in the parent) then swaps it all in.

use crate::ProxyError;
use crate::access_log::AccessLog;
use crate::handshakes::HandshakeScheduler;
use crate::request::context::ListenerCtx;
use crate::request::filters::RouteGuards;
use crate::request::rate_limit::{RateLimiter, RedisStore};
use crate::request::router::Router;
use crate::upstreams::dns::{Resolver, UpstreamSlot};
use sluice_config::{CompressOffload, Listener, Snapshot};
use sluice_tls::{KeyOffload, TlsAcceptor, TlsIdentity};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, UdpSocket};

/// A change prepared but not yet visible.
pub(super) struct Prepared {
    pub(super) upstreams: Arc<HashMap<String, Arc<UpstreamSlot>>>,
    pub(super) groups: Arc<[Arc<UpstreamSlot>]>,
    pub(super) resolver: Option<Arc<Resolver>>,
    pub(super) guards: Arc<RouteGuards>,
    pub(super) redis: Option<Arc<RedisStore>>,
    pub(super) key_identity: Vec<u8>,
    pub(super) compress_config: CompressOffload,
    pub(super) engines: Engines,
    /// Per listener of the new snapshot: an index into the old listeners to keep, or a new
    /// socket; and its new context.
    pub(super) listeners: Vec<(Placement, Arc<ListenerCtx>)>,
    pub(super) report: super::state::ApplyReport,
}

/// Where a listener of the new snapshot runs.
pub(super) enum Placement {
    /// The running listener at this index, and a UDP socket when HTTP/3 starts on it now.
    Keep(usize, Option<UdpSocket>),
    /// A new listener's socket, and its UDP socket when it serves HTTP/3.
    Bind(TcpListener, Option<UdpSocket>),
}

/// The engines and sinks a snapshot's listeners share: the running ones where their settings
/// stay, else new ones.
pub(super) struct Engines {
    pub(super) key_offload: Arc<KeyOffload>,
    pub(super) handshakes: Arc<HandshakeScheduler>,
    pub(super) compressor: Arc<crate::Compressor>,
    pub(super) cache: Arc<crate::ResponseCache>,
    pub(super) tracer: Option<Arc<sluice_trace::Tracer>>,
    pub(super) access_log: AccessLog,
}

/// What the passes over every certificate, upstream and route find ([`carried_over`]).
struct Carried {
    /// What the key-offload engines are built from.
    key_identity: Vec<u8>,
    /// What the compression engines are built from.
    compress: CompressOffload,
    /// Per upstream of the snapshot, the running group that serves it unchanged.
    kept: Vec<Option<Arc<UpstreamSlot>>>,
    limiters: HashMap<String, Arc<RateLimiter>>,
    waf: Result<Option<sluice_waf::WafRuntime>, sluice_waf::WafError>,
}

/// Builds everything `snapshot` needs that the running state cannot lend, without touching
/// the running state. At start (`state` has no listeners yet, and its engines were just built
/// for `snapshot`), `inherited` sockets are used before binding new ones.
pub(super) async fn prepare(
    state: &super::state::State,
    snapshot: &Arc<Snapshot>,
    metrics: &Arc<crate::ProxyMetrics>,
    mut inherited: Vec<(String, std::net::TcpListener)>,
) -> Result<Prepared, ProxyError> {
    let first = state.listeners.is_empty() && Arc::ptr_eq(&state.snapshot, snapshot);
    let mut report = super::state::ApplyReport::default();
    // The shared store: kept while its URL and TLS stay; limiters kept while their limit stays.
    let redis = match &state.redis {
        Some(r) if r.serves(&snapshot.rate_limit_store) => Some(r.clone()),
        _ => RedisStore::start(&snapshot.rate_limit_store),
    };
    let Carried {
        key_identity,
        compress,
        kept,
        limiters,
        waf,
    } = carried_over(state, snapshot, redis.clone()).await?;
    let guards = route_guards(state, snapshot, limiters, waf)?;
    let engines = engines(
        state,
        snapshot,
        first,
        (&key_identity, &compress),
        &mut report,
    )?;
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
    let shared = Shared {
        state,
        snapshot,
        engines: &engines,
        guards: &guards,
        groups: &groups,
        redis: redis.as_ref(),
        mqtt_gates: &mqtt_gates,
        metrics,
    };
    let listeners = listeners(&shared, routers, &mut inherited, first, &mut report).await?;
    Ok(Prepared {
        upstreams,
        groups,
        resolver,
        guards,
        redis,
        key_identity,
        compress_config: compress,
        engines,
        listeners,
        report,
    })
}

/// What carries over (engines, upstream groups, rate limiters) and the WAF's rule sets,
/// found by passes over every certificate, upstream and route: with 40,000 routes,
/// milliseconds of pointer chasing that requests would wait behind on the event loop. At
/// idle priority instead.
async fn carried_over(
    state: &super::state::State,
    snapshot: &Arc<Snapshot>,
    redis: Option<Arc<RedisStore>>,
) -> Result<Carried, ProxyError> {
    let (snapshot, old_groups, old_guards) = (
        snapshot.clone(),
        state.upstreams.clone(),
        state.guards.clone(),
    );
    at_idle(move || {
        let kept = snapshot
            .upstreams
            .iter()
            .map(|u| {
                // The same object (a fleet change to a route keeps every upstream's `Arc`)
                // needs no field-by-field comparison.
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
        // Rule sets compiled anew (a rule or data file may have changed) before anything is
        // swapped: a broken rule fails the apply and the old sets keep serving.
        let waf = sluice_waf::WafRuntime::build(
            &snapshot.waf,
            &snapshot.routes,
            old_guards.waf.as_deref(),
        );
        Carried {
            key_identity: KeyOffload::identity(&snapshot),
            compress: super::state::compress_config(&snapshot),
            kept,
            limiters,
            waf,
        }
    })
    .await
}

/// The routes' guards: `limiters` and `waf` as [`carried_over`] built them, the
/// authenticators and the Lua states.
fn route_guards(
    state: &super::state::State,
    snapshot: &Snapshot,
    limiters: HashMap<String, Arc<RateLimiter>>,
    waf: Result<Option<sluice_waf::WafRuntime>, sluice_waf::WafError>,
) -> Result<Arc<RouteGuards>, ProxyError> {
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
    Ok(Arc::new(RouteGuards {
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
    }))
}

/// The shared engines and sinks: each the running one while what it is built from stays
/// (`first`: the running ones were just built for this snapshot; `built_from`: what the
/// key-offload and compression engines are built from, as [`carried_over`] found it).
fn engines(
    state: &super::state::State,
    snapshot: &Arc<Snapshot>,
    first: bool,
    built_from: (&[u8], &CompressOffload),
    report: &mut super::state::ApplyReport,
) -> Result<Engines, ProxyError> {
    let (key_identity, compress) = built_from;
    let key_offload = if first || key_identity == state.key_identity.as_slice() {
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
    let compressor = if first || *compress == state.compress_config {
        state.compressor.clone()
    } else {
        report.compress_engines_rebuilt = true;
        crate::Compressor::from_config(compress, state.compressor.counters())
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
        (state.access_log)
            .reopen(&snapshot.log)
            .map_err(super::state::access_log_error(&snapshot.log))?
    };
    Ok(Engines {
        key_offload,
        handshakes,
        compressor,
        cache,
        tracer,
        access_log,
    })
}

/// What every listener's context is made from ([`listener_ctx`]).
struct Shared<'a> {
    state: &'a super::state::State,
    snapshot: &'a Arc<Snapshot>,
    engines: &'a Engines,
    guards: &'a Arc<RouteGuards>,
    groups: &'a Arc<[Arc<UpstreamSlot>]>,
    redis: Option<&'a Arc<RedisStore>>,
    mqtt_gates: &'a Arc<crate::request::mqtt_gate::MqttGates>,
    metrics: &'a Arc<crate::ProxyMetrics>,
}

/// Each listener of the snapshot, in order: where it runs (the running listener with the
/// same name and address, else a new socket, `inherited`'s first) and its new context; the
/// listeners added and removed go in `report` (`first`: at start, where none is "added").
async fn listeners(
    shared: &Shared<'_>,
    routers: Vec<Arc<Router>>,
    inherited: &mut Vec<(String, std::net::TcpListener)>,
    first: bool,
    report: &mut super::state::ApplyReport,
) -> Result<Vec<(Placement, Arc<ListenerCtx>)>, ProxyError> {
    let (state, snapshot) = (shared.state, shared.snapshot);
    let mut listeners = Vec::with_capacity(snapshot.listeners.len());
    let mut plan_tables = Vec::new();
    for (l, router) in snapshot.listeners.iter().zip(routers) {
        let old =
            (state.listeners.iter()).position(|o| o.name == l.name && o.configured == l.address);
        let old_ctx = old.map(|i| state.listeners[i].ctx.load_full());
        let key_offload = &shared.engines.key_offload;
        let tls = tls_for(snapshot, l, key_offload, old_ctx.as_deref(), report)?;
        let placement = placement(state, l, old, inherited).await?;
        if !first && matches!(placement, Placement::Bind(..)) {
            report.listeners_added.push(l.name.clone());
        }
        let plans = crate::request::filters::plans_for(&mut plan_tables, &router, shared.guards);
        let ctx = listener_ctx(shared, l, router, tls, plans, old_ctx.as_deref())?;
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
    Ok(listeners)
}

/// Listener `l`'s new context: its routing table, TLS acceptor and route plans, with its
/// MQTT authenticator and connect rates kept from `old` where their settings stay.
fn listener_ctx(
    shared: &Shared<'_>,
    l: &Listener,
    router: Arc<Router>,
    tls: Option<TlsAcceptor>,
    plans: Arc<[crate::request::filters::RoutePlan]>,
    old: Option<&ListenerCtx>,
) -> Result<Arc<ListenerCtx>, ProxyError> {
    let e = shared.engines;
    let mqtt_auth = crate::layer4::mqtt_auth::authenticator(l, old, &shared.guards.hashing)
        .map_err(ProxyError::Auth)?;
    let mqtt_rates = crate::request::rate_limit::connect_rates::ConnectRates::build(
        l,
        old.and_then(|o| o.mqtt_rates.as_deref()),
        &shared.snapshot.rate_limit_store,
        shared.redis,
    );
    Ok(Arc::new(ListenerCtx {
        name: Arc::from(l.name.as_str()),
        config: l.clone(),
        router,
        tls,
        handshakes: e.handshakes.clone(),
        upstreams: shared.groups.clone(),
        access_log: e.access_log.clone(),
        metrics: shared.metrics.clone(),
        compressor: e.compressor.clone(),
        cache: e.cache.clone(),
        tracer: e.tracer.clone(),
        plans,
        alt_svc: crate::request::context::AltSvc::new(l.http3, l.address.port()),
        mqtt_auth,
        mqtt_rates,
        takeovers: shared.state.takeovers.clone(),
        mqtt_bridge: crate::layer4::mqtt_ws::bridge,
        mqtt_gates: shared.mqtt_gates.clone(),
    }))
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
    state: &super::state::State,
    snapshot: &Snapshot,
    kept: Vec<Option<Arc<UpstreamSlot>>>,
    report: &mut super::state::ApplyReport,
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
    state: &super::state::State,
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
    state: &super::state::State,
    snapshot: &Arc<Snapshot>,
    report: &mut super::state::ApplyReport,
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
    report: &mut super::state::ApplyReport,
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
