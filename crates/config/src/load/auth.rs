//! `[route.auth]` and `[route.cors]`. Files are checked to exist here; their contents (keys,
//! htpasswd entries) are parsed by `sluice-auth`, which reports a broken line by file and line.

use super::Cx;
use crate::auth::*;
use crate::raw::*;
use crate::{HashKey, JWT_ALGORITHMS};
use http::HeaderName;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// `[route.auth]` (or an MQTT listener's `[listener.mqtt.auth]`); `None` when it has a
    /// mistake (reported). `route` names its owner in errors (``route `api` ``); `name` is
    /// the default realm.
    pub(super) fn auth(
        &mut self,
        route: &str,
        name: &str,
        raw: &Spanned<RawAuth>,
    ) -> Option<RouteAuth> {
        let r = raw.get_ref();
        let before = self.errors.len();
        let jwt = r.jwt.as_ref().map(|j| Arc::new(self.jwt(route, j)));
        let keys = r.keys.as_ref().map(|k| Arc::new(self.keys(route, k)));
        let basic = r.basic.as_ref().map(|b| {
            let b = b.get_ref();
            Arc::new(BasicAuth {
                htpasswd: self.existing_file(route, "basic htpasswd", &b.htpasswd),
                cache_size: b
                    .cache_size
                    .as_ref()
                    .map_or(1000, |n| *n.get_ref() as usize),
            })
        });
        let forward = r.forward.as_ref().map(|f| Arc::new(self.forward(route, f)));
        let cert = r.cert.as_ref().map(|c| Arc::new(self.cert_auth(route, c)));
        if cert.is_none() && jwt.is_none() && keys.is_none() && basic.is_none() && forward.is_none()
        {
            self.err_at(
                raw,
                format!("{route}: [route.auth] names no method"),
                "add cert = {…}, jwt = {…}, keys = {…}, basic = {…} or forward = {…}",
            );
        }
        let all = self
            .choice(
                r.require.as_ref(),
                "require",
                &[("any", false), ("all", true)],
            )
            .unwrap_or(false);
        let subject_header = match &r.subject_header {
            None => Some(HeaderName::from_static("x-auth-subject")),
            Some(h) if h.get_ref().is_empty() => None,
            Some(h) => self.header_name(route, h),
        };
        let realm = r
            .realm
            .as_ref()
            .map_or_else(|| name.to_owned(), |r| r.get_ref().clone());
        if (realm.contains(['"', '\\']) || realm.chars().any(char::is_control))
            && let Some(at) = &r.realm
        {
            self.err_at(
                at,
                format!("{route}: realm may not hold quotes, backslashes or control characters"),
                "use plain text",
            );
        }
        (self.errors.len() == before).then_some(RouteAuth {
            cert,
            jwt,
            keys,
            basic,
            forward,
            all,
            subject_header,
            realm,
            forward_credential: r.forward_credential.as_ref().is_some_and(|f| *f.get_ref()),
        })
    }

    /// `[auth]`: the password-hashing pool's size.
    pub(super) fn auth_settings(&mut self, raw: Option<&RawAuthSettings>) -> AuthSettings {
        let mut s = AuthSettings::default();
        let Some(raw) = raw else {
            return s;
        };
        if let Some(t) = &raw.hash_threads {
            match std::num::NonZeroUsize::new(*t.get_ref()) {
                Some(n) => s.hash_threads = n,
                None => self.err_at(
                    t,
                    "[auth] hash_threads = 0: no password could be checked",
                    "give it at least 1 (default: one per core)",
                ),
            }
        }
        if let Some(q) = &raw.hash_queue {
            s.hash_queue = *q.get_ref();
        }
        s
    }

    /// `[route.auth] jwt`: bearer tokens checked against the issuer's public keys.
    fn jwt(&mut self, route: &str, raw: &Spanned<RawJwt>) -> JwtAuth {
        let r = raw.get_ref();
        let jwks_url = r.jwks_url.as_ref().and_then(|u| self.http_url(route, u));
        let keys_file = r
            .keys
            .as_ref()
            .map(|k| self.existing_file(route, "jwt keys", k));
        if jwks_url.is_some() == keys_file.is_some() {
            self.err_at(
                raw,
                format!("{route}: jwt needs exactly one of jwks_url and keys"),
                "give the issuer's JWKS URL, or a file of its public keys (JWKS or PEM)",
            );
        }
        let jwks_ca = r.jwks_ca.as_ref().and_then(|c| self.pem_file(route, c));
        let algorithms = self.jwt_algorithms(route, r);
        let mut claims_to_headers = Vec::new();
        for (claim, header) in r.claims_to_headers.iter().flatten() {
            if let Some(h) = self.header_name(route, header) {
                claims_to_headers.push((claim.clone(), h));
            }
        }
        let token_from = self.jwt_token_from(route, r);
        JwtAuth {
            jwks_url,
            jwks_ca,
            keys_file,
            issuer: r.issuer.as_ref().map(|i| i.get_ref().clone()),
            audiences: r
                .audiences
                .iter()
                .flatten()
                .map(|a| a.get_ref().clone())
                .collect(),
            algorithms,
            claims_to_headers,
            leeway: self
                .duration_or_zero(r.leeway.as_ref())
                .unwrap_or(Duration::from_secs(60)),
            token_from,
            cache_size: r
                .cache_size
                .as_ref()
                .map_or(10_000, |n| *n.get_ref() as usize),
            required_claims: self.required_claims(route, r),
            max_token_size: self.max_token_size(route, r),
        }
    }

    /// `jwt.algorithms` (default all of [`JWT_ALGORITHMS`]): the signatures accepted, all
    /// of them public-key ones.
    fn jwt_algorithms(&mut self, route: &str, r: &RawJwt) -> Vec<String> {
        let mut algorithms = Vec::new();
        for a in r.algorithms.iter().flatten() {
            if JWT_ALGORITHMS.contains(&a.get_ref().as_str()) {
                algorithms.push(a.get_ref().clone());
            } else {
                self.err_at(
                    a,
                    format!("{route}: jwt algorithm `{}` is not supported", a.get_ref()),
                    format!(
                        "use some of {} (HMAC and `none` are refused: a public key is not a secret)",
                        JWT_ALGORITHMS.join(", ")
                    ),
                );
            }
        }
        if r.algorithms.is_none() {
            algorithms = JWT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect();
        }
        algorithms
    }

    /// `jwt.token_from` (default the Authorization header's bearer token): where the token
    /// is read.
    fn jwt_token_from(&mut self, route: &str, r: &RawJwt) -> TokenSource {
        match &r.token_from {
            None => TokenSource::Bearer,
            Some(t) if t.get_ref() == "header" => TokenSource::Bearer,
            Some(t) => match super::upstream::hash_key(t.get_ref()) {
                Some(k @ (HashKey::Header(_) | HashKey::Cookie(_) | HashKey::Query(_))) => {
                    TokenSource::Part(k)
                }
                _ => {
                    self.err_at(
                        t,
                        format!("{route}: token_from `{}` is not a place", t.get_ref()),
                        "use \"header\" (Authorization: Bearer), \"header:NAME\", \"cookie:NAME\" or \"query:NAME\"",
                    );
                    TokenSource::Bearer
                }
            },
        }
    }

    /// `jwt.require`: claim names, none empty.
    fn required_claims(&mut self, route: &str, r: &RawJwt) -> Vec<String> {
        let mut names = Vec::new();
        for c in r.require.iter().flatten() {
            if c.get_ref().is_empty() {
                self.err_at(
                    c,
                    format!("{route}: jwt.require names an empty claim"),
                    "list claim names such as \"exp\", \"sub\"",
                );
            } else {
                names.push(c.get_ref().clone());
            }
        }
        names
    }

    /// `jwt.max_token_size`: 8 KiB by default (NGINX's header buffer), 256 bytes to 64 KiB.
    fn max_token_size(&mut self, route: &str, r: &RawJwt) -> usize {
        let size = self.size(r.max_token_size.as_ref()).unwrap_or(8192);
        if let Some(v) = &r.max_token_size
            && !(256..=64 * 1024).contains(&size)
        {
            self.err_at(
                v,
                format!("{route}: jwt.max_token_size must be between 256 and 64k"),
                "the default, 8k, holds the tokens identity providers issue",
            );
        }
        usize::try_from(size).unwrap_or(8192)
    }

    fn cert_auth(&mut self, route: &str, raw: &Spanned<RawCertAuth>) -> CertAuth {
        let r = raw.get_ref();
        let mut sans = Vec::new();
        for s in r.sans.iter().flatten() {
            match s.get_ref().split_once(':') {
                Some(("DNS" | "URI" | "email", v)) if !v.is_empty() => {
                    sans.push(s.get_ref().clone())
                }
                _ => self.err_at(
                    s,
                    format!("{route}: `{}` is not a subjectAltName", s.get_ref()),
                    "write DNS:name, URI:spiffe://… or email:someone@example.com",
                ),
            }
        }
        CertAuth {
            subjects: r
                .subjects
                .iter()
                .flatten()
                .map(|s| s.get_ref().clone())
                .collect(),
            sans,
        }
    }

    fn keys(&mut self, route: &str, raw: &Spanned<RawKeys>) -> KeyAuth {
        let r = raw.get_ref();
        KeyAuth {
            file: self.existing_file(route, "keys file", &r.file),
            header: r
                .header
                .as_ref()
                .and_then(|h| self.header_name(route, h))
                .unwrap_or(HeaderName::from_static("x-api-key")),
            query: r.query.as_ref().map(|q| q.get_ref().clone()),
        }
    }

    fn forward(&mut self, route: &str, raw: &Spanned<RawForward>) -> ForwardAuth {
        let r = raw.get_ref();
        let url = self.http_url(route, &r.url).unwrap_or_default();
        let ca = r.ca.as_ref().and_then(|c| self.pem_file(route, c));
        let names = |cx: &mut Self,
                     list: &Option<Vec<SpannedStr>>,
                     default: &[&'static str]|
         -> Vec<HeaderName> {
            match list {
                None => default.iter().map(|n| HeaderName::from_static(n)).collect(),
                Some(list) => list
                    .iter()
                    .filter_map(|h| cx.header_name(route, h))
                    .collect(),
            }
        };
        let request_headers = names(self, &r.request_headers, &["authorization", "cookie"]);
        let upstream_headers = names(self, &r.upstream_headers, &[]);
        let client_headers = names(
            self,
            &r.client_headers,
            &["www-authenticate", "location", "set-cookie"],
        );
        let cache_key = match &r.cache_key {
            None => request_headers.clone(),
            some => names(self, some, &[]),
        };
        let allow_on_error = self
            .choice(
                r.on_error.as_ref(),
                "on_error",
                &[("deny", false), ("allow", true)],
            )
            .unwrap_or(false);
        ForwardAuth {
            subject: r
                .subject
                .as_ref()
                .and_then(|h| self.header_name(route, h))
                .unwrap_or(HeaderName::from_static("x-auth-subject")),
            url,
            ca,
            request_headers,
            upstream_headers,
            client_headers,
            timeout: self
                .duration(r.timeout.as_ref())
                .unwrap_or(Duration::from_secs(2)),
            allow_on_error,
            cache_ttl: self.duration(r.cache_ttl.as_ref()),
            cache_key,
        }
    }

    /// `[route.cors]`; `None` when it has a mistake (reported). `route` names its owner in
    /// errors (``route `api` ``).
    pub(super) fn cors(&mut self, route: &str, raw: &Spanned<RawCors>) -> Option<Cors> {
        let r = raw.get_ref();
        let before = self.errors.len();
        let mut origins = Vec::new();
        let mut any_origin = false;
        for o in &r.origins {
            match origin_pattern(o.get_ref()) {
                Some(None) => any_origin = true,
                Some(Some(p)) => origins.push(p),
                None => self.err_at(
                    o,
                    format!("{route}: CORS origin `{}` is not an origin", o.get_ref()),
                    "write scheme://host[:port] (\"https://app.example.com\"), with \"*.\" before a domain for its subdomains, or \"*\"",
                ),
            }
        }
        let credentials = r.credentials.as_ref().is_some_and(|c| *c.get_ref());
        if credentials && any_origin {
            self.err_at(
                raw,
                format!("{route}: CORS credentials = true with origin \"*\""),
                "browsers refuse credentials with a wildcard origin: list the origins",
            );
        }
        let mut methods = Vec::new();
        match &r.methods {
            None => methods.extend([http::Method::GET, http::Method::HEAD, http::Method::POST]),
            Some(list) => {
                for m in list {
                    match http::Method::from_bytes(m.get_ref().as_bytes()) {
                        Ok(method) => methods.push(method),
                        Err(_) => self.err_at(
                            m,
                            format!("{route}: `{}` is not a method", m.get_ref()),
                            "use methods such as \"GET\", \"PUT\"",
                        ),
                    }
                }
            }
        }
        let headers = match &r.headers {
            Some(list) if list.iter().any(|h| h.get_ref() == "*") => None,
            Some(list) => Some(
                list.iter()
                    .filter_map(|h| self.header_name(route, h))
                    .collect(),
            ),
            None => Some(Vec::new()),
        };
        let expose_headers = r
            .expose_headers
            .iter()
            .flatten()
            .filter_map(|h| self.header_name(route, h))
            .collect();
        let max_age = self
            .duration_or_zero(r.max_age.as_ref())
            .unwrap_or(Duration::from_secs(600));
        (self.errors.len() == before).then_some(Cors {
            origins,
            any_origin,
            methods,
            headers,
            expose_headers,
            credentials,
            max_age,
        })
    }

    fn header_name(&mut self, route: &str, h: &SpannedStr) -> Option<HeaderName> {
        match HeaderName::from_bytes(h.get_ref().as_bytes()) {
            Ok(n) => Some(n),
            Err(_) => {
                self.err_at(
                    h,
                    format!("{route}: `{}` is not a header name", h.get_ref()),
                    "use letters, digits and '-'",
                );
                None
            }
        }
    }

    fn http_url(&mut self, route: &str, u: &SpannedStr) -> Option<http::Uri> {
        match u.get_ref().parse::<http::Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https"))
                    && uri.host().is_some_and(|h| !h.is_empty()) =>
            {
                Some(uri)
            }
            _ => {
                self.err_at(
                    u,
                    format!(
                        "{route}: `{}` is not an http:// or https:// URL",
                        u.get_ref()
                    ),
                    "write it whole, such as \"https://idp.example.com/.well-known/jwks.json\"",
                );
                None
            }
        }
    }

    /// `p` resolved, reported when it cannot be read.
    fn existing_file(&mut self, route: &str, what: &str, p: &SpannedStr) -> PathBuf {
        let path = self.path(p.get_ref());
        if let Err(e) = std::fs::metadata(&path) {
            self.err_at(
                p,
                format!("{route}: {what} {}: {e}", path.display()),
                "check the path (relative paths start at the configuration file's directory)",
            );
        }
        path
    }

    fn pem_file(&mut self, route: &str, p: &SpannedStr) -> Option<Vec<u8>> {
        let path = self.path(p.get_ref());
        match self.read_file(&path) {
            Ok(pem) if boring::x509::X509::stack_from_pem(&pem).is_ok_and(|c| !c.is_empty()) => {
                Some(pem)
            }
            Ok(_) => {
                self.err_at(
                    p,
                    format!("{route}: {} holds no PEM certificate", path.display()),
                    "give a file of PEM CA certificates",
                );
                None
            }
            Err(e) => {
                self.err_at(
                    p,
                    format!("{route}: cannot read {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                None
            }
        }
    }
}

/// `scheme://host[:port]` as an [`OriginPattern`]; `Some(None)` for `*`; `None` when it is
/// not an origin.
fn origin_pattern(text: &str) -> Option<Option<OriginPattern>> {
    if text == "*" {
        return Some(None);
    }
    let (scheme, rest) = text.split_once("://")?;
    if !matches!(scheme, "http" | "https") || rest.contains('/') || rest.is_empty() {
        return None;
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            (h, format!(":{p}"))
        }
        Some(_) => return None,
        None => (rest, String::new()),
    };
    let (host, wildcard) = match host.strip_prefix("*.") {
        Some(h) => (h, true),
        None => (host, false),
    };
    let ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    ok.then(|| {
        Some(OriginPattern {
            scheme: format!("{scheme}://"),
            host: host.to_ascii_lowercase(),
            wildcard,
            port,
        })
    })
}
