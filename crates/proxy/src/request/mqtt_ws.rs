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

/// RFC 6455 §1.3: the key's digest is taken with this appended.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Answers an upgrade to MQTT over WebSocket (`101`, the relay spawned for the connection
/// once it has switched), or refuses what is not one: a request that is not a WebSocket
/// upgrade gets 426 with `Upgrade: websocket`, one without an MQTT subprotocol or a valid
/// key 400.
pub(crate) fn answer<B>(
    ctx: &RequestCtx<'_>,
    listener: &Arc<ListenerCtx>,
    mqtt: &Arc<MqttProxy>,
    req: &mut Request<B>,
) -> Stop {
    let headers = req.headers();
    let upgrading = req.version() == Version::HTTP_11
        && req.method() == Method::GET
        && token_in(headers, header::CONNECTION, "upgrade")
        && token_in(headers, header::UPGRADE, "websocket");
    if !upgrading {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        let body = Bytes::from_static(b"MQTT over WebSocket: upgrade to websocket\n");
        return Stop::Answer(Box::new((StatusCode::UPGRADE_REQUIRED, h, body)));
    }
    let version_13 = headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|k| valid_key(k.as_bytes()));
    let protocol = SUBPROTOCOLS
        .into_iter()
        .find(|p| token_in(headers, header::SEC_WEBSOCKET_PROTOCOL, p));
    let (Some(key), Some(protocol), true) = (key, protocol, version_13) else {
        return Stop::Fail(Failure::BadRequest);
    };
    let accept = accept_key(key.as_bytes());
    let Some(upgrade) = req.extensions_mut().remove::<crate::http1::OnUpgrade>() else {
        // Not an HTTP/1.1 connection that can switch (the version was checked above).
        return Stop::Fail(Failure::BadRequest);
    };
    let Some(bridge) = listener.mqtt_bridge else {
        return Stop::Fail(Failure::BadRequest);
    };
    let handoff = WsHandoff {
        listener: listener.clone(),
        mqtt: mqtt.clone(),
        upgrade,
        at: Addresses {
            client: std::net::SocketAddr::new(ctx.client, ctx.conn.peer.port()),
            local: ctx.conn.local,
        },
        signals: ctx.conn.signals.clone(),
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

/// `Sec-WebSocket-Accept` for `key`: base64(SHA-1(key ‖ GUID)).
fn accept_key(key: &[u8]) -> String {
    use base64::Engine as _;
    let mut input = key.to_vec();
    input.extend_from_slice(WS_GUID.as_bytes());
    let digest = boring::hash::hash(boring::hash::MessageDigest::sha1(), &input)
        .map(|d| d.to_vec())
        .unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(digest)
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
