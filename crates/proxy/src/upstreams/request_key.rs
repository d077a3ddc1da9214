//! What a request is keyed by for balancing (`hash` keys), traffic splits, sticky sessions and
//! rate limits: a header, cookie, query argument, the URI or the client address, hashed.
//! Shared by all four, so it lives with none of them.

use crate::hash::{hash_ip, hash64};
use sluice_config::HashKey;
use std::net::IpAddr;

/// The hash of what a [`HashKey`] names in a request, seeded; the client address stands in
/// for `client` keys and for requests that lack the header, cookie or argument, so such a
/// request still keeps its place. Balancers, splits and rate limits all key this way.
pub(crate) fn key_hash(
    key: &HashKey,
    seed: u64,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    client: IpAddr,
) -> u64 {
    key_value(key, uri, headers).map_or_else(|| hash_ip(client) ^ seed, |v| hash64(seed, v))
}

/// The bytes a [`HashKey`] names in a request; `None` for the client address, or when the
/// request lacks the header, cookie or argument.
pub(crate) fn key_value<'a>(
    key: &HashKey,
    uri: &'a http::Uri,
    headers: &'a http::HeaderMap,
) -> Option<&'a [u8]> {
    match key {
        HashKey::Client | HashKey::Subject => None,
        HashKey::Uri => uri.path_and_query().map(|pq| pq.as_str().as_bytes()),
        HashKey::Header(name) => headers.get(name.as_str()).map(|v| v.as_bytes()),
        HashKey::Cookie(name) => cookie(headers, name),
        HashKey::Query(name) => uri.query().and_then(|q| query_arg(q, name)),
    }
}

/// The value of cookie `name` in the request's `Cookie` headers (RFC 6265 §5.4: pairs
/// separated by `; `).
pub(crate) fn cookie<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a [u8]> {
    headers.get_all(http::header::COOKIE).iter().find_map(|v| {
        v.as_bytes().split(|&b| b == b';').find_map(|pair| {
            let pair = pair.trim_ascii_start();
            let eq = pair.iter().position(|&b| b == b'=')?;
            (pair[..eq].trim_ascii() == name.as_bytes()).then(|| pair[eq + 1..].trim_ascii())
        })
    })
}

/// The raw (still percent-encoded) value of query argument `name`.
pub(crate) fn query_arg<'a>(query: &'a str, name: &str) -> Option<&'a [u8]> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_and_query_arguments_are_found_by_name() {
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; session=abc ;b=2".parse().unwrap(),
        );
        h.append(http::header::COOKIE, "late=9".parse().unwrap());
        assert_eq!(cookie(&h, "session"), Some(&b"abc"[..]));
        assert_eq!(cookie(&h, "late"), Some(&b"9"[..]));
        assert_eq!(cookie(&h, "sess"), None, "a prefix is not a name");
        assert_eq!(
            query_arg("x=1&user=u%2042&flag", "user"),
            Some(&b"u%2042"[..])
        );
        assert_eq!(query_arg("x=1&flag", "flag"), Some(&b""[..]));
        assert_eq!(query_arg("x=1", "y"), None);
    }
}
