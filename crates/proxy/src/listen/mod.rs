//! A client connection once accepted: TLS, the choice of HTTP/1.1 or HTTP/2, the connection's
//! timers and graceful end (`connection`), connection limits (`conn_limit`), TLS write
//! coalescing (`coalesce`) and
//! the gate that keeps a connection's rare signals from being polled on every wake (`wake_gate`).
//! Accepting itself, and moving to a new configuration, is `gateway`'s, one level up: it hands
//! each connection here or to `layer4`.

pub(crate) mod coalesce;
pub(crate) mod conn_limit;
pub(crate) mod connection;
pub(crate) mod h2_streams;
pub(crate) mod wake_gate;
