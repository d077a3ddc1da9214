//! A listener's UDP socket: reads every datagram, hands it to its connection's task by the
//! destination connection ID, and starts a task for each new connection. Everything a
//! datagram can be refused for (unparsable, an unknown connection's non-Initial packet, an
//! Initial too short to be one, a connection whose queue is full) is dropped and counted,
//! never answered with more than it carried.

use super::connection::{self, Datagram, HalfOpen, Setup};
use super::steering::{self, CID_LEN};
use crate::listen::conn_limit::{ConnCounts, Refusal};
use crate::listen::connection::Signals;
use crate::metrics::QuicDropped as Dropped;
use crate::request::context::ListenerCtx;
use arc_swap::ArcSwap;
use quiche::ConnectionId;
use sluice_config::QuicRetry;
use sluice_tls::QuicHandshake;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

/// The smallest UDP payload that may carry a client's first Initial (RFC 9000 §14.1).
const MIN_INITIAL: usize = 1200;

/// Datagrams queued for one connection before more are dropped (the client sends them
/// again: QUIC's own recovery).
const QUEUE: usize = 256;

/// How long a Retry token is good for: the client echoes it at once, a round trip later.
const TOKEN_LIFETIME: Duration = Duration::from_secs(30);

/// Retry tokens (RFC 9000 §8.1.2): the time, the connection ID the client first chose, and an
/// HMAC-SHA256 over them and the client's address under a key of this endpoint's own. Only a
/// client that received our Retry at the address it sends from can present one, and only
/// for a while; the original connection ID comes back from it, so the server keeps no
/// state for a client it asked to retry.
struct Tokens {
    key: ring::hmac::Key,
}

impl Tokens {
    fn new() -> Tokens {
        let mut key = [0u8; 32];
        boring::rand::rand_bytes(&mut key).expect("BoringSSL's random generator");
        Tokens {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key),
        }
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    /// What the HMAC covers: the client's address, then the token's body.
    fn signed(peer: SocketAddr, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(18 + body.len());
        match peer.ip() {
            std::net::IpAddr::V4(a) => v.extend_from_slice(&a.octets()),
            std::net::IpAddr::V6(a) => v.extend_from_slice(&a.octets()),
        }
        v.extend_from_slice(&peer.port().to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn mint(&self, peer: SocketAddr, odcid: &[u8]) -> Vec<u8> {
        let mut t = Vec::with_capacity(9 + odcid.len() + 32);
        t.extend_from_slice(&Self::now().to_be_bytes());
        t.push(odcid.len() as u8);
        t.extend_from_slice(odcid);
        let tag = ring::hmac::sign(&self.key, &Self::signed(peer, &t));
        t.extend_from_slice(tag.as_ref());
        t
    }

    /// The original destination connection ID a valid token carries.
    fn validate(&self, peer: SocketAddr, token: &[u8]) -> Option<ConnectionId<'static>> {
        let body_len = token.len().checked_sub(32)?;
        let (body, tag) = token.split_at(body_len);
        ring::hmac::verify(&self.key, &Self::signed(peer, body), tag).ok()?;
        let minted = u64::from_be_bytes(body.get(..8)?.try_into().ok()?);
        let n = *body.get(8)? as usize;
        let odcid = body.get(9..)?;
        let age = Self::now().checked_sub(minted)?;
        (odcid.len() == n && age <= TOKEN_LIFETIME.as_secs())
            .then(|| ConnectionId::from_vec(odcid.to_vec()))
    }
}

/// A listener's UDP socket on `at`, with `SO_REUSEPORT`: `sluice upgrade` starts the new
/// process while the old one still holds the port (TCP listeners are handed over; a UDP
/// socket is bound anew beside the old one, which closes when the old process's last QUIC
/// connection has ended), and the group's selector (`steering`) keeps each connection's
/// datagrams with the process that accepted it. A large receive buffer absorbs bursts of
/// Initials.
pub(crate) fn bind(at: std::net::SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(at), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_port(true)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.bind(&at.into())?;
    if let Err(e) = steering::attach(&s) {
        // Only an upgrade needs it: serve without, and say what it costs.
        tracing::warn!(address = %at, error = %e, "cannot install the QUIC steering program; while `sluice upgrade` runs two processes, some QUIC connections may stall");
    }
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
    counts: Arc<ConnCounts>,
) {
    let Ok(local) = socket.local_addr() else {
        return;
    };
    let (gone_tx, mut gone_rx) = mpsc::unbounded_channel::<Vec<ConnectionId<'static>>>();
    let mut draining = signals.draining.clone();
    let mut endpoint = Endpoint {
        routes: HashMap::new(),
        gone_tx,
        tokens: Tokens::new(),
        half_open: Arc::new(AtomicUsize::new(0)),
        config: None,
        reply: vec![0u8; 1_350],
        drain: *draining.borrow(),
        socket,
        local,
        slot,
        signals,
        connections,
        counts,
    };
    let mut buf = vec![0u8; 65_535];
    loop {
        if endpoint.drain && endpoint.routes.is_empty() {
            return;
        }
        let (len, from) = tokio::select! {
            r = endpoint.socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    // ICMP errors surface here on Linux; nothing to do but go on.
                    tracing::debug!(error = %e, "receiving a QUIC datagram");
                    continue;
                }
            },
            Some(ids) = gone_rx.recv() => {
                for id in ids {
                    endpoint.routes.remove(&id);
                }
                continue;
            }
            changed = draining.changed(), if !endpoint.drain => {
                endpoint.drain = changed.is_err() || *draining.borrow();
                continue;
            }
        };
        endpoint.datagram(&mut buf[..len], from);
    }
}

