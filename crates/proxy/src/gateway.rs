//! Starting and stopping the data plane for one configuration snapshot.

use crate::ProxyError;
use crate::access_log::AccessLog;
use crate::connection::{Signals, serve};
use crate::handler::ListenerCtx;
use crate::router::Router;
use crate::upstream::UpstreamGroup;
use sluice_config::Snapshot;
use sluice_tls::{KeyOffload, TlsAcceptor};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A running gateway: its bound listeners and the means to stop it.
#[derive(Debug)]
pub struct Gateway {
    addresses: Vec<(String, SocketAddr)>,
    accept_tasks: Vec<JoinHandle<()>>,
    draining: watch::Sender<bool>,
    force: CancellationToken,
    connections: TaskTracker,
    access_log: AccessLog,
    key_offload: Arc<KeyOffload>,
    metrics: Arc<crate::ProxyMetrics>,
    compressor: Arc<crate::Compressor>,
}

impl Gateway {
    /// Binds every listener of `snapshot` and starts serving. Fails without serving anything
    /// if any listener cannot bind or set up TLS.
    pub async fn start(snapshot: Arc<Snapshot>) -> Result<Gateway, ProxyError> {
        let access_log =
            AccessLog::open(&snapshot.log).map_err(|source| ProxyError::AccessLog {
                path: format!("{:?}", snapshot.log.access_log),
                source,
            })?;
        Self::start_with_log(snapshot, access_log).await
    }

    /// Like [`Gateway::start`], with an access log sink chosen by the caller.
    pub async fn start_with_log(
        snapshot: Arc<Snapshot>,
        access_log: AccessLog,
    ) -> Result<Gateway, ProxyError> {
        let upstreams: Arc<[Arc<UpstreamGroup>]> = snapshot
            .upstreams
            .iter()
            .map(|u| Arc::new(UpstreamGroup::new(u.clone())))
            .collect();

        let key_offload = KeyOffload::from_config(&snapshot).map_err(ProxyError::Offload)?;
        let metrics = Arc::new(crate::ProxyMetrics::default());
        // No pool threads when no route compresses.
        let mut compress = snapshot.offload.compress.clone();
        if !snapshot.routes.iter().any(|r| r.compression.enabled) {
            compress.engines.clear();
        }
        let compressor = crate::Compressor::from_config(&compress).map_err(ProxyError::Offload)?;
        let mut bound = Vec::new();
        for l in &snapshot.listeners {
            let tls = match &l.tls {
                Some(t) => {
                    let acceptor = TlsAcceptor::build(&snapshot, l, key_offload.clone()).map_err(
                        |source| ProxyError::Tls {
                            listener: l.name.clone(),
                            source,
                        },
                    )?;
                    acceptor.start_ticket_rotation(t.ticket_key_rotation);
                    Some(acceptor)
                }
                None => None,
            };
            let socket = TcpListener::bind(l.address)
                .await
                .map_err(|source| ProxyError::Bind {
                    listener: l.name.clone(),
                    address: l.address,
                    source,
                })?;
            let ctx = ListenerCtx {
                name: Arc::from(l.name.as_str()),
                config: l.clone(),
                router: Router::new(&snapshot, &l.name),
                tls,
                upstreams: upstreams.clone(),
                access_log: access_log.clone(),
                metrics: metrics.clone(),
                compressor: compressor.clone(),
            };
            bound.push((socket, Arc::new(ctx)));
        }

        let (draining, draining_rx) = watch::channel(false);
        let force = CancellationToken::new();
        let connections = TaskTracker::new();
        let mut addresses = Vec::new();
        let mut accept_tasks = Vec::new();
        for (socket, ctx) in bound {
            let addr = socket.local_addr().map_err(|source| ProxyError::Bind {
                listener: ctx.name.to_string(),
                address: ctx.config.address,
                source,
            })?;
            addresses.push((ctx.name.to_string(), addr));
            let signals = Signals {
                draining: draining_rx.clone(),
                force: force.clone(),
            };
            accept_tasks.push(tokio::spawn(accept_loop(
                socket,
                ctx,
                signals,
                connections.clone(),
            )));
        }
        Ok(Gateway {
            addresses,
            accept_tasks,
            draining,
            force,
            connections,
            access_log,
            key_offload,
            metrics,
            compressor,
        })
    }

    /// Where each listener is bound (useful with port 0).
    pub fn addresses(&self) -> &[(String, SocketAddr)] {
        &self.addresses
    }

    /// The bound address of the listener called `name`.
    pub fn local_addr(&self, name: &str) -> Option<SocketAddr> {
        self.addresses
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
    }

    /// Connections currently open.
    pub fn open_connections(&self) -> usize {
        self.connections.len()
    }

    /// What the data plane counted.
    pub fn metrics(&self) -> Arc<crate::ProxyMetrics> {
        self.metrics.clone()
    }

    /// The TLS private-key offload (its engines' counters).
    pub fn key_offload(&self) -> Arc<KeyOffload> {
        self.key_offload.clone()
    }

    /// What the TLS private-key engines did.
    pub fn crypto_counters(&self) -> Vec<sluice_offload::CountersSnapshot> {
        self.key_offload.counters()
    }

    /// The response compression service (counters for `/metrics`).
    pub fn compressor(&self) -> Arc<crate::Compressor> {
        self.compressor.clone()
    }

    /// The access log sink.
    pub fn access_log(&self) -> &AccessLog {
        &self.access_log
    }

    /// Stops accepting, lets in-flight requests finish for up to `deadline`, then closes
    /// what is left. Returns whether everything finished in time.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        for t in &self.accept_tasks {
            t.abort();
        }
        for t in self.accept_tasks {
            let _ = t.await;
        }
        let _ = self.draining.send(true);
        self.connections.close();
        let clean = tokio::time::timeout(deadline, self.connections.wait())
            .await
            .is_ok();
        if !clean {
            self.force.cancel();
            self.connections.wait().await;
        }
        self.access_log.flush();
        clean
    }
}

async fn accept_loop(
    socket: TcpListener,
    ctx: Arc<ListenerCtx>,
    signals: Signals,
    connections: TaskTracker,
) {
    loop {
        match socket.accept().await {
            Ok((tcp, peer)) => {
                connections.spawn(serve(ctx.clone(), tcp, peer, signals.clone()));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning; existing connections go on.
                tracing::warn!(listener = %ctx.name, error = %e, "accept failed; retrying shortly");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
