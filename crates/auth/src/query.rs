//! Credentials in a query string (`keys = { query = "api_key" }`, `jwt.token_from =
//! "query:NAME"`): masked in what the gateway writes down (the access log, the request log,
//! shipped lines, traces) and removed from the target sent upstream unless the route says
//! otherwise (`forward_credential`). A credential in a URL is written down by every log on
//! its way; the gateway's are the ones it can keep clean.
//!
//! Arguments are matched by their raw name, as authentication reads them
//! (`name=value` pairs separated by `&`); every occurrence of a name is treated, not only the
//! first one authentication read.

/// What a masked value reads as.
pub const MASK: &str = "REDACTED";

/// `target` (a path and query, as a log keeps it) with the value of every argument named in
/// `names` replaced by [`MASK`]; `None` when it has none of them (nothing to change).
pub fn mask<S: AsRef<str>>(target: &str, names: &[S]) -> Option<String> {
    let (path, query) = target.split_once('?')?;
    if !has_any(query, names) {
        return None;
    }
    let mut out = String::with_capacity(target.len());
    out.push_str(path);
    out.push('?');
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match pair.split_once('=') {
            Some((k, _)) if is_named(k, names) => {
                out.push_str(k);
                out.push('=');
                out.push_str(MASK);
            }
            _ => out.push_str(pair),
        }
    }
    Some(out)
}

/// `query` without the arguments named in `names`, the others in their order; `None` when
/// it has none of them. An empty result means no query is left.
pub fn strip<S: AsRef<str>>(query: &str, names: &[S]) -> Option<String> {
    if !has_any(query, names) {
        return None;
    }
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !is_named(pair.split_once('=').map_or(*pair, |(k, _)| k), names))
        .collect();
    Some(kept.join("&"))
}

fn has_any<S: AsRef<str>>(query: &str, names: &[S]) -> bool {
    !names.is_empty()
        && query
            .split('&')
            .any(|pair| is_named(pair.split_once('=').map_or(pair, |(k, _)| k), names))
}

fn is_named<S: AsRef<str>>(key: &str, names: &[S]) -> bool {
    names.iter().any(|n| n.as_ref() == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_masked_in_place_and_every_copy_is() {
        let names = ["api_key", "token"];
        assert_eq!(
            mask("/v1/items?a=1&api_key=s3cret&b=2", &names).as_deref(),
            Some("/v1/items?a=1&api_key=REDACTED&b=2")
        );
        assert_eq!(
            mask("/x?api_key=one&api_key=two&token=t", &names).as_deref(),
            Some("/x?api_key=REDACTED&api_key=REDACTED&token=REDACTED")
        );
        assert_eq!(
            mask("/x?api_keys=1&xapi_key=2", &names),
            None,
            "names, not prefixes"
        );
        assert_eq!(mask("/x", &names), None);
        assert_eq!(mask("/x?api_key=1", &[] as &[&str]), None);
        // The path is never touched, even when it looks like a query.
        assert_eq!(
            mask("/api_key=1/y?api_key=2", &names).as_deref(),
            Some("/api_key=1/y?api_key=REDACTED")
        );
    }

    #[test]
    fn credentials_are_removed_and_the_rest_kept_in_order() {
        let names = ["api_key"];
        assert_eq!(
            strip("a=1&api_key=s&b=2&api_key", &names).as_deref(),
            Some("a=1&b=2")
        );
        assert_eq!(strip("api_key=s", &names).as_deref(), Some(""));
        assert_eq!(strip("a=1&b=2", &names), None);
    }
}
