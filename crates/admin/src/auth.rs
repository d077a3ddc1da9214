//! Authentication on the admin listener: `sluice_auth_*` families and `/status`'s and the
//! dashboard's `auth` (each authenticated route's passes and refusals by reason).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use crate::reply::{Reply, error, json_reply};
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// One counter of a route's authentication.
type Reading = fn(&sluice_auth::AuthCounters) -> u64;

/// The counters of the work each route's authentication did: name, help, count.
const WORK: [(&str, &str, Reading); 8] = [
    (
        "sluice_auth_signatures_verified_total",
        "Token signatures verified (accepted tokens not counted here came from the verified-token cache).",
        |c| c.signatures_verified.load(Ordering::Relaxed),
    ),
    (
        "sluice_auth_passwords_hashed_total",
        "Basic passwords hashed (the rest came from the verified-credential cache).",
        |c| c.passwords_hashed.load(Ordering::Relaxed),
    ),
    (
        "sluice_auth_jwks_fetched_total",
        "JWKS fetches that brought a key set.",
        |c| c.jwks_fetched.load(Ordering::Relaxed),
    ),
    (
        "sluice_auth_jwks_failed_total",
        "JWKS fetches that failed; the last good set stayed in force.",
        |c| c.jwks_failed.load(Ordering::Relaxed),
    ),
    (
        "sluice_auth_jwks_refresh_limited_total",
        "Fetches for an unknown kid not made because one was tried within 10 s.",
        |c| c.jwks_refresh_limited.load(Ordering::Relaxed),
    ),
    (
        "sluice_auth_files_reloaded_total",
        "Key and htpasswd files read again after they changed.",
        |c| c.files_reloaded.load(Ordering::Relaxed),
    ),
    (
        "sluice_auth_files_refused_total",
        "Changed key and htpasswd files that did not parse; the previous contents stayed.",
        |c| c.files_refused.load(Ordering::Relaxed),
    ),
    (
        "sluice_auth_forward_failed_open_total",
        "Requests let through because the authorization service failed (on_error = \"allow\").",
        |c| c.forward_failed_open.load(Ordering::Relaxed),
    ),
];

/// The `sluice_auth_*` families (none while no route authenticates).
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
    let routes = s.gateway.authentication();
    if routes.is_empty() {
        return;
    }
    let name = "sluice_auth_allowed_total";
    out.family(
        name,
        Kind::Counter,
        "Requests [route.auth] let through, by the method that accepted them.",
    );
    for (route, c) in &routes {
        for (method, n) in c.allowed() {
            out.sample(name, &[("route", route), ("method", method)], n);
        }
    }
    let name = "sluice_auth_refused_total";
    out.family(
        name,
        Kind::Counter,
        "Requests [route.auth] refused, by reason (missing credentials, jwt_expired, bad_password, forward_denied, ...).",
    );
    for (route, c) in &routes {
        for (reason, n) in c.refusals() {
            out.sample(name, &[("route", route), ("reason", reason)], n);
        }
    }
    for (name, help, get) in WORK {
        out.family_by(
            name,
            Kind::Counter,
            help,
            "route",
            routes.iter().map(|(route, c)| (route.as_str(), get(c))),
        );
    }
}

/// `/status`'s and the dashboard's `auth`: per route, requests allowed by method and
/// refused by reason (only reasons seen).
pub(crate) fn status(s: &Sources) -> Value {
    let routes: Vec<Value> = s
        .gateway
        .authentication()
        .iter()
        .map(|(route, c)| {
            let allowed: serde_json::Map<String, Value> =
                c.allowed().map(|(m, n)| (m.to_owned(), json!(n))).collect();
            let refused: serde_json::Map<String, Value> = c
                .refusals()
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.to_owned(), json!(n)))
                .collect();
            json!({
                "route": route,
                "allowed": allowed,
                "refused": refused,
                "jwks_failed": c.jwks_failed.load(Ordering::Relaxed),
            })
        })
        .collect();
    json!(routes)
}

/// `/api/v1/auth/keys`: a route's API keys, kept hashed in its `keys` file. `GET
/// ?route=NAME` lists their names; `POST {"route", "name", "key"}` adds one (without
/// `"key"`, the gateway makes a random one and answers it, once); `DELETE {"route",
/// "name"}` removes one. The file is rewritten whole and read again at once. The file is
/// this gateway's: in a fleet, each gateway has its own.
pub(crate) async fn keys(s: &Sources, req: Request<Incoming>) -> Reply {
    let method = req.method().clone();
    let (route, name, key) = match key_request(req).await {
        Ok(r) => r,
        Err(r) => return *r,
    };
    let Some(auth) = s.gateway.authenticator(&route) else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("no route `{route}` with [route.auth]; give \"route\" (GET: ?route=NAME)"),
        );
    };
    if method == Method::GET {
        return match auth.key_names() {
            Some(names) => json_reply(StatusCode::OK, &json!({ "route": route, "keys": names })),
            None => error(
                StatusCode::NOT_FOUND,
                &format!("route `{route}` has no keys = {{ file = … }}"),
            ),
        };
    }
    let made = (method == Method::POST && key.is_none()).then(|| {
        let mut raw = [0u8; 24];
        boring::rand::rand_bytes(&mut raw).expect("BoringSSL's RNG");
        raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
    });
    let edit = match method {
        Method::POST => Some(key.clone().or(made.clone()).unwrap_or_default()),
        Method::DELETE => None,
        _ => return crate::reply::not_allowed("GET, POST, DELETE"),
    };
    let done = tokio::task::spawn_blocking({
        let (auth, name) = (auth.clone(), name.clone());
        move || auth.edit_key(&name, edit.as_deref().map(str::as_bytes))
    })
    .await;
    match done {
        Ok(Ok(())) if method == Method::POST => {
            let mut answer = json!({ "route": route, "name": name });
            if let Some(k) = made {
                answer["key"] = json!(k);
            }
            json_reply(StatusCode::CREATED, &answer)
        }
        Ok(Ok(())) => json_reply(StatusCode::OK, &json!({ "route": route, "removed": name })),
        Ok(Err(e)) => edit_failed(&route, e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// What a keys request names: the route (a GET's `?route=`, else the JSON body's), and a
/// write's key name and key.
async fn key_request(
    req: Request<Incoming>,
) -> Result<(String, String, Option<String>), Box<Reply>> {
    if req.method() == Method::GET {
        let q = req.uri().query().unwrap_or("");
        let route = q
            .split('&')
            .find_map(|kv| kv.strip_prefix("route="))
            .unwrap_or("")
            .to_owned();
        return Ok((route, String::new(), None));
    }
    let body = crate::reply::json_body(req).await?;
    let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok((
        text("route").unwrap_or_default(),
        text("name").unwrap_or_default(),
        text("key"),
    ))
}

/// A key edit that did not happen (`None`: the route keeps no keys file).
fn edit_failed(route: &str, e: Option<sluice_auth::KeyEditError>) -> Reply {
    use sluice_auth::KeyEditError;
    match e {
        None => error(
            StatusCode::NOT_FOUND,
            &format!("route `{route}` has no keys = {{ file = … }}"),
        ),
        Some(e @ KeyEditError::Exists) => error(StatusCode::CONFLICT, &e.to_string()),
        Some(e @ KeyEditError::Missing) => error(StatusCode::NOT_FOUND, &e.to_string()),
        Some(e @ KeyEditError::Invalid(_)) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        Some(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
