//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a layer-4 balancer puts in
//! front of a connection to say whose it is, read on listeners that expect it and written to
//! upstreams that ask for it. Parsing and building are the `ppp` crate's.
//!
//! The header is read with `MSG_PEEK` and then consumed to its exact length, so what follows
//! it (a TLS ClientHello, an HTTP request) stays in the socket for the next layer and no
//! replaying wrapper is needed. The protocol requires a sender to send the header in one
//! piece; a receiver that sees part of it waits for the rest, here within
//! `header_read_timeout`.

use ppp::{HeaderResult, PartialResult as _, v1, v2};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;

/// The longest header: v2's 16 fixed bytes and a 16-bit length.
const MAX_HEADER: usize = 16 + u16::MAX as usize;

/// Why a connection that had to start with a header was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a PROXY protocol header, or a broken one.
    Malformed,
    /// The header did not arrive in time, or the peer closed first.
    Timeout,
}

/// What a header said about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A proxied connection from this client (to this address at the balancer).
    Client {
        source: SocketAddr,
        destination: SocketAddr,
    },
    /// `LOCAL` (v2) or `UNKNOWN` (v1): the balancer's own connection, such as its health
    /// check; the peer stays the client.
    Local,
}

/// Reads the header at the start of `tcp` within `timeout`, leaving every byte after it.
pub(crate) async fn read(tcp: &mut TcpStream, timeout: Duration) -> Result<Origin, Refused> {
    match tokio::time::timeout(timeout, read_header(tcp)).await {
        Ok(r) => r,
        Err(_) => Err(Refused::Timeout),
    }
}

async fn read_header(tcp: &mut TcpStream) -> Result<Origin, Refused> {
    let mut buf = vec![0u8; 256];
    let mut wait = Duration::from_millis(1);
    let mut last = 0;
    loop {
        let n = tcp.peek(&mut buf).await.map_err(|_| Refused::Timeout)?;
        if n == 0 {
            return Err(Refused::Timeout);
        }
        let (origin, len) = match parse(&buf[..n]) {
            Parsed::Complete(origin, len) => (origin, len),
            Parsed::Invalid => return Err(Refused::Malformed),
            Parsed::Incomplete(need) => {
                if need > buf.len() {
                    buf.resize(need.min(MAX_HEADER), 0);
                    if n == buf.len() {
                        continue;
                    }
                }
                // Part of the header is there: `peek` would return it again at once, so wait
                // a little for the rest (it was sent in one piece; this is rare).
                if n == last {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(50));
                }
                last = n;
                continue;
            }
        };
        // Consume exactly the header.
        let mut header = vec![0u8; len];
        tcp.read_exact(&mut header)
            .await
            .map_err(|_| Refused::Timeout)?;
        return Ok(origin);
    }
}

/// The outcome of parsing the start of a connection.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// A header of this many bytes.
    Complete(Origin, usize),
    /// More bytes are needed: at least this many in all (a guess for v1).
    Incomplete(usize),
    Invalid,
}

fn parse(buf: &[u8]) -> Parsed {
    match HeaderResult::parse(buf) {
        h if h.is_incomplete() => {
            // v2 says its length in bytes 14-15; v1 is at most 107 bytes.
            let need = if buf.len() >= 16 && buf.starts_with(b"\r\n\r\n\0\r\nQUIT\n") {
                16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]))
            } else {
                108
            };
            Parsed::Incomplete(need.max(buf.len() + 1))
        }
        HeaderResult::V1(Ok(h)) => {
            let origin = match h.addresses {
                v1::Addresses::Tcp4(a) => Origin::Client {
                    source: (a.source_address, a.source_port).into(),
                    destination: (a.destination_address, a.destination_port).into(),
                },
                v1::Addresses::Tcp6(a) => Origin::Client {
                    source: (a.source_address, a.source_port).into(),
                    destination: (a.destination_address, a.destination_port).into(),
                },
                v1::Addresses::Unknown => Origin::Local,
            };
            Parsed::Complete(origin, h.header.len())
        }
        HeaderResult::V2(Ok(h)) => {
            let origin = match (h.command, h.addresses) {
                (v2::Command::Local, _) => Origin::Local,
                (v2::Command::Proxy, v2::Addresses::IPv4(a)) => Origin::Client {
                    source: (a.source_address, a.source_port).into(),
                    destination: (a.destination_address, a.destination_port).into(),
                },
                (v2::Command::Proxy, v2::Addresses::IPv6(a)) => Origin::Client {
                    source: (a.source_address, a.source_port).into(),
                    destination: (a.destination_address, a.destination_port).into(),
                },
                // UNIX sockets or unspecified: no IP client to speak of.
                (v2::Command::Proxy, _) => Origin::Local,
            };
            // TLVs (ALPN, authority, SSL details…) are skipped: nothing here uses them yet.
            Parsed::Complete(origin, h.len())
        }
        _ => Parsed::Invalid,
    }
}

