//! Request and response headers on their way through the proxy (RFC 9110 §7.6, NGINX's
//! `proxy_set_header` defaults).

use crate::http1::client::WrittenFields;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;
use std::net::{IpAddr, SocketAddr};

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
    // Most responses have none left (`http1::client` keeps `Connection: keep-alive` out of
    // the map): one pass that finds none, and no list made and moved.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
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

/// The `X-Forwarded-Client-Cert` header: only the gateway sets it (from the client
/// certificate the listener verified), so a client's copy is never forwarded.
pub(crate) const XFCC: HeaderName = HeaderName::from_static("x-forwarded-client-cert");

/// A request field not copied upstream: a hop-by-hop one, or one only the gateway sets
/// (`X-Forwarded-Client-Cert`).
fn never_forwarded(name: &HeaderName) -> bool {
    is_hop_by_hop(name) || *name == XFCC
}

/// Removes the fields a request's `Connection` names (RFC 9110 §7.6.1: options for this hop
/// only), except those `keep` vouches for. Done once, where the request arrives
/// (`vouched::screen`), not when its copy goes upstream: by then the gateway has set its
/// own fields (the subject, claims, `X-Request-Id`), and a client's `Connection:
/// X-Auth-Subject` named them away. The hop-by-hop fields themselves, `Connection`
/// included, go when the request is copied upstream ([`forwardable`]).
pub(crate) fn remove_connection_options(
    headers: &mut HeaderMap,
    keep: impl Fn(&HeaderName) -> bool,
) {
    for name in connection_named(headers) {
        if !keep(&name) {
            headers.remove(&name);
        }
    }
}

