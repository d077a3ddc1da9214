//! Conditional requests around a cache: answering a client's from a stored response (RFC 9110
//! §13.1.1-13.1.3, §13.2.2: `If-None-Match` first, `If-Modified-Since` only without it),
//! asking the upstream to revalidate a stored response (§4.3.1 of RFC 9111), and updating the
//! stored head from a 304 (§4.3.4).

use crate::directives::split_list;
use crate::freshness::date;
use http::header::{
    CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH,
    LAST_MODIFIED, TRANSFER_ENCODING,
};
use http::{HeaderMap, HeaderValue, Method};

/// Whether `request`'s preconditions say the client already has what `stored` describes, so
/// that a 304 answers it (GET and HEAD only).
pub fn not_modified(method: &Method, request: &HeaderMap, stored: &HeaderMap) -> bool {
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    if request.contains_key(IF_NONE_MATCH) {
        let Some(etag) = stored.get(ETAG).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        return request.get_all(IF_NONE_MATCH).iter().any(|v| {
            v.to_str().is_ok_and(|list| {
                split_list(list)
                    .into_iter()
                    .any(|tag| tag == "*" || weak_eq(tag, etag))
            })
        });
    }
    match (
        date(request, IF_MODIFIED_SINCE),
        date(stored, LAST_MODIFIED),
    ) {
        (Some(since), Some(modified)) => modified <= since,
        _ => false,
    }
}

/// Weak comparison of two entity-tags (RFC 9110 §8.8.3.2): equal opaque tags, `W/` ignored.
pub fn weak_eq(a: &str, b: &str) -> bool {
    matches!((opaque(a), opaque(b)), (Some(x), Some(y)) if x == y)
}

/// An entity-tag's opaque part with its quotes (`W/` dropped); `None` if it is no tag.
fn opaque(t: &str) -> Option<&str> {
    let t = t.trim();
    let t = t.strip_prefix("W/").unwrap_or(t);
    (t.len() >= 2 && t.starts_with('"') && t.ends_with('"')).then_some(t)
}

/// The validators to send upstream to revalidate `stored` (its `ETag` as `If-None-Match`,
/// its `Last-Modified` as `If-Modified-Since`); empty when it has none.
pub fn revalidation_headers(stored: &HeaderMap) -> Vec<(http::HeaderName, HeaderValue)> {
    let mut out = Vec::new();
    if let Some(etag) = stored.get(ETAG) {
        out.push((IF_NONE_MATCH, etag.clone()));
    }
    if let Some(lm) = stored.get(LAST_MODIFIED) {
        out.push((IF_MODIFIED_SINCE, lm.clone()));
    }
    out
}

/// Whether a 304 from the upstream is about `stored` (§4.3.3: its strong validator, else its
/// `Last-Modified`, matches; with neither in the 304, it is taken as the stored one).
pub fn validates(stored: &HeaderMap, not_modified: &HeaderMap) -> bool {
    match (not_modified.get(ETAG), stored.get(ETAG)) {
        (Some(new), Some(old)) => return new == old,
        (Some(_), None) => return false,
        _ => {}
    }
    match (not_modified.get(LAST_MODIFIED), stored.get(LAST_MODIFIED)) {
        (Some(new), Some(old)) => new == old,
        (Some(_), None) => false,
        _ => true,
    }
}

/// The stored head updated by a 304's fields (§4.3.4): each field the 304 carries replaces
/// the stored one, except those that describe the stored body's bytes.
pub fn update_from_304(stored: &mut HeaderMap, not_modified: &HeaderMap) {
    let keep = [
        CONTENT_LENGTH,
        CONTENT_ENCODING,
        CONTENT_RANGE,
        TRANSFER_ENCODING,
    ];
    for name in not_modified.keys() {
        if keep.contains(name) {
            continue;
        }
        stored.remove(name);
        for v in not_modified.get_all(name) {
            stored.append(name.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_headers as h;

    #[test]
    fn clients_get_304_when_their_validators_match() {
        let stored = h(&[
            ("etag", "W/\"v1\""),
            ("last-modified", "Thu, 26 Nov 2026 00:00:00 GMT"),
        ]);
        let get = Method::GET;
        assert!(
            not_modified(&get, &h(&[("if-none-match", "\"v1\"")]), &stored),
            "weak comparison"
        );
        assert!(not_modified(
            &get,
            &h(&[("if-none-match", "\"x\", W/\"v1\"")]),
            &stored
        ));
        assert!(not_modified(&get, &h(&[("if-none-match", "*")]), &stored));
        assert!(!not_modified(
            &get,
            &h(&[("if-none-match", "\"v2\"")]),
            &stored
        ));
        assert!(!not_modified(
            &Method::POST,
            &h(&[("if-none-match", "*")]),
            &stored
        ));
        // If-Modified-Since only without If-None-Match.
        assert!(not_modified(
            &get,
            &h(&[("if-modified-since", "Thu, 26 Nov 2026 00:00:00 GMT")]),
            &stored
        ));
        assert!(not_modified(
            &get,
            &h(&[("if-modified-since", "Fri, 27 Nov 2026 00:00:00 GMT")]),
            &stored
        ));
        assert!(!not_modified(
            &get,
            &h(&[("if-modified-since", "Wed, 25 Nov 2026 00:00:00 GMT")]),
            &stored
        ));
        assert!(
            !not_modified(
                &get,
                &h(&[
                    ("if-none-match", "\"v2\""),
                    ("if-modified-since", "Fri, 27 Nov 2026 00:00:00 GMT")
                ]),
                &stored
            ),
            "If-None-Match decides when present"
        );
        assert!(!not_modified(
            &get,
            &h(&[("if-modified-since", "garbage")]),
            &stored
        ));
        assert!(!not_modified(&get, &h(&[]), &stored));
        assert!(!weak_eq("v1", "v1"), "unquoted is no entity-tag");
    }

    #[test]
    fn revalidation_asks_with_the_stored_validators_and_a_304_updates_the_head() {
        let mut stored = h(&[
            ("etag", "\"v1\""),
            ("last-modified", "Thu, 26 Nov 2026 00:00:00 GMT"),
            ("cache-control", "max-age=60"),
            ("content-length", "5"),
            ("content-encoding", "gzip"),
            ("x-a", "1"),
        ]);
        let asked = revalidation_headers(&stored);
        assert_eq!(
            asked[0],
            (IF_NONE_MATCH, HeaderValue::from_static("\"v1\""))
        );
        assert_eq!(asked[1].0, IF_MODIFIED_SINCE);
        assert!(revalidation_headers(&h(&[])).is_empty());

        let reply = h(&[
            ("etag", "\"v1\""),
            ("cache-control", "max-age=120"),
            ("content-length", "0"),
            ("x-b", "2"),
        ]);
        assert!(validates(&stored, &reply));
        assert!(
            !validates(&stored, &h(&[("etag", "\"v2\"")])),
            "a 304 about another version"
        );
        assert!(validates(&stored, &h(&[])));
        update_from_304(&mut stored, &reply);
        assert_eq!(stored["cache-control"], "max-age=120");
        assert_eq!(
            stored["content-length"], "5",
            "the stored body's length stays"
        );
        assert_eq!(stored["content-encoding"], "gzip");
        assert_eq!(stored["x-a"], "1");
        assert_eq!(stored["x-b"], "2");
    }
}
