//! The admin listener: `/metrics` in Prometheus text format and `/status` as JSON.
//!
//! It reads counters that the data plane and the offload engines keep; it changes nothing.
//! It listens on loopback by default (`[admin] address`). The full admin API (token,
//! configuration, dashboard) is a later issue.

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_offload::{CountersSnapshot, FallbackReason, FlushReason};
use sluice_proxy::{AccessLog, ProxyMetrics, STATUS_CLASSES, TLS_VERSIONS, UPSTREAM_ERRORS};
use sluice_tls::KeyOffload;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// What the admin listener reports on.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Data-plane counters.
    pub proxy: Arc<ProxyMetrics>,
    /// The TLS private-key offload.
    pub crypto: Arc<KeyOffload>,
    /// The access log (dropped lines).
    pub access_log: AccessLog,
    /// Process start.
    pub started: Instant,
}

/// Binds `addr` and serves until the returned task is aborted. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    sources: Sources,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let socket = tokio::net::TcpListener::bind(addr).await?;
    let bound = socket.local_addr()?;
    let sources = Arc::new(sources);
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = socket.accept().await else {
                continue;
            };
            let sources = sources.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let sources = sources.clone();
                    async move { Ok::<_, Infallible>(respond(&sources, &req)) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Ok((bound, task))
}

fn respond(s: &Sources, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics(s),
        ),
        "/status" => (StatusCode::OK, "application/json", status(s)),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try /metrics or /status\n".to_owned(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    r
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The Prometheus text exposition.
pub fn metrics(s: &Sources) -> String {
    let mut out = String::with_capacity(4096);
    let p = s.proxy.snapshot();
    family(
        &mut out,
        "sluice_tls_handshakes_total",
        "counter",
        "Completed TLS handshakes.",
    );
    for (v, version) in TLS_VERSIONS.iter().enumerate() {
        for (r, resumed) in ["false", "true"].iter().enumerate() {
            let _ = writeln!(
                out,
                "sluice_tls_handshakes_total{{version=\"{version}\",resumed=\"{resumed}\"}} {}",
                p.handshakes[v][r]
            );
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
    family(
        &mut out,
        "sluice_access_log_dropped_total",
        "counter",
        "Access log lines dropped because the sink could not keep up.",
    );
    let _ = writeln!(
        out,
        "sluice_access_log_dropped_total {}",
        s.access_log.dropped()
    );
    offload(&mut out, "crypto", &s.crypto.counters());
    out
}

fn offload(out: &mut String, service: &str, engines: &[CountersSnapshot]) {
    let each = |out: &mut String,
                name: &str,
                kind: &str,
                help: &str,
                value: &dyn Fn(&CountersSnapshot) -> i64| {
        family(out, name, kind, help);
        for c in engines {
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
        "sluice_offload_jobs_fell_back_total",
        "counter",
        "Jobs that left an engine for the next one, by reason.",
    );
    for c in engines {
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
    for c in engines {
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

/// The JSON status document.
pub fn status(s: &Sources) -> String {
    let p = s.proxy.snapshot();
    let engines: Vec<serde_json::Value> = s
        .crypto
        .counters()
        .iter()
        .map(|c| {
            let fell: serde_json::Map<String, serde_json::Value> =
                FallbackReason::ALL.iter().map(|r| (r.as_str().to_owned(), c.fell_back(*r).into())).collect();
            serde_json::json!({
                "engine": c.engine, "submitted": c.submitted, "completed": c.completed, "failed": c.failed,
                "in_flight": c.in_flight, "fell_back": fell,
            })
        })
        .collect();
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": s.started.elapsed().as_secs(),
        "tls_handshakes": p.handshakes.iter().flatten().sum::<u64>(),
        "tls_handshake_failures": p.handshake_failures,
        "requests": STATUS_CLASSES.iter().zip(p.requests).map(|(k, v)| ((*k).to_owned(), v.into())).collect::<serde_json::Map<_, _>>(),
        "offload": { "crypto": engines },
    })
    .to_string()
}
