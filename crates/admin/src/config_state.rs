//! The configuration's state as `/status`, `/metrics` and the dashboard show it: where it
//! came from, its revision, reloads and the last failure (with each located error). Its own
//! module because the admin API and the dashboard's data both report it.

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};
use sluice_control::{ReloadError, Status};
use std::time::SystemTime;

/// A failed reload as JSON: the message and every located error.
pub(crate) fn reload_error_json(e: &ReloadError) -> Value {
    json!({
        "result": "failed",
        "error": e.to_string(),
        "errors": e.errors().iter().map(|c| json!({
            "file": c.file, "line": c.line, "column": c.column,
            "message": c.message, "help": c.help,
        })).collect::<Vec<_>>(),
    })
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The `config` object of `/status`.
pub(crate) fn config_status(s: &Sources) -> Value {
    let snapshot = s.gateway.snapshot();
    let Some(control) = &s.control else {
        return json!({ "revision": snapshot.revision, "source": snapshot.source });
    };
    let Status {
        source,
        revision,
        loaded_at,
        last_failure,
        reloads_ok,
        reloads_failed,
    } = control.status();
    json!({
        "fleet": control.shared().map(|f| f.status()),
        "source": source,
        "revision": revision,
        "loaded_at": unix_seconds(loaded_at),
        "reloads": { "ok": reloads_ok, "failed": reloads_failed },
        "last_failure": last_failure.map(|f| {
            let mut v = reload_error_json(&f.error);
            v["at"] = json!(unix_seconds(f.at));
            v
        }),
    })
}

/// The configuration's families in `/metrics`.
pub(crate) fn config_metrics(out: &mut Exposition, s: &Sources) {
    let Some(control) = &s.control else { return };
    if let Some(store) = control.shared() {
        store.metrics(out.text());
    }
    let status = control.status();
    out.family_by(
        "sluice_config_reloads_total",
        Kind::Counter,
        "Configuration reloads, by result (failed: the old configuration kept serving).",
        "result",
        [("ok", status.reloads_ok), ("failed", status.reloads_failed)],
    );
    out.family_by(
        "sluice_config_info",
        Kind::Gauge,
        "The configuration serving, by revision (a content hash).",
        "revision",
        [(status.revision.as_str(), 1)],
    );
    out.single(
        "sluice_config_loaded_timestamp_seconds",
        Kind::Gauge,
        "When the serving configuration was loaded.",
        format_args!("{:.3}", unix_seconds(status.loaded_at)),
    );
}
