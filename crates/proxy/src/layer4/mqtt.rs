//! Layer 4 for MQTT: a `kind = "mqtt"` listener's connections (after TLS, when the listener
//! terminates it). The first packet must be a valid CONNECT (`sluice-mqtt`), whole within
//! `connect_timeout` and `max_connect_size`, with a client identifier that matches
//! `client_id_pattern` where there is one; else the connection is closed, with a CONNACK
//! that says why where the client's version has a code for it, and counted. An admitted
//! connection goes to the broker its client identifier (or user name) hashes to on the
//! upstream's ring, the next one on the ring when that one is down, with the CONNECT (and
//! anything the client sent behind it) replayed first; then its bytes are relayed until
//! either side ends or nothing crosses for 1.5 times the CONNECT's keep alive
//! (MQTT-3.1.2-24).
//!
//! Then the device's client certificate where the listener asks for one (`mqtt_cert`: none
//! where required, one that did not verify, a client identifier or user name that is not its
//! common name: "not authorized"), the listener's connection rates (`request::rate_limit::connect_rates`: per address, per identifier; over
//! them: "connection rate exceeded") and, with `[listener.mqtt.auth]`, its user name and
//! password (`mqtt_auth`; refused: "bad user name or password" or "not authorized").
//!
//! Each connection ends with one access-log line: method `MQTT`, the client identifier as
//! its path, the user name (or the subject its credentials were accepted as) as its subject;
//! status 200 proxied, 400 refused, 401 bad credentials, 403 denied or not authorized, 408 no
//! CONNECT in time, 409 proxied until a newer connection with its client identifier took over
//! (`max_connections_per_client_id`, `request::rate_limit::takeover`), 413 too large, 429
//! over a rate, 502 no broker, 503 credentials not checkable.

use crate::access_log::Entry;
use crate::addresses::Addresses;
use crate::layer4::stream::{Greeting, Relayed, TcpConn, handshaken, opened, relay_greeted};
use crate::listen::connection::Signals;
use crate::request::context::ListenerCtx;
use sluice_config::{MqttProxy, MqttRouteBy};
use sluice_mqtt::{BrokerReply, Fault, Parsed, Refusal, parse_connect};
use sluice_tls::ClientCert;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Indexes into [`crate::MQTT_OUTCOMES`].
const PROXIED: usize = 0;
const DENIED: usize = 1;
const TIMEOUT: usize = 8;
const CLOSED: usize = 9;
const UNAVAILABLE: usize = 10;
const TAKEN_OVER: usize = 18;

/// Serves one connection of an MQTT listener to its end.
pub(crate) async fn serve(
    listener: Arc<ListenerCtx>,
    tcp: TcpStream,
    at: Addresses,
    signals: Signals,
    permit: Option<crate::handshakes::HandshakePermit>,
) {
    let sluice_config::ListenerKind::Mqtt(mqtt) = &listener.config.kind else {
        return;
    };
    let _ = tcp.set_nodelay(true);
    let (mut log, start) = opened(&listener, at, "MQTT", "mqtt");
    if !listener.config.acl.permits(at.client.ip()) {
        listener.metrics.denied();
        return end(&listener, log, start, 403, DENIED);
    }
    let conn = |log: Entry| TcpConn {
        listener: &listener,
        idle_timeout: mqtt.idle_timeout,
        at,
        log,
        start,
        signals: &signals,
    };
    let gate = Gate {
        auth: listener.mqtt_auth.as_deref(),
        rates: listener.mqtt_rates.as_deref(),
    };
    match &listener.tls {
        None => admit(conn(log), mqtt, gate, tcp, Ok(None)).await,
        Some(acceptor) => {
            // Boxed, as are the other steps before the relay: a device's connection spends
            // its life relaying, and its task's size is that of its largest step.
            let Some((stream, info)) = Box::pin(crate::listen::connection::handshake(
                &listener, acceptor, tcp, at.client, &signals, permit,
            ))
            .await
            else {
                return;
            };
            handshaken(&mut log, "mqtts", &info);
            let cert = crate::layer4::mqtt_cert::presented(&listener, &info);
            drop(info);
            admit(conn(log), mqtt, gate, stream, cert).await;
        }
    }
}

/// What an admitted CONNECT decides for its connection.
struct Admitted {
    /// The client identifier (the log line's path).
    client_id: String,
    /// The user name, where one was sent.
    username: Option<String>,
    /// The broker's key on the ring.
    key: u64,
    /// The keep alive asked for, seconds.
    keep_alive: u16,
    /// The password, where one was sent (for `[listener.mqtt.auth]`).
    password: Option<Vec<u8>>,
    /// The version asked for (for a refusal's CONNACK).
    version: sluice_mqtt::Version,
}

