//! `[listener.mqtt]` and `[route.mqtt]`: what an MQTT listener, or an MQTT-over-WebSocket
//! route, reads of each device's CONNECT.

use super::auth::RawAuth;
use super::rate_limit::RawRateLimit;
use super::size::RawSize;
use serde::Deserialize;
use toml::Spanned;

type SpannedStr = Spanned<String>;

/// `[listener.mqtt]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListenerMqtt {
    /// The whole CONNECT must arrive within this long of the connection (after TLS)
    /// (default `"10s"`).
    pub connect_timeout: Option<SpannedStr>,
    /// The largest CONNECT accepted (default `"64k"`).
    pub max_connect_size: Option<Spanned<RawSize>>,
    /// What picks a device's broker on the upstream's hash ring: `"client_id"` (default) or
    /// `"username"`.
    pub route_by: Option<SpannedStr>,
    /// A regular expression every client identifier must match (default: any).
    pub client_id_pattern: Option<SpannedStr>,
    /// The CONNECT field (`"client_id"` or `"username"`) that must equal the common name of
    /// the device's verified client certificate.
    pub certificate_identity: Option<SpannedStr>,
    /// `[listener.mqtt.auth]`: the CONNECT's user name and password checked (`basic`: an
    /// htpasswd file; `jwt`: the password is a token), as `[route.auth]` checks requests.
    pub auth: Option<Spanned<RawAuth>>,
    /// `[listener.mqtt.rate_per_client]`: new connections per client address.
    pub rate_per_client: Option<Spanned<RawRateLimit>>,
    /// `[listener.mqtt.rate_per_client_id]`: new connections per client identifier.
    pub rate_per_client_id: Option<Spanned<RawRateLimit>>,
    /// At most this many connections per client identifier to the listener's brokers; a
    /// newer one closes the oldest (a broker's session takeover).
    pub max_connections_per_client_id: Option<Spanned<u32>>,
    /// Where that cap is counted: `"local"` (default: this gateway) or `"redis"` (the
    /// fleet, through `[rate_limit] redis`).
    pub max_connections_store: Option<SpannedStr>,
}

/// `[route.mqtt]`: what an MQTT-over-WebSocket route reads of each device's CONNECT: the
/// MQTT listener's keys, so that a device is admitted by the same rules over WebSocket as
/// over TCP (the upgrade request itself is checked by the route's `[route.auth]` and
/// `[route.rate_limit]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteMqtt {
    /// As `[listener.mqtt]`'s, counted from the WebSocket's opening.
    pub connect_timeout: Option<SpannedStr>,
    /// As `[listener.mqtt]`'s.
    pub max_connect_size: Option<Spanned<RawSize>>,
    /// As `[listener.mqtt]`'s.
    pub route_by: Option<SpannedStr>,
    /// As `[listener.mqtt]`'s.
    pub client_id_pattern: Option<SpannedStr>,
    /// As `[listener.mqtt]`'s (the cap counts this route's and the listeners' devices of
    /// the same brokers together).
    pub max_connections_per_client_id: Option<Spanned<u32>>,
    /// As `[listener.mqtt]`'s.
    pub max_connections_store: Option<SpannedStr>,
    /// As `[listener.mqtt]`'s: the CONNECT's user name and password checked.
    pub auth: Option<Spanned<RawAuth>>,
    /// As `[listener.mqtt]`'s.
    pub rate_per_client: Option<Spanned<RawRateLimit>>,
    /// As `[listener.mqtt]`'s.
    pub rate_per_client_id: Option<Spanned<RawRateLimit>>,
    /// As `[listener.mqtt]`'s: the field must be the common name of the certificate the
    /// device presented on its HTTPS connection.
    pub certificate_identity: Option<SpannedStr>,
    /// A device that asked for no keep alive is closed after this long without a byte
    /// either way (default `"10m"`, as a listener's `idle_timeout`).
    pub idle_timeout: Option<SpannedStr>,
}
