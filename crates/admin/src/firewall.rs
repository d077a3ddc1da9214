//! The WAF on the admin listener: `sluice_waf_*` families and `/status`'s and the
//! dashboard's `waf` (each WAF route's inspections, blocks, detections, saturation and body
//! limit outcomes, and its most matched rules).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};

/// One counter of a route.
type Reading = fn(&sluice_waf::StatsSnapshot) -> u64;

/// The rules listed per route in `/status` (the most matched first).
const TOP_RULES: usize = 10;

/// The `sluice_waf_*` families (none while no route has `[route.waf]`).
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
    let Some(waf) = s.gateway.waf() else {
        return;
    };
    let mut routes: Vec<(&str, sluice_waf::StatsSnapshot)> =
        waf.stats().map(|(r, st)| (r, st.snapshot())).collect();
    routes.sort_by(|a, b| a.0.cmp(b.0));
    let counters: [(&str, &str, Reading); 10] = [
        (
            "sluice_waf_inspected_total",
            "Requests the route's rules evaluated.",
            |c| c.inspected,
        ),
        (
            "sluice_waf_inspected_inline_total",
            "Of the requests evaluated, those evaluated on the event loop's thread (inline_percent).",
            |c| c.inline,
        ),
        (
            "sluice_waf_responses_inspected_total",
            "Responses the route's rules evaluated (inspect_response).",
            |c| c.responses,
        ),
        (
            "sluice_waf_blocked_total",
            "Requests a rule refused (mode block), at the request or at its response.",
            |c| c.blocked,
        ),
        (
            "sluice_waf_detected_total",
            "Requests forwarded with at least one rule matched (mode detect, or below the threshold).",
            |c| c.detected,
        ),
        (
            "sluice_waf_overload_open_total",
            "Requests (or responses) forwarded uninspected: the WAF was saturated (on_overload = \"open\").",
            |c| c.overload_open,
        ),
        (
            "sluice_waf_overload_closed_total",
            "Requests (or responses) refused with 503: the WAF was saturated (on_overload = \"closed\").",
            |c| c.overload_closed,
        ),
        (
            "sluice_waf_faults_total",
            "Requests (or responses) the engine failed on (a fault caught on its thread), then forwarded or refused as on_overload says.",
            |c| c.faults,
        ),
        (
            "sluice_waf_body_rejected_total",
            "Requests refused with 413: body over request_body_limit.",
            |c| c.body_rejected,
        ),
        (
            "sluice_waf_body_partial_total",
            "Requests whose body was inspected only up to request_body_limit and forwarded whole (inspect_partial, or mode detect).",
            |c| c.body_partial,
        ),
    ];
    for (name, help, get) in counters {
        let values = routes.iter().map(|(route, c)| (*route, get(c)));
        out.family_by(name, Kind::Counter, help, "route", values);
    }
    let name = "sluice_waf_rule_matches_total";
    out.family(
        name,
        Kind::Counter,
        "Matches of each rule, by route and rule id.",
    );
    for (route, c) in &routes {
        for (id, n) in &c.rules {
            out.sample(name, &[("route", route), ("rule", &id.to_string())], n);
        }
    }
    out.single(
        "sluice_waf_in_flight",
        Kind::Gauge,
        "Requests waiting for or in evaluation.",
        waf.in_flight(),
    );
}

/// `/status`'s `waf`: per route, its engine, counters and top rules; `null` without a WAF
/// route. The top-level `engine` is libmodsecurity's version line.
pub(crate) fn status(s: &Sources) -> Value {
    let Some(waf) = s.gateway.waf() else {
        return Value::Null;
    };
    let mut routes: Vec<Value> = waf
        .stats()
        .map(|(route, st)| {
            let c = st.snapshot();
            let mut top: Vec<(u32, u64)> = c.rules.iter().map(|(id, n)| (*id, *n)).collect();
            top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            top.truncate(TOP_RULES);
            json!({
                "route": route,
                "engine": waf.route(route).map(|f| f.engine()),
                "inspected": c.inspected,
                "inspected_inline": c.inline,
                "responses_inspected": c.responses,
                "blocked": c.blocked,
                "detected": c.detected,
                "overload_open": c.overload_open,
                "overload_closed": c.overload_closed,
                "faults": c.faults,
                "body_rejected": c.body_rejected,
                "body_partial": c.body_partial,
                "mean_us": c.inspect_us.checked_div(c.inspected + c.responses),
                "top_rules": top.iter().map(|(id, n)| json!({ "id": id, "matches": n })).collect::<Vec<_>>(),
            })
        })
        .collect();
    routes.sort_by(|a, b| a["route"].as_str().cmp(&b["route"].as_str()));
    json!({ "engine": sluice_waf::version(), "in_flight": waf.in_flight(), "routes": routes })
}
