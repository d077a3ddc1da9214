//! One path for every decision: the request path normalized as RFC 3986 §6.2.2 says before
//! routing, so that a route, an ACL, a limit, authentication, the WAF, Lua and the cache all
//! judge the path the origin will read, whichever way the client spelled it
//! (docs/security.md).
//!
//! What [`normalize`] does, in order:
//! - percent-encoded unreserved characters (`ALPHA DIGIT - . _ ~`) are decoded, and every
//!   other percent-encoding is kept with its hex upper-cased (`%2f` → `%2F`); a `%` not
//!   followed by two hex digits is refused (as NGINX refuses it);
//! - an encoded `/`, `\` or NUL is refused, kept or decoded as the listener's
//!   `escaped_slashes` says (NUL is never decoded);
//! - runs of `/` collapse into one where `merge_slashes` is on;
//! - dot segments (`.`, `..`, also when spelled `%2E`) are removed; a path whose `..` would
//!   climb above the root is refused (NGINX answers 400 too).
//!
//! The query is not touched. A path already in normal form (nearly every request) is
//! recognised by one scan and costs no allocation.

use http::Uri;
use http::uri::PathAndQuery;
use sluice_config::{EscapedSlashes, PathPolicy};

/// Why a path was refused (answered 400, the reason logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathRefusal {
    /// A `%` not followed by two hex digits.
    BadEncoding,
    /// An encoded `/`, `\` or NUL under `escaped_slashes = "reject"` (or a NUL to decode).
    EscapedSlash,
    /// A `..` segment that would climb above `/`.
    AboveRoot,
    /// Not an origin-form path (neither `/...` nor `*`).
    NotAbsolute,
}

impl PathRefusal {
    /// The reason as the access log names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PathRefusal::BadEncoding => "path_bad_encoding",
            PathRefusal::EscapedSlash => "path_escaped_slash",
            PathRefusal::AboveRoot => "path_above_root",
            PathRefusal::NotAbsolute => "path_not_absolute",
        }
    }
}

/// `path` in normal form under `policy`: `Ok(None)` when it already is (the common case, no
/// allocation), `Ok(Some(normal))` when it was spelled another way, `Err` when it is refused.
pub(crate) fn normalize(path: &str, policy: &PathPolicy) -> Result<Option<String>, PathRefusal> {
    if path == "*" {
        return Ok(None);
    }
    if !path.starts_with('/') {
        return Err(PathRefusal::NotAbsolute);
    }
    if is_normal(path.as_bytes(), policy.merge_slashes) {
        return Ok(None);
    }
    let decoded = decode(path.as_bytes(), policy.escaped_slashes)?;
    let normal = remove_dot_segments(&decoded, policy.merge_slashes)?;
    // UTF-8 in (an `http::Uri`'s path is a `str`), UTF-8 out: every byte decoded is ASCII
    // (unreserved, `/` or `\`), every other byte is copied as it came.
    let normal = String::from_utf8(normal).map_err(|_| PathRefusal::BadEncoding)?;
    Ok((normal != path).then_some(normal))
}

/// One scan for what can change a path: a `%`, a `.` opening a segment, an empty segment
/// where slashes merge. A path without any is its own normal form.
fn is_normal(path: &[u8], merge_slashes: bool) -> bool {
    let mut prev = 0u8;
    for &b in path {
        match b {
            b'%' => return false,
            b'.' if prev == b'/' => return false,
            b'/' if prev == b'/' && merge_slashes => return false,
            _ => {}
        }
        prev = b;
    }
    true
}

/// RFC 3986 §2.3: the characters whose percent-encoding means the same as the character.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// Percent-decoding as §6.2.2.2 allows: unreserved characters decoded, other encodings kept
/// upper-cased; the encoded separators as `action` says.
fn decode(path: &[u8], action: EscapedSlashes) -> Result<Vec<u8>, PathRefusal> {
    const UPPER: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let (Some(hi), Some(lo)) = (
            path.get(i + 1).copied().and_then(hex),
            path.get(i + 2).copied().and_then(hex),
        ) else {
            return Err(PathRefusal::BadEncoding);
        };
        let v = (hi << 4) | lo;
        i += 3;
        let separator = matches!(v, b'/' | b'\\' | 0);
        match action {
            _ if is_unreserved(v) => out.push(v),
            EscapedSlashes::Reject if separator => return Err(PathRefusal::EscapedSlash),
            EscapedSlashes::Decode if v == 0 => return Err(PathRefusal::EscapedSlash),
            EscapedSlashes::Decode if separator => out.push(v),
            _ => out.extend_from_slice(&[b'%', UPPER[usize::from(hi)], UPPER[usize::from(lo)]]),
        }
    }
    Ok(out)
}

