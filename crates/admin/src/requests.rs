//! The access log on the admin listener: the in-memory request log searched by
//! `GET /api/v1/requests`, and what the `[[log.ship]]` shippers did (`sluice_log_ship_*`,
//! `/status`'s `log_shipping` and `request_log`).

use crate::api::{Reply, error};
use crate::{Sources, label};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::SystemTime;

/// `GET /api/v1/requests?status=5xx&route=api&since=10m&trace_id=…&sort=slowest&limit=50`.
pub(crate) fn search(s: &Sources, query: Option<&str>) -> Reply {
    let q = match sluice_proxy::RequestQuery::parse(query.unwrap_or(""), SystemTime::now()) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let log = s.gateway.access_log();
    let (found, matched) = log.recent().query(&q);
    let st = log.recent().stats();
    // The entries are JSON already (the access log's lines); they are joined, not re-parsed.
    let mut body = String::with_capacity(64 + found.iter().map(|l| l.len() + 1).sum::<usize>());
    body.push_str("{\"requests\":[");
    for (i, line) in found.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(line);
    }
    let _ = writeln!(
        body,
        "],\"matched\":{matched},\"kept\":{},\"bytes\":{},\"budget\":{}}}",
        st.entries, st.bytes, st.budget
    );
    let mut r = http::Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(crate) fn metrics(out: &mut String, s: &Sources) {
    let log = s.gateway.access_log();
    let st = log.recent().stats();
    crate::family(
        out,
        "sluice_request_log_entries",
        "gauge",
        "Requests kept in memory for /api/v1/requests.",
    );
    let _ = writeln!(out, "sluice_request_log_entries {}", st.entries);
    crate::family(
        out,
        "sluice_request_log_bytes",
        "gauge",
        "Memory the kept requests take, against [log] request_log.",
    );
    let _ = writeln!(out, "sluice_request_log_bytes {}", st.bytes);
    crate::family(
        out,
        "sluice_request_log_evicted_total",
        "counter",
        "Kept requests evicted (oldest first) to stay within [log] request_log.",
    );
    let _ = writeln!(out, "sluice_request_log_evicted_total {}", st.evicted_total);
    let shippers = log.shippers();
    if shippers.is_empty() {
        return;
    }
    crate::family(
        out,
        "sluice_log_ship_lines_total",
        "counter",
        "Access log lines per [[log.ship]] by outcome: sent; dropped (the queue was full: the store was slow or down); rejected (the store refused them).",
    );
    for sh in &shippers {
        for (outcome, n) in [
            ("sent", sh.sent),
            ("dropped", sh.dropped),
            ("rejected", sh.rejected),
        ] {
            let _ = writeln!(
                out,
                "sluice_log_ship_lines_total{{shipper=\"{}\",outcome=\"{outcome}\"}} {n}",
                label(&sh.name)
            );
        }
    }
    crate::family(
        out,
        "sluice_log_ship_failures_total",
        "counter",
        "Sends to a log store or syslog server that failed (each retried with back-off).",
    );
    for sh in &shippers {
        let _ = writeln!(
            out,
            "sluice_log_ship_failures_total{{shipper=\"{}\"}} {}",
            label(&sh.name),
            sh.failures
        );
    }
    crate::family(
        out,
        "sluice_log_ship_queue_bytes",
        "gauge",
        "Bytes of access log lines waiting to be shipped (bounded by the shipper's queue).",
    );
    for sh in &shippers {
        let _ = writeln!(
            out,
            "sluice_log_ship_queue_bytes{{shipper=\"{}\"}} {}",
            label(&sh.name),
            sh.queued_bytes
        );
    }
}

/// `/status`'s `log_shipping`: one object per shipper.
pub(crate) fn shipping_status(s: &Sources) -> Value {
    s.gateway
        .access_log()
        .shippers()
        .iter()
        .map(|sh| {
            json!({
                "name": sh.name,
                "kind": sh.kind,
                "target": sh.target,
                "sent": sh.sent,
                "dropped": sh.dropped,
                "rejected": sh.rejected,
                "batches": sh.batches,
                "failures": sh.failures,
                "queued_bytes": sh.queued_bytes,
                "queue_limit": sh.queue_limit,
                "last_error": sh.last_error,
            })
        })
        .collect()
}

/// `/status`'s `request_log`.
pub(crate) fn request_log_status(s: &Sources) -> Value {
    let st = s.gateway.access_log().recent().stats();
    json!({
        "entries": st.entries,
        "bytes": st.bytes,
        "budget": st.budget,
        "kept_total": st.kept_total,
        "evicted_total": st.evicted_total,
    })
}
