//! Accepting a listener's connections: the PROXY protocol header from trusted balancers,
//! connection limits, a place among the TLS handshakes in progress, and handing each
//! connection to HTTP (`listen`) or the layer-4 relay (`layer4`) as its listener's kind says.
//! `gateway` starts one accept loop per bound listener and stops it on reload or shutdown.

use crate::handshakes::HandshakePermit;
use crate::listen::conn_limit::{ConnCounts, Refusal};
use crate::listen::connection::Signals;
use crate::request::context::ListenerCtx;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;

/// Accepts `socket`'s connections until the task is aborted; `slot` holds the listener's
/// current context.
pub(crate) async fn accept_loop(
    bound: SocketAddr,
    socket: TcpListener,
    slot: Arc<ArcSwap<ListenerCtx>>,
    signals: Signals,
    connections: TaskTracker,
    counts: Arc<ConnCounts>,
) {
    let acceptor = Acceptor {
        bound,
        slot,
        signals,
        connections,
        counts,
    };
    loop {
        // A TLS listener accepts only when there is a place among the handshakes in progress:
        // a storm larger than that waits in the listen backlog. The place is taken after
        // `accept(2)`, so that a listener idle in `accept` holds none (another listener may
        // take it meanwhile: then this one waits with one accepted connection).
        let scheduler = {
            let ctx = acceptor.slot.load();
            ctx.tls.is_some().then(|| ctx.handshakes.clone())
        };
        if let Some(s) = &scheduler {
            s.room().await;
        }
        let accepted = socket.accept().await;
        let permit = match (&scheduler, &accepted) {
            (Some(s), Ok(_)) => Some(s.permit().await),
            _ => None,
        };
        match accepted {
            Ok((tcp, peer)) => acceptor.accepted(tcp, peer, permit),
            Err(e) => {
                // EMFILE and friends: back off instead of spinning; existing connections go on.
                let name = acceptor.slot.load().name.clone();
                tracing::warn!(listener = %name, error = %e, "accept failed; retrying shortly");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What a listener's accepted connections are handed with.
struct Acceptor {
    bound: SocketAddr,
    slot: Arc<ArcSwap<ListenerCtx>>,
    signals: Signals,
    connections: TaskTracker,
    counts: Arc<ConnCounts>,
}

impl Acceptor {
    /// A connection from `peer`: admitted within the listener's limits and served, or closed
    /// at once (no TLS, no read) and counted.
    fn accepted(&self, tcp: TcpStream, peer: SocketAddr, permit: Option<HandshakePermit>) {
        let ctx = self.slot.load_full();
        let cfg = &ctx.config;
        if cfg.proxy_protocol {
            return self.behind_balancer(ctx, tcp, peer, permit);
        }
        match self.counts.admit(
            peer.ip(),
            cfg.max_connections,
            cfg.max_connections_per_client,
        ) {
            Ok(place) => {
                let at = crate::addresses::Addresses {
                    client: peer,
                    local: local_addr(&tcp, self.bound),
                };
                let (slot, signals) = (self.slot.clone(), self.signals.clone());
                let serving = dispatch(ctx.clone(), slot, tcp, at, signals, permit);
                self.connections.spawn(async move {
                    serving.await;
                    drop(place);
                });
            }
            Err(why) => ctx.metrics.connection_refused(why == Refusal::Client),
        }
    }

    /// A connection on a PROXY protocol listener. Only a trusted balancer may say whose
    /// connection this is; anyone else is closed before a byte is read. The connection
    /// limits count the client the header names.
    fn behind_balancer(
        &self,
        ctx: Arc<ListenerCtx>,
        tcp: TcpStream,
        peer: SocketAddr,
        permit: Option<HandshakePermit>,
    ) {
        if !crate::request::policy::trusted(peer.ip(), &ctx.config.trusted_proxies) {
            ctx.metrics.proxy_protocol(1);
            tracing::debug!(listener = %ctx.name, %peer, "PROXY protocol from a peer not in trusted_proxies; closed");
            return;
        }
        let (slot, signals, counts) =
            (self.slot.clone(), self.signals.clone(), self.counts.clone());
        let bound = self.bound;
        self.connections.spawn(async move {
            let Some((tcp, at)) = read_proxy_header(&ctx, tcp, peer, bound, &signals).await else {
                return;
            };
            let cfg = &ctx.config;
            match counts.admit(
                at.client.ip(),
                cfg.max_connections,
                cfg.max_connections_per_client,
            ) {
                Ok(place) => {
                    dispatch(ctx, slot, tcp, at, signals, permit).await;
                    drop(place);
                }
                Err(why) => ctx.metrics.connection_refused(why == Refusal::Client),
            }
        });
    }
}

/// The address a connection came in on: the listener's own when it is bound to one IP (no
/// system call per connection), else the socket's (a wildcard listener's connections each
/// have the address of the interface they arrived at).
fn local_addr(tcp: &tokio::net::TcpStream, bound: SocketAddr) -> SocketAddr {
    if bound.ip().is_unspecified() {
        tcp.local_addr().unwrap_or(bound)
    } else {
        bound
    }
}

/// Reads the PROXY protocol header that opens a connection from a trusted balancer: the
/// client and the address it connected to, or `None` (counted) when the connection closes.
async fn read_proxy_header(
    ctx: &ListenerCtx,
    mut tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    bound: SocketAddr,
    signals: &Signals,
) -> Option<(tokio::net::TcpStream, crate::addresses::Addresses)> {
    use crate::proxy_protocol::{Origin, Refused};
    let local = local_addr(&tcp, bound);
    let read = crate::proxy_protocol::read(&mut tcp, ctx.config.header_read_timeout);
    let origin = tokio::select! {
        r = read => r,
        () = signals.force.cancelled() => return None,
    };
    let at = match origin {
        Ok(Origin::Client {
            source,
            destination,
        }) => crate::addresses::Addresses {
            client: SocketAddr::new(sluice_config::canonical(source.ip()), source.port()),
            local: destination,
        },
        // The balancer's own connection (a health check): it is the client.
        Ok(Origin::Local) => crate::addresses::Addresses {
            client: peer,
            local,
        },
        Err(why) => {
            ctx.metrics
                .proxy_protocol(if why == Refused::Malformed { 2 } else { 3 });
            tracing::debug!(listener = %ctx.name, %peer, ?why, "no valid PROXY protocol header; closed");
            return None;
        }
    };
    ctx.metrics.proxy_protocol(0);
    Some((tcp, at))
}

/// Serves a connection as its listener's kind says.
async fn dispatch(
    ctx: Arc<ListenerCtx>,
    slot: Arc<ArcSwap<ListenerCtx>>,
    tcp: tokio::net::TcpStream,
    at: crate::addresses::Addresses,
    signals: Signals,
    permit: Option<crate::handshakes::HandshakePermit>,
) {
    match ctx.config.kind {
        sluice_config::ListenerKind::Http => {
            crate::listen::connection::serve(ctx, slot, tcp, at, signals, permit).await;
        }
        sluice_config::ListenerKind::Tcp(_) => {
            crate::layer4::stream::serve(ctx, tcp, at, signals, permit).await
        }
        sluice_config::ListenerKind::Mqtt(_) => {
            crate::layer4::mqtt::serve(ctx, tcp, at, signals, permit).await
        }
    }
}