/// A copy of a request's `headers` without the hop-by-hop ones, with room for `room` more
/// fields. A request's head is copied like this for each try (the client's stays as it
/// came, for a retry, the log and the mirrors); `clone` gave the copy no room, so the
/// forwarding headers added next reallocated it twice. The fields its `Connection` named
/// are gone already ([`remove_connection_options`]).
pub(crate) fn forwardable(headers: &HeaderMap, room: usize) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len() + room);
    for (name, value) in headers {
        if !never_forwarded(name) {
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

/// What the forwarding headers say of one request: X-Forwarded-For (appending the peer to
/// any received), X-Forwarded-Proto, X-Forwarded-Host, X-Real-IP (the client, which differs
/// from the peer behind trusted proxies), and, when `forwarded` is on, RFC 7239 Forwarded
/// (the peer, like X-Forwarded-For). Written into a map by [`add_forwarding`] or as lines by
/// [`write_forwardable`], from the one list [`Forwarding::each`] makes.
pub(crate) struct Forwarding<'a> {
    pub(crate) peer: SocketAddr,
    /// `peer`'s IP as text, made once per connection (`ConnCtx::peer_ip`): most requests
    /// forward it as it is.
    pub(crate) peer_ip: &'a HeaderValue,
    pub(crate) client: IpAddr,
    pub(crate) https: bool,
    /// The request's host, for X-Forwarded-Host and Forwarded's `host=`.
    pub(crate) host: &'a str,
    pub(crate) forwarded: bool,
}

/// A forwarding field's value as [`Forwarding::each`] gives it.
enum Value<'v> {
    Shared(&'v HeaderValue),
    Static(&'static str),
    /// Text made for this request; a field whose text is no valid value is left out (the
    /// request's own field of that name, if any, then stays), as `HeaderValue::from_str`
    /// decides.
    Text(&'v str),
}

impl Forwarding<'_> {
    /// Calls `field` for each forwarding field in turn. `prev_for` and `prev_forwarded`: the
    /// request's own first X-Forwarded-For and Forwarded values, if they are text.
    fn each(
        &self,
        prev_for: Option<&str>,
        prev_forwarded: Option<&str>,
        mut field: impl FnMut(&'static HeaderName, Value<'_>),
    ) {
        debug_assert_eq!(
            self.peer_ip,
            crate::text::ip_string(self.peer.ip()).as_str()
        );
        let peer_text = self.peer_ip.to_str().unwrap_or_default();
        // A value built from parts is written into one scratch string.
        let mut text = String::new();
        match prev_for.filter(|v| !v.trim().is_empty()) {
            Some(prev) => {
                text.reserve(prev.len() + 2 + peer_text.len());
                text.push_str(prev);
                text.push_str(", ");
                text.push_str(peer_text);
                field(&X_FORWARDED_FOR, Value::Text(&text));
            }
            None => field(&X_FORWARDED_FOR, Value::Shared(self.peer_ip)),
        }
        let proto = if self.https { "https" } else { "http" };
        field(&X_FORWARDED_PROTO, Value::Static(proto));
        field(&X_FORWARDED_HOST, Value::Text(self.host));
        if self.client == self.peer.ip() {
            field(&X_REAL_IP, Value::Shared(self.peer_ip));
        } else {
            text.clear();
            crate::text::push_ip(&mut text, self.client);
            field(&X_REAL_IP, Value::Text(&text));
        }
        if self.forwarded {
            text.clear();
            if let Some(prev) = prev_forwarded {
                text.push_str(prev);
                text.push_str(", ");
            }
            text.push_str("for=");
            if self.peer.is_ipv6() {
                text.push_str("\"[");
                text.push_str(peer_text);
                text.push_str("]\"");
            } else {
                text.push_str(peer_text);
            }
            text.push_str(";proto=");
            text.push_str(proto);
            let host = self.host;
            if !host.is_empty() && host.bytes().all(|b| b.is_ascii_graphic() && b != b'"') {
                text.push_str(";host=\"");
                text.push_str(host);
                text.push('"');
            }
            field(&FORWARDED, Value::Text(&text));
        }
    }
}

/// Sets the forwarding headers in `headers` (see [`Forwarding`]), replacing the request's.
pub(crate) fn add_forwarding(headers: &mut HeaderMap, fwd: &Forwarding<'_>) {
    let prev_for = headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok());
    let prev_forwarded = fwd
        .forwarded
        .then(|| headers.get(header::FORWARDED))
        .flatten()
        .and_then(|v| v.to_str().ok());
    // Collected first: the previous values borrow the map.
    let mut set = SmallVec::<[(&HeaderName, HeaderValue); 5]>::new();
    fwd.each(prev_for, prev_forwarded, |name, value| {
        let value = match value {
            Value::Shared(v) => Some(v.clone()),
            Value::Static(s) => Some(HeaderValue::from_static(s)),
            Value::Text(t) => HeaderValue::from_str(t).ok(),
        };
        if let Some(v) = value {
            set.push((name, v));
        }
    });
    for (name, value) in set {
        headers.insert(name, value);
    }
}

/// Writes the fields of the request that goes upstream straight from the client's
/// `headers`, as [`forwardable`], a `Host` of `host` and [`add_forwarding`] would make them
/// in a second map (the fields this replaces come after the others; the order of fields
/// with one name is kept). A map built and dropped per request, with the four custom names
/// of the forwarding fields hashed byte by byte into it, was ~2,500 instructions of a
/// proxied request.
///
/// `None` when `stop` says a field needs more than that (the caller then takes the map
/// path).
pub(crate) fn write_forwardable(
    headers: &HeaderMap,
    host: &str,
    fwd: &Forwarding<'_>,
    stop: impl Fn(&HeaderName) -> bool,
) -> Option<WrittenFields> {
    // Replaced only by a valid value, as a failed `HeaderValue::from_str` leaves the
    // request's own field in the map.
    let fwd_host_ok = is_value(fwd.host);
    let host_ok = if std::ptr::eq(host, fwd.host) {
        fwd_host_ok
    } else {
        is_value(host)
    };
    let mut out = WrittenFields {
        lines: Vec::with_capacity(160 + 40 * headers.len()),
        content_length: None,
    };
    let mut seen = Replaced::default();
    for (name, value) in headers {
        if stop(name) {
            return None;
        }
        if never_forwarded(name) {
            continue;
        }
        let replaced = match name.as_str() {
            "host" => host_ok,
            "x-forwarded-host" => fwd_host_ok,
            other => seen.replaces(other, value, fwd.forwarded),
        };
        if !replaced {
            push_field(&mut out.lines, name.as_str(), value.as_bytes());
        }
    }
    if host_ok {
        push_field(&mut out.lines, "host", host.as_bytes());
    }
    out.content_length = seen.declared.flatten();
    push_forwarding(&mut out.lines, fwd, &seen, fwd_host_ok);
    Some(out)
}

/// The request's fields the forwarding replaces, and the first value of each that
/// `HeaderMap::get` would find (`write_forwardable`).
#[derive(Default)]
struct Replaced<'h> {
    prev_for: Option<Option<&'h str>>,
    prev_forwarded: Option<Option<&'h str>>,
    declared: Option<Option<u64>>,
}

