//! The syslog shipper: each access log line as an RFC 5424 message whose MSG is the JSON
//! line, over UDP (one datagram each, RFC 5426), TCP (octet-counted frames, RFC 6587
//! §3.4.1, on a connection kept between batches) or TLS (the same frames, RFC 5425: the
//! server's certificate checked against `ca` or the system's roots and the server's name,
//! a client certificate presented when configured). A server given by name is resolved at
//! each connection (and, over UDP, each batch), so a syslog server that moves is followed.

use super::{Batch, Sent};
use crate::access_log::entry::Entry;
use crate::upstreams::upstream_tls::{UpstreamConnector, UpstreamIo};
use sluice_config::{SyslogTransport, UpstreamTls};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

/// The largest datagram sent; a longer message is not sent and is counted as rejected
/// (IPv4's UDP payload limit; RFC 5426 asks receivers for at least 2048 bytes and most take
/// 64 KiB).
const MAX_DATAGRAM: usize = 65_507;

/// This machine's name, for HOSTNAME (read once; `-` when it has none).
fn hostname() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let name = name.trim();
        // RFC 5424 §6.2.4: printable US-ASCII, at most 255 characters.
        if !name.is_empty() && name.len() <= 255 && name.bytes().all(|b| (33..=126).contains(&b)) {
            name.to_owned()
        } else {
            "-".to_owned()
        }
    })
}

/// Appends `e` as one RFC 5424 message (and `\n`): `<PRI>1 TIMESTAMP HOSTNAME APP-NAME
/// PROCID access - JSON`. Severity follows the status: informational below 400, notice for
/// 4xx, warning for 5xx.
pub(super) fn frame(out: &mut Vec<u8>, e: &Entry, facility: u8, app_name: &str, json: &str) {
    let severity = match e.status {
        500.. => 4,
        400..=499 => 5,
        _ => 6,
    };
    let mut head = String::with_capacity(96);
    let _ = write!(
        head,
        "<{}>1 {} {} {} {} access - ",
        u16::from(facility) * 8 + severity,
        humantime::format_rfc3339_millis(e.time.unwrap_or_else(SystemTime::now)),
        hostname(),
        app_name,
        std::process::id(),
    );
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(json.as_bytes());
    if !json.ends_with('\n') {
        out.push(b'\n');
    }
}

pub(crate) struct Client {
    /// `host:port`.
    address: String,
    /// `None`: UDP. `Some(None)`: TCP. `Some(Some(..))`: TLS, or why it cannot be set up.
    stream_tls: Option<Option<Result<UpstreamConnector, String>>>,
    timeout: Duration,
    udp: Option<UdpSocket>,
    stream: Option<UpstreamIo>,
}

impl Client {
    pub(crate) fn new(address: String, transport: &SyslogTransport, timeout: Duration) -> Self {
        let stream_tls = match transport {
            SyslogTransport::Udp => None,
            SyslogTransport::Tcp => Some(None),
            SyslogTransport::Tls {
                ca,
                client_identity,
            } => {
                let host = address
                    .rsplit_once(':')
                    .map_or(address.as_str(), |(h, _)| h)
                    .trim_matches(['[', ']']);
                let cfg = UpstreamTls {
                    // An IP address is verified as one (the connector's rule).
                    server_name: host
                        .parse::<std::net::IpAddr>()
                        .is_err()
                        .then(|| host.to_owned()),
                    ca: ca.clone(),
                    verify: true,
                    client_identity: client_identity.clone(),
                };
                Some(Some(UpstreamConnector::new(&cfg, None).map_err(|e| {
                    format!("setting up TLS to syslog {address}: {e}")
                })))
            }
        };
        Client {
            address,
            stream_tls,
            timeout,
            udp: None,
            stream: None,
        }
    }

    pub(crate) async fn send(&mut self, batch: &Batch) -> Sent {
        let result = if self.stream_tls.is_some() {
            tokio::time::timeout(self.timeout, self.send_tcp(batch)).await
        } else {
            tokio::time::timeout(self.timeout, self.send_udp(batch)).await
        };
        match result {
            Ok(sent) => sent,
            Err(_) => {
                self.stream = None;
                Sent::Retry(format!(
                    "syslog {} took more than {:?}",
                    self.address, self.timeout
                ))
            }
        }
    }

    async fn connect(&self) -> Result<UpstreamIo, String> {
        let tcp = TcpStream::connect(self.address.as_str())
            .await
            .map_err(|e| format!("connecting to syslog {}: {e}", self.address))?;
        match &self.stream_tls {
            Some(Some(Ok(connector))) => {
                let peer = tcp.peer_addr().map_err(|e| e.to_string())?;
                let tls = connector
                    .connect(peer, tcp)
                    .await
                    .map_err(|e| format!("syslog {}: {e}", self.address))?;
                Ok(UpstreamIo::Tls(Box::new(tls)))
            }
            Some(Some(Err(why))) => Err(why.clone()),
            _ => Ok(UpstreamIo::Plain(tcp)),
        }
    }

    async fn send_tcp(&mut self, batch: &Batch) -> Sent {
        if self.stream.is_none() {
            match self.connect().await {
                Ok(s) => self.stream = Some(s),
                Err(e) => return Sent::Retry(e),
            }
        }
        let mut frames = Vec::with_capacity(batch.bytes.len() + batch.lines * 6);
        for line in batch.lines() {
            frames.extend_from_slice(line.len().to_string().as_bytes());
            frames.push(b' ');
            frames.extend_from_slice(line);
        }
        let stream = self.stream.as_mut().expect("connected above");
        match stream.write_all(&frames).await {
            Ok(()) => Sent::Ok { rejected: 0 },
            Err(e) => {
                self.stream = None;
                Sent::Retry(format!("writing to syslog {}: {e}", self.address))
            }
        }
    }

    async fn send_udp(&mut self, batch: &Batch) -> Sent {
        // Resolved for each batch: a name that moves is followed.
        let target = match tokio::net::lookup_host(self.address.as_str()).await {
            Ok(mut found) => match found.next() {
                Some(a) => a,
                None => {
                    return Sent::Retry(format!("syslog {} resolves to nothing", self.address));
                }
            },
            Err(e) => return Sent::Retry(format!("resolving syslog {}: {e}", self.address)),
        };
        let family_changed = self.udp.as_ref().is_some_and(|u| {
            u.local_addr()
                .is_ok_and(|l| l.is_ipv4() != target.is_ipv4())
        });
        if family_changed {
            self.udp = None;
        }
        if self.udp.is_none() {
            let local: SocketAddr = if target.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            match UdpSocket::bind(local).await {
                Ok(s) => self.udp = Some(s),
                Err(e) => return Sent::Retry(format!("opening a UDP socket: {e}")),
            }
        }
        let socket = self.udp.as_ref().expect("bound above");
        let mut rejected = 0;
        for line in batch.lines() {
            if line.len() > MAX_DATAGRAM {
                rejected += 1;
                continue;
            }
            // A datagram the network refuses (no route, a full buffer) is lost like any
            // other: UDP syslog promises no delivery, and retrying would duplicate the rest.
            if socket.send_to(line, target).await.is_err() {
                rejected += 1;
            }
        }
        Sent::Ok { rejected }
    }
}
