//! Request and response headers on their way through the proxy (RFC 9110 §7.6, NGINX's
//! `proxy_set_header` defaults).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::net::SocketAddr;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1), plus the
/// non-standard ones that NGINX also drops.
const HOP_BY_HOP: [HeaderName; 8] = [
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
/// them of absent names, were 1% of a proxied request.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|k| HOP_BY_HOP.contains(k))
        .cloned()
        .collect();
    if doomed.contains(&header::CONNECTION) {
        doomed.extend(
            headers
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok()),
        );
    }
    for name in &doomed {
        headers.remove(name);
    }
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
pub(crate) fn add_forwarding(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    client: std::net::IpAddr,
    https: bool,
    host: &str,
    forwarded: bool,
) {
    let client = crate::text::ip_string(client);
    let ip = crate::text::ip_string(peer.ip());
    let xff = match headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.trim().is_empty() => format!("{prev}, {ip}"),
        _ => ip.clone(),
    };
    let proto = if https { "https" } else { "http" };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    if let Ok(v) = HeaderValue::from_str(host) {
        headers.insert(X_FORWARDED_HOST, v);
    }
    if let Ok(v) = HeaderValue::from_str(&client) {
        headers.insert(X_REAL_IP, v);
    }
    if forwarded {
        let node = if peer.is_ipv6() {
            format!("\"[{ip}]\"")
        } else {
            ip
        };
        let mut element = format!("for={node};proto={proto}");
        if !host.is_empty() && host.bytes().all(|b| b.is_ascii_graphic() && b != b'"') {
            element.push_str(&format!(";host=\"{host}\""));
        }
        let value = match headers.get(header::FORWARDED).and_then(|v| v.to_str().ok()) {
            Some(prev) => format!("{prev}, {element}"),
            None => element,
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
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
}