/// What admits a connection beyond its CONNECT's own checks: the credentials' checker and
/// the connection rates of an MQTT listener, or of a `[route.mqtt]` route (the same rules
/// over WebSocket as over TCP).
#[derive(Clone, Copy, Default)]
pub(crate) struct Gate<'a> {
    pub(crate) auth: Option<&'a sluice_auth::Authenticator>,
    pub(crate) rates: Option<&'a crate::request::rate_limit::connect_rates::ConnectRates>,
}

/// A client stream told when its CONNECT has been admitted: a WebSocket lifts the bounds it
/// kept on its frames until then (`mqtt_ws::WsBytes`); a socket has none.
pub(crate) trait Admits {
    fn admitted(&mut self) {}

    /// Whether a read error before admission is the stream's own bound refusing more bytes
    /// than `max_connect_size` allows (logged as a CONNECT too large), not a broken stream.
    fn over_bound(_e: &std::io::Error) -> bool {
        false
    }
}

impl Admits for TcpStream {}

impl<S> Admits for tokio_boring::SslStream<S> {}

/// Reads and checks the CONNECT, then relays the connection to its broker. `cert`: what
/// the handshake left of the device's certificate (`mqtt_cert::presented`).
pub(crate) async fn admit<C>(
    mut conn: TcpConn<'_>,
    mqtt: &MqttProxy,
    gate: Gate<'_>,
    mut client: C,
    cert: Result<Option<Arc<ClientCert>>, Fault>,
) where
    C: AsyncRead + AsyncWrite + crate::layer4::splice::FinOnClose + Admits + Unpin,
{
    let mut read = Vec::with_capacity(512);
    let first = tokio::select! {
        r = tokio::time::timeout(mqtt.connect_timeout, read_connect(&mut client, &mut read, mqtt, conn.at)) => r,
        () = conn.signals.force.cancelled() => return,
    };
    // Every byte the client sent counts, the CONNECT and what came with it included.
    conn.log.bytes_in = read.len() as u64;
    let admitted = match first {
        Ok(Ok(Some(a))) => a,
        Ok(Ok(None)) => return end(conn.listener, conn.log, conn.start, 400, CLOSED),
        Ok(Err(refusal)) => return refuse(conn, client, refusal).await,
        Err(_) => return end(conn.listener, conn.log, conn.start, 408, TIMEOUT),
    };
    match Box::pin(checked(&conn, mqtt, gate, &admitted, cert)).await {
        Ok(subject) => conn.log.subject = subject,
        Err(fault) => return refuse_admitted(conn, client, admitted, fault).await,
    }
    client.admitted();
    conn.log.path = admitted.client_id;
    if admitted.keep_alive > 0 {
        // MQTT-3.1.2-24: a server closes a connection silent for 1.5 times its keep alive.
        conn.idle_timeout = keep_alive_timeout(admitted.keep_alive);
    }
    let greeting = (admitted.version == sluice_mqtt::Version::V5).then_some(ServerKeepAlive {
        wait: mqtt.connect_timeout,
        none: mqtt.idle_timeout,
    });
    relayed(conn, mqtt, admitted.key, client, &read, greeting).await;
}

/// How long a connection may be silent with keep alive `secs` (MQTT-3.1.2-24: 1.5 times it).
fn keep_alive_timeout(secs: u16) -> Duration {
    Duration::from_millis(u64::from(secs) * 1500)
}

/// The checks after the CONNECT: the certificate (it costs nothing, and binds the fields
/// checked next), the rates (before the credentials, so that a reconnect storm costs no
/// bcrypt), then the credentials. The log line's subject, or why the device is refused.
async fn checked(
    conn: &TcpConn<'_>,
    mqtt: &MqttProxy,
    gate: Gate<'_>,
    admitted: &Admitted,
    cert: Result<Option<Arc<ClientCert>>, Fault>,
) -> Result<Option<Arc<str>>, Fault> {
    let cert = cert.and_then(|c| {
        let (id, user) = (&admitted.client_id, admitted.username.as_deref());
        crate::layer4::mqtt_cert::bound(mqtt.certificate_identity, c.as_deref(), id, user)
            .map(|()| c)
    })?;
    if let Some(rates) = gate.rates
        && !rates.admit(conn.at.client.ip(), &admitted.client_id).await
    {
        return Err(Fault::RateExceeded);
    }
    let Some(auth) = gate.auth else {
        // The certificate's subject where one verified, else the user name.
        return Ok(cert
            .map(|c| Arc::from(c.subject.as_str()))
            .or_else(|| admitted.username.as_deref().map(Arc::from)));
    };
    let who = crate::layer4::mqtt_auth::Credentials {
        username: admitted.username.as_deref(),
        password: admitted.password.as_deref(),
        client: conn.at.client.ip(),
        host: &conn.log.host,
        tls: conn.listener.tls.is_some(),
    };
    crate::layer4::mqtt_auth::check(auth, &who).await.map(Some)
}