/// The header that tells an upstream server that `client` connected to `local`.
pub(crate) fn header(
    version: sluice_config::ProxyProtocol,
    client: SocketAddr,
    local: SocketAddr,
) -> Vec<u8> {
    // Both ends in one family: an IPv4 client of an IPv6 listener is written as mapped.
    let (client, local) = same_family(client, local);
    match version {
        sluice_config::ProxyProtocol::V1 => v1::Addresses::from((client, local))
            .to_string()
            .into_bytes(),
        sluice_config::ProxyProtocol::V2 => v2::Builder::with_addresses(
            v2::Version::Two | v2::Command::Proxy,
            v2::Protocol::Stream,
            (client, local),
        )
        .build()
        // Building into a Vec fails only when the length overflows 16 bits: not with two
        // addresses and no TLV.
        .unwrap_or_default(),
    }
}

/// The header of the balancer's own connection (a health check): v1 `UNKNOWN`, v2 `LOCAL`.
pub(crate) fn local_header(version: sluice_config::ProxyProtocol) -> Vec<u8> {
    match version {
        sluice_config::ProxyProtocol::V1 => b"PROXY UNKNOWN\r\n".to_vec(),
        sluice_config::ProxyProtocol::V2 => v2::Builder::with_addresses(
            v2::Version::Two | v2::Command::Local,
            v2::Protocol::Unspecified,
            v2::Addresses::Unspecified,
        )
        .build()
        .unwrap_or_default(),
    }
}

fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    let v6 = |s: SocketAddr| match s {
        SocketAddr::V4(v4) => SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port()),
        v6 => v6,
    };
    match (a, b) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => (a, b),
        _ => (v6(a), v6(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::ProxyProtocol;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_and_v2_headers_round_trip_for_ipv4_and_ipv6() {
        for (c, l) in [
            ("192.0.2.7:51000", "198.51.100.1:443"),
            ("[2001:db8::7]:51000", "[2001:db8::1]:443"),
        ] {
            for v in [ProxyProtocol::V1, ProxyProtocol::V2] {
                let mut bytes = header(v, addr(c), addr(l));
                let len = bytes.len();
                bytes.extend_from_slice(b"GET / HTTP/1.1\r\n");
                assert_eq!(
                    parse(&bytes),
                    Parsed::Complete(
                        Origin::Client {
                            source: addr(c),
                            destination: addr(l)
                        },
                        len
                    ),
                    "{v:?} {c}"
                );
            }
        }
    }

    #[test]
    fn a_mixed_family_pair_is_written_as_ipv6() {
        let h = header(
            ProxyProtocol::V1,
            addr("192.0.2.7:1"),
            addr("[2001:db8::1]:443"),
        );
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "PROXY TCP6 ::ffff:192.0.2.7 2001:db8::1 1 443\r\n"
        );
    }

    #[test]
    fn local_and_unknown_keep_the_peer() {
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\nrest"),
            Parsed::Complete(Origin::Local, 15)
        );
        let v1 = local_header(ProxyProtocol::V1);
        assert_eq!(parse(&v1), Parsed::Complete(Origin::Local, v1.len()));
        let v2 = local_header(ProxyProtocol::V2);
        assert_eq!(parse(&v2), Parsed::Complete(Origin::Local, 16));
    }

    #[test]
    fn tlvs_are_skipped_and_counted_in_the_length() {
        let h = v2::Builder::with_addresses(
            v2::Version::Two | v2::Command::Proxy,
            v2::Protocol::Stream,
            (addr("192.0.2.7:51000"), addr("198.51.100.1:443")),
        )
        .write_tlv(v2::Type::ALPN, b"h2")
        .unwrap()
        .write_tlv(v2::Type::Authority, b"example.com")
        .unwrap()
        .build()
        .unwrap();
        let Parsed::Complete(Origin::Client { source, .. }, len) = parse(&h) else {
            panic!("not parsed: {h:?}");
        };
        assert_eq!(source, addr("192.0.2.7:51000"));
        assert_eq!(len, h.len());
        assert!(len > 16 + 12 + 2, "the TLVs are part of the header");
    }

    #[test]
    fn partial_headers_ask_for_more_and_garbage_is_refused() {
        let full = header(
            ProxyProtocol::V2,
            addr("192.0.2.7:51000"),
            addr("198.51.100.1:443"),
        );
        assert!(matches!(parse(&full[..10]), Parsed::Incomplete(_)));
        assert_eq!(parse(&full[..20]), Parsed::Incomplete(full.len()));
        assert!(matches!(
            parse(b"PROXY TCP4 192.0.2.7"),
            Parsed::Incomplete(_)
        ));
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Parsed::Invalid);
        assert_eq!(
            parse(b"PROXY TCP4 999.0.0.1 1.2.3.4 1 2\r\n"),
            Parsed::Invalid
        );
        assert_eq!(parse(&[0x16, 3, 1, 0, 200, 1, 0, 0, 196]), Parsed::Invalid);
    }
}
