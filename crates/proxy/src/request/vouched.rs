//! The request headers the gateway vouches for, and what keeps them so. An origin behind
//! the gateway believes the fields the gateway sets: the forwarding headers
//! (`X-Forwarded-For`, `-Proto`, `-Host`, `X-Real-IP`, `Forwarded`), `X-Request-Id`,
//! `X-Forwarded-Client-Cert`, and on an authenticated route the subject, claim and
//! forward-auth headers (`RequestCtx::authenticate`). A client must not be able to forge
//! them (its own copies are removed or replaced), strip them (`Connection` names them),
//! smuggle a second spelling past them (`X_Auth_Subject`, which CGI, PHP, WSGI and Rack
//! origins read as `X-Auth-Subject`), or send credentials the gateway verified once and the
//! origin reads twice (two `Authorization` fields). [`screen`] runs where a request arrives
//! (phase `early`); [`drop_spellings`] where authentication sets a route's own fields.

use crate::request::forward;
use http::header::{self, HeaderMap, HeaderName};
use smallvec::SmallVec;

/// The fields the gateway sets on every proxied request (or replaces, or removes the
/// client's copy of: `X-Forwarded-Client-Cert`), as `HeaderName` spells them. `Forwarded`
/// has no `-` to spell otherwise.
const GATEWAY_SET: [&str; 6] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
    "x-request-id",
    "x-forwarded-client-cert",
];

/// Why [`screen`] refused a request: its name in the access log's `refused=`.
pub(crate) type Refusal = &'static str;

/// Screens the header fields of a request that just arrived, before anything reads them:
///
/// - more than one `Authorization` or `Proxy-Authorization` field is refused: the gateway
///   would verify the first and the origin might read the other (NGINX answers 400 for a
///   second `Authorization`);
/// - a field whose name has `_` is dropped, unless the listener keeps them
///   (`underscores_in_headers`, NGINX's directive and default), and even then when it is an
///   underscore spelling of a field the gateway sets;
/// - the fields `Connection` names are removed now ([`forward::remove_connection_options`]),
///   except the gateway's `X-Request-Id` (`request_id`: the gateway set it) and the
///   message's own `Host` and `Content-Length`, which the gateway has already read.
///
/// One pass over the names finds whether there is anything to do; most requests have none
/// of these.
pub(crate) fn screen(
    headers: &mut HeaderMap,
    keep_underscores: bool,
    request_id: bool,
) -> Result<(), Refusal> {
    let mut underscored = false;
    for name in headers.keys() {
        if name.as_str().contains('_') {
            underscored = true;
        } else if (*name == header::AUTHORIZATION || *name == header::PROXY_AUTHORIZATION)
            && headers.get_all(name).iter().nth(1).is_some()
        {
            return Err(if *name == header::AUTHORIZATION {
                "duplicate_authorization"
            } else {
                "duplicate_proxy_authorization"
            });
        }
    }
    if underscored {
        drop_underscored(headers, |name| {
            keep_underscores && !GATEWAY_SET.iter().any(|set| same_field(name, set))
        });
    }
    if headers.contains_key(header::CONNECTION) {
        forward::remove_connection_options(headers, |name| {
            *name == header::HOST
                || *name == header::CONTENT_LENGTH
                || (request_id && *name == crate::request::policy::X_REQUEST_ID)
        });
    }
    Ok(())
}

/// Drops the client's fields whose names have `_` and are another spelling of one of
/// `vouched` (a route's subject and identity headers, about to be set): on a listener that
/// keeps underscores, the gateway's `X-Auth-Subject` would go upstream beside the client's
/// `X_Auth_Subject`, and an origin that maps `_` to `-` could read the client's. Exact
/// copies are removed by the caller.
pub(crate) fn drop_spellings<'n>(
    headers: &mut HeaderMap,
    vouched: impl Iterator<Item = &'n HeaderName> + Clone,
) {
    drop_underscored(headers, |name| {
        !vouched.clone().any(|v| same_field(name, v.as_str()))
    });
}

/// Removes each field whose name has `_`, unless `keep` says otherwise.
fn drop_underscored(headers: &mut HeaderMap, keep: impl Fn(&str) -> bool) {
    let doomed: SmallVec<[HeaderName; 2]> = headers
        .keys()
        .filter(|name| name.as_str().contains('_') && !keep(name.as_str()))
        .cloned()
        .collect();
    for name in &doomed {
        headers.remove(name);
    }
}

/// Whether two (lowercase) field names are one field to an origin that reads `_` as `-`.
fn same_field(a: &str, b: &str) -> bool {
    let dash = |c: u8| if c == b'_' { b'-' } else { c };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| dash(x) == dash(y))
}

#[cfg(test)]
mod tests;
