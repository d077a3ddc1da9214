//! Edge policy on the request path: the real client address behind trusted proxies, request
//! IDs, variables in configured values, path rewrites, header edits and the answers a route
//! gives itself (redirects, fixed responses).

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Uri};
use sluice_config::{Answer, HeaderEdits, IpNet, Part, Rewrite, Template, Var, canonical};
use std::net::IpAddr;

/// The `X-Request-Id` header.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub(crate) fn trusted(ip: IpAddr, proxies: &[IpNet]) -> bool {
    let ip = canonical(ip);
    proxies.iter().any(|n| n.contains(&ip))
}

/// The client's address: the peer's, unless the peer is a trusted proxy; then the last
/// address of `X-Forwarded-For` that is not a trusted proxy (NGINX's `real_ip_recursive on`).
/// A list that is all trusted proxies gives its first address; one that does not parse
/// stops the walk there (what comes before it cannot be believed).
pub(crate) fn real_client(peer: IpAddr, headers: &HeaderMap, proxies: &[IpNet]) -> IpAddr {
    if proxies.is_empty() || !trusted(peer, proxies) {
        return canonical(peer);
    }
    let mut last = canonical(peer);
    for value in headers.get_all("x-forwarded-for").iter().rev() {
        let Ok(text) = value.to_str() else {
            return last;
        };
        for item in text.rsplit(',') {
            let Ok(ip) = item.trim().parse::<IpAddr>() else {
                return last;
            };
            let ip = canonical(ip);
            if !trusted(ip, proxies) {
                return ip;
            }
            last = ip;
        }
    }
    last
}

/// `value` marked for HPACK as never indexed: a value that is new with every message (a
/// request ID) is of no use in any HTTP/2 dynamic table, and the mark, sent with the field
/// (RFC 7541 §6.2.3), tells every later hop that re-encodes it not to insert it. Sluice's
/// own encoder inserts nothing (vendor/patches/h2), but h2 as published inserts this value
/// into every connection's table, evicting the fields that do repeat. The same holds for the request to an HTTP/2 upstream; the flag changes nothing on HTTP/1.1
/// and HTTP/3.
pub(crate) fn never_indexed(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

/// The request's ID: a trusted proxy's `X-Request-Id` if it sent a sane one (1 to 200
/// visible ASCII characters), else a new one (128 random bits, hex).
pub(crate) fn request_id(peer: IpAddr, headers: &HeaderMap, proxies: &[IpNet]) -> HeaderValue {
    if trusted(peer, proxies)
        && let Some(v) = headers.get(&X_REQUEST_ID)
        && (1..=200).contains(&v.len())
        && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
    {
        return v.clone();
    }
    let bits = (u128::from(crate::hash::random()) << 64) | u128::from(crate::hash::random());
    let mut buf = [0u8; 32];
    sluice_trace::propagation::write_hex(&mut buf, bits);
    // Owned by a shared allocation from the start: the value is cloned into the upstream
    // request, the response and the proxy's own state, and `from_bytes`' copy would be a
    // `Vec` that its first clone promotes with a second allocation.
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(buf))
        .expect("hex is a valid header value")
}

/// What variables stand for in one request.
pub(crate) struct Vars<'a> {
    pub(crate) host: &'a str,
    pub(crate) uri: &'a Uri,
    pub(crate) https: bool,
    pub(crate) client: IpAddr,
    pub(crate) request_id: Option<&'a HeaderValue>,
}

/// Fills in a template's variables.
pub(crate) fn render(t: &Template, v: &Vars<'_>) -> String {
    let mut out = String::new();
    for part in &t.0 {
        match part {
            Part::Text(s) => out.push_str(s),
            Part::Var(Var::Host) => out.push_str(v.host),
            Part::Var(Var::Uri) => out.push_str(v.uri.path()),
            Part::Var(Var::RequestUri) => {
                out.push_str(v.uri.path_and_query().map_or("/", |pq| pq.as_str()))
            }
            Part::Var(Var::Args) => out.push_str(v.uri.query().unwrap_or("")),
            Part::Var(Var::Scheme) => out.push_str(if v.https { "https" } else { "http" }),
            Part::Var(Var::RemoteAddr) => out.push_str(&crate::text::ip_string(v.client)),
            Part::Var(Var::RequestId) => {
                out.push_str(v.request_id.and_then(|h| h.to_str().ok()).unwrap_or(""))
            }
        }
    }
    out
}

