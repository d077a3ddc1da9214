//! Traffic mirroring on the admin listener: `sluice_mirror_*` families and `/status`'s and
//! the dashboard's `mirrors` (each route's mirror beside its primary).

use crate::Sources;
use serde_json::{Value, json};
use sluice_proxy::{MIRROR_FAILURES, MIRROR_SIDES, MIRROR_SKIPS, STATUS_CLASSES};
use std::fmt::Write as _;

/// The `sluice_mirror_*` families (none while no route mirrors).
pub(crate) fn metrics(out: &mut String, s: &Sources) {
    let mirrors = s.gateway.metrics().mirrors();
    if mirrors.is_empty() {
        return;
    }
    let labels = |m: &sluice_proxy::MirrorSnapshot| {
        format!("route=\"{}\",upstream=\"{}\"", m.route, m.upstream)
    };
    crate::family(
        out,
        "sluice_mirror_requests_total",
        "counter",
        "Copies sent to a route's mirror.",
    );
    for m in &mirrors {
        let _ = writeln!(
            out,
            "sluice_mirror_requests_total{{{}}} {}",
            labels(m),
            m.sent
        );
    }
    crate::family(
        out,
        "sluice_mirror_in_flight",
        "gauge",
        "Copies in flight to a route's mirror.",
    );
    for m in &mirrors {
        let _ = writeln!(
            out,
            "sluice_mirror_in_flight{{{}}} {}",
            labels(m),
            m.in_flight
        );
    }
    crate::family(
        out,
        "sluice_mirror_skipped_total",
        "counter",
        "Sampled requests not copied, by reason (busy: max_in_flight reached; body_too_large; body_incomplete; no_server).",
    );
    for m in &mirrors {
        for (i, r) in MIRROR_SKIPS.iter().enumerate() {
            let _ = writeln!(
                out,
                "sluice_mirror_skipped_total{{{},reason=\"{r}\"}} {}",
                labels(m),
                m.skipped[i]
            );
        }
    }
    crate::family(
        out,
        "sluice_mirror_failed_total",
        "counter",
        "Copies sent that failed, by reason.",
    );
    for m in &mirrors {
        for (i, r) in MIRROR_FAILURES.iter().enumerate() {
            let _ = writeln!(
                out,
                "sluice_mirror_failed_total{{{},reason=\"{r}\"}} {}",
                labels(m),
                m.failed[i]
            );
        }
    }
    crate::family(
        out,
        "sluice_mirror_responses_total",
        "counter",
        "Responses to mirrored requests by side (the mirror's copy, the primary's original) and status class.",
    );
    for m in &mirrors {
        for (side, name) in MIRROR_SIDES.iter().enumerate() {
            for (c, class) in STATUS_CLASSES.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "sluice_mirror_responses_total{{{},side=\"{name}\",class=\"{class}\"}} {}",
                    labels(m),
                    m.classes[side][c]
                );
            }
        }
    }
    crate::family(
        out,
        "sluice_mirror_response_seconds",
        "summary",
        "Time to the response of mirrored requests, by side (the mirror's whole response; the primary's head).",
    );
    for m in &mirrors {
        for (side, name) in MIRROR_SIDES.iter().enumerate() {
            let _ = writeln!(
                out,
                "sluice_mirror_response_seconds_sum{{{},side=\"{name}\"}} {}\nsluice_mirror_response_seconds_count{{{},side=\"{name}\"}} {}",
                labels(m),
                m.latency_us[side] as f64 / 1e6,
                labels(m),
                m.latency_n[side]
            );
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
