//! The admin listener: `/metrics` in Prometheus text format, `/status` as JSON, and the admin
//! API under `/api/v1/` (reload; see `api.rs`).
//!
//! It reads counters that the data plane and the offload engines keep. Changes go through
//! `sluice-control` (the same validation and reload path as SIGHUP), never around it, and
//! need the bearer token of `[admin] token_file`. It listens on loopback by default; off
//! loopback it serves HTTPS (`[admin.tls]`, optionally asking for client certificates) unless
//! the operator wrote `insecure = true`, and reads from elsewhere need `read_networks` or a
//! token (see `api::may_read`).

mod api;
mod auth;
pub mod build_label;
mod cache;
mod certificates;
mod config_state;
mod exposition;
mod firewall;
mod health;
mod metrics;
mod mirror;
mod mqtt;
mod reply;
mod requests;
mod scripting;
mod stats;
mod tracing_export;

use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_control::Controller;
use sluice_offload::FallbackReason;
use sluice_proxy::{Gateway, STATUS_CLASSES};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// What the admin listener reports on and acts through.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The running data plane: its counters, engines and configuration.
    pub gateway: Arc<Gateway>,
    /// Reloads and configuration edits; `None` where the gateway runs without one (tests).
    pub control: Option<Arc<Controller>>,
    /// Process start.
    pub started: Instant,
}

/// Binds `addr` and serves cleartext until the returned task is aborted. Returns the bound
/// address.
pub async fn serve(
    addr: SocketAddr,
    sources: Sources,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let socket = tokio::net::TcpListener::bind(addr).await?;
    serve_on(socket, sources)
}

/// How long a client has to finish its TLS handshake with the admin listener.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The admin listener's HTTPS settings: its certificate and, with `client_ca`, client
/// certificates required and verified against those CAs.
pub fn acceptor(
    tls: &sluice_config::AdminTls,
) -> Result<boring::ssl::SslAcceptor, boring::error::ErrorStack> {
    use boring::ssl::{SslAcceptor, SslMethod, SslVerifyMode};
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls())?;
    b.set_certificate(&tls.certificate[0])?;
    for c in &tls.certificate[1..] {
        b.add_extra_chain_cert(c.clone())?;
    }
    b.set_private_key(&tls.key)?;
    b.check_private_key()?;
    b.set_alpn_protos(b"\x02h2\x08http/1.1")?;
    b.set_alpn_select_callback(|_, client| {
        boring::ssl::select_next_proto(b"\x02h2\x08http/1.1", client)
            .ok_or(boring::ssl::AlpnError::NOACK)
    });
    if !tls.client_ca.is_empty() {
        for ca in &tls.client_ca {
            b.cert_store_mut().add_cert(ca.clone())?;
        }
        b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
    }
    Ok(b.build())
}

/// Serves on a socket already bound (one inherited across a binary upgrade): HTTPS when the
/// running configuration has `[admin.tls]`, else cleartext. Read at each connection, so that a
/// reload that renews the certificate (or adds TLS) applies without a new socket.
pub fn serve_on(
    socket: tokio::net::TcpListener,
    sources: Sources,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let bound = socket.local_addr()?;
    let sources = Arc::new(sources);
    let history = Arc::new(stats::History::default());
    let task = tokio::spawn(async move {
        // The dashboard's sampler lives as long as the listener: aborting this task drops it.
        let _sampler = AbortOnDrop(tokio::spawn(stats::sample(
            history.clone(),
            sources.clone(),
        )));
        let mut tls = CurrentTls::default();
        loop {
            let Ok((tcp, peer)) = socket.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let Ok(tls) = tls.for_config(&sources) else {
                continue;
            };
            let (sources, history) = (sources.clone(), history.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let (sources, history) = (sources.clone(), history.clone());
                    async move { Ok::<_, Infallible>(api::respond(&sources, &history, req, peer).await) }
                });
                let http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                match tls {
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
                    }
                    Some(acceptor) => {
                        let handshake = tokio_boring::accept(&acceptor, tcp);
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                            Ok(Ok(stream)) => {
                                let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "admin listener: TLS handshake failed");
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "admin listener: TLS handshake timed out");
                            }
                        }
                    }
                }
            });
        }
    });
    Ok((bound, task))
}

/// The acceptor for the running `[admin.tls]`, rebuilt when a reload changes it.
#[derive(Default)]
struct CurrentTls(Option<(sluice_config::AdminTls, Arc<boring::ssl::SslAcceptor>)>);

