//! MQTT at Sluice's edge: a device connection's first packet, the CONNECT of MQTT 3.1, 3.1.1
//! or 5, read as its bytes arrive and checked as strictly as the standards say (and never
//! more laxly than HAProxy's `mqtt_is_valid`), and the CONNACK that refuses one.
//!
//! The gateway reads nothing after the CONNECT: once a connection is admitted its bytes go to
//! the broker as they come, so this crate parses one packet type and writes one.

mod connect;
mod refusal;
mod version;
mod wire;

pub use connect::{Connect, Parsed, Properties, Will, parse_connect};
pub use refusal::{Fault, Refusal, connack};
pub use version::Version;

#[cfg(test)]
mod tests;
