//! The host a request names (the target's authority, else `Host`), checked before any
//! decision is made on it: host routes, the certificate settings a `Host` must agree with
//! (421), and the `Host` an origin gets. A value an origin could read as another host
//! (`a@internal.test`: userinfo, which a URL parser strips; `internal.test,x`: a list;
//! `internal%2etest`: an encoding; `.internal.test`: an empty label) would be judged under
//! the catch-all route and read by the origin as a protected name, so only a plain
//! `host[:port]` is accepted: a name of unreserved characters (RFC 3986 §3.2.2's reg-name
//! without encodings or sub-delimiters, which no DNS name holds), or an IPv6 literal in
//! brackets; the port, digits. Anything else is 400 (`refused=bad_host`).

use std::net::Ipv6Addr;

/// Whether `authority` is a `host[:port]` that every reader parses alike.
pub(crate) fn is_plain(authority: &str) -> bool {
    if authority.len() > 255 + 6 {
        return false;
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((literal, port)) if literal.parse::<Ipv6Addr>().is_ok() => ("v6", port),
            _ => return false,
        },
        // The port keeps its `:`, as after a literal's `]`.
        None => authority.split_at(authority.find(':').unwrap_or(authority.len())),
    };
    let port_ok = match port.strip_prefix(':') {
        Some(digits) => digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()),
        None => port.is_empty(),
    };
    port_ok && is_name(host)
}

/// Labels of unreserved characters, none empty but a trailing dot's (`example.com.`).
fn is_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~'))
        })
}

#[cfg(test)]
mod tests {
    use super::is_plain;

    #[test]
    fn plain_hosts_and_ports_pass() {
        for ok in [
            "example.com",
            "Example.COM:8443",
            "a.test.",
            "a.test:",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[2001:db8::1]:443",
            "under_score.internal",
            "localhost",
        ] {
            assert!(is_plain(ok), "{ok}");
        }
    }

    #[test]
    fn hosts_an_origin_could_read_otherwise_are_refused() {
        for bad in [
            "a@internal.test",
            "internal.test,public",
            "internal.test, x",
            "internal%2etest",
            ".internal.test",
            "internal..test",
            "[secure.test]",
            "[::1]x",
            "a.test:80:80",
            "a.test:8o",
            "a.test:123456",
            "a test",
            "a/b",
            "a\\b",
            "é.test",
            "",
            ".",
            "[v1.x]",
        ] {
            assert!(!is_plain(bad), "{bad:?}");
        }
    }
}
