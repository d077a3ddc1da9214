//! Upstream groups and their policy: the group and its servers (`upstream`), balancing,
//! passive and active health, servers that follow DNS (`dns`), outlier ejection, retries, sticky sessions, request keys, the
//! HTTP/1.1 keep-alive pool (`conn_pool`) and TLS to servers (`upstream_tls`).

pub(crate) mod balance;
pub(crate) mod conn_pool;
pub(crate) mod dns;
pub(crate) mod health;
pub(crate) mod outlier;
pub(crate) mod request_key;
pub(crate) mod retry;
pub(crate) mod sticky;
pub(crate) mod upstream;
pub(crate) mod upstream_tls;
