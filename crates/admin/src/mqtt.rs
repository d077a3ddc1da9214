//! MQTT listeners on the admin listener: `/status`'s and the dashboard's `mqtt`, with the
//! connections by outcome (relayed, or refused and why) and each listener's brokers with the
//! device connections each holds now (`sluice_mqtt_connections_total` and
//! `sluice_upstream_server_in_flight` on `/metrics`).

use crate::Sources;
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
    json!({ "connections": outcomes, "brokers": brokers })
}