/// A listener's QUIC endpoint: its socket, the connections' queues by connection ID, and
/// what admitting a new connection needs.
struct Endpoint {
    routes: HashMap<ConnectionId<'static>, mpsc::Sender<Datagram>>,
    /// Where a finished connection's task sends its IDs, to be forgotten.
    gone_tx: mpsc::UnboundedSender<Vec<ConnectionId<'static>>>,
    tokens: Tokens,
    half_open: Arc<AtomicUsize>,
    /// quiche's configuration, rebuilt when the listener's context changes (a reload).
    config: Option<(Arc<ListenerCtx>, quiche::Config)>,
    /// Room for a version negotiation or a Retry.
    reply: Vec<u8>,
    /// The listener drains: new connections are refused.
    drain: bool,
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    slot: Arc<ArcSwap<ListenerCtx>>,
    signals: Signals,
    connections: TaskTracker,
    counts: Arc<ConnCounts>,
}

impl Endpoint {
    /// One datagram: to its connection's queue, or a new connection's first, or dropped and
    /// counted.
    fn datagram(&mut self, packet: &mut [u8], from: SocketAddr) {
        let ctx = self.slot.load_full();
        let Ok(hdr) = quiche::Header::from_slice(packet, CID_LEN) else {
            ctx.metrics.quic_dropped(Dropped::Unparsable);
            return;
        };
        if let Some(tx) = self.routes.get(&hdr.dcid) {
            let d = Datagram {
                data: packet.to_vec(),
                from,
            };
            if tx.try_send(d).is_err() {
                ctx.metrics.quic_dropped(Dropped::QueueFull);
            }
            return;
        }
        if let Err(why) = self.initial(&hdr, packet.len(), from) {
            if let Some(why) = why {
                ctx.metrics.quic_dropped(why);
            }
            return;
        }
        if ctx.tls.is_none() || self.config_for(&ctx).is_none() {
            return;
        }
        let Some(odcid) = self.validated(&ctx, &hdr, from) else {
            return;
        };
        self.accept(&ctx, &hdr, odcid, packet, from);
    }

    /// Whether an unknown connection's packet may start one: an Initial of a version we
    /// speak (else a version negotiation), full-size, while the listener is not draining.
    /// `Err(None)`: answered or ignored, not counted.
    fn initial(
        &mut self,
        hdr: &quiche::Header<'_>,
        len: usize,
        from: SocketAddr,
    ) -> Result<(), Option<Dropped>> {
        if hdr.ty != quiche::Type::Initial {
            return Err(Some(Dropped::UnknownConnection));
        }
        if !quiche::version_is_supported(hdr.version) {
            // Version negotiation (RFC 9000 §6): small, and only for a full-size Initial.
            if len >= MIN_INITIAL
                && let Ok(n) = quiche::negotiate_version(&hdr.scid, &hdr.dcid, &mut self.reply)
            {
                let _ = self.socket.try_send_to(&self.reply[..n], from);
            }
            return Err(None);
        }
        if self.drain {
            return Err(Some(Dropped::Draining));
        }
        if len < MIN_INITIAL || hdr.dcid.len() < 8 {
            return Err(Some(Dropped::BadInitial));
        }
        Ok(())
    }

