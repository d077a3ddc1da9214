//! A bound listener while it runs: its accept loop, its QUIC endpoint, and what draining it
//! needs (the connections' tracker, the drain and deadline signals).

use crate::listen::connection::Signals;
use crate::request::context::ListenerCtx;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// One bound listener.
#[derive(Debug)]
pub(super) struct RunningListener {
    pub(super) name: String,
    /// The listening socket's descriptor (owned by the accept task).
    pub(super) fd: std::os::fd::RawFd,
    /// As configured (port 0 stays 0 here: the same configuration keeps the same socket).
    pub(super) configured: SocketAddr,
    pub(super) bound: SocketAddr,
    /// The listener's current context; the accept loop and every request read it.
    pub(super) ctx: Arc<ArcSwap<ListenerCtx>>,
    pub(super) accept: JoinHandle<()>,
    /// The QUIC endpoint of an `http3` listener (its connections are in `connections`);
    /// it ends by itself once the listener drains and its last connection is done.
    pub(super) quic: Option<JoinHandle<()>>,
    pub(super) draining: watch::Sender<bool>,
    pub(super) force: CancellationToken,
    pub(super) connections: TaskTracker,
    /// Relays that outlived their requests (WebSocket tunnels, MQTT over WebSocket).
    pub(super) streams: crate::signals::Streams,
    /// Open connections against `max_connections` and `max_connections_per_client`, TCP and
    /// QUIC together.
    pub(super) counts: Arc<crate::listen::conn_limit::ConnCounts>,
}

impl RunningListener {
    /// Stops accepting (the socket closes) and asks every connection to finish gracefully.
    pub(super) fn stop_accepting(&self) {
        // The QUIC endpoint sees the drain itself: it takes no new connection and ends
        // when its last one has.
        self.accept.abort();
        let _ = self.draining.send(true);
        self.connections.close();
        self.streams.tasks.close();
    }
}

pub(super) fn spawn_listener(socket: TcpListener, ctx: Arc<ListenerCtx>) -> RunningListener {
    use std::os::fd::AsRawFd as _;
    let fd = socket.as_raw_fd();
    // A socket from the OS always has a local address; 0.0.0.0:0 only if it somehow has not.
    let bound = socket
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let (draining, draining_rx) = watch::channel(false);
    let force = CancellationToken::new();
    let connections = TaskTracker::new();
    let streams = crate::signals::Streams::default();
    let counts = Arc::new(crate::listen::conn_limit::ConnCounts::default());
    let name = ctx.name.to_string();
    let configured = ctx.config.address;
    let slot = Arc::new(ArcSwap::new(ctx));
    let signals = Signals {
        draining: draining_rx,
        force: force.clone(),
        idle: Arc::default(),
        streams: streams.clone(),
    };
    let accept = tokio::spawn(crate::accept::accept_loop(
        bound,
        socket,
        slot.clone(),
        signals,
        connections.clone(),
        counts.clone(),
    ));
    RunningListener {
        name,
        fd,
        configured,
        bound,
        ctx: slot,
        accept,
        quic: None,
        draining,
        force,
        connections,
        streams,
        counts,
    }
}

/// Starts the QUIC endpoint of `l` on `udp`: its connections share the listener's context,
/// drain and deadline.
pub(super) fn spawn_quic(udp: UdpSocket, l: &RunningListener) -> JoinHandle<()> {
    let signals = Signals {
        draining: l.draining.subscribe(),
        force: l.force.clone(),
        idle: Arc::default(),
        streams: l.streams.clone(),
    };
    tracing::info!(listener = %l.name, address = %l.bound, "serving HTTP/3 (QUIC) on UDP");
    tokio::spawn(crate::http3::run(
        Arc::new(udp),
        l.ctx.clone(),
        signals,
        l.connections.clone(),
        l.counts.clone(),
    ))
}
