//! Upstream health on the admin listener: `GET /api/v1/upstreams/{name}/health`, the
//! `upstreams` object of `/status` and the `sluice_upstream_*` metrics.

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};
use sluice_proxy::UpstreamHealth;
use std::time::SystemTime;

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One upstream's health document, or `None` if no upstream has that name.
pub(crate) fn upstream(s: &Sources, name: &str) -> Option<Value> {
    let h = s
        .gateway
        .upstream_health()
        .into_iter()
        .find(|h| h.name == name)?;
    Some(document(&h))
}

/// What following DNS shows: each name's addresses, lookups, failures, changes.
fn dns(h: &UpstreamHealth) -> Value {
    h.dns.as_ref().map_or(Value::Null, |d| {
        json!({
            "names": d.names.iter().map(|(n, a)| json!({
                "name": n,
                "addresses": a.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "lookups": d.lookups,
            "failures": d.failures,
            "changes": d.changes,
            "last_error": d.last_error,
        })
    })
}

fn document(h: &UpstreamHealth) -> Value {
    json!({
        "dns": dns(h),
        "upstream": h.name,
        "health_check": h.checked,
        "fail_open_requests": h.fail_open,
        "ejections": h.ejections,
        "ejections_capped": h.ejections_capped,
        "queued": h.queued,
        "servers": h.servers.iter().map(|s| json!({
            "address": s.address,
            "state": if s.up { "up" } else { "down" },
            "reason": s.reason,
            "since": unix_seconds(s.since),
            "in_flight": s.in_flight,
        })).collect::<Vec<_>>(),
    })
}

/// `/status`'s summary: servers up and down per upstream (the full list is in the API).
pub(crate) fn status(s: &Sources) -> Value {
    Value::Array(
        s.gateway
            .upstream_health()
            .iter()
            .map(|h| {
                let up = h.servers.iter().filter(|s| s.up).count();
                json!({
                    "name": h.name,
                    "health_check": h.checked,
                    "servers_up": up,
                    "servers_down": h.servers.len() - up,
                    "fail_open_requests": h.fail_open,
                    "dns": dns(h),
                    "down": h.servers.iter().filter(|s| !s.up).map(|s| json!({
                        "address": s.address, "reason": s.reason, "since": unix_seconds(s.since),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The `sluice_upstream_*` families of each upstream and server (none without upstreams).
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
    let all = s.gateway.upstream_health();
    if all.is_empty() {
        return;
    }
    servers(out, &all);
    let name = "sluice_upstream_ejections_total";
    out.family(
        name,
        Kind::Counter,
        "Outlier ejections of upstream servers, by whether max_ejected_percent allowed them.",
    );
    for h in &all {
        for (result, v) in [("ejected", h.ejections), ("capped", h.ejections_capped)] {
            out.sample(name, &[("upstream", &h.name), ("result", result)], v);
        }
    }
    out.family_by(
        "sluice_upstream_fail_open_total",
        Kind::Counter,
        "Requests sent to a server marked down because every server of the upstream was down.",
        "upstream",
        all.iter().map(|h| (h.name.as_str(), h.fail_open)),
    );
    if all.iter().any(|h| h.dns.is_some()) {
        dns_metrics(out, &all);
    }
}

/// Each server's state and requests in flight.
fn servers(out: &mut Exposition, all: &[UpstreamHealth]) {
    type Reading = fn(&sluice_proxy::ServerHealthReport) -> u64;
    let families: [(&str, &str, Reading); 2] = [
        (
            "sluice_upstream_server_up",
            "Whether an upstream server is in use (1) or skipped by health checks or passive marks (0).",
            |sv| u64::from(sv.up),
        ),
        (
            "sluice_upstream_server_in_flight",
            "Requests in flight to an upstream server.",
            |sv| sv.in_flight as u64,
        ),
    ];
    for (name, help, get) in families {
        out.family(name, Kind::Gauge, help);
        for h in all {
            for sv in &h.servers {
                out.sample(
                    name,
                    &[("upstream", &h.name), ("server", &sv.address)],
                    get(sv),
                );
            }
        }
    }
}

/// The upstreams that follow DNS: lookups by result, and changes.
fn dns_metrics(out: &mut Exposition, all: &[UpstreamHealth]) {
    let name = "sluice_upstream_dns_lookups_total";
    out.family(
        name,
        Kind::Counter,
        "DNS lookups of upstream servers with resolve = true, by result (a failure keeps the last good addresses).",
    );
    for h in all {
        let Some(d) = &h.dns else { continue };
        for (result, v) in [
            ("ok", d.lookups - d.failures.min(d.lookups)),
            ("failed", d.failures),
        ] {
            out.sample(name, &[("upstream", &h.name), ("result", result)], v);
        }
    }
    out.family_by(
        "sluice_upstream_dns_changes_total",
        Kind::Counter,
        "Times DNS changed an upstream's servers.",
        "upstream",
        all.iter()
            .filter_map(|h| Some((h.name.as_str(), h.dns.as_ref()?.changes))),
    );
}