/// The path and query sent upstream after the route's rewrite; `None` when the rewrite
/// leaves it as it is. The query always goes along unchanged.
pub(crate) fn rewrite(rw: &Rewrite, uri: &Uri) -> Option<http::uri::PathAndQuery> {
    let path = uri.path();
    let new_path = match rw {
        Rewrite::StripPrefix(prefix) => {
            let rest = path.strip_prefix(prefix.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None; // "/apix" does not start with the prefix "/api"
            }
            if rest.is_empty() {
                "/".to_string()
            } else {
                rest.to_string()
            }
        }
        Rewrite::Regex { regex, replacement } => {
            if !regex.is_match(path) {
                return None;
            }
            let p = regex.replace(path, replacement.as_str()).into_owned();
            if p.starts_with('/') {
                p
            } else {
                format!("/{p}")
            }
        }
    };
    let pq = match uri.query() {
        Some(q) => format!("{new_path}?{q}"),
        None => new_path,
    };
    pq.parse().ok()
}

/// Applies header edits: removes, then sets, then adds. A value that renders to something
/// not allowed in a header is skipped (and logged once per request at debug level).
pub(crate) fn edit_headers(edits: &HeaderEdits, headers: &mut HeaderMap, v: &Vars<'_>) {
    for name in &edits.remove {
        headers.remove(name);
    }
    let value = |t: &Template| {
        let text = render(t, v);
        HeaderValue::from_str(&text)
            .map_err(|_| tracing::debug!(value = %text, "a configured header value is not valid here; skipped"))
            .ok()
    };
    for (name, t) in &edits.set {
        if let Some(val) = value(t) {
            headers.insert(name.clone(), val);
        }
    }
    for (name, t) in &edits.add {
        if let Some(val) = value(t) {
            headers.append(name.clone(), val);
        }
    }
}

/// A route's own answer: status, headers and body.
pub(crate) fn answer(a: &Answer, v: &Vars<'_>) -> (http::StatusCode, HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    match a {
        Answer::Redirect { status, location } => {
            let loc = render(location, v);
            if let Ok(val) = HeaderValue::from_str(&loc) {
                headers.insert(http::header::LOCATION, val);
            }
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            let status = http::StatusCode::from_u16(*status).unwrap_or(http::StatusCode::FOUND);
            (
                status,
                headers,
                Bytes::from(format!("redirecting to {loc}\n")),
            )
        }
        Answer::Respond {
            status,
            body,
            content_type,
        } => {
            headers.insert(http::header::CONTENT_TYPE, content_type.clone());
            let status = http::StatusCode::from_u16(*status).unwrap_or(http::StatusCode::OK);
            (status, headers, Bytes::from(render(body, v)))
        }
    }
}

