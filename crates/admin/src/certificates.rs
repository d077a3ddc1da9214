//! ACME certificates and OCSP stapling on `/status`, `/api/v1/stats` (the dashboard) and
//! `/metrics`: what each ACME certificate serves (placeholder or issued, until when), when it
//! is next ordered and how its orders went; whether each stapling certificate carries a
//! current staple, and how its fetches went.

use serde_json::{Value, json};
use std::fmt::Write as _;

/// One entry per ACME certificate, by name.
pub(crate) fn status() -> Value {
    Value::Array(
        sluice_tls::live()
            .statuses()
            .into_iter()
            .map(|(name, s)| {
                json!({
                    "certificate": name, "names": s.names, "state": s.state,
                    "challenge": s.challenge, "not_after": s.not_after,
                    "next_attempt": s.next_attempt, "issued": s.issued, "failures": s.failures,
                    "consecutive_failures": s.consecutive_failures, "last_error": s.last_error,
                    "last_issued": s.last_issued,
                })
            })
            .collect(),
    )
}

/// One entry per certificate that staples, by name.
pub(crate) fn ocsp_status() -> Value {
    Value::Array(
        sluice_tls::live()
            .ocsp_statuses()
            .into_iter()
            .map(|(name, s)| {
                json!({
                    "certificate": name, "responder": s.responder, "state": s.state,
                    "stapled": s.stapled, "this_update": s.this_update,
                    "next_update": s.next_update, "next_fetch": s.next_fetch,
                    "fetched": s.fetched, "failures": s.failures, "last_error": s.last_error,
                })
            })
            .collect(),
    )
}

use crate::label;

pub(crate) fn metrics(out: &mut String) {
    ocsp_metrics(out);
    let all = sluice_tls::live().statuses();
    if all.is_empty() {
        return;
    }
    crate::family(
        out,
        "sluice_acme_orders_total",
        "counter",
        "ACME orders by outcome (issued: the certificate is in force).",
    );
    for (name, s) in &all {
        for (result, n) in [("issued", s.issued), ("failed", s.failures)] {
            let _ = writeln!(
                out,
                "sluice_acme_orders_total{{certificate=\"{}\",result=\"{result}\"}} {n}",
                label(name)
            );
        }
    }
    crate::family(
        out,
        "sluice_acme_placeholder",
        "gauge",
        "1 while an ACME certificate's self-signed placeholder serves (no certificate from the CA yet).",
    );
    for (name, s) in &all {
        let _ = writeln!(
            out,
            "sluice_acme_placeholder{{certificate=\"{}\"}} {}",
            label(name),
            u8::from(s.not_after.is_none())
        );
    }
    crate::family(
        out,
        "sluice_acme_certificate_expiry_timestamp_seconds",
        "gauge",
        "When the ACME certificate in force expires (Unix time).",
    );
    for (name, s) in all.iter().filter(|(_, s)| s.not_after.is_some()) {
        let _ = writeln!(
            out,
            "sluice_acme_certificate_expiry_timestamp_seconds{{certificate=\"{}\"}} {}",
            label(name),
            s.not_after.unwrap_or_default()
        );
    }
}

fn ocsp_metrics(out: &mut String) {
    let all = sluice_tls::live().ocsp_statuses();
    if all.is_empty() {
        return;
    }
    crate::family(
        out,
        "sluice_ocsp_stapled",
        "gauge",
        "1 while a certificate's handshakes carry a current OCSP response.",
    );
    for (name, s) in &all {
        let _ = writeln!(
            out,
            "sluice_ocsp_stapled{{certificate=\"{}\"}} {}",
            label(name),
            u8::from(s.stapled)
        );
    }
    crate::family(
        out,
        "sluice_ocsp_fetches_total",
        "counter",
        "OCSP fetches by outcome (ok: a response for this certificate, whatever its status).",
    );
    for (name, s) in &all {
        for (result, n) in [("ok", s.fetched), ("failed", s.failures)] {
            let _ = writeln!(
                out,
                "sluice_ocsp_fetches_total{{certificate=\"{}\",result=\"{result}\"}} {n}",
                label(name)
            );
        }
    }
}
