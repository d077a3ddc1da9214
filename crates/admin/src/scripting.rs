//! Lua on the admin listener: `sluice_lua_*` families and `/status`'s and the dashboard's
//! `lua` (each script's calls, errors, budget stops and time; the shared dictionaries).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// One counter of a script.
type Reading = fn(&sluice_lua::stats::ScriptStats) -> u64;

/// The `sluice_lua_*` families (none before any script has been loaded).
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
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
        out.family(name, Kind::Counter, help);
        for (route, phase, c) in &scripts {
            out.sample(name, &[("route", route), ("phase", phase.name())], get(c));
        }
    }
    let name = "sluice_lua_call_seconds";
    out.family(
        name,
        Kind::Histogram,
        "Time each call of a route's script took, by phase.",
    );
    for (route, phase, c) in &scripts {
        let bounds = sluice_lua::stats::TIME_BUCKETS_US.iter().enumerate();
        let buckets = bounds.map(|(i, b)| (*b as f64 / 1e6, c.buckets[i].load(Ordering::Relaxed)));
        let sum = c.time_us.load(Ordering::Relaxed) as f64 / 1e6;
        let labels = [("route", route.as_str()), ("phase", phase.name())];
        out.histogram(name, &labels, buckets, sum, c.calls());
    }
    out.single(
        "sluice_lua_timer_failures_total",
        Kind::Counter,
        "ngx.timer.at callbacks that raised an error.",
        sluice_lua::stats::timer_failures(),
    );
    out.single(
        "sluice_lua_refused_total",
        Kind::Counter,
        "Script calls refused (each a 500) because another call had held their worker's Lua state for over a second, stuck in a C function.",
        sluice_lua::stats::refused_count(),
    );
    if let Some(rt) = s.gateway.lua() {
        memory(out, &rt);
    }
}

/// The shared dictionaries' and the Lua states' memory.
fn memory(out: &mut Exposition, rt: &sluice_lua::LuaRuntime) {
    let name = "sluice_lua_shared_dict_bytes";
    out.family(
        name,
        Kind::Gauge,
        "Bytes each ngx.shared dictionary holds, and its capacity.",
    );
    for (dict, used, cap) in rt.dictionaries() {
        out.sample(name, &[("dict", &dict), ("kind", "used")], used);
        out.sample(name, &[("dict", &dict), ("kind", "capacity")], cap);
    }
    let states = rt.memory();
    let states: Vec<(String, &usize)> = states
        .iter()
        .enumerate()
        .map(|(i, bytes)| (i.to_string(), bytes))
        .collect();
    out.family_by(
        "sluice_lua_state_bytes",
        Kind::Gauge,
        "Bytes each worker's Lua state holds.",
        "state",
        states.iter().map(|(i, bytes)| (i.as_str(), *bytes)),
    );
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
