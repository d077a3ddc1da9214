//! The secondary cache key (RFC 9111 §4.1): a stored response answers a later request only if
//! every request field its `Vary` names has the same value now as then.
//!
//! Values are normalised the way the RFC allows and every cache does: names lower-cased,
//! field lines of one name joined with ", ", whitespace around commas dropped. One field is
//! special: `Accept-Encoding` is not part of the key here, because the cache keeps every
//! encoded variant of an entry itself and chooses among them by the request's
//! `Accept-Encoding` (a response that varies on it only because the origin compressed is one
//! entry, not one per browser's header spelling).

use crate::directives::split_list;
use http::HeaderMap;
use http::header::{ACCEPT_ENCODING, VARY};

/// The request field names a response's `Vary` lists (lower-case, sorted, without
/// `Accept-Encoding`); `None` for `Vary: *` (never matches).
pub fn fields(response: &HeaderMap) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for v in response.get_all(VARY) {
        for name in split_list(v.to_str().ok()?) {
            if name == "*" {
                return None;
            }
            let name = name.to_ascii_lowercase();
            if name != ACCEPT_ENCODING.as_str() && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out.sort();
    Some(out)
}

/// The secondary key of `request` under `fields`: each field's normalised value (absent
/// and empty differ), one per line.
pub fn key(fields: &[String], request: &HeaderMap) -> String {
    let mut out = String::new();
    for name in fields {
        out.push_str(name);
        let values: Vec<&str> = request
            .get_all(name.as_str())
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if values.is_empty() {
            out.push('\n');
            continue;
        }
        out.push(':');
        let joined = values.join(",");
        out.push_str(&split_list(&joined).join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_headers as h;

    #[test]
    fn vary_lists_fields_without_accept_encoding_and_star_never_matches() {
        let f = fields(&h(&[
            ("vary", "Accept-Encoding, Accept-Language"),
            ("vary", "X-Device,accept-language"),
        ]));
        assert_eq!(
            f,
            Some(vec!["accept-language".to_owned(), "x-device".to_owned()])
        );
        assert_eq!(fields(&h(&[("vary", "accept-encoding")])), Some(vec![]));
        assert_eq!(fields(&h(&[])), Some(vec![]));
        assert_eq!(fields(&h(&[("vary", "Cookie, *")])), None);
    }

    #[test]
    fn keys_match_equal_values_and_tell_absent_from_empty() {
        let f = vec!["accept-language".to_owned(), "x-device".to_owned()];
        let a = key(
            &f,
            &h(&[("accept-language", "en, fr"), ("x-device", "phone")]),
        );
        let b = key(
            &f,
            &h(&[("Accept-Language", "en,fr"), ("x-device", "phone")]),
        );
        let c = key(
            &f,
            &h(&[
                ("accept-language", "en"),
                ("accept-language", "fr"),
                ("x-device", "phone"),
            ]),
        );
        assert_eq!(a, b);
        assert_eq!(a, c, "field lines joined");
        assert_ne!(
            a,
            key(&f, &h(&[("accept-language", "de"), ("x-device", "phone")]))
        );
        assert_ne!(key(&f, &h(&[])), key(&f, &h(&[("x-device", "")])));
        assert_eq!(
            key(&f, &h(&[("accept-encoding", "gzip")])),
            key(&f, &h(&[("accept-encoding", "br")]))
        );
    }
}
