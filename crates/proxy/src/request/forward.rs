//! Request and response headers on their way through the proxy (RFC 9110 §7.6, NGINX's
//! `proxy_set_header` defaults).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;
use std::net::SocketAddr;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1), plus the
/// non-standard ones that NGINX also drops. A `static`, not a `const`: a `const` array of
/// names is built and dropped again wherever it is named (in a loop, for every field).
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including every header that `Connection` names.
///
/// One pass over the names finds the ones present (usually none in a request, `Connection`
/// in a response) and only those are removed: eight hashed removals per message, most of
/// them of absent names, were 1% of a proxied request. The names `Connection` lists are
/// looked up as text and made into `HeaderName`s only when present: `keep-alive`, the
/// usual one, is not a standard name, and making it one allocated on every response.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut doomed: SmallVec<[HeaderName; 4]> = headers
        .keys()
        .filter(|k| is_hop_by_hop(k))
        .cloned()
        .collect();
    if doomed.contains(&header::CONNECTION) {
        doomed.extend(connection_named(headers));
    }
    for name in &doomed {
        headers.remove(name);
    }
}

/// Whether `name` is one of [`HOP_BY_HOP`]: one match on the (lowercase) text, not eight
/// `HeaderName` comparisons, for every field of every message.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// A copy of `headers` without the hop-by-hop ones (as [`strip_hop_by_hop`] leaves them),
/// with room for `room` more fields. A request's head is copied like this for each try
/// (the client's stays as it came, for a retry, the log and the mirrors); `clone` gave the
/// copy no room, so the forwarding headers added next reallocated it twice.
pub(crate) fn forwardable(headers: &HeaderMap, room: usize) -> HeaderMap {
    let named = if headers.contains_key(header::CONNECTION) {
        connection_named(headers)
    } else {
        SmallVec::new()
    };
    let mut out = HeaderMap::with_capacity(headers.len() + room);
    for (name, value) in headers {
        if !is_hop_by_hop(name) && !named.contains(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// The headers present in `headers` that its `Connection` fields name, other than the
/// hop-by-hop ones already known.
fn connection_named(headers: &HeaderMap) -> SmallVec<[HeaderName; 4]> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| {
            !t.is_empty()
                && !HOP_BY_HOP
                    .iter()
                    .any(|h| t.eq_ignore_ascii_case(h.as_str()))
                && headers.contains_key(*t)
        })
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect()
}

/// The `Upgrade` protocol of an HTTP/1.1 upgrade request (`Connection: upgrade`), if any.
pub(crate) fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
    let wants = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    wants
        .then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// Adds X-Forwarded-For (appending the peer to any received), X-Forwarded-Proto,
/// X-Forwarded-Host, X-Real-IP (the client, which differs from the peer behind trusted
/// proxies), and, when enabled, RFC 7239 Forwarded (the peer, like X-Forwarded-For).
/// `peer_ip` is `peer`'s IP as text, made once per connection (`ConnCtx::peer_ip`): most
/// requests forward it as it is.
pub(crate) fn add_forwarding(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    peer_ip: &HeaderValue,
    client: std::net::IpAddr,
    https: bool,
    host: &str,
    forwarded: bool,
) {
    debug_assert_eq!(peer_ip, crate::text::ip_string(peer.ip()).as_str());
    let peer_text = peer_ip.to_str().unwrap_or_default();
    // A value built from parts is written into one scratch string and copied once into its
    // field.
    let mut text = String::new();
    match headers
        .get(X_FORWARDED_FOR)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.trim().is_empty())
    {
        Some(prev) => {
            text.reserve(prev.len() + 2 + peer_text.len());
            text.push_str(prev);
            text.push_str(", ");
            text.push_str(peer_text);
            if let Ok(v) = HeaderValue::from_str(&text) {
                headers.insert(X_FORWARDED_FOR, v);
            }
        }
        None => {
            headers.insert(X_FORWARDED_FOR, peer_ip.clone());
        }
    }
    let proto = if https { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    if let Ok(v) = HeaderValue::from_str(host) {
        headers.insert(X_FORWARDED_HOST, v);
    }
    if client == peer.ip() {
        headers.insert(X_REAL_IP, peer_ip.clone());
    } else {
        text.clear();
        crate::text::push_ip(&mut text, client);
        if let Ok(v) = HeaderValue::from_str(&text) {
            headers.insert(X_REAL_IP, v);
        }
    }
    if forwarded {
        text.clear();
        if let Some(prev) = headers.get(header::FORWARDED).and_then(|v| v.to_str().ok()) {
            text.push_str(prev);
            text.push_str(", ");
        }
        text.push_str("for=");
        if peer.is_ipv6() {
            text.push_str("\"[");
            text.push_str(peer_text);
            text.push_str("]\"");
        } else {
            text.push_str(peer_text);
        }
        text.push_str(";proto=");
        text.push_str(proto);
        if !host.is_empty() && host.bytes().all(|b| b.is_ascii_graphic() && b != b'"') {
            text.push_str(";host=\"");
            text.push_str(host);
            text.push('"');
        }
        if let Ok(v) = HeaderValue::from_str(&text) {
            headers.insert(header::FORWARDED, v);
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Bytes a request head takes on the wire, roughly: request line plus `name: value\r\n`.
pub(crate) fn head_size(method: &http::Method, uri: &http::Uri, headers: &HeaderMap) -> usize {
    let target = uri.scheme_str().map_or(0, |s| s.len() + 3)
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = method.as_str().len() + target + 12;
    line + headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Private"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("trailer", "x-sum"),
            ("proxy-authenticate", "Basic"),
            ("x-private", "1"),
            ("x-other", "2"),
            ("content-type", "text/html"),
            ("x-kept", "3"),
            ("x-kept", "4"),
        ]);
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
            .collect();
        left.sort();
        assert_eq!(left, ["content-type: text/html", "x-kept: 3", "x-kept: 4"]);
    }

    #[test]
    fn a_message_without_hop_by_hop_headers_is_untouched() {
        let pairs = [("host", "a"), ("accept", "*/*"), ("x-private", "1")];
        let mut h = map(&pairs);
        strip_hop_by_hop(&mut h);
        assert_eq!(h, map(&pairs));
        // Named by a Connection header that is itself the only hop-by-hop one.
        let mut h = map(&[
            ("connection", "x-private"),
            ("x-private", "1"),
            ("host", "a"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h, map(&[("host", "a")]));
    }

    #[test]
    fn the_hop_by_hop_match_is_the_list() {
        for name in &HOP_BY_HOP {
            assert!(is_hop_by_hop(name), "{name}");
        }
        for name in [
            "host",
            "content-length",
            "x-connection",
            "tea",
            "upgrade-insecure-requests",
        ] {
            assert!(!is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[test]
    fn a_forwardable_copy_is_the_stripped_message_with_room() {
        for pairs in [
            &[
                ("connection", "keep-alive, X-Private, close"),
                ("keep-alive", "timeout=5"),
                ("host", "a"),
                ("x-private", "1"),
                ("x-kept", "3"),
                ("x-kept", "4"),
                ("te", "trailers"),
            ][..],
            &[("host", "a"), ("accept", "*/*"), ("x-private", "1")][..],
            &[("connection", "x-absent"), ("host", "a")][..],
        ] {
            let original = map(pairs);
            let mut stripped = original.clone();
            strip_hop_by_hop(&mut stripped);
            let copy = forwardable(&original, 6);
            assert_eq!(copy, stripped, "{pairs:?}");
            // Multi-valued fields keep their order.
            let kept: Vec<_> = copy.get_all("x-kept").iter().collect();
            let want: Vec<_> = stripped.get_all("x-kept").iter().collect();
            assert_eq!(kept, want);
            assert!(copy.capacity() >= copy.len() + 6, "{pairs:?}");
        }
    }

    #[test]
    fn forwarding_headers_name_the_peer_and_the_client() {
        let v4: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:5000".parse().unwrap();
        let client: std::net::IpAddr = "192.0.2.9".parse().unwrap();

        let mut h = map(&[("x-forwarded-for", "192.0.2.9")]);
        add_forwarding(&mut h, v4, &ip(v4), client, true, "example.com", true);
        assert_eq!(h["x-forwarded-for"], "192.0.2.9, 10.0.0.7");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "example.com");
        assert_eq!(h["x-real-ip"], "192.0.2.9");
        assert_eq!(
            h["forwarded"],
            "for=10.0.0.7;proto=https;host=\"example.com\""
        );

        // No list yet (or a blank one), an IPv6 peer, a host that cannot be quoted.
        let mut h = map(&[("x-forwarded-for", " "), ("forwarded", "for=192.0.2.1")]);
        add_forwarding(&mut h, v6, &ip(v6), v6.ip(), false, "a\"b", true);
        assert_eq!(h["x-forwarded-for"], "2001:db8::1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-real-ip"], "2001:db8::1");
        assert_eq!(
            h["forwarded"],
            "for=192.0.2.1, for=\"[2001:db8::1]\";proto=http"
        );

        // Off: no Forwarded.
        let mut h = HeaderMap::new();
        add_forwarding(&mut h, v4, &ip(v4), client, false, "", false);
        assert!(!h.contains_key("forwarded"));
        assert_eq!(h["x-forwarded-for"], "10.0.0.7");
        assert_eq!(h["x-forwarded-host"], "");

        // The client is the peer: X-Real-IP is the peer's text too.
        let mut h = HeaderMap::new();
        add_forwarding(&mut h, v4, &ip(v4), v4.ip(), false, "h", false);
        assert_eq!(h["x-real-ip"], "10.0.0.7");
        assert_eq!(h["x-forwarded-for"], "10.0.0.7");
    }

    fn ip(addr: SocketAddr) -> HeaderValue {
        crate::text::ip_value(addr.ip())
    }
}
