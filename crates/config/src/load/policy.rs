//! Edge policy keys: CIDR lists, rewrites, redirects, fixed responses, header edits.

use super::Cx;
use crate::policy::*;
use crate::raw::*;
use std::collections::BTreeMap;
use toml::Spanned;

impl Cx<'_> {
    /// A count that must be at least 1 when given.
    pub(super) fn positive(&mut self, v: Option<&Spanned<u32>>, what: &str) -> Option<u32> {
        let v = v?;
        if *v.get_ref() == 0 {
            self.err_at(
                v,
                format!("{what} = 0 would refuse everything"),
                "use 1 or more, or remove it for no limit",
            );
            return None;
        }
        Some(*v.get_ref())
    }

    /// A list of CIDRs (a bare address is a /32 or /128).
    pub(super) fn cidrs(&mut self, list: Option<&Vec<Spanned<String>>>, what: &str) -> Vec<IpNet> {
        let mut out = Vec::new();
        for item in list.into_iter().flatten() {
            let text = item.get_ref().trim();
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from));
            match net {
                Ok(n) => out.push(n.trunc()),
                Err(_) => self.err_at(
                    item,
                    format!("{what}: `{text}` is not an address or CIDR"),
                    "write it as \"10.0.0.0/8\", \"192.0.2.7\" or \"2001:db8::/32\"",
                ),
            }
        }
        out
    }

    pub(super) fn acl(
        &mut self,
        allow: Option<&Vec<Spanned<String>>>,
        deny: Option<&Vec<Spanned<String>>>,
        what: &str,
    ) -> Acl {
        Acl {
            allow: self.cidrs(allow, &format!("{what}: allow")),
            deny: self.cidrs(deny, &format!("{what}: deny")),
        }
    }

    fn template(&mut self, value: &Spanned<String>, what: &str) -> Template {
        Template::parse(value.get_ref()).unwrap_or_else(|e| {
            let names: Vec<String> = Var::ALL.iter().map(|(n, _)| format!("${n}")).collect();
            self.err_at(
                value,
                format!("{what}: {e}"),
                format!("use {} (write $$ for a dollar sign)", names.join(", ")),
            );
            Template(Vec::new())
        })
    }

    pub(super) fn rewrite(&mut self, route: &str, raw: &RawRoute) -> Option<Rewrite> {
        if let (Some(_), Some(r)) = (&raw.strip_prefix, &raw.rewrite) {
            self.err_at(
                r,
                format!("route `{route}` sets both strip_prefix and rewrite"),
                "keep one: rewrite = { regex = \"^/prefix(/.*)$\", replacement = \"$1\" } does both",
            );
        }
        if let Some(p) = &raw.strip_prefix {
            let prefix = p.get_ref();
            if !prefix.starts_with('/') || prefix.len() < 2 {
                self.err_at(
                    p,
                    format!("route `{route}`: strip_prefix `{prefix}` is not a path prefix"),
                    "write it from the root, such as \"/api\"",
                );
                return None;
            }
            return Some(Rewrite::StripPrefix(
                prefix.trim_end_matches('/').to_string(),
            ));
        }
        let r = raw.rewrite.as_ref()?.get_ref();
        let regex = match regex::Regex::new(r.regex.get_ref()) {
            Ok(re) => re,
            Err(e) => {
                self.err_at(
                    &r.regex,
                    format!("route `{route}`: rewrite regex does not compile: {e}"),
                    "fix the regular expression (Rust regex syntax)",
                );
                return None;
            }
        };
        let replacement = r.replacement.get_ref();
        if !replacement.starts_with('/') && !replacement.starts_with('$') {
            self.err_at(
                &r.replacement,
                format!("route `{route}`: rewrite replacement `{replacement}` is not a path"),
                "start it with '/', or with a capture that holds one, such as \"$1\"",
            );
        }
        Some(Rewrite::Regex {
            regex,
            replacement: replacement.clone(),
        })
    }

    pub(super) fn answer(&mut self, route: &str, raw: &RawRoute) -> Option<Answer> {
        if let (Some(_), Some(r)) = (&raw.redirect, &raw.respond) {
            self.err_at(
                r,
                format!("route `{route}` sets both redirect and respond"),
                "keep one",
            );
        }
        if let Some(r) = &raw.redirect {
            let r = r.get_ref();
            let status = r.status.as_ref().map_or(302, |s| *s.get_ref());
            if ![301, 302, 303, 307, 308].contains(&status) {
                self.err_at(
                    r.status.as_ref().expect("only a given status can be wrong"),
                    format!("route `{route}`: redirect status {status} is not a redirect"),
                    "use 301 or 308 (permanent), 302, 303 or 307 (temporary)",
                );
            }
            let location =
                self.template(&r.location, &format!("route `{route}`: redirect location"));
            return Some(Answer::Redirect { status, location });
        }
        let r = raw.respond.as_ref()?.get_ref();
        let status = r.status.as_ref().map_or(200, |s| *s.get_ref());
        if !(200..=599).contains(&status) {
            self.err_at(
                r.status.as_ref().expect("only a given status can be wrong"),
                format!("route `{route}`: respond status {status} is out of range"),
                "use a status from 200 to 599 (redirects: use redirect = { ... })",
            );
        }
        let body = match &r.body {
            Some(b) => self.template(b, &format!("route `{route}`: respond body")),
            None => Template(Vec::new()),
        };
        let content_type = match &r.content_type {
            None => http::HeaderValue::from_static("text/plain; charset=utf-8"),
            Some(c) => http::HeaderValue::from_str(c.get_ref()).unwrap_or_else(|_| {
                self.err_at(
                    c,
                    format!("route `{route}`: content_type is not a header value"),
                    "use printable ASCII, such as \"application/json\"",
                );
                http::HeaderValue::from_static("text/plain; charset=utf-8")
            }),
        };
        Some(Answer::Respond {
            status,
            body,
            content_type,
        })
    }

    pub(super) fn header_edits(
        &mut self,
        raw: Option<&Spanned<RawHeaderEdits>>,
        what: &str,
    ) -> HeaderEdits {
        let Some(raw) = raw else {
            return HeaderEdits::default();
        };
        let r = raw.get_ref();
        let mut out = HeaderEdits::default();
        let named = |cx: &mut Self, map: &Option<BTreeMap<String, Spanned<String>>>, kind: &str| {
            let mut v = Vec::new();
            for (k, value) in map.iter().flatten() {
                match http::HeaderName::from_bytes(k.as_bytes()) {
                    Ok(n) if !hop_by_hop(&n) => {
                        v.push((n, cx.template(value, &format!("{what} {kind} `{k}`"))))
                    }
                    Ok(_) => cx.err_at(
                        value,
                        format!("{what}: `{k}` is a hop-by-hop header, which Sluice manages"),
                        "remove it; connection headers are per hop",
                    ),
                    Err(_) => cx.err_at(
                        value,
                        format!("{what}: `{k}` is not a header name"),
                        "use letters, digits and '-'",
                    ),
                }
            }
            v
        };
        out.set = named(self, &r.set, "set");
        out.add = named(self, &r.add, "add");
        for k in r.remove.iter().flatten() {
            match http::HeaderName::from_bytes(k.get_ref().as_bytes()) {
                Ok(n) => out.remove.push(n),
                Err(_) => self.err_at(
                    k,
                    format!("{what}: `{}` is not a header name", k.get_ref()),
                    "use letters, digits and '-'",
                ),
            }
        }
        out
    }
}

fn hop_by_hop(n: &http::HeaderName) -> bool {
    use http::header::*;
    [
        CONNECTION,
        TRANSFER_ENCODING,
        UPGRADE,
        TE,
        TRAILER,
        PROXY_AUTHENTICATE,
    ]
    .contains(n)
        || n.as_str() == "keep-alive"
        || n.as_str() == "proxy-connection"
}

impl Cx<'_> {
    /// A `header = { name = value }` match (`[[route.split]]`, `[[route.mirror]]`): each pair
    /// as a header name and value, or an error at the value.
    pub(super) fn header_match(
        &mut self,
        route: &str,
        what: &str,
        raw: Option<&std::collections::BTreeMap<String, toml::Spanned<String>>>,
    ) -> Vec<(http::HeaderName, http::HeaderValue)> {
        let mut headers = Vec::new();
        for (k, v) in raw.into_iter().flatten() {
            match (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(v.get_ref()),
            ) {
                (Ok(n), Ok(v)) => headers.push((n, v)),
                _ => self.err_at(
                    v,
                    format!(
                        "route `{route}`: {what} header `{k}` is not a valid header name and value"
                    ),
                    "use a header name of letters, digits and '-' and a printable value",
                ),
            }
        }
        headers
    }
}
