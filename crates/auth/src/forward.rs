//! `forward = {...}`: NGINX's `auth_request`, APISIX's `forward-auth`, Envoy's HTTP
//! `ext_authz`. A subrequest without a body goes to the authorization service with the
//! client's method, the chosen request headers and where the request was going
//! (`X-Forwarded-Method`, `-Proto`, `-Host`, `-Uri`, `-For`, and NGINX's `X-Original-URI`).
//! A 2xx lets the request through with the answer's chosen headers; 401 and 403 go back to
//! the client with theirs; anything else (no answer in time, another status) is an error,
//! refused with 500 as NGINX does unless `on_error = "allow"`.

use crate::client::HttpClient;
use crate::ttl_cache::TtlCache;
use crate::ttl_cache::unix_now;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use sluice_config::ForwardAuth;
use std::sync::Arc;

/// What the service decided.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    /// 2xx: the subject the answer named, and its `upstream_headers`.
    Allow(Option<Arc<str>>, Arc<[(HeaderName, HeaderValue)]>),
    /// 401 or 403, with the answer's `client_headers`.
    Deny(StatusCode, Arc<[(HeaderName, HeaderValue)]>),
    /// No usable answer.
    Error(String),
}

/// What the subrequest says about the client's request.
pub(crate) struct Original<'a> {
    pub(crate) method: &'a Method,
    pub(crate) uri: &'a Uri,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) host: &'a str,
    pub(crate) https: bool,
    pub(crate) client: std::net::IpAddr,
}

/// One route's forward authentication.
pub(crate) struct Forwarder {
    config: Arc<ForwardAuth>,
    client: HttpClient,
    cache: Option<TtlCache<Decision>>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("url", &self.config.url)
            .finish()
    }
}

impl Forwarder {
    pub(crate) fn new(config: &Arc<ForwardAuth>) -> Result<Self, String> {
        Ok(Forwarder {
            config: config.clone(),
            client: HttpClient::new(config.ca.as_deref())?,
            cache: config.cache_ttl.map(|_| TtlCache::new(10_000)),
        })
    }

    /// The service's decision on `req`, remembered for `cache_ttl` where set (by the
    /// `cache_key` headers' values; errors are never remembered). `true` with it when it
    /// came from the cache.
    pub(crate) async fn decide(&self, req: &Original<'_>) -> (Decision, bool) {
        let key = self.cache.as_ref().map(|_| self.cache_key(req.headers));
        if let (Some(cache), Some(key)) = (&self.cache, &key)
            && let Some(d) = cache.get(key, 0, unix_now())
        {
            return (d, true);
        }
        let decision = self.ask(req).await;
        if let (Some(cache), Some(key), Some(ttl)) = (&self.cache, &key, self.config.cache_ttl)
            && !matches!(decision, Decision::Error(_))
        {
            cache.put(key, decision.clone(), unix_now() + ttl.as_secs().max(1), 0);
        }
        (decision, false)
    }

    /// The cache key: each `cache_key` header's values, separated by bytes no header value
    /// holds.
    fn cache_key(&self, headers: &HeaderMap) -> Vec<u8> {
        let mut key = Vec::new();
        for name in &self.config.cache_key {
            for v in headers.get_all(name) {
                key.extend_from_slice(v.as_bytes());
                key.push(0);
            }
            key.push(b'\n');
        }
        key
    }

    async fn ask(&self, req: &Original<'_>) -> Decision {
        let mut sub = Request::new(Full::new(Bytes::new()));
        *sub.method_mut() = req.method.clone();
        *sub.uri_mut() = self.config.url.clone();
        let h = sub.headers_mut();
        for name in &self.config.request_headers {
            for v in req.headers.get_all(name) {
                h.append(name.clone(), v.clone());
            }
        }
        let pq = req.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(HeaderName::from_static(name), v);
            }
        };
        put("x-forwarded-method", req.method.as_str());
        put(
            "x-forwarded-proto",
            if req.https { "https" } else { "http" },
        );
        put("x-forwarded-host", req.host);
        put("x-forwarded-uri", pq);
        put("x-original-uri", pq);
        put("x-forwarded-for", &req.client.to_string());
        let resp = match self.client.send(sub, self.config.timeout).await {
            Ok(r) => r,
            Err(e) => return Decision::Error(e),
        };
        let copy = |names: &[HeaderName]| -> Arc<[(HeaderName, HeaderValue)]> {
            names
                .iter()
                .flat_map(|n| {
                    resp.headers()
                        .get_all(n)
                        .iter()
                        .map(move |v| (n.clone(), v.clone()))
                })
                .collect()
        };
        match resp.status() {
            s if s.is_success() => {
                let subject = resp
                    .headers()
                    .get(&self.config.subject)
                    .and_then(|v| v.to_str().ok())
                    .map(Arc::from);
                Decision::Allow(subject, copy(&self.config.upstream_headers))
            }
            s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                Decision::Deny(s, copy(&self.config.client_headers))
            }
            s => Decision::Error(format!("the service answered {s}")),
        }
    }
}
