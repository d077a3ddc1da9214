//! `[route.cors]`: the Fetch standard's CORS protocol at the edge. A preflight (`OPTIONS`
//! with `Origin` and `Access-Control-Request-Method`) is answered by the gateway, 204 with
//! what the route allows when the origin is allowed, 204 without CORS headers (which the
//! browser takes as a refusal) when it is not; it never reaches the upstream. Other requests
//! from an allowed origin get `Access-Control-Allow-Origin` and the rest on their response.

use http::Method;
use http::header::{self, HeaderMap, HeaderValue};
use sluice_config::Cors;

/// `Vary` on every CORS answer: the answer depends on these.
const PREFLIGHT_VARY: &str =
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers";

/// Whether `(method, headers)` is a CORS preflight.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The allowed origin's value for `Access-Control-Allow-Origin`, if `origin` is allowed.
fn allowed_origin(cors: &Cors, origin: &HeaderValue) -> Option<HeaderValue> {
    if cors.any_origin && !cors.credentials {
        return Some(HeaderValue::from_static("*"));
    }
    let text = origin.to_str().ok()?;
    (cors.any_origin || cors.origins.iter().any(|p| p.matches(text))).then(|| origin.clone())
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
mod tests {
    use super::*;
    use sluice_config::OriginPattern;
    use std::time::Duration;

    fn cors(credentials: bool, any: bool) -> Cors {
        Cors {
            origins: vec![OriginPattern {
                scheme: "https://".into(),
                host: "example.com".into(),
                wildcard: true,
                port: String::new(),
            }],
            any_origin: any,
            methods: vec![Method::GET, Method::PUT],
            headers: Some(vec![header::CONTENT_TYPE]),
            expose_headers: vec![header::ETAG],
            credentials,
            max_age: Duration::from_secs(600),
        }
    }

    fn request(origin: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ORIGIN, origin.parse().unwrap());
        h.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            "PUT".parse().unwrap(),
        );
        h
    }

    #[test]
    fn a_preflight_from_an_allowed_origin_gets_the_routes_lists() {
        let c = cors(true, false);
        assert!(is_preflight(
            &Method::OPTIONS,
            &request("https://a.example.com")
        ));
        assert!(!is_preflight(
            &Method::GET,
            &request("https://a.example.com")
        ));
        let (h, ok) = preflight(&c, &request("https://a.example.com"));
        assert!(ok);
        assert_eq!(
            h[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://a.example.com"
        );
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_METHODS], "GET, PUT");
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_HEADERS], "content-type");
        assert_eq!(h[header::ACCESS_CONTROL_MAX_AGE], "600");
        let (h, ok) = preflight(&c, &request("https://evil.net"));
        assert!(!ok);
        assert!(!h.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
        assert!(h.contains_key(header::VARY));
    }

    #[test]
    fn responses_name_the_origin_or_the_wildcard() {
        let mut out = HeaderMap::new();
        let origin = HeaderValue::from_static("https://a.example.com");
        on_response(&cors(false, true), Some(&origin), &mut out);
        assert_eq!(out[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        let mut out = HeaderMap::new();
        on_response(&cors(true, false), Some(&origin), &mut out);
        assert_eq!(
            out[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://a.example.com"
        );
        assert_eq!(out[header::ACCESS_CONTROL_EXPOSE_HEADERS], "etag");
        let mut out = HeaderMap::new();
        on_response(
            &cors(true, false),
            Some(&HeaderValue::from_static("https://x.org")),
            &mut out,
        );
        assert!(!out.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
        assert_eq!(out[header::VARY], "Origin");
    }
}
