//! Routing of the admin listener and the admin API (`/api/v1/…`).
//!
//! Reads (`/metrics`, `/status`, the dashboard's data, `GET /api/v1/…`) are open to loopback
//! and to `[admin] read_networks`; from elsewhere they need `Authorization: Bearer` with the
//! read token (`read_token_file`) or the write token. The dashboard page itself (`/`) is
//! static and holds no data: anyone who reaches the listener gets it, and it asks for a token
//! for its data. Writes need the token of `[admin] token_file`; without a configured token no
//! write endpoint exists (404 says how to enable them).

use crate::Sources;
use http::{HeaderValue, Method, Request, StatusCode, header};
use hyper::body::Incoming;
use serde_json::{Value, json};
use sluice_control::{EditError, Kind, ReloadError, SharedObjects};
use std::net::SocketAddr;

use crate::reply::{Reply, error, json_body, json_reply, not_allowed, reply};

pub(crate) async fn respond(
    s: &Sources,
    history: &crate::stats::History,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Reply {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (&method, path.as_str()) {
        // The page is public like /metrics; its data, from elsewhere than loopback, needs the
        // token, which the page asks for.
        (&Method::GET, "/") => page(),
        (&Method::GET, "/api/v1/stats" | "/api/v1/requests" | "/metrics" | "/status")
            if let Some(denied) = refuse_read(s, &req, peer) =>
        {
            denied
        }
        (&Method::GET, "/api/v1/stats") => json_reply(StatusCode::OK, &history.json(s)),
        (_, "/api/v1/stats") => not_allowed("GET"),
        (&Method::GET, "/api/v1/requests") => crate::requests::answer(s, &req).await,
        (_, "/api/v1/requests") => not_allowed("GET"),
        (&Method::GET, "/metrics") => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics(s),
        ),
        (&Method::GET, "/status") => reply(StatusCode::OK, "application/json", crate::status(s)),
        (&Method::POST, "/api/v1/reload") => {
            if let Some(denied) = refuse_unauthorized(s, &req) {
                return denied;
            }
            reload(s).await
        }
        (_, "/api/v1/reload") => not_allowed("POST"),
        (&Method::POST, "/api/v1/cache/purge") => {
            if let Some(denied) = refuse_unauthorized(s, &req) {
                return denied;
            }
            purge_cache(s, req).await
        }
        (_, "/api/v1/cache/purge") => not_allowed("POST"),
        (_, "/api/v1/auth/keys") => {
            let denied = if method == Method::GET {
                refuse_read(s, &req, peer)
            } else {
                refuse_unauthorized(s, &req)
            };
            if let Some(denied) = denied {
                return denied;
            }
            crate::auth::keys(s, req).await
        }
        (_, "/api/v1/config") if method != Method::GET => not_allowed("GET"),
        (_, p) if p.starts_with("/api/v1/") => api_v1(s, req, peer).await,
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try / (the dashboard), /metrics, /status, /api/v1/stats, /api/v1/requests, /api/v1/config, /api/v1/{routes,upstreams,certificates}/NAME, /api/v1/upstreams/NAME/health, /api/v1/auth/keys?route=NAME, POST /api/v1/reload or POST /api/v1/cache/purge\n",
        ),
    }
}

/// The dashboard's page, allowed to reach nothing but its own listener.
fn page() -> Reply {
    let mut r = reply(
        StatusCode::OK,
        "text/html; charset=utf-8",
        crate::stats::PAGE,
    );
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'",
        ),
    );
    r
}

/// The rest of `/api/v1/`: an upstream's health, and the configuration's objects.
async fn api_v1(s: &Sources, req: Request<Incoming>, peer: SocketAddr) -> Reply {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let write = method != Method::GET && method != Method::HEAD;
    let denied = if write {
        refuse_unauthorized(s, &req)
    } else {
        refuse_read(s, &req, peer)
    };
    if let Some(denied) = denied {
        return denied;
    }
    if let Some(name) = path
        .strip_prefix("/api/v1/upstreams/")
        .and_then(|rest| rest.strip_suffix("/health"))
    {
        if method != Method::GET {
            return not_allowed("GET");
        }
        return match crate::health::upstream(s, name) {
            Some(doc) => json_reply(StatusCode::OK, &doc),
            None => error(
                StatusCode::NOT_FOUND,
                &format!("no upstream `{name}` is running; GET /api/v1/config lists them"),
            ),
        };
    }
    objects(s, req).await
}