impl CurrentTls {
    /// The acceptor the running configuration asks for (`None`: cleartext); `Err` (logged)
    /// when its settings cannot make one, and the connection is closed.
    fn for_config(
        &mut self,
        sources: &Sources,
    ) -> Result<Option<Arc<boring::ssl::SslAcceptor>>, ()> {
        let snapshot = sources.gateway.snapshot();
        let Some(want) = snapshot.admin.as_ref().and_then(|a| a.tls.as_ref()) else {
            self.0 = None;
            return Ok(None);
        };
        if let Some((have, acceptor)) = &self.0
            && have == want
        {
            return Ok(Some(acceptor.clone()));
        }
        match acceptor(want) {
            Ok(a) => {
                let a = Arc::new(a);
                self.0 = Some((want.clone(), a.clone()));
                Ok(Some(a))
            }
            Err(e) => {
                tracing::error!(error = %e, "admin listener: [admin.tls] cannot make a TLS acceptor; connection closed");
                Err(())
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The Prometheus text exposition (see `metrics`).
pub fn metrics(s: &Sources) -> String {
    metrics::render(s)
}

/// The private-key engine chain in force, where it came from and why.
fn crypto_chain(s: &Sources) -> serde_json::Value {
    let offload = s.gateway.key_offload();
    let chain = offload.chain();
    serde_json::json!({
        "engines": chain.engines.iter().map(|e| sluice_tls::chain::name(*e)).chain(["inline"]).collect::<Vec<_>>(),
        "origin": chain.origin.as_str(),
        "why": chain.why,
    })
}

/// Where handshakes run, how many are in progress and how many expired.
fn handshake_scheduler(s: &Sources) -> serde_json::Value {
    let hs = s.gateway.handshake_stats();
    serde_json::json!({
        "isolated": hs.priority.is_some(),
        "priority": hs.priority.map(|p| p.describe()),
        "in_progress": hs.in_progress,
        "limit": hs.limit,
        "expired": hs.expired,
        "handed_off": hs.handed_off,
        "kept_on_loop": hs.kept_on_loop,
    })
}

/// The shared rate limits' Redis for `/status` and the dashboard: its URL (no password),
/// TLS, whether it answers, its outages, and the checks decided locally meanwhile; `null`
/// when no limit is shared.
fn rate_limit_store(s: &Sources) -> serde_json::Value {
    let Some(store) = s.gateway.rate_limit_redis() else {
        return serde_json::Value::Null;
    };
    let fallback: u64 = s.gateway.rate_limits().iter().map(|l| l.2).sum();
    serde_json::json!({
        "url": store.url, "tls": store.tls, "up": store.up, "outages": store.outages,
        "fallback_total": fallback,
    })
}

/// Each listener as it is bound: its address (a port 0 resolved), what it speaks, and the
/// UDP address of its HTTP/3 endpoint (the same port number).
fn listeners(s: &Sources) -> Vec<serde_json::Value> {
    let snapshot = s.gateway.snapshot();
    s.gateway
        .addresses()
        .into_iter()
        .map(|(name, bound)| {
            let l = snapshot.listeners.iter().find(|l| l.name == name);
            let kind = l.map(|l| match l.kind {
                sluice_config::ListenerKind::Http => "http",
                sluice_config::ListenerKind::Tcp(_) => "tcp",
                sluice_config::ListenerKind::Mqtt(_) => "mqtt",
            });
            let tls = l.is_some_and(|l| l.tls.is_some());
            let http3 = l.is_some_and(|l| l.http3);
            serde_json::json!({
                "name": name, "address": bound.to_string(), "kind": kind, "tls": tls,
                "http3": http3.then(|| format!("udp://{bound}")),
            })
        })
        .collect()
}

/// The JSON status document.
pub fn status(s: &Sources) -> String {
    let p = s.gateway.metrics().snapshot();
    let engines: Vec<serde_json::Value> = s
        .gateway
        .crypto_counters()
        .iter()
        .map(|c| {
            let fell: serde_json::Map<String, serde_json::Value> =
                FallbackReason::ALL.iter().map(|r| (r.as_str().to_owned(), c.fell_back(*r).into())).collect();
            serde_json::json!({
                "engine": c.engine, "submitted": c.submitted, "completed": c.completed, "failed": c.failed,
                "in_flight": c.in_flight, "fell_back": fell, "routed_past": c.routed_past,
            })
        })
        .collect();
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": build_label::label(),
        "uptime_s": s.started.elapsed().as_secs(),
        "config": config_state::config_status(s),
        "upstreams": health::status(s),
        "acme": certificates::status(),
        "ocsp": certificates::ocsp_status(),
        "tls_handshakes": p.handshakes.iter().flatten().sum::<u64>(),
        "tls_handshake_failures": p.handshake_failures,
        "tls_handshake_scheduler": handshake_scheduler(s),
        "listeners": listeners(s),
        "quic": {
            "connections_open": p.quic_open,
            "handshakes": { "full": p.quic_handshakes[0], "resumed": p.quic_handshakes[1] },
            "retries": p.quic_retries,
            "dropped": sluice_proxy::QUIC_DROPPED.iter().zip(p.quic_dropped).map(|(k, v)| ((*k).to_owned(), v.into())).collect::<serde_json::Map<_, _>>(),
        },
        "rate_limit_store": rate_limit_store(s),
        "cache": cache::status(s),
        "mirrors": mirror::status(s),
        "auth": auth::status(s),
        "lua": scripting::status(s),
        "waf": firewall::status(s),
        "mqtt": mqtt::status(s),
        "tracing": tracing_export::status(s),
        "log_shipping": requests::shipping_status(s),
        "request_log": requests::request_log_status(s),
        "requests": STATUS_CLASSES.iter().zip(p.requests).map(|(k, v)| ((*k).to_owned(), v.into())).collect::<serde_json::Map<_, _>>(),
        "offload": { "chain": crypto_chain(s), "crypto": engines, "key_servers": s.gateway.key_offload().key_servers().iter().map(|k| serde_json::json!({
            "server": k.address, "up": k.up, "in_flight": k.in_flight, "ok": k.ok, "failed": k.failed,
        })).collect::<Vec<_>>() },
    })
    .to_string()
}
