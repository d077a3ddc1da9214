//! Layer 4: TCP listeners' connections relayed as bytes (`stream`), routed by the ClientHello's
//! server name where asked (`client_hello`), with `splice(2)` for cleartext relays (`splice`);
//! MQTT listeners', admitted by their CONNECT (its credentials, `mqtt_auth`; the device's
//! certificate, `mqtt_cert`; their rates, `request::rate_limit::connect_rates`) and routed by
//! client identifier (`mqtt`), over TCP or, from an HTTP route's WebSocket, `mqtt_ws`.

pub(crate) mod client_hello;
pub(crate) mod mqtt;
pub(crate) mod mqtt_auth;
pub(crate) mod mqtt_cert;
pub(crate) mod mqtt_ws;
pub(crate) mod splice;
pub(crate) mod stream;
