//! `sluice_tls_*`: handshakes by version, resumption and transport, failures, and the
//! handshake scheduler (in progress, its limit, expired, where they ran).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use sluice_proxy::{ProxySnapshot, TLS_VERSIONS};

pub(super) fn handshakes(out: &mut Exposition, s: &Sources, p: &ProxySnapshot) {
    let name = "sluice_tls_handshakes_total";
    out.family(
        name,
        Kind::Counter,
        "Completed TLS handshakes, by version, resumption and transport (quic: HTTP/3, always TLSv1.3).",
    );
    for (v, version) in TLS_VERSIONS.iter().enumerate() {
        for (r, resumed) in ["false", "true"].iter().enumerate() {
            // QUIC's handshakes are TLSv1.3 ones too: counted in both, shown apart here.
            let quic = if *version == "TLSv1.3" {
                p.quic_handshakes[r]
            } else {
                0
            };
            let labels = |transport| {
                [
                    ("version", *version),
                    ("resumed", resumed),
                    ("transport", transport),
                ]
            };
            out.sample(
                name,
                &labels("tcp"),
                p.handshakes[v][r].saturating_sub(quic),
            );
            if *version == "TLSv1.3" {
                out.sample(name, &labels("quic"), quic);
            }
        }
    }
    out.single(
        "sluice_tls_handshake_failures_total",
        Kind::Counter,
        "TLS handshakes that failed or timed out.",
        p.handshake_failures,
    );
    scheduler(out, s);
}

/// The handshake scheduler: `[offload.handshakes]`.
fn scheduler(out: &mut Exposition, s: &Sources) {
    let hs = s.gateway.handshake_stats();
    out.single(
        "sluice_tls_handshakes_in_progress",
        Kind::Gauge,
        "TLS handshakes in progress now.",
        hs.in_progress,
    );
    out.single(
        "sluice_tls_handshakes_in_progress_limit",
        Kind::Gauge,
        "The most TLS handshakes in progress at once ([offload.handshakes] max_in_progress); more connections wait in the listen backlog.",
        hs.limit,
    );
    out.single(
        "sluice_tls_handshakes_expired_total",
        Kind::Counter,
        "TLS handshakes dropped unfinished after the listener's header_read_timeout.",
        hs.expired,
    );
    out.family_by(
        "sluice_tls_handshakes_placed_total",
        Kind::Counter,
        "TLS handshakes by where they ran: on the handshake threads (handed off while several were in progress) or on the event loop (alone, or not isolated).",
        "on",
        [("handshake_threads", hs.handed_off), ("event_loop", hs.kept_on_loop)],
    );
}