/// `GET /api/v1/config` and `GET|PUT|DELETE /api/v1/{routes,upstreams,certificates}/NAME`.
async fn objects(s: &Sources, req: Request<Incoming>) -> Reply {
    let Some(control) = &s.control else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "this gateway was started without a configuration source",
        );
    };
    let path = req.uri().path().to_owned();
    let with_etag = |mut r: Reply| {
        if let Ok(v) = HeaderValue::from_str(&control.etag()) {
            r.headers_mut().insert(header::ETAG, v);
        }
        r
    };
    if let Some(store) = control.shared() {
        return fleet_objects(store.as_ref(), req).await;
    }
    if path == "/api/v1/config" {
        return match control.config() {
            Ok(v) => with_etag(json_reply(StatusCode::OK, &v)),
            Err(e) => edit_error(&e),
        };
    }
    let (kind, name, if_match) = match object_target(&req) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    match req.method().clone() {
        Method::GET => match control.object(kind, &name) {
            Ok(v) => with_etag(json_reply(StatusCode::OK, &v)),
            Err(e) => edit_error(&e),
        },
        Method::PUT => {
            let body = match json_body(req).await {
                Ok(b) => b,
                Err(r) => return *r,
            };
            match control.put(kind, &name, body, if_match.as_deref()).await {
                Ok(w) => {
                    let status = if w.created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    with_etag(json_reply(status, &w.object))
                }
                Err(e) => edit_error(&e),
            }
        }
        Method::DELETE => match control.delete(kind, &name, if_match.as_deref()).await {
            Ok(revision) => with_etag(json_reply(
                StatusCode::OK,
                &json!({ "deleted": name, "revision": revision }),
            )),
            Err(e) => edit_error(&e),
        },
        _ => not_allowed("GET, PUT, DELETE"),
    }
}

/// The object a request names, and its `If-Match`.
fn object_target(req: &Request<Incoming>) -> Result<(Kind, String, Option<String>), Box<Reply>> {
    let path = req.uri().path();
    let mut segments = path.trim_start_matches("/api/v1/").splitn(2, '/');
    let (Some(plural), Some(name)) = (segments.next(), segments.next()) else {
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            "use /api/v1/{routes,upstreams,certificates}/NAME",
        )));
    };
    let Some(kind) = Kind::from_plural(plural) else {
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            &format!("`{plural}` is not an object kind; use routes, upstreams or certificates"),
        )));
    };
    let if_match = req
        .headers()
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok((kind, name.to_owned(), if_match))
}

/// The same endpoints in fleet mode: objects live in etcd, each with its own `ETag` (its
/// `mod_revision`); `GET /api/v1/fleet` is the sync's state.
async fn fleet_objects(store: &dyn SharedObjects, req: Request<Incoming>) -> Reply {
    let with_etag = |mut r: Reply, tag: &str| {
        if let Ok(v) = HeaderValue::from_str(tag) {
            r.headers_mut().insert(header::ETAG, v);
        }
        r
    };
    match req.uri().path() {
        "/api/v1/config" => {
            return match store.config() {
                Ok(v) => json_reply(StatusCode::OK, &v),
                Err(e) => edit_error(&e),
            };
        }
        "/api/v1/fleet" => {
            return match *req.method() {
                Method::GET => json_reply(StatusCode::OK, &store.status()),
                _ => not_allowed("GET"),
            };
        }
        _ => {}
    }
    let (kind, name, if_match) = match object_target(&req) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    match req.method().clone() {
        Method::GET => match store.object(kind, &name) {
            Ok((v, tag)) => with_etag(json_reply(StatusCode::OK, &v), &tag),
            Err(e) => edit_error(&e),
        },
        Method::PUT => {
            let body = match json_body(req).await {
                Ok(b) => b,
                Err(r) => return *r,
            };
            match store.put(kind, &name, body, if_match.as_deref()).await {
                Ok(w) => {
                    let status = if w.created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    with_etag(json_reply(status, &w.object), &w.etag)
                }
                Err(e) => edit_error(&e),
            }
        }
        Method::DELETE => match store.delete(kind, &name, if_match.as_deref()).await {
            Ok(revision) => json_reply(
                StatusCode::OK,
                &json!({ "deleted": name, "revision": revision }),
            ),
            Err(e) => edit_error(&e),
        },
        _ => not_allowed("GET, PUT, DELETE"),
    }
}

