//! MQTT at Sluice's edge: a device connection's first packet, the CONNECT of MQTT 3.1, 3.1.1
//! or 5, read as its bytes arrive and checked as strictly as the standards say (and never
//! more laxly than HAProxy's `mqtt_is_valid`), and the CONNACK that refuses one.
//!
//! The gateway reads nothing else the client sends: once a connection is admitted its bytes
//! go to the broker as they come. Of the broker's bytes it reads the first packet, an MQTT 5
//! CONNACK's Server Keep Alive (`connack`), which the connection's idle timeout follows.

mod connack;
mod connect;
mod refusal;
mod version;
mod wire;

pub use connack::{BrokerReply, read_connack};
pub use connect::{Connect, Parsed, Properties, Will, parse_connect};
pub use refusal::{Fault, Refusal, connack};
pub use version::Version;

#[cfg(test)]
mod tests;
