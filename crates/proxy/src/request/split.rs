//! Traffic split for gray releases (`[[route.split]]`): which upstream a request of a route
//! goes to. Splits are checked in order; one with a match (headers, cookies, query
//! arguments) applies to the requests that match, one without takes its share of all the
//! route's requests; what no split takes goes to the route's `upstream`.
//!
//! A share is decided by a hash of `split_on` (a cookie or header naming the user, or the
//! client address) into 10,000 buckets, each weighted split owning a range of them: the same
//! user always lands in the same range, so they do not flip between versions from one
//! request to the next, and raising a canary from 5% to 10% keeps the first 5% where they
//! were.

use crate::upstreams::request_key::{cookie, key_hash, query_arg};
use sluice_config::{Route, Split};
use std::net::IpAddr;

/// Seeds the split's hash apart from the balancers' (a canary share and a consistent hash
/// on the same cookie must not line up).
const SEED: u64 = 0x0073_706c_6974;

/// The upstream index for a request of `route` (`None` for a route that answers itself).
pub(crate) fn upstream_for(
    route: &Route,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    client: IpAddr,
) -> Option<usize> {
    if route.split.is_empty() {
        return route.upstream;
    }
    let bucket = || {
        let h = key_hash(&route.split_on, SEED, uri, headers, client);
        (h % 10_000) as u32
    };
    let mut b = None;
    let mut taken = 0u32;
    for s in &route.split {
        let conditional = !(s.headers.is_empty() && s.cookies.is_empty() && s.query.is_empty());
        if conditional {
            if matches(s, uri, headers) && *b.get_or_insert_with(bucket) < s.basis_points {
                return Some(s.upstream);
            }
        } else {
            let at = *b.get_or_insert_with(bucket);
            if (taken..taken + s.basis_points).contains(&at) {
                return Some(s.upstream);
            }
            taken += s.basis_points;
        }
    }
    route.upstream
}

fn matches(s: &Split, uri: &http::Uri, headers: &http::HeaderMap) -> bool {
    s.headers
        .iter()
        .all(|(n, v)| headers.get_all(n).iter().any(|h| h == v))
        && s.cookies
            .iter()
            .all(|(n, v)| cookie(headers, n).is_some_and(|c| c == v.as_bytes()))
        && s.query.iter().all(|(n, v)| {
            uri.query()
                .and_then(|q| query_arg(q, n))
                .is_some_and(|a| a == v.as_bytes())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::load_str;

    fn route(splits: &str) -> Route {
        let src = format!(
            r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "stable"
servers = [{{ address = "127.0.0.1:9000" }}]
[[upstream]]
name = "canary"
servers = [{{ address = "127.0.0.1:9001" }}]
[[upstream]]
name = "beta"
servers = [{{ address = "127.0.0.1:9002" }}]
[[route]]
name = "r"
upstream = "stable"
split_on = "cookie:uid"
{splits}
"#
        );
        // Nothing here reads a file: any base folder does.
        load_str(&src, "t.toml", std::path::Path::new("/"))
            .unwrap()
            .routes[0]
            .as_ref()
            .clone()
    }

    fn with_cookie(uid: u32) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::COOKIE, format!("uid={uid}").parse().unwrap());
        h
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn a_five_percent_canary_takes_five_percent_of_users_and_keeps_them() {
        let r = route("[[route.split]]\nupstream = \"canary\"\nweight = 5");
        let uri: http::Uri = "/".parse().unwrap();
        let to_canary = (0..10_000)
            .filter(|&u| upstream_for(&r, &uri, &with_cookie(u), CLIENT) == Some(1))
            .count();
        // 500 expected; a binomial's standard deviation here is about 22.
        assert!(
            (400..=600).contains(&to_canary),
            "{to_canary} of 10,000 users"
        );
        for u in 0..200 {
            let first = upstream_for(&r, &uri, &with_cookie(u), CLIENT);
            assert_eq!(
                upstream_for(&r, &uri, &with_cookie(u), CLIENT),
                first,
                "user {u} stays"
            );
        }
        // Raising it to 10% keeps every 5% user on the canary.
        let r10 = route("[[route.split]]\nupstream = \"canary\"\nweight = 10");
        for u in 0..2_000 {
            if upstream_for(&r, &uri, &with_cookie(u), CLIENT) == Some(1) {
                assert_eq!(upstream_for(&r10, &uri, &with_cookie(u), CLIENT), Some(1));
            }
        }
    }

    #[test]
    fn a_match_takes_its_requests_before_the_weights() {
        let r = route(
            "[[route.split]]\nupstream = \"beta\"\nheader = { \"x-beta\" = \"1\" }\nquery = { v = \"2\" }\n\
             [[route.split]]\nupstream = \"canary\"\nweight = 50",
        );
        let mut h = with_cookie(7);
        h.insert("x-beta", "1".parse().unwrap());
        let both: http::Uri = "/p?a=1&v=2".parse().unwrap();
        let header_only: http::Uri = "/p?v=3".parse().unwrap();
        assert_eq!(
            upstream_for(&r, &both, &h, CLIENT),
            Some(2),
            "header and query match: beta"
        );
        assert_ne!(
            upstream_for(&r, &header_only, &h, CLIENT),
            Some(2),
            "every condition must hold"
        );
        let beta_cookie = route("[[route.split]]\nupstream = \"beta\"\ncookie = { uid = \"7\" }");
        assert_eq!(
            upstream_for(&beta_cookie, &header_only, &with_cookie(7), CLIENT),
            Some(2)
        );
        assert_eq!(
            upstream_for(&beta_cookie, &header_only, &with_cookie(8), CLIENT),
            Some(0)
        );
    }
}
