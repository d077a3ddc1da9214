//! Byte ranges (RFC 9110 §14) answered from a whole stored response: what a `Range` asks of
//! a body of a known length, and whether `If-Range` lets it be answered as a range.

use http::HeaderMap;
use http::header;

/// The most ranges one request may ask for; more is answered whole (NGINX's
/// `max_ranges`, unlimited by default, is a common hardening; many small ranges cost more
/// than the body).
pub const MAX_RANGES: usize = 16;

/// What a `Range` field asks of a body of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable range (absent, not `bytes`, malformed, too many, or overlapping into more
    /// than the body): the whole body, 200.
    Whole,
    /// These ranges, each `start..end` (end exclusive), in the order asked: 206.
    Parts(Vec<std::ops::Range<u64>>),
    /// Every range starts past the end: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// The ranges `request` asks of a body of `len` bytes whose validators are in `response`
/// (`If-Range` must match the entity tag, strongly, or the `Last-Modified` date exactly).
pub fn requested(request: &HeaderMap, response: &HeaderMap, len: u64) -> Ranges {
    let Some(spec) = request.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return Ranges::Whole;
    };
    if let Some(cond) = request.get(header::IF_RANGE).and_then(|v| v.to_str().ok())
        && !if_range_holds(cond.trim(), response)
    {
        return Ranges::Whole;
    }
    parse(spec, len)
}

/// `If-Range`: a strong entity tag equal to the response's, or its `Last-Modified` exactly.
fn if_range_holds(cond: &str, response: &HeaderMap) -> bool {
    let field = |name| {
        response
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
    };
    if cond.starts_with('"') {
        return field(header::ETAG).is_some_and(|etag| etag == cond);
    }
    if cond.starts_with("W/") {
        return false;
    }
    field(header::LAST_MODIFIED).is_some_and(|lm| lm == cond)
}

/// A `Range` value against a body of `len` bytes.
pub fn parse(spec: &str, len: u64) -> Ranges {
    let Some(sets) = spec.trim().strip_prefix("bytes=") else {
        return Ranges::Whole;
    };
    let mut parts = Vec::new();
    let mut any = false;
    for set in sets.split(',') {
        let set = set.trim();
        if set.is_empty() {
            continue;
        }
        any = true;
        let Some((first, last)) = set.split_once('-') else {
            return Ranges::Whole;
        };
        let (first, last) = (first.trim(), last.trim());
        let range = if first.is_empty() {
            // A suffix: the last N bytes.
            let Ok(n) = last.parse::<u64>() else {
                return Ranges::Whole;
            };
            if n == 0 {
                continue;
            }
            len.saturating_sub(n)..len
        } else {
            let Ok(start) = first.parse::<u64>() else {
                return Ranges::Whole;
            };
            let end = if last.is_empty() {
                len
            } else {
                match last.parse::<u64>() {
                    Ok(l) if l >= start => l.saturating_add(1).min(len),
                    _ => return Ranges::Whole,
                }
            };
            if start >= len {
                continue;
            }
            start..end
        };
        parts.push(range);
    }
    if !any {
        return Ranges::Whole;
    }
    if parts.is_empty() {
        return Ranges::Unsatisfiable;
    }
    let asked: u64 = parts.iter().map(|r| r.end - r.start).sum();
    if parts.len() > MAX_RANGES || (parts.len() > 1 && asked > len) {
        return Ranges::Whole;
    }
    Ranges::Parts(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(v: &[(u64, u64)]) -> Ranges {
        Ranges::Parts(v.iter().map(|&(a, b)| a..b).collect())
    }

    #[test]
    fn ranges_as_rfc_9110_reads_them() {
        assert_eq!(parse("bytes=0-9", 100), parts(&[(0, 10)]));
        assert_eq!(parse("bytes=90-", 100), parts(&[(90, 100)]));
        assert_eq!(parse("bytes=-5", 100), parts(&[(95, 100)]));
        assert_eq!(parse("bytes=-500", 100), parts(&[(0, 100)]));
        assert_eq!(parse("bytes=95-200", 100), parts(&[(95, 100)]));
        assert_eq!(parse("bytes=0-0, -1", 100), parts(&[(0, 1), (99, 100)]));
        assert_eq!(parse("bytes= 1-2 , 5-6", 100), parts(&[(1, 3), (5, 7)]));
        assert_eq!(parse("bytes=100-", 100), Ranges::Unsatisfiable);
        assert_eq!(parse("bytes=200-300", 100), Ranges::Unsatisfiable);
        // Malformed or foreign: the whole body.
        for bad in [
            "items=0-1",
            "bytes=5-1",
            "bytes=a-b",
            "bytes=",
            "bytes=1",
            "0-1",
        ] {
            assert_eq!(parse(bad, 100), Ranges::Whole, "{bad}");
        }
        // Overlapping ranges asking for more than the body, and too many: whole.
        assert_eq!(parse("bytes=0-99,0-99", 100), Ranges::Whole);
        let many = format!("bytes={}", vec!["1-1"; MAX_RANGES + 1].join(","));
        assert_eq!(parse(&many, 100), Ranges::Whole);
    }

    #[test]
    fn if_range_must_match_strongly() {
        let mut response = HeaderMap::new();
        response.insert(header::ETAG, "\"v1\"".parse().unwrap());
        response.insert(
            header::LAST_MODIFIED,
            "Sat, 28 Nov 2026 10:00:00 GMT".parse().unwrap(),
        );
        let req = |if_range: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::RANGE, "bytes=0-0".parse().unwrap());
            if !if_range.is_empty() {
                h.insert(header::IF_RANGE, if_range.parse().unwrap());
            }
            h
        };
        assert_eq!(requested(&req(""), &response, 10), parts(&[(0, 1)]));
        assert_eq!(requested(&req("\"v1\""), &response, 10), parts(&[(0, 1)]));
        assert_eq!(requested(&req("\"v2\""), &response, 10), Ranges::Whole);
        assert_eq!(requested(&req("W/\"v1\""), &response, 10), Ranges::Whole);
        assert_eq!(
            requested(&req("Sat, 28 Nov 2026 10:00:00 GMT"), &response, 10),
            parts(&[(0, 1)])
        );
        assert_eq!(
            requested(&req("Sat, 28 Nov 2026 09:00:00 GMT"), &response, 10),
            Ranges::Whole
        );
        assert_eq!(requested(&HeaderMap::new(), &response, 10), Ranges::Whole);
    }
}
