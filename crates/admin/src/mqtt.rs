//! MQTT listeners on the admin listener: `/status`'s and the dashboard's `mqtt`, with the
//! connections by outcome (relayed, or refused and why) and each listener's brokers with the
//! device connections each holds now (`sluice_mqtt_connections_total` and
//! `sluice_upstream_server_in_flight` on `/metrics`), and the takeovers of
//! `max_connections_per_client_id` (`sluice_mqtt_takeovers_total`,
//! `sluice_mqtt_unshared_admissions_total`).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};

/// `null` while no listener is `kind = "mqtt"`.
pub(crate) fn status(s: &Sources) -> Value {
    let snapshot = s.gateway.snapshot();
    let mqtt: Vec<(&str, &str)> = snapshot
        .listeners
        .iter()
        .filter_map(|l| match &l.kind {
            sluice_config::ListenerKind::Mqtt(m) => Some((
                l.name.as_str(),
                snapshot.upstreams[m.upstream].name.as_str(),
            )),
            _ => None,
        })
        .collect();
    if mqtt.is_empty() {
        return Value::Null;
    }
    let p = s.gateway.metrics().snapshot();
    let outcomes: serde_json::Map<String, Value> = sluice_proxy::MQTT_OUTCOMES
        .iter()
        .zip(p.mqtt)
        .map(|(k, v)| ((*k).to_owned(), v.into()))
        .collect();
    let health = s.gateway.upstream_health();
    let brokers: Vec<Value> = mqtt
        .iter()
        .flat_map(|(listener, upstream)| {
            let servers = health
                .iter()
                .find(|h| h.name == *upstream)
                .map(|h| h.servers.as_slice())
                .unwrap_or_default();
            servers.iter().map(move |b| {
                json!({
                    "listener": listener, "upstream": upstream, "broker": b.address,
                    "up": b.up, "connections": b.in_flight,
                })
            })
        })
        .collect();
    let t = s.gateway.mqtt_takeovers();
    let takeovers = json!({
        "taken_over": t.taken_over, "by_fleet": t.by_fleet, "unshared": t.unshared,
    });
    json!({ "connections": outcomes, "brokers": brokers, "takeovers": takeovers })
}

/// The MQTT families of `/metrics`: connections by outcome (`counts`, by
/// `sluice_proxy::MQTT_OUTCOMES`), takeovers, and admissions the fleet did not see.
pub(crate) fn metrics(out: &mut Exposition, s: &Sources, counts: &[u64]) {
    out.family_by(
        "sluice_mqtt_connections_total",
        Kind::Counter,
        "Connections of kind = \"mqtt\" listeners and [route.mqtt] routes by outcome: proxied to the device's broker, refused (denied, not_connect, malformed, protocol_error, unsupported_version, client_id_not_valid, too_large, timeout, closed, bad_credentials, not_authorized, auth_unavailable, rate_limited, no_certificate, bad_certificate, certificate_mismatch), no broker reachable (upstream_unavailable), or proxied until a newer connection with the client identifier took over (taken_over).",
        "outcome",
        sluice_proxy::MQTT_OUTCOMES.iter().copied().zip(counts),
    );
    let t = s.gateway.mqtt_takeovers();
    out.family_by(
        "sluice_mqtt_takeovers_total",
        Kind::Counter,
        "MQTT connections closed by max_connections_per_client_id: by a newer connection here (gateway) or, through Redis, on another gateway (fleet).",
        "by",
        [
            ("gateway", t.taken_over.saturating_sub(t.by_fleet)),
            ("fleet", t.by_fleet),
        ],
    );
    out.single(
        "sluice_mqtt_unshared_admissions_total",
        Kind::Counter,
        "MQTT admissions under max_connections_store = \"redis\" that the fleet could not count (Redis unreachable): only this gateway's connections were capped.",
        t.unshared,
    );
}