/// RFC 3986 §5.2.4 over the segments of `path` (which starts with `/`), empty segments
/// dropped where slashes merge; a `..` with nothing left to remove is refused rather than
/// ignored, so that a path which tried to leave the root never reaches an origin that might
/// resolve it differently.
fn remove_dot_segments(path: &[u8], merge_slashes: bool) -> Result<Vec<u8>, PathRefusal> {
    let mut kept: Vec<&[u8]> = Vec::new();
    let segments: Vec<&[u8]> = path[1..].split(|&b| b == b'/').collect();
    let last = segments.len() - 1;
    // A path ending in a dot segment names a directory: `/a/b/..` is `/a/`.
    let mut trailing_slash = false;
    for (i, seg) in segments.into_iter().enumerate() {
        trailing_slash = false;
        match seg {
            b"." => trailing_slash = true,
            b".." => {
                kept.pop().ok_or(PathRefusal::AboveRoot)?;
                trailing_slash = true;
            }
            b"" if merge_slashes && i != last => {}
            _ => kept.push(seg),
        }
    }
    if trailing_slash {
        kept.push(b"");
    }
    let mut out = Vec::with_capacity(path.len());
    for seg in &kept {
        out.push(b'/');
        out.extend_from_slice(seg);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(out)
}

/// The request target as the client sent it, kept on a request whose path normalization
/// changed, for a route with `forward_path = "original"`: sent upstream only while the
/// request's target is still the normalized one (a script that set another URI wins).
#[derive(Clone)]
pub(crate) struct OriginalTarget {
    pub(crate) original: PathAndQuery,
    pub(crate) normalized: PathAndQuery,
}

/// The client's own target, where normalization changed it and nothing changed it since
/// (`uri` and `extensions` are the request's): what a route with `forward_path =
/// "original"` sends upstream, and what the WAF inspects.
pub(crate) fn original_target<'a>(
    uri: &Uri,
    extensions: &'a http::Extensions,
) -> Option<&'a PathAndQuery> {
    let kept = extensions.get::<OriginalTarget>()?;
    (uri.path_and_query() == Some(&kept.normalized)).then_some(&kept.original)
}

/// `uri` with its path replaced by `path` (the query kept), and what it was, for
/// [`OriginalTarget`]; `None` where the result is no valid target.
pub(crate) fn with_path(uri: &Uri, path: &str) -> Option<(Uri, OriginalTarget)> {
    let original = uri.path_and_query()?.clone();
    let target = match original.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let normalized = PathAndQuery::try_from(target).ok()?;
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(normalized.clone());
    let uri = Uri::from_parts(parts).ok()?;
    Some((
        uri,
        OriginalTarget {
            original,
            normalized,
        },
    ))
}

#[cfg(test)]
mod tests;

/// The invariants a fuzzer checks (`crates/proxy/fuzz`, target `path`), for a path and bytes
/// that choose how to spell it again, under each policy:
/// - the normal form is its own normal form (idempotent);
/// - it starts with `/`, has no `.` or `..` segment, no encoded unreserved character, no
///   lower-case hex, and no empty segment but the last where slashes merge;
/// - any other spelling of it (unreserved characters encoded, hex in lower case, `.` and
///   `x/..` segments inserted, slashes doubled) has the same normal form, so no spelling can
///   route differently from another.
///
/// Panics when one does not hold.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_invariants(path: &str, spell: &[u8]) {
    for merge_slashes in [true, false] {
        for escaped_slashes in [
            EscapedSlashes::Reject,
            EscapedSlashes::Keep,
            EscapedSlashes::Decode,
        ] {
            let policy = PathPolicy {
                merge_slashes,
                escaped_slashes,
            };
            let Ok(normal) = normalize(path, &policy) else {
                continue;
            };
            let normal = normal.unwrap_or_else(|| path.to_owned());
            if normal == "*" {
                continue;
            }
            assert_eq!(
                normalize(&normal, &policy),
                Ok(None),
                "not idempotent: {path:?}"
            );
            assert_normal(&normal, merge_slashes);
            let other = respell(&normal, spell, merge_slashes);
            let again = normalize(&other, &policy)
                .unwrap_or_else(|e| panic!("{other:?} (from {normal:?}) refused: {e:?}"));
            assert_eq!(
                again.as_deref().unwrap_or(&other),
                normal,
                "{other:?} and {normal:?} are one path"
            );
        }
    }
}

#[cfg(any(test, feature = "fuzzing"))]
fn assert_normal(normal: &str, merge_slashes: bool) {
    assert!(normal.starts_with('/'), "{normal:?}");
    let segments: Vec<&str> = normal[1..].split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        assert!(*seg != "." && *seg != "..", "dot segment in {normal:?}");
        assert!(
            !merge_slashes || !seg.is_empty() || i == segments.len() - 1,
            "empty segment in {normal:?}"
        );
    }
    let b = normal.as_bytes();
    for (i, _) in normal.match_indices('%') {
        let v = u8::from_str_radix(&normal[i + 1..i + 3], 16).expect("two hex digits");
        assert!(!is_unreserved(v), "encoded unreserved in {normal:?}");
        assert!(
            !b[i + 1..i + 3].iter().any(u8::is_ascii_lowercase),
            "lower-case hex in {normal:?}"
        );
    }
}

#[cfg(any(test, feature = "fuzzing"))]
/// Another spelling of `normal` (a path in normal form), chosen by `spell`'s bytes.
fn respell(normal: &str, spell: &[u8], merge_slashes: bool) -> String {
    let mut choices = spell.iter().copied().cycle();
    let mut next = || {
        if spell.is_empty() {
            0
        } else {
            choices.next().unwrap_or(0)
        }
    };
    let mut out: Vec<u8> = Vec::with_capacity(normal.len() * 2);
    let bytes = normal.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            // Lower-case the hex of a kept encoding now and then.
            let code = &bytes[i..i + 3];
            if next() % 2 == 0 {
                out.extend(code.iter().map(u8::to_ascii_lowercase));
            } else {
                out.extend_from_slice(code);
            }
            i += 3;
            continue;
        }
        if b == b'/' {
            out.push(b'/');
            match next() % 8 {
                0 => out.extend_from_slice(b"./"),
                1 => out.extend_from_slice(b"zz/../"),
                2 if merge_slashes => out.push(b'/'),
                3 => out.extend_from_slice(b"%2e/"),
                _ => {}
            }
        } else if is_unreserved(b) && next() % 3 == 0 {
            out.extend_from_slice(format!("%{b:02x}").as_bytes());
        } else {
            out.push(b);
        }
        i += 1;
    }
    String::from_utf8(out).expect("bytes of a str, with ASCII inserted between characters")
}