    /// Address validation (RFC 9000 §8.1): the original destination ID a valid Retry token
    /// carries (`Some(Some(odcid))`), no token where none is needed (`Some(None)`), or a
    /// Retry sent or a bad token dropped (`None`). A Retry costs one small packet and no
    /// state; the handshake is spent only on a client that echoes the token from its address.
    fn validated(
        &mut self,
        ctx: &ListenerCtx,
        hdr: &quiche::Header<'_>,
        from: SocketAddr,
    ) -> Option<Option<ConnectionId<'static>>> {
        let must_retry = match ctx.config.quic.retry {
            QuicRetry::Always => true,
            QuicRetry::Off => false,
            QuicRetry::Auto => self.half_open.load(Ordering::Relaxed) > QuicRetry::AUTO_THRESHOLD,
        };
        let presented = hdr.token.as_deref().filter(|t| !t.is_empty());
        let odcid = presented.and_then(|t| self.tokens.validate(from, t));
        if !must_retry || odcid.is_some() {
            return Some(odcid);
        }
        if presented.is_some() {
            // A client may follow one Retry only: a second would strand it.
            ctx.metrics.quic_dropped(Dropped::BadToken);
            return None;
        }
        let token = self.tokens.mint(from, &hdr.dcid);
        let new_scid = steering::new_cid();
        match quiche::retry(
            &hdr.scid,
            &hdr.dcid,
            &new_scid,
            &token,
            hdr.version,
            &mut self.reply,
        ) {
            Ok(n) => {
                let _ = self.socket.try_send_to(&self.reply[..n], from);
                ctx.metrics.quic_retry();
            }
            Err(e) => tracing::debug!(%from, error = %e, "QUIC Retry not written"),
        }
        None
    }

    /// quiche's configuration for `ctx`, made once per listener context.
    fn config_for(&mut self, ctx: &Arc<ListenerCtx>) -> Option<&mut quiche::Config> {
        if !matches!(&self.config, Some((for_ctx, _)) if Arc::ptr_eq(for_ctx, ctx)) {
            match quic_config(ctx) {
                Ok(cfg) => self.config = Some((ctx.clone(), cfg)),
                Err(e) => {
                    tracing::error!(listener = %ctx.name, error = %e, "cannot configure QUIC; HTTP/3 refused");
                    ctx.metrics.quic_dropped(Dropped::AcceptFailed);
                    return None;
                }
            }
        }
        self.config.as_mut().map(|(_, cfg)| cfg)
    }

    /// A new connection for a validated Initial: within the listener's connection limits
    /// (QUIC and TCP together; over them the Initial is dropped, and the client tries again
    /// or falls back to TCP), its task started and its IDs routed to it.
    fn accept(
        &mut self,
        ctx: &Arc<ListenerCtx>,
        hdr: &quiche::Header<'_>,
        odcid: Option<ConnectionId<'static>>,
        packet: &[u8],
        from: SocketAddr,
    ) {
        // After a Retry the client's destination ID is the one our Retry chose (ours to
        // keep); else a fresh one.
        let scid = match &odcid {
            Some(_) if hdr.dcid.len() == CID_LEN => hdr.dcid.clone().into_owned(),
            Some(_) => return ctx.metrics.quic_dropped(Dropped::BadToken),
            None => steering::new_cid(),
        };
        let limits = &ctx.config;
        let place = match self.counts.admit(
            from.ip(),
            limits.max_connections,
            limits.max_connections_per_client,
        ) {
            Ok(p) => p,
            Err(why) => return ctx.metrics.connection_refused(why == Refusal::Client),
        };
        let (local, tls) = (self.local, ctx.tls.as_ref().expect("checked by datagram"));
        let (_, cfg) = self
            .config
            .as_mut()
            .expect("made for this context by datagram");
        let conn = match quiche::accept(&scid, odcid.as_ref(), local, from, cfg) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%from, error = %e, "QUIC connection not accepted");
                return ctx.metrics.quic_dropped(Dropped::AcceptFailed);
            }
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let _ = tx.try_send(Datagram {
            data: packet.to_vec(),
            from,
        });
        // The client's Initials go on using the ID it chose until it hears ours.
        let mut ids = vec![scid.clone()];
        if hdr.dcid != scid {
            ids.push(hdr.dcid.clone().into_owned());
        }
        for id in &ids {
            self.routes.insert(id.clone(), tx.clone());
        }
        let setup = Setup {
            conn,
            handshake: QuicHandshake::new(tls),
            half_open: HalfOpen::new(&self.half_open),
            place,
            datagrams: rx,
            socket: self.socket.clone(),
            local,
            peer: from,
            listener: ctx.clone(),
            slot: self.slot.clone(),
            signals: self.signals.clone(),
        };
        let gone = self.gone_tx.clone();
        self.connections.spawn(async move {
            connection::serve(setup).await;
            let _ = gone.send(ids);
        });
    }
}