/// The host without a port, for `$host`.
pub(crate) fn host_name(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((h, port))
            if port.bytes().all(|b| b.is_ascii_digit())
                && !h.ends_with(']')
                && !h.contains(':') =>
        {
            h
        }
        Some((h, port)) if h.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn xff(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", v.parse().unwrap());
        h
    }

    #[test]
    fn the_client_is_believed_only_through_trusted_proxies() {
        let proxies = nets(&["10.0.0.0/8", "::1/128"]);
        let lb: IpAddr = "10.0.0.5".parse().unwrap();
        let stranger: IpAddr = "192.0.2.9".parse().unwrap();
        // The load balancer appended the client; a spoofed entry before it is ignored.
        assert_eq!(
            real_client(lb, &xff("6.6.6.6, 198.51.100.7"), &proxies),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
        // Two trusted hops.
        assert_eq!(
            real_client(lb, &xff("198.51.100.7, 10.0.0.9"), &proxies),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
        // An untrusted peer's header means nothing.
        assert_eq!(
            real_client(stranger, &xff("203.0.113.1"), &proxies),
            stranger
        );
        // Garbage stops the walk.
        assert_eq!(
            real_client(lb, &xff("198.51.100.7, junk, 10.0.0.9"), &proxies),
            "10.0.0.9".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            real_client("::1".parse().unwrap(), &xff("2001:db8::5"), &proxies),
            "2001:db8::5".parse::<IpAddr>().unwrap()
        );
        // No trusted proxies configured: always the peer.
        assert_eq!(real_client(lb, &xff("198.51.100.7"), &[]), lb);
    }

    /// The mark is HPACK's alone: the value's bytes (all that HTTP/1.1, HTTP/3, the log and
    /// header rules see) stay the same. h2 writes a marked field as a never-indexed literal
    /// (RFC 7541 §6.2.3; vendor/h2's encoder tests).
    #[test]
    fn never_indexed_values_keep_their_bytes() {
        let id = never_indexed(HeaderValue::from_static("0123456789abcdef0123456789abcdef"));
        assert!(id.is_sensitive());
        assert_eq!(id, "0123456789abcdef0123456789abcdef");
        let plain = HeaderValue::from_static("0123456789abcdef0123456789abcdef");
        assert!(!plain.is_sensitive());
    }

    #[test]
    fn request_ids_are_kept_from_trusted_peers_and_made_otherwise() {
        let proxies = nets(&["10.0.0.0/8"]);
        let mut h = HeaderMap::new();
        h.insert(&X_REQUEST_ID, "abc-123".parse().unwrap());
        assert_eq!(
            request_id("10.1.1.1".parse().unwrap(), &h, &proxies),
            "abc-123"
        );
        let made = request_id("192.0.2.1".parse().unwrap(), &h, &proxies);
        assert_ne!(made, "abc-123");
        assert_eq!(made.len(), 32);
        assert!(made.as_bytes().iter().all(u8::is_ascii_hexdigit));
        assert!(!made.as_bytes().iter().any(u8::is_ascii_uppercase));
        assert_ne!(
            made,
            request_id("192.0.2.1".parse().unwrap(), &h, &proxies),
            "unique"
        );
    }

    #[test]
    fn rewrites_keep_the_query() {
        let uri: Uri = "/api/users/7?x=1".parse().unwrap();
        let strip = Rewrite::StripPrefix("/api".into());
        assert_eq!(rewrite(&strip, &uri).unwrap(), "/users/7?x=1");
        assert_eq!(rewrite(&strip, &"/api".parse().unwrap()).unwrap(), "/");
        assert_eq!(
            rewrite(&strip, &"/apix/1".parse().unwrap()),
            None,
            "a prefix of a segment is not the prefix"
        );
        let re = Rewrite::Regex {
            regex: regex::Regex::new("^/api/users/([0-9]+)$").unwrap(),
            replacement: "/v2/user?id=$1".into(),
        };
        // Captures fill the path; the original query follows.
        assert_eq!(rewrite(&re, &uri).unwrap().path(), "/v2/user");
        assert_eq!(rewrite(&re, &"/other".parse().unwrap()), None);
    }

    #[test]
    fn templates_render_the_requests_values() {
        let uri: Uri = "/a/b?q=1".parse().unwrap();
        let id = HeaderValue::from_static("rid");
        let v = Vars {
            host: "example.com",
            uri: &uri,
            https: false,
            client: "192.0.2.1".parse().unwrap(),
            request_id: Some(&id),
        };
        let t = Template::parse(
            "https://$host$request_uri [$uri|$args|$scheme|$remote_addr|$request_id]",
        )
        .unwrap();
        assert_eq!(
            render(&t, &v),
            "https://example.com/a/b?q=1 [/a/b|q=1|http|192.0.2.1|rid]"
        );
    }
}
