//! MQTT over WebSocket on an HTTP route (`[route.mqtt]`): the upgrade request, once it has
//! passed the route's access phase (its ACL, `[route.auth]`, `[route.rate_limit]`, the WAF),
//! is answered here: `101` with the `mqtt` subprotocol (RFC 6455 §4.2.2, MQTT 5 §6). The
//! device's connection is then handed to the MQTT relay (`layer4::mqtt_ws`), which reads
//! its CONNECT from the WebSocket's frames and sends it to the broker its client identifier
//! hashes to, as an MQTT listener would.
//!
//! The relay sits above the request path (it uses the layer-4 relays), so the listener's
//! context carries it as a function (`context::MqttBridge`) that the gateway sets: the
//! request path names the handoff, not the module that takes it.

use crate::addresses::Addresses;
use crate::request::context::{ListenerCtx, WsHandoff};
use crate::request::error::Failure;
use crate::request::phases::{RequestCtx, Stop};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Version, header};
use sluice_config::MqttProxy;
use std::sync::Arc;

/// The subprotocols MQTT registers: `mqtt` (3.1.1 and 5), `mqttv3.1` (3.1).
const SUBPROTOCOLS: [&str; 2] = ["mqtt", "mqttv3.1"];

/// Answers an upgrade to MQTT over WebSocket (`101`, the relay spawned for the connection
/// once it has switched), or refuses what is not one (`Refused`).
pub(crate) fn answer<B>(
    ctx: &RequestCtx<'_>,
    listener: &Arc<ListenerCtx>,
    mqtt: &Arc<MqttProxy>,
    req: &mut Request<B>,
) -> Stop {
    let (accept, protocol) = match handshake(req.method(), req.version(), req.headers()) {
        Ok(h) => h,
        Err(Refused::BadRequest) => return Stop::Fail(Failure::BadRequest),
        Err(Refused::NotUpgrade) => {
            let mut h = HeaderMap::new();
            h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            let body = Bytes::from_static(b"MQTT over WebSocket: upgrade to websocket\n");
            return Stop::Answer(Box::new((StatusCode::UPGRADE_REQUIRED, h, body)));
        }
        Err(Refused::Version) => {
            let mut h = HeaderMap::new();
            h.insert(
                header::SEC_WEBSOCKET_VERSION,
                HeaderValue::from_static("13"),
            );
            let body = Bytes::from_static(b"WebSocket version 13 only\n");
            return Stop::Answer(Box::new((StatusCode::UPGRADE_REQUIRED, h, body)));
        }
    };
    let Some(upgrade) = req.extensions_mut().remove::<crate::http1::OnUpgrade>() else {
        // Not an HTTP/1.1 connection that can switch (the version was checked above).
        return Stop::Fail(Failure::BadRequest);
    };
    let bridge = listener.mqtt_bridge;
    let handoff = WsHandoff {
        listener: listener.clone(),
        mqtt: mqtt.clone(),
        upgrade,
        at: Addresses {
            client: std::net::SocketAddr::new(ctx.client, ctx.conn.peer.port()),
            local: ctx.conn.local,
        },
        signals: ctx.conn.signals.clone(),
        gate: listener
            .mqtt_gates
            .get(&crate::request::mqtt_gate::gate_key(mqtt))
            .cloned(),
        // Only a certificate that verified binds anything; the listener's `client_auth`
        // already refused the connection where one was required.
        cert: (ctx.conn.tls.as_ref())
            .and_then(|t| t.client_cert.clone())
            .filter(|c| c.verified),
    };
    // Tracked with the listener's long-lived relays: an upgrade's drain waits for it as for
    // an MQTT listener's devices (`stream_drain_timeout`).
    ctx.conn.signals.streams.tasks.spawn(bridge(handoff));
    let mut h = HeaderMap::new();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(protocol),
    );
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    Stop::Answer(Box::new((StatusCode::SWITCHING_PROTOCOLS, h, Bytes::new())))
}

