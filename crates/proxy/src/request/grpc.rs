//! gRPC through the proxy: the call's `grpc-timeout` bounds the upstream wait, and the
//! gateway's own failures are answered as gRPC errors (a trailers-only response with
//! `grpc-status`), which a gRPC client can read, instead of an HTTP error page it cannot.
//!
//! Everything else a gRPC call needs is HTTP/2 done right, and the proxy does it for every
//! request: bodies stream both ways without buffering, trailers pass through (`TE: trailers`
//! is kept for the upstream), and `protocol = "h2"` upstreams speak HTTP/2.

use crate::request::error::Failure;
use http::HeaderMap;
use http::header::{self, HeaderValue};
use std::time::Duration;

/// Whether a request is a gRPC call (`application/grpc`, `application/grpc+proto`, …).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.strip_prefix("application/grpc")
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['+', ';']))
        })
}

/// The call's deadline from `grpc-timeout` (gRPC over HTTP/2: 1-8 digits and a unit, `H`
/// `M` `S` `m` `u` `n`); `None` when absent or malformed (then the route's timeouts alone
/// apply, as gRPC servers ignore a malformed one).
pub(crate) fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.as_bytes();
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The gRPC status of a failure the gateway answers itself, by gRPC's own mapping of HTTP
/// statuses (`doc/http-grpc-status-mapping.md`), except where the gateway knows better: its
/// timeout is the call's deadline, and size limits are exhausted resources.
pub(crate) fn status(why: Failure) -> (u8, &'static str) {
    match why {
        Failure::NoRoute => (12, "UNIMPLEMENTED"),
        Failure::HeadersTooLarge | Failure::BodyTooLarge => (8, "RESOURCE_EXHAUSTED"),
        Failure::BadRequest | Failure::BadPath => (13, "INTERNAL"),
        Failure::Misdirected => (14, "UNAVAILABLE"),
        Failure::UpstreamConnect
        | Failure::UpstreamError
        | Failure::ServiceUnavailable
        | Failure::WafUnavailable
        | Failure::AuthBusy
        | Failure::TooManyRequests => (14, "UNAVAILABLE"),
        Failure::UpstreamTimeout => (4, "DEADLINE_EXCEEDED"),
        Failure::Forbidden | Failure::AuthForbidden => (7, "PERMISSION_DENIED"),
        Failure::Unauthorized
        | Failure::NoClientCert
        | Failure::BadClientCert
        | Failure::DuplicateAuthorization => (16, "UNAUTHENTICATED"),
        Failure::AuthUnavailable | Failure::ScriptFailed => (13, "INTERNAL"),
    }
}

/// Makes `headers` those of a trailers-only gRPC response for `why` (the status goes with a
/// 200, as gRPC requires).
pub(crate) fn error_headers(why: Failure, headers: &mut HeaderMap) {
    let (code, _) = status(why);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from(u16::from(code)));
    // The message is plain ASCII without `%`: no percent-encoding needed.
    let message = why.message().trim_end();
    if let Ok(v) = HeaderValue::from_str(message) {
        headers.insert("grpc-message", v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn grpc_content_types_are_recognised_and_look_alikes_are_not() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc;x=1",
        ] {
            assert!(is_grpc(&with("content-type", yes)), "{yes}");
        }
        for no in ["application/grpc-web", "application/json", "text/grpc"] {
            assert!(!is_grpc(&with("content-type", no)), "{no}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_malformed_ones_are_ignored() {
        let t = |v: &str| timeout(&with("grpc-timeout", v));
        assert_eq!(t("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("10S"), Some(Duration::from_secs(10)));
        assert_eq!(t("250m"), Some(Duration::from_millis(250)));
        assert_eq!(t("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(t("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "123456789S", "10s", "1.5S", "-1S", "10"] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn gateway_failures_become_trailers_only_grpc_errors() {
        let mut h = HeaderMap::new();
        error_headers(Failure::UpstreamTimeout, &mut h);
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["grpc-status"], "4");
        assert_eq!(
            h["grpc-message"],
            "the upstream server did not respond in time"
        );
        assert_eq!(status(Failure::UpstreamConnect), (14, "UNAVAILABLE"));
        assert_eq!(status(Failure::NoRoute), (12, "UNIMPLEMENTED"));
    }
}
