//! `sluice run` and `sluice check`: loading, start-up banner, signals and graceful shutdown.

use anyhow::Context as _;
use sluice_config::{DefaultConfigParams, Snapshot, default_config, load_file};
use sluice_proxy::Gateway;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// `sluice check --config FILE`: every error at once, exit status 1 when there is any.
pub(crate) fn check(path: &Path) -> ExitCode {
    match load_file(path) {
        Ok(s) => {
            println!(
                "{}: OK ({} listener(s), {} certificate(s), {} upstream(s), {} route(s))",
                path.display(),
                s.listeners.len(),
                s.certificates.len(),
                s.upstreams.len(),
                s.routes.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// `sluice run`.
pub(crate) fn run(config: Option<PathBuf>, state_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (snapshot, demo) = match &config {
            Some(path) => (load_file(path)?, None),
            None => {
                let dir = state_dir.unwrap_or_else(sluice_tls::selfsigned::default_state_dir);
                let generated = sluice_tls::selfsigned::ensure_default_certificates(&dir)
                    .with_context(|| {
                        format!("preparing self-signed certificates in {}", dir.display())
                    })?;
                let demo = crate::demo::start()
                    .await
                    .context("starting the demo origin")?;
                let (_, snapshot) = default_config(&DefaultConfigParams {
                    state_dir: &dir,
                    demo_origin: demo,
                })?;
                (snapshot, Some((demo, dir, generated)))
            }
        };
        init_tracing(&snapshot.log.level);
        let shutdown_timeout = snapshot.global.shutdown_timeout;
        let snapshot = Arc::new(snapshot);
        let gateway = Gateway::start(snapshot.clone()).await?;
        let admin = match snapshot.admin {
            Some(addr) => {
                let sources = sluice_admin::Sources {
                    proxy: gateway.metrics(),
                    crypto: gateway.key_offload(),
                    compress: gateway.compressor(),
                    access_log: gateway.access_log().clone(),
                    started: std::time::Instant::now(),
                };
                let served = sluice_admin::serve(addr, sources).await.with_context(|| {
                    format!("binding the admin listener on {addr}; change or disable [admin]")
                })?;
                Some(served)
            }
            None => None,
        };
        banner(
            &snapshot,
            &gateway,
            demo.as_ref().map(|(a, d, g)| (*a, d.as_path(), *g)),
            admin.as_ref().map(|(a, _)| *a),
        );

        wait_for_signal().await?;
        eprintln!(
            "sluice: shutting down; in-flight requests have {}s to finish",
            shutdown_timeout.as_secs_f32()
        );
        if !gateway.shutdown(shutdown_timeout).await {
            eprintln!("sluice: some requests did not finish in time and were closed");
        }
        if let Some((_, task)) = admin {
            task.abort();
        }
        eprintln!("sluice: stopped");
        Ok(())
    })
}

fn banner(
    snapshot: &Snapshot,
    gateway: &Gateway,
    demo: Option<(std::net::SocketAddr, &Path, bool)>,
    admin: Option<std::net::SocketAddr>,
) {
    let mut out = String::new();
    match demo {
        Some(_) => out.push_str(&format!(
            "Sluice {} is running on its embedded default configuration.\n",
            env!("CARGO_PKG_VERSION")
        )),
        None => out.push_str(&format!(
            "Sluice {} is running with {}.\n",
            env!("CARGO_PKG_VERSION"),
            snapshot.source
        )),
    }
    for (l, (name, addr)) in snapshot.listeners.iter().zip(gateway.addresses()) {
        let (scheme, protos) = match (&l.tls, l.h2, l.http1) {
            (Some(_), true, true) => ("https", "HTTP/2 and HTTP/1.1 by ALPN"),
            (Some(_), true, false) => ("https", "HTTP/2"),
            (Some(_), _, _) => ("https", "HTTP/1.1"),
            (None, true, true) => ("http", "HTTP/1.1, and HTTP/2 with prior knowledge"),
            (None, true, false) => ("http", "HTTP/2 with prior knowledge"),
            (None, _, _) => ("http", "HTTP/1.1"),
        };
        out.push_str(&format!("  {name:<8} {scheme}://{addr}/  ({protos})\n"));
    }
    if let Some(a) = admin {
        out.push_str(&format!(
            "  admin    http://{a}/metrics (Prometheus) and /status (JSON)\n"
        ));
    }
    if let Some((origin, dir, generated)) = demo {
        out.push_str(&format!(
            "  demo origin on {origin}: / (HTML page), /api/status (JSON), /headers (echo), /stream (a line every 100 ms)\n"
        ));
        out.push_str(&format!(
            "  self-signed RSA-2048 and ECDSA P-256 certificates for localhost in {} ({})\n",
            dir.display(),
            if generated {
                "generated now"
            } else {
                "kept from an earlier run"
            }
        ));
        out.push_str("  try: curl -k https://127.0.0.1:8443/\n");
    }
    out.push_str(&format!(
        "Stop with Ctrl-C, or: kill -TERM {}\n",
        std::process::id()
    ));
    print!("{out}");
}

async fn wait_for_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    Ok(())
}
