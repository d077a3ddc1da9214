//! `[listener.mqtt.auth]`: a CONNECT's user name and password checked by `sluice-auth`, the
//! same checker (files watched, verified credentials cached, bcrypt off the event loop, JWKS
//! fetched and rotated) that `[route.auth]` uses for HTTP requests. The CONNECT's
//! credentials are presented to it as a request's: a password shaped like a JWT as a bearer
//! token (where `jwt` is configured), otherwise the user name and password as basic
//! credentials.

use crate::request::context::ListenerCtx;
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, Method, Uri, header};
use sluice_auth::{Authenticator, Presented};
use sluice_config::{Listener, ListenerKind};
use sluice_mqtt::Fault;
use std::net::IpAddr;
use std::sync::Arc;

/// The listener's checker: the old one where its settings did not change (its caches and
/// fetched keys kept), else a new one, started.
pub(crate) fn authenticator(
    listener: &Listener,
    old: Option<&ListenerCtx>,
    hashing: &Arc<sluice_auth::HashPool>,
) -> Result<Option<Arc<Authenticator>>, String> {
    let ListenerKind::Mqtt(mqtt) = &listener.kind else {
        return Ok(None);
    };
    let Some(config) = &mqtt.auth else {
        return Ok(None);
    };
    let owner = format!("listener `{}` [listener.mqtt.auth]", listener.name);
    let old = old.and_then(|o| o.mqtt_auth.as_ref());
    checker(&owner, config, old, hashing).map(Some)
}

/// The checker of `config` (`owner` names it in errors): `old` where it checks the same.
pub(crate) fn checker(
    owner: &str,
    config: &Arc<sluice_config::RouteAuth>,
    old: Option<&Arc<Authenticator>>,
    hashing: &Arc<sluice_auth::HashPool>,
) -> Result<Arc<Authenticator>, String> {
    if let Some(a) = old
        && *a.config == **config
        && a.hashes_on(hashing)
    {
        return Ok(a.clone());
    }
    let a = Authenticator::new(config, hashing).map_err(|e| format!("{owner}: {e}"))?;
    a.start();
    Ok(Arc::new(a))
}

/// What a CONNECT carries for its check.
pub(crate) struct Credentials<'a> {
    pub(crate) username: Option<&'a str>,
    pub(crate) password: Option<&'a [u8]>,
    pub(crate) client: IpAddr,
    /// The TLS server name, where the listener terminates TLS.
    pub(crate) host: &'a str,
    pub(crate) tls: bool,
}

/// Checks `who`: the subject it is accepted as, or why not.
pub(crate) async fn check(auth: &Authenticator, who: &Credentials<'_>) -> Result<Arc<str>, Fault> {
    let mut headers = HeaderMap::new();
    let password = who.password.unwrap_or_default();
    let value = if auth.config.jwt.is_some() && looks_like_jwt(password) {
        let mut v = b"Bearer ".to_vec();
        v.extend_from_slice(password);
        Some(v)
    } else {
        who.username.map(|u| {
            let mut plain = u.as_bytes().to_vec();
            plain.push(b':');
            plain.extend_from_slice(password);
            let mut v = b"Basic ".to_vec();
            v.extend(
                base64::engine::general_purpose::STANDARD
                    .encode(plain)
                    .into_bytes(),
            );
            v
        })
    };
    if let Some(v) = value.and_then(|v| HeaderValue::from_bytes(&v).ok()) {
        headers.insert(header::AUTHORIZATION, v);
    }
    let uri = Uri::from_static("/");
    // A token read from a header, cookie or argument of its own (`jwt.token_from`) is the
    // password too.
    let part = |_: &sluice_config::HashKey| who.password.filter(|p| !p.is_empty());
    let presented = Presented {
        client_cert: None,
        method: &Method::GET,
        uri: &uri,
        headers: &headers,
        host: who.host,
        https: who.tls,
        client: who.client,
        part: &part,
    };
    match auth.authenticate(&presented).await {
        Ok(identity) => Ok(identity.subject),
        Err(denial) => Err(match denial.status.as_u16() {
            401 => Fault::BadCredentials,
            403 => Fault::NotAuthorized,
            _ => Fault::Unavailable,
        }),
    }
}

/// Three base64url segments separated by dots: a JWS in compact form.
fn looks_like_jwt(p: &[u8]) -> bool {
    let segments: Vec<&[u8]> = p.split(|&b| b == b'.').collect();
    segments.len() == 3
        && segments[..2].iter().all(|s| !s.is_empty())
        && p.iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_jwt_is_told_from_a_password() {
        assert!(super::looks_like_jwt(
            b"eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
        ));
        assert!(!super::looks_like_jwt(b"hunter2"));
        assert!(!super::looks_like_jwt(b"a.b"));
        assert!(!super::looks_like_jwt(b"a b.c.d"));
        assert!(!super::looks_like_jwt(b".x.y"));
    }
}
