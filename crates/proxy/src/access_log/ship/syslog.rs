//! The syslog shipper: each access log line as an RFC 5424 message whose MSG is the JSON
//! line, over UDP (one datagram each, RFC 5426) or TCP (octet-counted frames, RFC 6587
//! §3.4.1, on a connection kept between batches).

use super::{Batch, Sent};
use crate::access_log::entry::Entry;
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
    address: SocketAddr,
    tcp: bool,
    timeout: Duration,
    udp: Option<UdpSocket>,
    stream: Option<TcpStream>,
}

impl Client {
    pub(crate) fn new(address: SocketAddr, tcp: bool, timeout: Duration) -> Self {
        Client {
            address,
            tcp,
            timeout,
            udp: None,
            stream: None,
        }
    }

    pub(crate) async fn send(&mut self, batch: &Batch) -> Sent {
        let result = if self.tcp {
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

    async fn send_tcp(&mut self, batch: &Batch) -> Sent {
        if self.stream.is_none() {
            match TcpStream::connect(self.address).await {
                Ok(s) => self.stream = Some(s),
                Err(e) => {
                    return Sent::Retry(format!("connecting to syslog {}: {e}", self.address));
                }
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
        if self.udp.is_none() {
            let local: SocketAddr = if self.address.is_ipv4() {
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
            if socket.send_to(line, self.address).await.is_err() {
                rejected += 1;
            }
        }
        Sent::Ok { rejected }
    }
}
