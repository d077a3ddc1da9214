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
mod firewall;
mod health;
mod mirror;
mod mqtt;
mod reply;
mod requests;
mod scripting;
mod stats;
mod tracing_export;

use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_compress::{ByteCount, Codec, CompressCounters, SkipReason};
use sluice_control::Controller;
use sluice_offload::{CountersSnapshot, FallbackReason, FlushReason};
use sluice_proxy::{Gateway, STATUS_CLASSES, TLS_VERSIONS, UPSTREAM_ERRORS};
use std::convert::Infallible;
use std::fmt::Write as _;
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

/// A Prometheus label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The Prometheus text exposition.
pub fn metrics(s: &Sources) -> String {
    let mut out = String::with_capacity(4096);
    let p = s.gateway.metrics().snapshot();
    family(
        &mut out,
        "sluice_tls_handshakes_total",
        "counter",
        "Completed TLS handshakes, by version, resumption and transport (quic: HTTP/3, always TLSv1.3).",
    );
    for (v, version) in TLS_VERSIONS.iter().enumerate() {
        for (r, resumed) in ["false", "true"].iter().enumerate() {
            let quic = if *version == "TLSv1.3" {
                p.quic_handshakes[r]
            } else {
                0
            };
            let _ = writeln!(
                out,
                "sluice_tls_handshakes_total{{version=\"{version}\",resumed=\"{resumed}\",transport=\"tcp\"}} {}",
                p.handshakes[v][r].saturating_sub(quic)
            );
            if *version == "TLSv1.3" {
                let _ = writeln!(
                    out,
                    "sluice_tls_handshakes_total{{version=\"{version}\",resumed=\"{resumed}\",transport=\"quic\"}} {quic}"
                );
            }
        }
    }
    family(
        &mut out,
        "sluice_tls_handshake_failures_total",
        "counter",
        "TLS handshakes that failed or timed out.",
    );
    let _ = writeln!(
        out,
        "sluice_tls_handshake_failures_total {}",
        p.handshake_failures
    );
    let hs = s.gateway.handshake_stats();
    for (name, kind, help, value) in [
        (
            "sluice_tls_handshakes_in_progress",
            "gauge",
            "TLS handshakes in progress now.",
            hs.in_progress as u64,
        ),
        (
            "sluice_tls_handshakes_in_progress_limit",
            "gauge",
            "The most TLS handshakes in progress at once ([offload.handshakes] max_in_progress); more connections wait in the listen backlog.",
            hs.limit as u64,
        ),
        (
            "sluice_tls_handshakes_expired_total",
            "counter",
            "TLS handshakes dropped unfinished after the listener's header_read_timeout.",
            hs.expired,
        ),
    ] {
        family(&mut out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
    family(
        &mut out,
        "sluice_tls_handshakes_placed_total",
        "counter",
        "TLS handshakes by where they ran: on the handshake threads (handed off while several were in progress) or on the event loop (alone, or not isolated).",
    );
    let _ = writeln!(
        out,
        "sluice_tls_handshakes_placed_total{{on=\"handshake_threads\"}} {}\nsluice_tls_handshakes_placed_total{{on=\"event_loop\"}} {}",
        hs.handed_off, hs.kept_on_loop
    );
    family(
        &mut out,
        "sluice_http_requests_total",
        "counter",
        "Responses sent, by status class.",
    );
    for (i, class) in STATUS_CLASSES.iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_http_requests_total{{class=\"{class}\"}} {}",
            p.requests[i]
        );
    }
    family(
        &mut out,
        "sluice_http_body_bytes_total",
        "counter",
        "HTTP body bytes: received from clients (in), sent to them (out).",
    );
    for (i, direction) in ["in", "out"].iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_http_body_bytes_total{{direction=\"{direction}\"}} {}",
            p.bytes[i]
        );
    }
    family(
        &mut out,
        "sluice_http_request_duration_seconds",
        "histogram",
        "HTTP requests from their first byte to the end of their response.",
    );
    let latency = s.gateway.metrics().latency_us();
    let mut cumulative = 0u64;
    for (bound, n) in latency.bounds.iter().zip(&latency.counts) {
        cumulative += n;
        let _ = writeln!(
            out,
            "sluice_http_request_duration_seconds_bucket{{le=\"{}\"}} {cumulative}",
            *bound as f64 / 1e6
        );
    }
    let _ = writeln!(
        out,
        "sluice_http_request_duration_seconds_bucket{{le=\"+Inf\"}} {}\nsluice_http_request_duration_seconds_sum {}\nsluice_http_request_duration_seconds_count {}",
        latency.total(),
        latency.sum as f64 / 1e6,
        latency.total()
    );
    family(
        &mut out,
        "sluice_offload_cpu_saved_seconds_total",
        "counter",
        "Event-loop CPU the offload engines saved: each job they ran, at its inline cost measured on this machine.",
    );
    for (service, saved) in [
        ("crypto", s.gateway.key_offload().cpu_saved()),
        ("compress", s.gateway.compressor().cpu_saved()),
    ] {
        let _ = writeln!(
            out,
            "sluice_offload_cpu_saved_seconds_total{{service=\"{service}\"}} {}",
            saved.as_secs_f64()
        );
    }
    family(
        &mut out,
        "sluice_upstream_errors_total",
        "counter",
        "Upstream attempts that failed, by kind.",
    );
    for (i, kind) in UPSTREAM_ERRORS.iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_upstream_errors_total{{kind=\"{kind}\"}} {}",
            p.upstream_errors[i]
        );
    }
    let limits = s.gateway.rate_limits();
    if !limits.is_empty() {
        family(
            &mut out,
            "sluice_rate_limit_requests_total",
            "counter",
            "Requests checked by a route's rate limit: passed, delayed (within the burst, spaced out at the rate) or rejected (429).",
        );
        for (route, counts, _, _) in &limits {
            for (result, v) in ["passed", "delayed", "rejected"].iter().zip(counts) {
                let _ = writeln!(
                    out,
                    "sluice_rate_limit_requests_total{{route=\"{route}\",result=\"{result}\"}} {v}"
                );
            }
        }
        family(
            &mut out,
            "sluice_rate_limit_fallback_total",
            "counter",
            "Shared-limit checks decided locally (rate / expected_gateways) because Redis did not answer in time.",
        );
        for (route, _, fell, _) in &limits {
            let _ = writeln!(
                out,
                "sluice_rate_limit_fallback_total{{route=\"{route}\"}} {fell}"
            );
        }
    }
    if !limits.is_empty() {
        family(
            &mut out,
            "sluice_rate_limit_redis_calls_total",
            "counter",
            "Calls to Redis by shared limits (one per lease of nodelay limits, else one per request).",
        );
        for (route, _, _, calls) in &limits {
            let _ = writeln!(
                out,
                "sluice_rate_limit_redis_calls_total{{route=\"{route}\"}} {calls}"
            );
        }
    }
    if let Some(store) = s.gateway.rate_limit_redis() {
        family(
            &mut out,
            "sluice_rate_limit_redis_up",
            "gauge",
            "Whether the shared rate limits' Redis answers (1) or the local fallback decides (0).",
        );
        let _ = writeln!(out, "sluice_rate_limit_redis_up {}", u8::from(store.up));
        family(
            &mut out,
            "sluice_rate_limit_redis_outages_total",
            "counter",
            "Times the shared rate limits' Redis became unreachable (a failed first connection included); each began a stretch of local fallback.",
        );
        let _ = writeln!(
            out,
            "sluice_rate_limit_redis_outages_total {}",
            store.outages
        );
    }
    family(
        &mut out,
        "sluice_connections_refused_total",
        "counter",
        "Connections closed at accept by a listener's max_connections or max_connections_per_client.",
    );
    for (i, reason) in ["listener_limit", "client_limit"].iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_connections_refused_total{{reason=\"{reason}\"}} {}",
            p.connections_refused[i]
        );
    }
    family(
        &mut out,
        "sluice_tcp_connections_total",
        "counter",
        "Connections of kind = \"tcp\" listeners by outcome: proxied, denied (allow/deny), bad_client_hello (passthrough), no_upstream (a server name no passthrough entry takes), upstream_unavailable (no server could be connected to).",
    );
    for (i, outcome) in sluice_proxy::TCP_OUTCOMES.iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_tcp_connections_total{{outcome=\"{outcome}\"}} {}",
            p.tcp[i]
        );
    }
    mqtt::metrics(&mut out, s, &p.mqtt);
    family(
        &mut out,
        "sluice_proxy_protocol_total",
        "counter",
        "Connections of proxy_protocol listeners: header accepted, peer not in trusted_proxies (closed), header malformed or missing (closed), none within header_read_timeout (closed).",
    );
    for (i, outcome) in sluice_proxy::PROXY_PROTOCOL_OUTCOMES.iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_proxy_protocol_total{{outcome=\"{outcome}\"}} {}",
            p.proxy_protocol[i]
        );
    }
    family(
        &mut out,
        "sluice_quic_handshakes_total",
        "counter",
        "QUIC (HTTP/3) handshakes completed, by whether the session was resumed; also in sluice_tls_handshakes_total{transport=\"quic\"}.",
    );
    for (i, resumed) in ["false", "true"].iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_quic_handshakes_total{{resumed=\"{resumed}\"}} {}",
            p.quic_handshakes[i]
        );
    }
    family(
        &mut out,
        "sluice_quic_connections_open",
        "gauge",
        "QUIC (HTTP/3) connections open now, handshakes in progress included.",
    );
    let _ = writeln!(out, "sluice_quic_connections_open {}", p.quic_open);
    family(
        &mut out,
        "sluice_quic_retries_total",
        "counter",
        "QUIC Retry packets sent: new connections asked to prove their address (quic_retry).",
    );
    let _ = writeln!(out, "sluice_quic_retries_total {}", p.quic_retries);
    family(
        &mut out,
        "sluice_quic_packets_dropped_total",
        "counter",
        "QUIC datagrams dropped by the endpoint: unparsable, unknown_connection (not an Initial, for no connection), bad_initial (under 1200 bytes or a short connection ID), queue_full (the connection's queue), accept_failed, draining (a new connection while the listener drains), bad_token (an Initial whose token is not our Retry's while address validation is required).",
    );
    for (i, reason) in sluice_proxy::QUIC_DROPPED.iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_quic_packets_dropped_total{{reason=\"{reason}\"}} {}",
            p.quic_dropped[i]
        );
    }
    family(
        &mut out,
        "sluice_http_denied_total",
        "counter",
        "Requests refused with 403 by a listener's or route's allow/deny lists.",
    );
    let _ = writeln!(out, "sluice_http_denied_total {}", p.denied);
    family(
        &mut out,
        "sluice_upstream_retries_total",
        "counter",
        "Retries a route's policy wanted: sent to another server, or refused by the upstream's retry budget.",
    );
    for (i, result) in ["sent", "budget_exhausted"].iter().enumerate() {
        let _ = writeln!(
            out,
            "sluice_upstream_retries_total{{result=\"{result}\"}} {}",
            p.retries[i]
        );
    }
    family(
        &mut out,
        "sluice_access_log_dropped_total",
        "counter",
        "Access log lines dropped because the sink could not keep up.",
    );
    let _ = writeln!(
        out,
        "sluice_access_log_dropped_total {}",
        s.gateway.access_log().dropped()
    );
    offload(
        &mut out,
        &[
            ("crypto", s.gateway.key_offload().counters()),
            ("compress", s.gateway.compressor().engine_counters()),
        ],
    );
    compression(&mut out, &s.gateway.compressor().counters());
    cache::metrics(&mut out, s);
    mirror::metrics(&mut out, s);
    auth::metrics(&mut out, s);
    scripting::metrics(&mut out, s);
    firewall::metrics(&mut out, s);
    tracing_export::metrics(&mut out, s);
    requests::metrics(&mut out, s);
    key_servers(&mut out, &s.gateway.key_offload().key_servers());
    health::metrics(&mut out, s);
    certificates::metrics(&mut out);
    config_state::config_metrics(&mut out, s);
    out
}

fn compression(out: &mut String, c: &CompressCounters) {
    family(
        out,
        "sluice_compress_responses_total",
        "counter",
        "Responses compressed, by codec.",
    );
    for codec in [Codec::Gzip, Codec::Brotli, Codec::Zstd] {
        let _ = writeln!(
            out,
            "sluice_compress_responses_total{{codec=\"{}\"}} {}",
            codec.token(),
            c.compressed_count(codec)
        );
    }
    family(
        out,
        "sluice_compress_skipped_total",
        "counter",
        "Responses passed through uncompressed on a route with compression on, by reason.",
    );
    for r in SkipReason::ALL {
        let _ = writeln!(
            out,
            "sluice_compress_skipped_total{{reason=\"{}\"}} {}",
            r.as_str(),
            c.skipped_count(r)
        );
    }
    family(
        out,
        "sluice_compress_failed_total",
        "counter",
        "Responses aborted because compression failed on every engine.",
    );
    let _ = writeln!(out, "sluice_compress_failed_total {}", c.failed_count());
    let bytes = c.bytes();
    for (name, help, pick) in [
        (
            "sluice_compress_bytes_in_total",
            "Bytes compressed, by codec and engine.",
            (|b: &ByteCount| b.bytes_in) as fn(&ByteCount) -> u64,
        ),
        (
            "sluice_compress_bytes_out_total",
            "Compressed bytes produced, by codec and engine.",
            |b: &ByteCount| b.bytes_out,
        ),
    ] {
        family(out, name, "counter", help);
        for b in &bytes {
            let _ = writeln!(
                out,
                "{name}{{codec=\"{}\",engine=\"{}\"}} {}",
                b.codec.token(),
                b.engine,
                pick(b)
            );
        }
    }
}

/// The offload families, each written once with a `service` label per offload service.
fn offload(out: &mut String, services: &[(&str, Vec<CountersSnapshot>)]) {
    let engines: Vec<(&str, &CountersSnapshot)> = services
        .iter()
        .flat_map(|(s, list)| list.iter().map(move |c| (*s, c)))
        .collect();
    let each = |out: &mut String,
                name: &str,
                kind: &str,
                help: &str,
                value: &dyn Fn(&CountersSnapshot) -> i64| {
        family(out, name, kind, help);
        for &(service, c) in &engines {
            let _ = writeln!(
                out,
                "{name}{{service=\"{service}\",engine=\"{}\"}} {}",
                c.engine,
                value(c)
            );
        }
    };
    each(
        out,
        "sluice_offload_jobs_submitted_total",
        "counter",
        "Jobs an engine accepted.",
        &|c| c.submitted as i64,
    );
    each(
        out,
        "sluice_offload_jobs_completed_total",
        "counter",
        "Jobs an engine completed correctly.",
        &|c| c.completed as i64,
    );
    each(
        out,
        "sluice_offload_jobs_failed_total",
        "counter",
        "Jobs an engine accepted and failed (errors, wrong results, missed deadlines).",
        &|c| c.failed as i64,
    );
    each(
        out,
        "sluice_offload_jobs_in_flight",
        "gauge",
        "Jobs accepted and not finished.",
        &|c| c.in_flight,
    );
    family(
        out,
        "sluice_offload_jobs_routed_past_total",
        "counter",
        "Jobs passed to the next engine by design: ones this engine never takes (an ECDSA key past mb, a key a key server does not hold). Routing, not a fault.",
    );
    for &(service, c) in &engines {
        let _ = writeln!(
            out,
            "sluice_offload_jobs_routed_past_total{{service=\"{service}\",engine=\"{}\"}} {}",
            c.engine, c.routed_past
        );
    }
    family(
        out,
        "sluice_offload_jobs_fell_back_total",
        "counter",
        "Jobs that left an engine for the next one because something went wrong there, by reason.",
    );
    for &(service, c) in &engines {
        for r in FallbackReason::ALL {
            let _ = writeln!(
                out,
                "sluice_offload_jobs_fell_back_total{{service=\"{service}\",engine=\"{}\",reason=\"{}\"}} {}",
                c.engine,
                r.as_str(),
                c.fell_back(r)
            );
        }
    }
    family(
        out,
        "sluice_offload_batch_flushes_total",
        "counter",
        "Batches flushed by batching engines, by reason.",
    );
    for &(service, c) in &engines {
        for (i, r) in FlushReason::ALL.iter().enumerate() {
            let _ = writeln!(
                out,
                "sluice_offload_batch_flushes_total{{service=\"{service}\",engine=\"{}\",reason=\"{}\"}} {}",
                c.engine,
                r.as_str(),
                c.flushes[i]
            );
        }
    }
}

/// The `keyless` engine's view of each key server.
fn key_servers(out: &mut String, servers: &[sluice_keyless::ServerStats]) {
    if servers.is_empty() {
        return;
    }
    family(
        out,
        "sluice_keyless_server_up",
        "gauge",
        "Whether a key server answers its pings (1) or not (0).",
    );
    for k in servers {
        let _ = writeln!(
            out,
            "sluice_keyless_server_up{{server=\"{}\"}} {}",
            k.address,
            u8::from(k.up)
        );
    }
    family(
        out,
        "sluice_keyless_server_in_flight",
        "gauge",
        "Requests in flight on a key server.",
    );
    for k in servers {
        let _ = writeln!(
            out,
            "sluice_keyless_server_in_flight{{server=\"{}\"}} {}",
            k.address, k.in_flight
        );
    }
    family(
        out,
        "sluice_keyless_server_requests_total",
        "counter",
        "Requests to a key server, by result (failed: connection lost, timeout, error status or a result that did not verify; the job then tried the next server).",
    );
    for k in servers {
        for (result, v) in [("ok", k.ok), ("failed", k.failed)] {
            let _ = writeln!(
                out,
                "sluice_keyless_server_requests_total{{server=\"{}\",result=\"{result}\"}} {v}",
                k.address
            );
        }
    }
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