fn edit_error(e: &EditError) -> Reply {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_reply(status, &json!({ "error": e.message, "errors": e.errors }))
}

/// Who may read, as `read_access` decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Allowed,
    /// A token would do: 401.
    NeedsToken,
    /// No token is configured and the peer is not in `read_networks`: 403.
    Refused,
}

/// Whether `peer` may read: loopback and `read_networks` always; anyone else with the read
/// token or the write token.
fn read_access(
    admin: Option<&sluice_config::Admin>,
    peer: std::net::IpAddr,
    bearer: Option<&str>,
) -> Read {
    let peer = sluice_config::canonical(peer);
    if peer.is_loopback() {
        return Read::Allowed;
    }
    let Some(admin) = admin else {
        return Read::Refused;
    };
    if admin.read_networks.iter().any(|n| n.contains(&peer)) {
        return Read::Allowed;
    }
    let tokens: Vec<&str> = [admin.read_token.as_deref(), admin.token.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    if tokens.is_empty() {
        return Read::Refused;
    }
    let matches = |t: &&str| bearer.is_some_and(|b| constant_time_eq(b.as_bytes(), t.as_bytes()));
    if tokens.iter().any(matches) {
        Read::Allowed
    } else {
        Read::NeedsToken
    }
}

/// `None` when the request may read, else the response to send.
fn refuse_read(s: &Sources, req: &Request<Incoming>, peer: SocketAddr) -> Option<Reply> {
    let snapshot = s.gateway.snapshot();
    match read_access(snapshot.admin.as_ref(), peer.ip(), bearer(req)) {
        Read::Allowed => None,
        Read::Refused => Some(error(
            StatusCode::FORBIDDEN,
            &format!(
                "reads from {} are not allowed: add its network to [admin] read_networks, or set [admin] read_token_file and send `Authorization: Bearer <token>`",
                peer.ip()
            ),
        )),
        Read::NeedsToken => {
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: reads from outside [admin] read_networks need `Authorization: Bearer <token>` with the token in [admin] read_token_file or token_file",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sluice admin\""),
            );
            Some(r)
        }
    }
}

/// The bearer token a request carries.
fn bearer(req: &Request<Incoming>) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Checks the bearer token: `None` when the request may write, else the response to send.
fn refuse_unauthorized(s: &Sources, req: &Request<Incoming>) -> Option<Reply> {
    let snapshot = s.gateway.snapshot();
    let Some(token) = snapshot.admin.as_ref().and_then(|a| a.token.as_deref()) else {
        return Some(error(
            StatusCode::NOT_FOUND,
            "admin API writes are disabled: set [admin] token_file to a file (mode 0600) holding a token",
        ));
    };
    let given = bearer(req);
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        return None;
    }
    let mut r = error(
        StatusCode::UNAUTHORIZED,
        "missing or wrong token: send `Authorization: Bearer <token>` with the token in [admin] token_file",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"sluice admin\""),
    );
    Some(r)
}

/// Compares in constant time (BoringSSL's `CRYPTO_memcmp`), so the time taken does not tell
/// how much of a guess was right. Only the length can show: `memcmp::eq` needs equal ones.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && boring::memcmp::eq(a, b)
}

async fn reload(s: &Sources) -> Reply {
    let Some(control) = &s.control else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "this gateway was started without a configuration source to reload",
        );
    };
    match control.reload().await {
        Ok(o) => json_reply(
            StatusCode::OK,
            &json!({
                "result": "ok",
                "revision": o.revision,
                "previous": o.previous,
                "changes": o.summary,
            }),
        ),
        Err(e) => {
            let status = match e {
                ReloadError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            json_reply(status, &crate::config_state::reload_error_json(&e))
        }
    }
}

