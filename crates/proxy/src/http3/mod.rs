//! HTTP/3 over QUIC (RFC 9114, RFC 9000), on Cloudflare's quiche under Sluice's own UDP loop.
//!
//! - `endpoint`: a listener's UDP socket (the same port number as its TCP one): datagrams to
//!   their connections by connection ID, new connections accepted, bad packets dropped and
//!   counted;
//! - `connection`: one connection's task, which drives quiche and HTTP/3 and runs each
//!   request through the same handler as HTTP/1.1 and HTTP/2;
//! - `message`: header sections to and from `http` types, checked strictly;
//! - `steering`: connection IDs that name their process, and the kernel-side selector that
//!   keeps each connection's datagrams with its process while `sluice upgrade` runs two.
//!
//! Why quiche directly and not `tokio-quiche`: tokio-quiche (0.20) brings Cloudflare's
//! `foundations` telemetry stack and runs each connection in its own worker behind an
//! application trait, with the TLS context built once per socket from certificate paths;
//! here the TLS context is the listener's own (SNI credentials, ticket keys, ACME slots),
//! rebuilt on reload, and a connection's handshake must run inside its task so that the
//! private-key operation goes to the offload layer and wakes that task
//! (`sluice_tls::QuicHandshake`). quiche's `Connection` and `h3::Connection` give exactly
//! that with no runtime of their own. quinn/h3 is no alternative: rustls signs
//! synchronously.

mod connection;
mod endpoint;
mod message;
mod steering;

pub(crate) use endpoint::{bind, run};
pub use steering::set_generation;
