//! End-to-end tests: real sockets on 127.0.0.1, real TLS (BoringSSL clients), real HTTP/1.1
//! and HTTP/2, in-process origin servers. One test binary, as linkerd does.

#![allow(
    unreachable_pub,
    reason = "test support items are shared between test modules"
)]

mod acme;
mod acme_dns;
mod admin_api;
pub(crate) mod auth;
mod auth_api;
mod balancing;
mod banner;
mod cache;
mod cli;
mod client_cert;
mod client_cert_chain;
mod compression;
mod dashboard;
pub(crate) mod differential;
mod dns;
mod fleet;
mod grpc;
mod header_integrity;
mod health;
mod host_sni;
mod http;
mod http1;
mod http3;
mod keepalive;
mod keyless;
pub(crate) mod layer4;
mod login_limits;
mod logs;
mod lua;
mod lua_families;
mod mirror;
mod mqtt;
mod mqtt_edges;
mod mqtt_identity;
mod mqtt_takeover;
mod mqtt_upgrade;
mod mqtt_ws;
mod mqtt_ws_admission;
pub(crate) mod ocsp;
mod offload;
mod path_policy;
mod policy;
mod rate_limit;
mod reload;
mod routing;
mod service;
mod support;
mod tls;
mod tracing;
mod upstream_mtls;
mod waf;
mod waf_native;
