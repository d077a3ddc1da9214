//! Numbers and addresses as text without `core::fmt`: every proxied request writes a few
//! (the access log line, `X-Forwarded-For`, the upstream authority), and `Ipv4Addr`'s
//! `Display`, one `write!` per octet, was 1.5% of a 1 KiB request's CPU time on its own.
//! The output is what `Display` writes (tests here and in `access_log`).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

/// `v` in decimal (`itoa`: two digits per step, no UTF-8 check).
pub(crate) fn push_u64(out: &mut String, v: u64) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// `ip` as `Display` writes it (IPv6 through `Display`: rare here, and its compression of
/// zero runs is worth not rewriting).
pub(crate) fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => push_v4(out, v4),
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// `addr` as `Display` writes it (`[v6]:port` for IPv6).
pub(crate) fn push_addr(out: &mut String, addr: &SocketAddr) {
    match addr {
        SocketAddr::V4(a) => {
            push_v4(out, *a.ip());
            out.push(':');
            push_u64(out, u64::from(a.port()));
        }
        // With its scope id, where it has one.
        SocketAddr::V6(a) => {
            let _ = write!(out, "{a}");
        }
    }
}

/// An IPv4 address a character at a time: an append per octet and dot (each a capacity
/// check and a call to `memcpy`, or digits into a buffer and a UTF-8 check) was ~300
/// instructions an address, and the access log writes two per request.
fn push_v4(out: &mut String, ip: std::net::Ipv4Addr) {
    out.reserve(15);
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
}

/// [`push_ip`] into a new string.
pub(crate) fn ip_string(ip: IpAddr) -> String {
    let mut s = String::with_capacity(15);
    push_ip(&mut s, ip);
    s
}

/// `ip` as text in a header value (the text of an address is always a valid one).
pub(crate) fn ip_value(ip: IpAddr) -> http::HeaderValue {
    http::HeaderValue::try_from(ip_string(ip))
        .unwrap_or_else(|_| http::HeaderValue::from_static("unknown"))
}

/// [`push_addr`] into a new string.
pub(crate) fn addr_string(addr: &SocketAddr) -> String {
    let mut s = String::with_capacity(21);
    push_addr(&mut s, addr);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    /// Every octet value in every position, and ports at each digit count's edges, as
    /// `Display` writes them.
    #[test]
    fn ipv4_addresses_print_as_display_does() {
        for v in 0..=255u8 {
            for at in 0..4 {
                let mut octets = [1, 20, 255, 0];
                octets[at] = v;
                let ip = Ipv4Addr::from(octets);
                assert_eq!(ip_string(IpAddr::V4(ip)), ip.to_string());
                for port in [
                    0,
                    9,
                    10,
                    99,
                    100,
                    999,
                    1000,
                    9999,
                    10000,
                    65535,
                    u16::from(v),
                ] {
                    let addr = SocketAddr::V4(SocketAddrV4::new(ip, port));
                    assert_eq!(addr_string(&addr), addr.to_string());
                }
            }
        }
        // Appended, not replaced.
        let mut s = String::from("for=");
        push_ip(&mut s, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)));
        assert_eq!(s, "for=10.0.0.7");
    }

    /// The per-connection header value holds the address's text, IPv4, IPv6 and mapped.
    #[test]
    fn ip_values_hold_the_address_text() {
        for ip in [
            "10.0.0.7",
            "2001:db8::1",
            "::ffff:192.0.2.1",
            "::1",
            "255.255.255.255",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_value(ip), ip.to_string().as_str());
        }
    }
}
