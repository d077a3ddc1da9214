//! A listener's UDP socket: reads every datagram, hands it to its connection's task by the
//! destination connection ID, and starts a task for each new connection. Everything a
//! datagram can be refused for (unparsable, an unknown connection's non-Initial packet, an
//! Initial too short to be one, a connection whose queue is full) is dropped and counted,
//! never answered with more than it carried.

use super::connection::{self, Datagram, Setup};
use crate::listen::connection::Signals;
use crate::metrics::QuicDropped as Dropped;
use crate::request::context::ListenerCtx;
use arc_swap::ArcSwap;
use quiche::ConnectionId;
use sluice_tls::QuicHandshake;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

/// The length of the connection IDs this side chooses.
const CID_LEN: usize = 16;

/// The smallest UDP payload that may carry a client's first Initial (RFC 9000 §14.1).
const MIN_INITIAL: usize = 1200;

/// Datagrams queued for one connection before more are dropped (the client sends them
/// again: QUIC's own recovery).
const QUEUE: usize = 256;

/// A listener's UDP socket on `at`, with `SO_REUSEPORT`: `sluice upgrade` starts the new
/// process while the old one still holds the port (TCP listeners are handed over; a UDP
/// socket is bound anew beside the old one, which closes when the old process stops
/// accepting). A large receive buffer absorbs bursts of Initials.
pub(crate) fn bind(at: std::net::SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(at), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_port(true)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.bind(&at.into())?;
    UdpSocket::from_std(s.into())
}

/// Reads `socket` until the task is aborted, or, once the listener drains, until its last
/// connection has finished (each sends GOAWAY and closes when its requests are done); `slot`
/// holds the listener's current context.
pub(crate) async fn run(
    socket: Arc<UdpSocket>,
    slot: Arc<ArcSwap<ListenerCtx>>,
    signals: Signals,
    connections: TaskTracker,
) {
    let Ok(local) = socket.local_addr() else {
        return;
    };
    let mut routes: HashMap<ConnectionId<'static>, mpsc::Sender<Datagram>> = HashMap::new();
    let (gone_tx, mut gone_rx) = mpsc::unbounded_channel::<Vec<ConnectionId<'static>>>();
    // quiche's configuration, rebuilt when the listener's context changes (a reload).
    let mut config: Option<(Arc<ListenerCtx>, quiche::Config)> = None;
    let mut buf = vec![0u8; 65_535];
    let mut reply = vec![0u8; 1_350];
    let mut draining = signals.draining.clone();
    let mut drain = *draining.borrow();
    loop {
        if drain && routes.is_empty() {
            return;
        }
        let (len, from) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    // ICMP errors surface here on Linux; nothing to do but go on.
                    tracing::debug!(error = %e, "receiving a QUIC datagram");
                    continue;
                }
            },
            Some(ids) = gone_rx.recv() => {
                for id in ids {
                    routes.remove(&id);
                }
                continue;
            }
            changed = draining.changed(), if !drain => {
                drain = changed.is_err() || *draining.borrow();
                continue;
            }
        };
        let ctx = slot.load();
        let packet = &mut buf[..len];
        let hdr = match quiche::Header::from_slice(packet, CID_LEN) {
            Ok(h) => h,
            Err(_) => {
                ctx.metrics.quic_dropped(Dropped::Unparsable);
                continue;
            }
        };
        if let Some(tx) = routes.get(&hdr.dcid) {
            let d = Datagram {
                data: packet.to_vec(),
                from,
            };
            if tx.try_send(d).is_err() {
                ctx.metrics.quic_dropped(Dropped::QueueFull);
            }
            continue;
        }
        if hdr.ty != quiche::Type::Initial {
            ctx.metrics.quic_dropped(Dropped::UnknownConnection);
            continue;
        }
        if !quiche::version_is_supported(hdr.version) {
            // Version negotiation (RFC 9000 §6): small, and only for a full-size Initial.
            if len >= MIN_INITIAL
                && let Ok(n) = quiche::negotiate_version(&hdr.scid, &hdr.dcid, &mut reply)
            {
                let _ = socket.try_send_to(&reply[..n], from);
            }
            continue;
        }
        if drain {
            ctx.metrics.quic_dropped(Dropped::Draining);
            continue;
        }
        if len < MIN_INITIAL || hdr.dcid.len() < 8 {
            ctx.metrics.quic_dropped(Dropped::BadInitial);
            continue;
        }
        let Some(tls) = ctx.tls.as_ref() else {
            continue;
        };
        let current = ctx.clone();
        let cfg = match &mut config {
            Some((for_ctx, cfg)) if Arc::ptr_eq(for_ctx, &current) => cfg,
            _ => match quic_config(&current) {
                Ok(cfg) => &mut config.insert((current.clone(), cfg)).1,
                Err(e) => {
                    tracing::error!(listener = %current.name, error = %e, "cannot configure QUIC; HTTP/3 refused");
                    ctx.metrics.quic_dropped(Dropped::AcceptFailed);
                    continue;
                }
            },
        };
        let mut scid = [0u8; CID_LEN];
        boring::rand::rand_bytes(&mut scid).expect("BoringSSL's random generator");
        let scid = ConnectionId::from_vec(scid.to_vec());
        let conn = match quiche::accept(&scid, None, local, from, cfg) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%from, error = %e, "QUIC connection not accepted");
                ctx.metrics.quic_dropped(Dropped::AcceptFailed);
                continue;
            }
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let _ = tx.try_send(Datagram {
            data: packet.to_vec(),
            from,
        });
        // The client's Initials go on using the ID it chose until it hears ours.
        let ids = vec![scid.clone(), hdr.dcid.clone().into_owned()];
        for id in &ids {
            routes.insert(id.clone(), tx.clone());
        }
        let setup = Setup {
            conn,
            handshake: QuicHandshake::new(tls),
            datagrams: rx,
            socket: socket.clone(),
            local,
            peer: from,
            listener: current,
            slot: slot.clone(),
            signals: signals.clone(),
        };
        let gone = gone_tx.clone();
        connections.spawn(async move {
            connection::serve(setup).await;
            let _ = gone.send(ids);
        });
    }
}

/// quiche's settings for `listener`: its TLS context (certificates, SNI, tickets, offload),
/// ALPN `h3`, the keep-alive timeout as QUIC's idle timeout, and stream limits.
fn quic_config(listener: &ListenerCtx) -> Result<quiche::Config, String> {
    let tls = listener
        .tls
        .as_ref()
        .ok_or("the listener has no TLS")?
        .quic_context()
        .map_err(|e| e.to_string())?;
    let mut c = quiche::Config::with_boring_ssl_ctx_builder(quiche::PROTOCOL_VERSION, tls)
        .map_err(|e| e.to_string())?;
    c.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .map_err(|e| e.to_string())?;
    let cfg = &listener.config;
    c.set_max_idle_timeout(cfg.keepalive_timeout.as_millis() as u64);
    c.set_max_recv_udp_payload_size(65_527);
    c.set_max_send_udp_payload_size(1_350);
    c.set_initial_max_data(10 << 20);
    c.set_initial_max_stream_data_bidi_local(1 << 20);
    c.set_initial_max_stream_data_bidi_remote(1 << 20);
    c.set_initial_max_stream_data_uni(1 << 20);
    c.set_initial_max_streams_bidi(100);
    c.set_initial_max_streams_uni(16);
    c.set_disable_active_migration(true);
    Ok(c)
}
