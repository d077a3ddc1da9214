//! Traffic mirroring on the admin listener: `sluice_mirror_*` families and `/status`'s and
//! the dashboard's `mirrors` (each route's mirror beside its primary).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};
use sluice_proxy::{MIRROR_FAILURES, MIRROR_SIDES, MIRROR_SKIPS, MirrorSnapshot, STATUS_CLASSES};

/// The `sluice_mirror_*` families (none while no route mirrors).
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
    let mirrors = s.gateway.metrics().mirrors();
    if mirrors.is_empty() {
        return;
    }
    let name = "sluice_mirror_requests_total";
    out.family(name, Kind::Counter, "Copies sent to a route's mirror.");
    for m in &mirrors {
        out.sample(name, &labels(m, &[]), m.sent);
    }
    let name = "sluice_mirror_in_flight";
    out.family(name, Kind::Gauge, "Copies in flight to a route's mirror.");
    for m in &mirrors {
        out.sample(name, &labels(m, &[]), m.in_flight);
    }
    let name = "sluice_mirror_skipped_total";
    out.family(
        name,
        Kind::Counter,
        "Sampled requests not copied, by reason (busy: max_in_flight reached; body_too_large; body_incomplete; no_server).",
    );
    for m in &mirrors {
        for (r, n) in MIRROR_SKIPS.iter().zip(m.skipped) {
            out.sample(name, &labels(m, &[("reason", r)]), n);
        }
    }
    let name = "sluice_mirror_failed_total";
    out.family(name, Kind::Counter, "Copies sent that failed, by reason.");
    for m in &mirrors {
        for (r, n) in MIRROR_FAILURES.iter().zip(m.failed) {
            out.sample(name, &labels(m, &[("reason", r)]), n);
        }
    }
    responses(out, &mirrors);
}

/// A mirror's `route` and `upstream`, then `more`.
fn labels<'a>(m: &'a MirrorSnapshot, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = vec![
        ("route", m.route.as_str()),
        ("upstream", m.upstream.as_str()),
    ];
    all.extend_from_slice(more);
    all
}

/// The responses to mirrored requests, on each side: by class, and how long they took.
fn responses(out: &mut Exposition, mirrors: &[MirrorSnapshot]) {
    let name = "sluice_mirror_responses_total";
    out.family(
        name,
        Kind::Counter,
        "Responses to mirrored requests by side (the mirror's copy, the primary's original) and status class.",
    );
    for m in mirrors {
        for (side, side_name) in MIRROR_SIDES.iter().enumerate() {
            for (class, n) in STATUS_CLASSES.iter().zip(m.classes[side]) {
                out.sample(
                    name,
                    &labels(m, &[("side", side_name), ("class", class)]),
                    n,
                );
            }
        }
    }
    let name = "sluice_mirror_response_seconds";
    out.family(
        name,
        Kind::Summary,
        "Time to the response of mirrored requests, by side (the mirror's whole response; the primary's head).",
    );
    for m in mirrors {
        for (side, side_name) in MIRROR_SIDES.iter().enumerate() {
            let labels = labels(m, &[("side", side_name)]);
            let sum = m.latency_us[side] as f64 / 1e6;
            out.sample(&format!("{name}_sum"), &labels, sum);
            out.sample(&format!("{name}_count"), &labels, m.latency_n[side]);
        }
    }
}

/// Each mirror as JSON (`/status`, the dashboard).
pub(crate) fn status(s: &Sources) -> Value {
    let mirrors: Vec<Value> = s
        .gateway
        .metrics()
        .mirrors()
        .iter()
        .map(|m| {
            let side = |i: usize| {
                json!({
                    "classes": STATUS_CLASSES.iter().zip(m.classes[i]).map(|(k, v)| ((*k).to_owned(), v.into())).collect::<serde_json::Map<_, _>>(),
                    "mean_ms": (m.latency_n[i] > 0).then(|| m.latency_us[i] as f64 / m.latency_n[i] as f64 / 1e3),
                })
            };
            json!({
                "route": m.route, "upstream": m.upstream, "sent": m.sent, "in_flight": m.in_flight,
                "skipped": MIRROR_SKIPS.iter().zip(m.skipped).map(|(k, v)| ((*k).to_owned(), v.into())).collect::<serde_json::Map<_, _>>(),
                "failed": MIRROR_FAILURES.iter().zip(m.failed).map(|(k, v)| ((*k).to_owned(), v.into())).collect::<serde_json::Map<_, _>>(),
                "mirror": side(0), "primary": side(1),
            })
        })
        .collect();
    Value::Array(mirrors)
}