/// quiche's settings for `listener`: its TLS context (certificates, SNI, tickets, offload),
/// ALPN `h3`, and its QUIC settings (idle timeout, stream limit).
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
    let quic = &listener.config.quic;
    c.set_max_idle_timeout(quic.idle_timeout.as_millis() as u64);
    c.set_max_recv_udp_payload_size(65_527);
    c.set_max_send_udp_payload_size(1_350);
    c.set_initial_max_data(10 << 20);
    c.set_initial_max_stream_data_bidi_local(1 << 20);
    c.set_initial_max_stream_data_bidi_remote(1 << 20);
    c.set_initial_max_stream_data_uni(1 << 20);
    c.set_initial_max_streams_bidi(u64::from(quic.max_streams));
    c.set_initial_max_streams_uni(16);
    c.set_disable_active_migration(true);
    // No GREASE from this side: quiche's opens an extra unidirectional stream and sends
    // reserved frames on every connection (measured: part of what a QUIC handshake costs
    // over a TCP one); clients grease, and NGINX's and HAProxy's QUIC do not.
    c.grease(false);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 7], port))
    }

    #[test]
    fn a_token_is_good_only_from_its_address_untampered_and_in_time() {
        let t = Tokens::new();
        let odcid = [9u8; 12];
        let token = t.mint(peer(4433), &odcid);
        assert_eq!(t.validate(peer(4433), &token).unwrap().as_ref(), &odcid[..]);
        assert!(t.validate(peer(4434), &token).is_none(), "another port");
        assert!(
            t.validate(SocketAddr::from(([192, 0, 2, 8], 4433)), &token)
                .is_none(),
            "another address"
        );
        for i in 0..token.len() {
            let mut bad = token.clone();
            bad[i] ^= 1;
            assert!(t.validate(peer(4433), &bad).is_none(), "byte {i} flipped");
        }
        assert!(t.validate(peer(4433), &token[..token.len() - 1]).is_none());
        assert!(t.validate(peer(4433), &[]).is_none());
        assert!(
            Tokens::new().validate(peer(4433), &token).is_none(),
            "another endpoint's key (another process)"
        );
    }

    #[test]
    fn an_old_token_is_refused() {
        let t = Tokens::new();
        // A token minted TOKEN_LIFETIME + 1 s ago, signed properly.
        let mut body = (Tokens::now() - TOKEN_LIFETIME.as_secs() - 1)
            .to_be_bytes()
            .to_vec();
        body.push(4);
        body.extend_from_slice(&[1, 2, 3, 4]);
        let tag = ring::hmac::sign(&t.key, &Tokens::signed(peer(1), &body));
        body.extend_from_slice(tag.as_ref());
        assert!(t.validate(peer(1), &body).is_none());
        // The same minted now is good.
        let fresh = t.mint(peer(1), &[1, 2, 3, 4]);
        assert!(t.validate(peer(1), &fresh).is_some());
    }
}
