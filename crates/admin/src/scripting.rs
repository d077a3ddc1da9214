//! Lua on the admin listener: `sluice_lua_*` families and `/status`'s and the dashboard's
//! `lua` (each script's calls, errors, budget stops and time; the shared dictionaries).

use crate::Sources;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// One counter of a script.
type Reading = fn(&sluice_lua::stats::ScriptStats) -> u64;

/// The `sluice_lua_*` families (none before any script has been loaded).
pub(crate) fn metrics(out: &mut String, s: &Sources) {
    let scripts = sluice_lua::stats::all();
    if scripts.is_empty() {
        return;
    }
    let counters: [(&str, &str, Reading); 6] = [
        (
            "sluice_lua_calls_total",
            "Calls of each route's script, by phase.",
            |c| c.calls(),
        ),
        (
            "sluice_lua_errors_total",
            "Calls that raised an error (answered 500 where the phase could; the traceback is in the log).",
            |c| c.errors.load(Ordering::Relaxed),
        ),
        (
            "sluice_lua_stopped_total",
            "Calls stopped at their instruction budget ([lua] max_instructions).",
            |c| c.stopped.load(Ordering::Relaxed),
        ),
        (
            "sluice_lua_exits_total",
            "Calls that ended the request themselves (ngx.exit, ngx.redirect, output).",
            |c| c.exits.load(Ordering::Relaxed),
        ),
        (
            "sluice_lua_outbound_total",
            "Outbound requests scripts made (resty.http), through the gateway's upstream pools.",
            |c| c.outbound.load(Ordering::Relaxed),
        ),
        (
            "sluice_lua_outbound_failures_total",
            "Outbound requests that got no response (no upstream or server, refused, timed out, too large).",
            |c| c.outbound_failures.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, get) in counters {
        crate::family(out, name, "counter", help);
        for (route, phase, c) in &scripts {
            let _ = writeln!(
                out,
                "{name}{{route=\"{route}\",phase=\"{}\"}} {}",
                phase.name(),
                get(c)
            );
        }
    }
    crate::family(
        out,
        "sluice_lua_call_seconds",
        "histogram",
        "Time each call of a route's script took, by phase.",
    );
    for (route, phase, c) in &scripts {
        let labels = format!("route=\"{route}\",phase=\"{}\"", phase.name());
        let mut cumulative = 0;
        for (i, bound) in sluice_lua::stats::TIME_BUCKETS_US.iter().enumerate() {
            cumulative += c.buckets[i].load(Ordering::Relaxed);
            let le = *bound as f64 / 1e6;
            let _ = writeln!(
                out,
                "sluice_lua_call_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
            );
        }
        let all = c.calls();
        let _ = writeln!(
            out,
            "sluice_lua_call_seconds_bucket{{{labels},le=\"+Inf\"}} {all}"
        );
        let sum = c.time_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "sluice_lua_call_seconds_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "sluice_lua_call_seconds_count{{{labels}}} {all}");
    }
    crate::family(
        out,
        "sluice_lua_timer_failures_total",
        "counter",
        "ngx.timer.at callbacks that raised an error.",
    );
    let _ = writeln!(
        out,
        "sluice_lua_timer_failures_total {}",
        sluice_lua::stats::timer_failures()
    );
    if let Some(rt) = s.gateway.lua() {
        crate::family(
            out,
            "sluice_lua_shared_dict_bytes",
            "gauge",
            "Bytes each ngx.shared dictionary holds, and its capacity.",
        );
        for (name, used, cap) in rt.dictionaries() {
            let _ = writeln!(
                out,
                "sluice_lua_shared_dict_bytes{{dict=\"{name}\",kind=\"used\"}} {used}"
            );
            let _ = writeln!(
                out,
                "sluice_lua_shared_dict_bytes{{dict=\"{name}\",kind=\"capacity\"}} {cap}"
            );
        }
        crate::family(
            out,
            "sluice_lua_state_bytes",
            "gauge",
            "Bytes each worker's Lua state holds.",
        );
        for (i, bytes) in rt.memory().iter().enumerate() {
            let _ = writeln!(out, "sluice_lua_state_bytes{{state=\"{i}\"}} {bytes}");
        }
    }
}

/// `/status`'s and the dashboard's `lua`: each script's counts and mean time; the
/// dictionaries' use.
pub(crate) fn status(s: &Sources) -> Value {
    let scripts: Vec<Value> = sluice_lua::stats::all()
        .iter()
        .map(|(route, phase, c)| {
            let calls = c.calls();
            let mean_us = c.time_us.load(Ordering::Relaxed).checked_div(calls);
            json!({
                "route": route,
                "phase": phase.name(),
                "calls": calls,
                "errors": c.errors.load(Ordering::Relaxed),
                "stopped": c.stopped.load(Ordering::Relaxed),
                "exits": c.exits.load(Ordering::Relaxed),
                "outbound": c.outbound.load(Ordering::Relaxed),
                "outbound_failures": c.outbound_failures.load(Ordering::Relaxed),
                "mean_us": mean_us,
            })
        })
        .collect();
    let dicts: Vec<Value> = s
        .gateway
        .lua()
        .map(|rt| {
            rt.dictionaries()
                .into_iter()
                .map(|(name, used, cap)| json!({ "name": name, "used": used, "capacity": cap }))
                .collect()
        })
        .unwrap_or_default();
    json!({ "scripts": scripts, "shared_dicts": dicts })
}