/// Relays an admitted connection to the broker `key` hashes to, under its identifier's cap
/// where there is one, and logs its end.
async fn relayed<C>(
    conn: TcpConn<'_>,
    mqtt: &MqttProxy,
    key: u64,
    client: C,
    read: &[u8],
    greeting: Option<ServerKeepAlive>,
) where
    C: AsyncRead + AsyncWrite + crate::layer4::splice::FinOnClose + Unpin,
{
    let group = conn.listener.upstreams[mqtt.upstream].group();
    // A newer connection with this identifier beyond the cap closes the oldest; this one's
    // relay watches the session's token, a child of the gateway's own. An empty identifier
    // is the connection itself (the broker assigns one): nothing else can take it over.
    let gateway_force = conn.signals.force.clone();
    let session = (mqtt.max_connections_per_client_id)
        .filter(|_| !conn.log.path.is_empty())
        .map(|cap| {
            let id = &conn.log.path;
            (conn.listener.takeovers).admit(&group.config.name, id, cap, &gateway_force)
        });
    let signals;
    let conn = match &session {
        None => conn,
        Some(s) => {
            signals = Signals {
                force: s.token.clone(),
                ..conn.signals.clone()
            };
            TcpConn {
                signals: &signals,
                ..conn
            }
        }
    };
    let greeting = greeting.as_ref().map(|g| g as &dyn Greeting);
    let relayed = relay_greeted(conn, key, group, client, read, greeting).await;
    let taken_over = session.is_some_and(|s| s.taken_over(&gateway_force));
    if let Some(Relayed {
        listener,
        log,
        start,
        connected,
    }) = relayed
    {
        let (status, outcome) = match (connected, taken_over) {
            (_, true) => (409, TAKEN_OVER),
            (true, false) => (200, PROXIED),
            (false, false) => (502, UNAVAILABLE),
        };
        end(listener, log, start, status, outcome);
    }
}

/// An MQTT 5 connection's first packet from its broker, its CONNACK, read for Server Keep
/// Alive (5.0 §3.2.2.3.14): the client must use the broker's value instead of its own
/// (MQTT-3.2.2-21), so the idle timeout follows it (1.5 times, as for the client's own).
/// Read within `wait` (the CONNECT's own time limit); a broker that answers otherwise
/// (enhanced authentication's AUTH) or later leaves the client's value in force.
struct ServerKeepAlive {
    wait: Duration,
    /// The idle timeout for a Server Keep Alive of 0 (no keep alive).
    none: Duration,
}