/// Why an upgrade request is not answered with `101`.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// Not a WebSocket upgrade (426 with `Upgrade: websocket`).
    NotUpgrade,
    /// Another WebSocket version than 13 (426 with `Sec-WebSocket-Version: 13`, RFC 6455
    /// §4.4).
    Version,
    /// No valid key, or no MQTT subprotocol (400).
    BadRequest,
}

/// An upgrade request's `Sec-WebSocket-Accept` and the MQTT subprotocol chosen, or why not.
fn handshake(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
) -> Result<(String, &'static str), Refused> {
    let upgrading = version == Version::HTTP_11
        && method == Method::GET
        && token_in(headers, header::CONNECTION, "upgrade")
        && token_in(headers, header::UPGRADE, "websocket");
    if !upgrading {
        return Err(Refused::NotUpgrade);
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(Refused::Version);
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|k| valid_key(k.as_bytes()))
        .ok_or(Refused::BadRequest)?;
    let protocol = SUBPROTOCOLS
        .into_iter()
        .find(|p| token_in(headers, header::SEC_WEBSOCKET_PROTOCOL, p))
        .ok_or(Refused::BadRequest)?;
    Ok((accept_key(key.as_bytes()), protocol))
}

/// Whether a comma-separated header (every line of it) holds `token`, case-insensitively.
fn token_in(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// RFC 6455 §4.1: the key is 16 bytes, base64-encoded (24 characters).
fn valid_key(key: &[u8]) -> bool {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(key)
        .is_ok_and(|k| k.len() == 16)
}

/// `Sec-WebSocket-Accept` for `key`: base64(SHA-1(key ‖ GUID)), RFC 6455 §1.3, as
/// tungstenite (which relays the frames) derives it.
fn accept_key(key: &[u8]) -> String {
    tokio_tungstenite::tungstenite::handshake::derive_accept_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(valid_key(b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!valid_key(b"c2hvcnQ="), "8 bytes");
        assert!(!valid_key(b"not base64!"));
    }

    #[test]
    fn an_upgrade_is_answered_and_what_is_not_one_is_told_why() {
        let upgrade = |extra: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in [
                ("connection", "Upgrade"),
                ("upgrade", "websocket"),
                ("sec-websocket-version", "13"),
                ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("sec-websocket-protocol", "mqtt"),
            ] {
                h.insert(k, HeaderValue::from_static(v));
            }
            for (k, v) in extra {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        let get = |h: &HeaderMap| handshake(&Method::GET, Version::HTTP_11, h);
        assert_eq!(
            get(&upgrade(&[])),
            Ok(("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_owned(), "mqtt"))
        );
        assert_eq!(
            get(&upgrade(&[("sec-websocket-protocol", "chat, mqttv3.1")])).map(|h| h.1),
            Ok("mqttv3.1")
        );
        assert_eq!(
            handshake(&Method::POST, Version::HTTP_11, &upgrade(&[])),
            Err(Refused::NotUpgrade)
        );
        assert_eq!(
            handshake(&Method::GET, Version::HTTP_2, &upgrade(&[])),
            Err(Refused::NotUpgrade)
        );
        assert_eq!(
            get(&upgrade(&[("connection", "keep-alive")])),
            Err(Refused::NotUpgrade)
        );
        assert_eq!(
            get(&upgrade(&[("sec-websocket-version", "8")])),
            Err(Refused::Version)
        );
        assert_eq!(
            get(&upgrade(&[("sec-websocket-protocol", "chat")])),
            Err(Refused::BadRequest)
        );
        assert_eq!(
            get(&upgrade(&[("sec-websocket-key", "c2hvcnQ=")])),
            Err(Refused::BadRequest)
        );
    }

    #[test]
    fn tokens_are_found_in_any_line_and_case() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        h.append(header::CONNECTION, HeaderValue::from_static("x, Upgrade"));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("mqttv3.1"),
        );
        assert!(token_in(&h, header::CONNECTION, "upgrade"));
        assert!(!token_in(&h, header::SEC_WEBSOCKET_PROTOCOL, "mqtt"));
        assert!(token_in(&h, header::SEC_WEBSOCKET_PROTOCOL, "mqttv3.1"));
    }
}
