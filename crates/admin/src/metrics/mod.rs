//! `/metrics`: every section's families, in the order a scrape has always shown them.
//!
//! Each section is one function that reads its counters and writes its families through
//! [`Exposition`](crate::exposition::Exposition). The sections about the request path and
//! the gateway's connections are here; those of a concern the admin listener also shows on
//! `/status` (the cache, mirrors, auth, Lua, the WAF, tracing, the request log, upstream
//! health, certificates, the configuration) are beside its status, in that concern's module.
//! A new family goes in its section; a new section is one more line in [`render`].

mod connections;
mod http;
mod offload;
mod rate_limit;
mod tls;

use crate::Sources;
use crate::exposition::Exposition;

/// The Prometheus text exposition.
pub(crate) fn render(s: &Sources) -> String {
    let mut out = Exposition::new();
    // One snapshot of the data plane's counters, so that the sections agree with each other.
    let p = s.gateway.metrics().snapshot();
    tls::handshakes(&mut out, s, &p);
    http::traffic(&mut out, s, &p);
    offload::cpu_saved(&mut out, s);
    http::upstream_errors(&mut out, &p);
    rate_limit::metrics(&mut out, s);
    connections::refused(&mut out, &p);
    connections::tcp(&mut out, &p);
    crate::mqtt::metrics(&mut out, s, &p.mqtt);
    connections::proxy_protocol(&mut out, &p);
    connections::quic(&mut out, &p);
    http::policy(&mut out, s, &p);
    offload::engines(&mut out, s);
    offload::compression(&mut out, s);
    crate::cache::metrics(&mut out, s);
    crate::mirror::metrics(&mut out, s);
    crate::auth::metrics(&mut out, s);
    crate::scripting::metrics(&mut out, s);
    crate::firewall::metrics(&mut out, s);
    crate::tracing_export::metrics(&mut out, s);
    crate::requests::metrics(&mut out, s);
    offload::key_servers(&mut out, s);
    crate::health::metrics(&mut out, s);
    crate::certificates::metrics(&mut out);
    crate::config_state::config_metrics(&mut out, s);
    out.finish()
}