/// `POST /api/v1/cache/purge` with `{"host": "example.com", "path": "/page?x=1"}` (one URL,
/// every variant and Vary entry of it) or `{"host": "example.com", "prefix": "/static/"}`
/// (every URL under it; `"prefix": "/"` empties the host). In fleet mode it reaches every
/// gateway through etcd; with etcd away it fails (503) and purges nothing.
async fn purge_cache(s: &Sources, req: Request<Incoming>) -> Reply {
    let body = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let host = body.get("host").and_then(Value::as_str).unwrap_or("");
    let (path, prefix) = match (
        body.get("path").and_then(Value::as_str),
        body.get("prefix").and_then(Value::as_str),
    ) {
        (Some(p), None) => (p, false),
        (None, Some(p)) => (p, true),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "give \"host\" and one of \"path\" (one URL, with its query) or \"prefix\" (every URL under it)",
            );
        }
    };
    if host.is_empty() || !path.starts_with('/') {
        return error(
            StatusCode::BAD_REQUEST,
            "\"host\" is the request's Host (with its port if not 80/443) and the path starts with /",
        );
    }
    // One time for every gateway: what each fetched before it goes, what came after stays.
    let at = std::time::SystemTime::now();
    // In a fleet, every gateway (this one too) purges when the purge arrives through etcd;
    // this one also purges now, so that its next answer is already without it.
    let fleet = match s.control.as_ref().and_then(|c| c.shared()) {
        Some(store) => match store.purge_cache(host, path, prefix, at).await {
            Ok(()) => true,
            Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
        },
        None => false,
    };
    let cache = s.gateway.cache();
    let (h, p) = (host.to_owned(), path.to_owned());
    // Recorded on disk (synced) before the answer: off the event loop.
    let recorded =
        tokio::task::spawn_blocking(move || cache.purge_requested(&h, &p, prefix, at)).await;
    let disk = match recorded {
        Ok(Ok(true)) => "recorded",
        Ok(Ok(false)) => "none",
        Ok(Err(e)) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                    "purged from memory, but the disk tier could not record it: {e}; the disk writer retries it, check [cache.disk] path's file system"
                ),
            );
        }
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the purge's task failed"),
    };
    json_reply(
        StatusCode::OK,
        &json!({
            "result": "ok", "host": host, if prefix { "prefix" } else { "path" }: path,
            "fleet": fleet, "memory": "purged", "disk": disk,
            "at_unix_ms": at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::{Read, constant_time_eq, read_access};

    fn admin(
        token: Option<&str>,
        read_token: Option<&str>,
        networks: &[&str],
    ) -> sluice_config::Admin {
        sluice_config::Admin {
            address: "0.0.0.0:9901".parse().unwrap(),
            token: token.map(str::to_owned),
            read_token: read_token.map(str::to_owned),
            read_networks: networks.iter().map(|n| n.parse().unwrap()).collect(),
            tls: None,
        }
    }

    #[test]
    fn reads_from_off_loopback_need_an_allowed_network_or_a_token() {
        let far = "203.0.113.9".parse().unwrap();
        let near = "10.1.2.3".parse().unwrap();
        let both = admin(
            Some("w".repeat(16).as_str()),
            Some("r".repeat(16).as_str()),
            &["10.0.0.0/8"],
        );
        let (w, r) = ("w".repeat(16), "r".repeat(16));
        // Loopback (v4, v6 and v4-mapped) and the listed networks read without a token.
        for ip in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert_eq!(
                read_access(Some(&both), ip.parse().unwrap(), None),
                Read::Allowed,
                "{ip}"
            );
        }
        assert_eq!(read_access(Some(&both), near, None), Read::Allowed);
        assert_eq!(
            read_access(Some(&both), "::ffff:10.9.9.9".parse().unwrap(), None),
            Read::Allowed
        );
        // Elsewhere: either token, whole.
        assert_eq!(read_access(Some(&both), far, None), Read::NeedsToken);
        assert_eq!(read_access(Some(&both), far, Some(&r)), Read::Allowed);
        assert_eq!(read_access(Some(&both), far, Some(&w)), Read::Allowed);
        assert_eq!(
            read_access(Some(&both), far, Some(&r[1..])),
            Read::NeedsToken
        );
        // No token configured at all: refused, not "try a token".
        let none = admin(None, None, &[]);
        assert_eq!(
            read_access(Some(&none), far, Some("anything-at-all!")),
            Read::Refused
        );
        assert_eq!(read_access(None, far, None), Read::Refused);
        // Only the write token: it reads too.
        let write_only = admin(Some(&w), None, &[]);
        assert_eq!(read_access(Some(&write_only), far, Some(&w)), Read::Allowed);
        assert_eq!(
            read_access(Some(&write_only), far, Some(&r)),
            Read::NeedsToken
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!constant_time_eq(b"0123456789abcdef", b"0123456789abcdeF"));
        assert!(!constant_time_eq(b"0123456789abcdef", b"0123456789abcde"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