impl<'h> Replaced<'h> {
    /// Whether the field `name` (not `host` nor `x-forwarded-host`, which depend on the new
    /// values' validity) is replaced by one the gateway writes; its first value noted.
    #[inline(always)]
    fn replaces(&mut self, name: &str, value: &'h HeaderValue, forwarded: bool) -> bool {
        match name {
            "content-length" => {
                self.declared.get_or_insert_with(|| {
                    std::str::from_utf8(value.as_bytes())
                        .ok()
                        .and_then(|v| v.parse().ok())
                });
                true
            }
            "x-forwarded-for" => {
                self.prev_for.get_or_insert(value.to_str().ok());
                true
            }
            "forwarded" if forwarded => {
                self.prev_forwarded.get_or_insert(value.to_str().ok());
                true
            }
            "x-forwarded-proto" | "x-real-ip" => true,
            _ => false,
        }
    }
}

/// The forwarding fields as lines, after the request's own (`write_forwardable`); an invalid
/// `X-Forwarded-Host` (`fwd_host_ok` false) is left out, as the map path leaves it.
#[inline(always)]
fn push_forwarding(
    lines: &mut Vec<u8>,
    fwd: &Forwarding<'_>,
    seen: &Replaced<'_>,
    fwd_host_ok: bool,
) {
    fwd.each(
        seen.prev_for.flatten(),
        seen.prev_forwarded.flatten(),
        |name, value| {
            let value = match value {
                Value::Shared(v) => v.as_bytes(),
                Value::Static(s) => s.as_bytes(),
                Value::Text(t) => {
                    // Only X-Forwarded-Host's text can be invalid (the others are made from
                    // valid text); it was not replaced then.
                    if std::ptr::eq(name, &X_FORWARDED_HOST) {
                        if !fwd_host_ok {
                            return;
                        }
                    } else {
                        debug_assert!(is_value(t), "{name}: {t:?}");
                    }
                    t.as_bytes()
                }
            };
            push_field(lines, name.as_str(), value);
        },
    );
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Whether `HeaderValue::from_str` takes `s` (visible ASCII, space, tab, obs-text; no other
/// control character).
fn is_value(s: &str) -> bool {
    s.bytes().all(|b| (b >= 32 && b != 127) || b == b'\t')
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// Statics, not consts: [`Forwarding::each`] hands out `&'static` names.
static FORWARDED: HeaderName = header::FORWARDED;

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
    fn a_clients_forwarded_client_cert_is_never_copied() {
        let h = map(&[("x-forwarded-client-cert", "Hash=forged"), ("host", "a")]);
        assert_eq!(forwardable(&h, 0), map(&[("host", "a")]));
    }

    /// A field the gateway set after the request arrived goes upstream whatever the
    /// client's `Connection` named: the options were removed on arrival, and a copy reads
    /// `Connection` no more.
    #[test]
    fn connection_options_go_on_arrival_and_spare_what_the_gateway_vouches_for() {
        let mut h = map(&[
            (
                "connection",
                "keep-alive, X-Auth-Subject, x-request-id, X-Private, x-absent",
            ),
            ("x-auth-subject", "forged"),
            ("x-request-id", "gateway-made"),
            ("x-private", "1"),
            ("host", "a"),
        ]);
        remove_connection_options(&mut h, |n| n == "x-request-id");
        assert!(!h.contains_key("x-auth-subject"));
        assert!(!h.contains_key("x-private"));
        assert_eq!(h["x-request-id"], "gateway-made");
        // Authentication sets its subject afterwards; the copy keeps it.
        h.insert("x-auth-subject", HeaderValue::from_static("alice"));
        let copy = forwardable(&h, 0);
        assert_eq!(copy["x-auth-subject"], "alice");
        assert_eq!(copy["x-request-id"], "gateway-made");
        assert!(!copy.contains_key(header::CONNECTION));
        let peer: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let peer_ip = ip(peer);
        let f = fwd(peer, &peer_ip, peer.ip(), true, "a", false);
        let w = write_forwardable(&h, "a", &f, |_| false).unwrap();
        let text = String::from_utf8(w.lines).unwrap();
        assert!(text.contains("x-auth-subject: alice\r\n"), "{text}");
        assert!(text.contains("x-request-id: gateway-made\r\n"), "{text}");
        assert!(!text.contains("connection"), "{text}");
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
            // As the request arrived: its `Connection` options removed (`vouched::screen`).
            let mut arrived = original.clone();
            remove_connection_options(&mut arrived, |_| false);
            let copy = forwardable(&arrived, 6);
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
        add_forwarding(&mut h, &fwd(v4, &ip(v4), client, true, "example.com", true));
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
        add_forwarding(&mut h, &fwd(v6, &ip(v6), v6.ip(), false, "a\"b", true));
        assert_eq!(h["x-forwarded-for"], "2001:db8::1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-real-ip"], "2001:db8::1");
        assert_eq!(
            h["forwarded"],
            "for=192.0.2.1, for=\"[2001:db8::1]\";proto=http"
        );

        // Off: no Forwarded.
        let mut h = HeaderMap::new();
        add_forwarding(&mut h, &fwd(v4, &ip(v4), client, false, "", false));
        assert!(!h.contains_key("forwarded"));
        assert_eq!(h["x-forwarded-for"], "10.0.0.7");
        assert_eq!(h["x-forwarded-host"], "");

        // The client is the peer: X-Real-IP is the peer's text too.
        let mut h = HeaderMap::new();
        add_forwarding(&mut h, &fwd(v4, &ip(v4), v4.ip(), false, "h", false));
        assert_eq!(h["x-real-ip"], "10.0.0.7");
        assert_eq!(h["x-forwarded-for"], "10.0.0.7");
    }

    fn ip(addr: SocketAddr) -> HeaderValue {
        crate::text::ip_value(addr.ip())
    }

    fn fwd<'a>(
        peer: SocketAddr,
        peer_ip: &'a HeaderValue,
        client: IpAddr,
        https: bool,
        host: &'a str,
        forwarded: bool,
    ) -> Forwarding<'a> {
        Forwarding {
            peer,
            peer_ip,
            client,
            https,
            host,
            forwarded,
        }
    }

    /// A head's lines after the request line, stably sorted by name: the order of fields
    /// with one name is kept, the order between names is not compared.
    fn fields_of(head: &[u8]) -> Vec<String> {
        let text = std::str::from_utf8(head).unwrap();
        let mut lines: Vec<String> = text
            .split("\r\n")
            .skip(1)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        lines.sort_by_key(|l| l.split(':').next().unwrap().to_owned());
        lines
    }

    fn empty_body() -> crate::body::ProxyBody {
        use http_body_util::BodyExt as _;
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed()
    }

    fn unknown_length() -> crate::body::ProxyBody {
        use http_body_util::BodyExt as _;
        let frames = futures_util::stream::iter(Vec::<
            Result<http_body::Frame<bytes::Bytes>, crate::body::BoxError>,
        >::new());
        http_body_util::StreamBody::new(frames).boxed()
    }

    /// The lines written straight from the client's fields are the head the map path
    /// makes (copy without hop-by-hop fields, Host, forwarding fields), field for field,
    /// for requests with and without each field the path replaces or drops.
    #[test]
    fn written_fields_are_the_map_paths_fields() {
        use crate::http1::client::{Fields, encode_request};
        let v4: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:5000".parse().unwrap();
        let other: IpAddr = "192.0.2.9".parse().unwrap();
        let requests: &[&[(&str, &str)]] = &[
            &[],
            &[
                ("host", "a.example"),
                ("accept", "*/*"),
                ("user-agent", "t"),
            ],
            &[
                ("host", "a.example"),
                ("connection", "keep-alive, X-Private"),
                ("keep-alive", "timeout=5"),
                ("x-private", "1"),
                ("te", "trailers"),
                ("x-kept", "1"),
                ("x-kept", "2"),
                ("content-length", "12"),
            ],
            &[
                ("x-forwarded-for", "192.0.2.1"),
                ("x-forwarded-for", "192.0.2.2"),
                ("x-forwarded-proto", "http"),
                ("x-forwarded-host", "spoofed"),
                ("x-real-ip", "192.0.2.3"),
                ("forwarded", "for=192.0.2.4"),
                ("forwarded", "for=192.0.2.5"),
                ("cookie", "a=1"),
                ("cookie", "b=2"),
            ],
            &[("x-forwarded-for", " "), ("transfer-encoding", "chunked")],
            &[("x-forwarded-for", "caf\u{e9}"), ("forwarded", "caf\u{e9}")],
            &[("content-length", "7"), ("content-length", "x")],
            &[("content-length", "x"), ("content-length", "7")],
        ];
        let hosts = ["a.example", "", "bad\u{7f}host", "quoted\"host"];
        for pairs in requests {
            let client_map: HeaderMap = pairs
                .iter()
                .map(|(k, v)| {
                    (
                        HeaderName::from_bytes(k.as_bytes()).unwrap(),
                        HeaderValue::from_bytes(v.as_bytes()).unwrap(),
                    )
                })
                .collect();
            for (peer, client, https, forwarded) in [
                (v4, v4.ip(), true, false),
                (v6, other, false, true),
                (v4, other, false, true),
            ] {
                for host in hosts {
                    for pass_host in [host, "node.example:8080"] {
                        let peer_ip = ip(peer);
                        let f = fwd(peer, &peer_ip, client, https, host, forwarded);
                        let mut map = forwardable(&client_map, 6);
                        if let Ok(v) = HeaderValue::from_str(pass_host) {
                            map.insert(header::HOST, v);
                        }
                        add_forwarding(&mut map, &f);
                        let written = write_forwardable(&client_map, pass_host, &f, |_| false)
                            .expect("nothing stops it");
                        for body in [unknown_length(), empty_body()] {
                            let (a, ea) =
                                encode_request(&http::Method::POST, "/", Fields::Map(&map), &body);
                            let (b, eb) = encode_request(
                                &http::Method::POST,
                                "/",
                                Fields::Written(&written),
                                &body,
                            );
                            assert_eq!(ea, eb, "{pairs:?} {host:?}");
                            assert_eq!(
                                fields_of(&a),
                                fields_of(&b),
                                "{pairs:?} host {host:?} pass {pass_host:?} {peer} {forwarded}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_field_the_written_path_cannot_make_sends_it_to_the_map() {
        let h = map(&[("accept", "*/*"), ("if-none-match", "W/\"1\"")]);
        let peer: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let peer_ip = ip(peer);
        let f = fwd(peer, &peer_ip, peer.ip(), true, "a", false);
        assert!(write_forwardable(&h, "a", &f, |n| n == header::IF_NONE_MATCH).is_none());
        let w = write_forwardable(&h, "a", &f, |n| n == header::COOKIE).unwrap();
        assert!(
            w.lines
                .starts_with(b"accept: */*\r\nif-none-match: W/\"1\"\r\nhost: a\r\n")
        );
    }
}