impl Greeting for ServerKeepAlive {
    fn greet<'g>(
        &'g self,
        up: &'g mut crate::upstreams::upstream_tls::UpstreamIo,
        read: &'g mut Vec<u8>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Duration>> + Send + 'g>> {
        Box::pin(async move {
            let reply = tokio::time::timeout(self.wait, async {
                loop {
                    match sluice_mqtt::read_connack(read) {
                        BrokerReply::Incomplete => {}
                        BrokerReply::Connack {
                            server_keep_alive, ..
                        } => return server_keep_alive,
                        BrokerReply::Other => return None,
                    }
                    read.reserve(64);
                    match up.read_buf(read).await {
                        Ok(0) | Err(_) => return None,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            match reply.ok().flatten()? {
                0 => Some(self.none),
                secs => Some(keep_alive_timeout(secs)),
            }
        })
    }
}

/// Reads until `read` holds a whole CONNECT (and whatever the client sent behind it, which is
/// replayed to the broker). `Ok(None)`: the client closed first.
async fn read_connect<C>(
    client: &mut C,
    read: &mut Vec<u8>,
    mqtt: &MqttProxy,
    at: Addresses,
) -> Result<Option<Admitted>, Refusal>
where
    C: AsyncRead + Admits + Unpin,
{
    loop {
        match parse_connect(read, mqtt.max_connect_size)? {
            Parsed::Complete(c, _) => {
                if let Some(p) = &mqtt.client_id_pattern
                    && !p.0.is_match(c.client_id)
                {
                    return Err(Refusal {
                        fault: Fault::ClientIdNotValid,
                        version: Some(c.version),
                    });
                }
                return Ok(Some(Admitted {
                    key: ring_key(mqtt.route_by, c.username, c.client_id, at),
                    client_id: c.client_id.to_owned(),
                    username: c.username.map(str::to_owned),
                    keep_alive: c.keep_alive,
                    password: c.password.map(<[u8]>::to_vec),
                    version: c.version,
                }));
            }
            Parsed::Incomplete => {
                read.reserve(1024);
                match client.read_buf(read).await {
                    Err(e) if C::over_bound(&e) => {
                        return Err(Refusal {
                            fault: Fault::TooLarge,
                            version: None,
                        });
                    }
                    Ok(0) | Err(_) => return Ok(None),
                    Ok(_) => {}
                }
            }
        }
    }
}

/// A device's key on the brokers' ring: its client identifier (or, `route_by = "username"`,
/// its user name, falling back to the identifier). A device with neither is placed by its
/// connection, address and port: the broker assigns it an identifier of its own, so it has
/// no session to return to, and one key for all of them would put every unnamed device of
/// the fleet on one broker.
fn ring_key(route_by: MqttRouteBy, username: Option<&str>, client_id: &str, at: Addresses) -> u64 {
    let by = match route_by {
        MqttRouteBy::Username => username.filter(|u| !u.is_empty()),
        MqttRouteBy::ClientId => None,
    }
    .unwrap_or(client_id);
    if by.is_empty() {
        return crate::hash::hash64(0, at.client.to_string().as_bytes());
    }
    crate::hash::hash64(0, by.as_bytes())
}

/// Refuses a connection whose CONNECT was read whole: its client identifier is the log
/// line's path, and the CONNACK is in its version.
async fn refuse_admitted<C>(mut conn: TcpConn<'_>, client: C, admitted: Admitted, fault: Fault)
where
    C: AsyncWrite + Unpin,
{
    conn.log.path = admitted.client_id;
    let version = Some(admitted.version);
    refuse(conn, client, Refusal { fault, version }).await;
}

/// Closes a refused connection: the CONNACK that says why first, where there is one.
async fn refuse<C>(conn: TcpConn<'_>, mut client: C, refusal: Refusal)
where
    C: AsyncWrite + Unpin,
{
    tracing::debug!(listener = %conn.listener.name, client = %conn.at.client, %refusal, "MQTT connection refused");
    if let Some(connack) = refusal.connack() {
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            let _ = client.write_all(&connack).await;
            let _ = client.shutdown().await;
        })
        .await;
    }
    let status = match refusal.fault {
        Fault::TooLarge => 413,
        Fault::BadCredentials => 401,
        Fault::NotAuthorized | Fault::CertificateMismatch => 403,
        Fault::Unavailable => 503,
        Fault::RateExceeded => 429,
        _ => 400,
    };
    // Each refusal's name is its outcome's (`tests::every_refusal_has_its_outcome`).
    let outcome = crate::MQTT_OUTCOMES
        .iter()
        .position(|o| *o == refusal.name())
        .unwrap_or(0);
    end(conn.listener, conn.log, conn.start, status, outcome);
}

/// A connection's end: counted by outcome, and its access-log line.
fn end(listener: &ListenerCtx, mut log: Entry, start: Instant, status: u16, outcome: usize) {
    listener.metrics.mqtt(outcome);
    log.status = status;
    log.duration = start.elapsed();
    listener.access_log.log(&log);
}

#[cfg(test)]
mod tests {
    use sluice_mqtt::{Fault, Refusal};

    #[test]
    fn the_named_outcomes_are_where_they_are_counted() {
        let named = [
            (super::PROXIED, "proxied"),
            (super::DENIED, "denied"),
            (super::TIMEOUT, "timeout"),
            (super::CLOSED, "closed"),
            (super::UNAVAILABLE, "upstream_unavailable"),
            (super::TAKEN_OVER, "taken_over"),
        ];
        for (i, name) in named {
            assert_eq!(crate::MQTT_OUTCOMES[i], name);
        }
    }

    #[test]
    fn every_refusal_has_its_outcome() {
        let faults = [
            Fault::NotConnect,
            Fault::Malformed("x"),
            Fault::ProtocolError("x"),
            Fault::UnsupportedVersion,
            Fault::ClientIdNotValid,
            Fault::TooLarge,
            Fault::BadCredentials,
            Fault::NotAuthorized,
            Fault::Unavailable,
            Fault::RateExceeded,
            Fault::NoCertificate,
            Fault::BadCertificate,
            Fault::CertificateMismatch,
        ];
        for fault in faults {
            let name = Refusal {
                fault,
                version: None,
            }
            .name();
            assert!(
                crate::MQTT_OUTCOMES[1..].contains(&name),
                "{name} is counted under its own outcome"
            );
        }
    }
}
