//! ACME certificates and OCSP stapling on `/status`, `/api/v1/stats` (the dashboard) and
//! `/metrics`: what each ACME certificate serves (placeholder or issued, until when), when it
//! is next ordered and how its orders went; whether each stapling certificate carries a
//! current staple, and how its fetches went.

use crate::exposition::{Exposition, Kind};
use serde_json::{Value, json};

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

/// `sluice_ocsp_*`, then `sluice_acme_*` (none while no certificate staples or is ACME's).
pub(crate) fn metrics(out: &mut Exposition) {
    ocsp_metrics(out);
    let all = sluice_tls::live().statuses();
    if all.is_empty() {
        return;
    }
    let family = "sluice_acme_orders_total";
    out.family(
        family,
        Kind::Counter,
        "ACME orders by outcome (issued: the certificate is in force).",
    );
    for (name, s) in &all {
        for (result, n) in [("issued", s.issued), ("failed", s.failures)] {
            out.sample(family, &[("certificate", name), ("result", result)], n);
        }
    }
    out.family_by(
        "sluice_acme_placeholder",
        Kind::Gauge,
        "1 while an ACME certificate's self-signed placeholder serves (no certificate from the CA yet).",
        "certificate",
        all.iter()
            .map(|(name, s)| (name.as_str(), u8::from(s.not_after.is_none()))),
    );
    out.family_by(
        "sluice_acme_certificate_expiry_timestamp_seconds",
        Kind::Gauge,
        "When the ACME certificate in force expires (Unix time).",
        "certificate",
        all.iter()
            .filter_map(|(name, s)| Some((name.as_str(), s.not_after?))),
    );
}

fn ocsp_metrics(out: &mut Exposition) {
    let all = sluice_tls::live().ocsp_statuses();
    if all.is_empty() {
        return;
    }
    out.family_by(
        "sluice_ocsp_stapled",
        Kind::Gauge,
        "1 while a certificate's handshakes carry a current OCSP response.",
        "certificate",
        all.iter()
            .map(|(name, s)| (name.as_str(), u8::from(s.stapled))),
    );
    let family = "sluice_ocsp_fetches_total";
    out.family(
        family,
        Kind::Counter,
        "OCSP fetches by outcome (ok: a response for this certificate, whatever its status).",
    );
    for (name, s) in &all {
        for (result, n) in [("ok", s.fetched), ("failed", s.failures)] {
            out.sample(family, &[("certificate", name), ("result", result)], n);
        }
    }
}
