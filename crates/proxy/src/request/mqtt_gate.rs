//! The admission state of `[route.mqtt]` routes (MQTT over WebSocket), by route: kept in the
//! listener's context and built by the gateway at each reload, apart from the upgrade's
//! handling (`request::mqtt_ws`) so that the context does not import the request path.

use sluice_config::MqttProxy;
use std::sync::Arc;

/// A `[route.mqtt]` route's admission state beside its settings: the CONNECT credentials'
/// checker and the connection rates, built by the gateway at each reload (kept while the
/// route's settings stay, so that caches and allowances survive it).
#[derive(Debug, Default)]
pub(crate) struct MqttGate {
    /// The route's name, by which a reload finds the gate it may keep.
    pub(crate) route: String,
    pub(crate) auth: Option<Arc<sluice_auth::Authenticator>>,
    pub(crate) rates: Option<Arc<crate::request::rate_limit::connect_rates::ConnectRates>>,
}

/// Each `[route.mqtt]`'s gate, by [`gate_key`].
pub(crate) type MqttGates = std::collections::HashMap<usize, Arc<MqttGate>>;

/// A route's key among the gates: the address of its settings, which the routers and the
/// gates of one configuration share (a route found by a request finds its own gate without
/// a name lookup per device).
pub(crate) fn gate_key(mqtt: &Arc<MqttProxy>) -> usize {
    Arc::as_ptr(mqtt) as usize
}
