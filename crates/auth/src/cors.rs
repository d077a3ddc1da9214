//! `[route.cors]`: the Fetch standard's CORS protocol at the edge. A preflight (`OPTIONS`
//! with `Origin` and `Access-Control-Request-Method`) is answered by the gateway, 204 with
//! what the route allows when the origin is allowed, 204 without CORS headers (which the
//! browser takes as a refusal) when it is not; it never reaches the upstream. Other requests
//! from an allowed origin get `Access-Control-Allow-Origin` and the rest on their response.
//!
//! An `Origin` is matched as a parsed origin (scheme, host, port), never as a string: a
//! value that is not `scheme "://" host [ ":" port ]` (a path, a query, userinfo, `null`,
//! non-ASCII) is allowed by no pattern, so `https://evil.com/.example.com` is not a
//! subdomain of `example.com`.

use http::Method;
use http::header::{self, HeaderMap, HeaderValue};
use sluice_config::{Cors, OriginPattern};

/// `Vary` on every CORS answer: the answer depends on these.
const PREFLIGHT_VARY: &str =
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers";

/// Whether `(method, headers)` is a CORS preflight.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The allowed origin's value for `Access-Control-Allow-Origin`, if `origin` is allowed:
/// the value as the browser sent it, which is the origin it compares with its own.
fn allowed_origin(cors: &Cors, origin: &HeaderValue) -> Option<HeaderValue> {
    if cors.any_origin && !cors.credentials {
        return Some(HeaderValue::from_static("*"));
    }
    let parsed = Origin::parse(origin.as_bytes())?;
    (cors.any_origin || cors.origins.iter().any(|p| parsed.is_allowed_by(p)))
        .then(|| origin.clone())
}

/// An `Origin` value as a browser serializes one (RFC 6454 §6.1): `scheme "://" host [ ":"
/// port ]` and nothing else. Scheme and host are compared without ASCII case (a browser
/// sends them lowercase; comparing so is lowercasing them without a copy per request).
#[derive(Debug, PartialEq, Eq)]
struct Origin<'v> {
    scheme: &'v str,
    /// A DNS name (labels of letters, digits, `-` and `_`, none empty: no trailing dot) or a
    /// bracketed IPv6 literal.
    host: &'v str,
    /// As sent; `None` when absent.
    port: Option<u16>,
}

impl<'v> Origin<'v> {
    /// `value` as an origin; `None` when it is not one (`null`, a path, a query, a
    /// fragment, userinfo, an empty or out-of-range port, a byte outside ASCII: browsers
    /// send IDNs as punycode).
    fn parse(value: &'v [u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        let (scheme, rest) = text.split_once("://")?;
        let scheme_ok = scheme.as_bytes().first()?.is_ascii_alphabetic()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        // An IPv6 literal's colons are inside its brackets.
        let host_end = match rest.strip_prefix('[') {
            Some(v6) => v6.find(']')? + 2,
            None => rest.find(':').unwrap_or(rest.len()),
        };
        let (host, after) = rest.split_at(host_end);
        let port = match after {
            "" => None,
            _ => {
                let digits = after.strip_prefix(':')?;
                if !(1..=5).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Some(digits.parse().ok()?)
            }
        };
        (scheme_ok && valid_host(host)).then_some(Origin { scheme, host, port })
    }

    /// Whether `pattern` allows this origin: the same scheme, the same port (a pattern
    /// without one means the scheme's default, which an origin may also spell out:
    /// `https://a.example.com:443` is `https://a.example.com`), and the same host, or for
    /// `*.example.com` a host of at least one more label that ends in `.example.com`.
    fn is_allowed_by(&self, pattern: &OriginPattern) -> bool {
        let Some(scheme) = pattern.scheme.strip_suffix("://") else {
            return false;
        };
        if !self.scheme.eq_ignore_ascii_case(scheme) {
            return false;
        }
        let default = default_port(scheme);
        let want = match pattern.port.strip_prefix(':') {
            Some(digits) => digits.parse().ok(),
            None => default,
        };
        if want.is_none() || self.port.or(default) != want {
            return false;
        }
        let (host, base) = (self.host.as_bytes(), pattern.host.as_bytes());
        if !pattern.wildcard {
            return host.eq_ignore_ascii_case(base);
        }
        // Labels are never empty (`valid_host`), so one more byte than `.base` is a label.
        host.len() > base.len() + 1
            && host[host.len() - base.len() - 1] == b'.'
            && host[host.len() - base.len()..].eq_ignore_ascii_case(base)
    }
}

/// The port an origin of `scheme` has when it names none.
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    }
}

/// A host as an origin carries it: a bracketed IPv6 literal, or dot-separated labels of
/// ASCII letters, digits, `-` and `_`, none empty.
fn valid_host(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.contains(':')
            && v6
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The headers of the 204 that answers a preflight; `(headers, allowed)`.
pub fn preflight(cors: &Cors, headers: &HeaderMap) -> (HeaderMap, bool) {
    let mut out = HeaderMap::new();
    out.insert(header::VARY, HeaderValue::from_static(PREFLIGHT_VARY));
    let Some(origin) = headers
        .get(header::ORIGIN)
        .and_then(|o| allowed_origin(cors, o))
    else {
        return (out, false);
    };
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    if cors.credentials {
        out.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    let methods = cors
        .methods
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if let Ok(v) = HeaderValue::from_str(&methods) {
        out.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
    }
    let allow_headers = match &cors.headers {
        // Any: the headers asked for, as asked.
        None => headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned(),
        Some(list) if list.is_empty() => None,
        Some(list) => HeaderValue::from_str(
            &list
                .iter()
                .map(|h| h.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )
        .ok(),
    };
    if let Some(v) = allow_headers {
        out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
    }
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from(cors.max_age.as_secs()),
    );
    (out, true)
}

/// Adds the CORS headers to the response of a request with `origin` (not a preflight).
pub fn on_response(cors: &Cors, origin: Option<&HeaderValue>, out: &mut HeaderMap) {
    out.append(header::VARY, HeaderValue::from_static("Origin"));
    let Some(allowed) = origin.and_then(|o| allowed_origin(cors, o)) else {
        return;
    };
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
    if cors.credentials {
        out.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    if !cors.expose_headers.is_empty()
        && let Ok(v) = HeaderValue::from_str(
            &cors
                .expose_headers
                .iter()
                .map(|h| h.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )
    {
        out.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v);
    }
}

#[cfg(test)]
mod tests;
