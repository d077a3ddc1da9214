//! Keyless TLS: private keys stay on a few key servers; gateways ask them for signatures.
//!
//! - [`protocol`]: the wire format (framing, version, request ids, opcodes, key ids, status
//!   codes), documented there.
//! - [`server`]: the key server (`sluice-keyserver`): TLS 1.3 with client certificates, keys
//!   per client, its own crypto dispatcher, back-pressure per connection, `/metrics`.
//! - [`client`]: the gateway's `keyless` engine: persistent multiplexed connections to
//!   several key servers, least-in-flight selection, ping health checks, a deadline per
//!   request, failover to the next key server; the offload dispatcher then falls back to the
//!   local key when the certificate has one.
//!
//! Dependencies point one way: this crate knows the offload layer, the crypto jobs and the
//! configuration's `[offload.keyless]` settings, and nothing of HTTP.

pub mod client;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod protocol;
pub mod server;
pub mod server_config;

pub use client::{Keyless, ServerStats};
pub use server::{KeyServer, ServerError, fingerprint, key_id_of, load_private_key};
pub use server_config::{ConfigError, ServerConfig};

#[cfg(test)]
mod tests;
