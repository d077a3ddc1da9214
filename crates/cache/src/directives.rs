//! `Cache-Control` (RFC 9111 §5.2) as a cache reads it, from a request or a response.
//!
//! Parsing follows the RFC's leniency rules where they keep a cache safe: directive names are
//! case-insensitive; a directive that appears twice with conflicting values, or a delta-seconds
//! value that is not a number, makes the response stale (§4.2.1: "a cache SHOULD consider
//! the response to be stale" — here: no lifetime from that directive, and `invalid` set so
//! that the caller does not store on heuristics either); a quoted value is unquoted; unknown
//! directives are ignored. Values over 2³¹ seconds are clamped to it (§1.2.2).

use http::HeaderMap;
use http::header::CACHE_CONTROL;
use std::time::Duration;

/// The largest delta-seconds a cache must understand (§1.2.2).
const MAX_DELTA: u64 = 2_147_483_648;

/// The directives of one message's `Cache-Control` fields (all of them, combined).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age`.
    pub max_age: Option<Duration>,
    /// `s-maxage` (responses; a shared cache's own max-age).
    pub s_maxage: Option<Duration>,
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` (without field names: a field-named `no-cache` is treated the same, the
    /// safe reading).
    pub no_cache: bool,
    /// `private` (responses: a shared cache must not store it).
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`.
    pub must_revalidate: bool,
    /// `proxy-revalidate`.
    pub proxy_revalidate: bool,
    /// `no-transform` (responses: the cache must not make encoded variants of it).
    pub no_transform: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
    /// `stale-while-revalidate` (RFC 5861).
    pub stale_while_revalidate: Option<Duration>,
    /// `stale-if-error` (RFC 5861; requests and responses).
    pub stale_if_error: Option<Duration>,
    /// `max-stale` (requests): `Some(None)` without a value (any staleness).
    pub max_stale: Option<Option<Duration>>,
    /// `min-fresh` (requests).
    pub min_fresh: Option<Duration>,
    /// `only-if-cached` (requests).
    pub only_if_cached: bool,
    /// A freshness directive was malformed or repeated with another value: treat the
    /// response as stale.
    pub invalid: bool,
}

impl CacheControl {
    /// The directives of every `Cache-Control` field in `headers`.
    pub fn parse(headers: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::default();
        for value in headers.get_all(CACHE_CONTROL) {
            let Ok(text) = value.to_str() else {
                cc.invalid = true;
                continue;
            };
            for item in split_list(text) {
                let (name, arg) = match item.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(unquote(a.trim()))),
                    None => (item.trim(), None),
                };
                cc.apply(&name.to_ascii_lowercase(), arg.as_deref());
            }
        }
        cc
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        let seconds = |arg: Option<&str>, invalid: &mut bool| -> Option<Duration> {
            match arg.map(str::parse::<u64>) {
                Some(Ok(n)) => Some(Duration::from_secs(n.min(MAX_DELTA))),
                _ => {
                    *invalid = true;
                    None
                }
            }
        };
        let set = |slot: &mut Option<Duration>, arg: Option<&str>, invalid: &mut bool| {
            let v = seconds(arg, invalid);
            match (*slot, v) {
                (Some(old), Some(new)) if old != new => *invalid = true,
                (_, Some(new)) => *slot = Some(new),
                _ => {}
            }
        };
        match name {
            "max-age" => set(&mut self.max_age, arg, &mut self.invalid),
            "s-maxage" => set(&mut self.s_maxage, arg, &mut self.invalid),
            "stale-while-revalidate" => {
                set(&mut self.stale_while_revalidate, arg, &mut self.invalid)
            }
            "stale-if-error" => set(&mut self.stale_if_error, arg, &mut self.invalid),
            "min-fresh" => set(&mut self.min_fresh, arg, &mut self.invalid),
            "max-stale" => {
                self.max_stale = Some(match arg {
                    None => None,
                    Some(a) => a
                        .parse::<u64>()
                        .ok()
                        .map(|n| Duration::from_secs(n.min(MAX_DELTA))),
                })
            }
            "no-store" => self.no_store = true,
            "no-cache" => self.no_cache = true,
            "private" => self.private = true,
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "no-transform" => self.no_transform = true,
            "immutable" => self.immutable = true,
            "only-if-cached" => self.only_if_cached = true,
            _ => {}
        }
    }
}

/// The comma-separated items of a list field, commas inside quoted strings kept.
pub(crate) fn split_list(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// A quoted-string's content (backslash escapes undone), or the token as it is.
fn unquote(v: &str) -> String {
    match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut escaped = false;
            for c in inner.chars() {
                if escaped || c != '\\' {
                    out.push(c);
                    escaped = false;
                } else {
                    escaped = true;
                }
            }
            out
        }
        None => v.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(values: &[&str]) -> CacheControl {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(CACHE_CONTROL, v.parse().unwrap());
        }
        CacheControl::parse(&h)
    }

    #[test]
    fn directives_are_read_case_insensitively_across_fields() {
        let c = cc(&["Max-Age=60, PUBLIC", "s-maxage=\"120\", no-transform"]);
        assert_eq!(c.max_age, Some(Duration::from_secs(60)));
        assert_eq!(c.s_maxage, Some(Duration::from_secs(120)));
        assert!(c.public && c.no_transform && !c.invalid);
        let c = cc(&["private=\"set-cookie, x-a\", no-cache=\"x\", max-stale"]);
        assert!(c.private && c.no_cache);
        assert_eq!(c.max_stale, Some(None));
        let c = cc(&["stale-while-revalidate=30,stale-if-error=600 , immutable"]);
        assert_eq!(c.stale_while_revalidate, Some(Duration::from_secs(30)));
        assert_eq!(c.stale_if_error, Some(Duration::from_secs(600)));
        assert!(c.immutable);
    }

    #[test]
    fn malformed_or_conflicting_lifetimes_make_the_response_stale() {
        for bad in [
            &["max-age=abc"][..],
            &["max-age"],
            &["max-age=-1"],
            &["max-age=10, max-age=20"],
            &["max-age=10", "max-age=20"],
        ] {
            let c = cc(bad);
            assert!(c.invalid, "{bad:?}");
        }
        let c = cc(&["max-age=10, max-age=10"]);
        assert!(!c.invalid, "the same value twice is no conflict");
        assert_eq!(
            cc(&["max-age=99999999999999"]).max_age,
            Some(Duration::from_secs(MAX_DELTA))
        );
    }

    #[test]
    fn lists_split_outside_quotes_only() {
        assert_eq!(
            split_list(r#"a, b="x,y", c="q\"," , ,d"#),
            vec!["a", r#"b="x,y""#, r#"c="q\",""#, "d"]
        );
        assert_eq!(unquote(r#""a\"b""#), "a\"b");
    }
}
