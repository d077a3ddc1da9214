//! Connections before any request: refused at accept, `kind = "tcp"` listeners' outcomes,
//! PROXY protocol headers, and QUIC's handshakes, connections, retries and drops.

use crate::exposition::{Exposition, Kind};
use sluice_proxy::{PROXY_PROTOCOL_OUTCOMES, ProxySnapshot, QUIC_DROPPED, TCP_OUTCOMES};

pub(super) fn refused(out: &mut Exposition, p: &ProxySnapshot) {
    out.family_by(
        "sluice_connections_refused_total",
        Kind::Counter,
        "Connections closed at accept by a listener's max_connections or max_connections_per_client.",
        "reason",
        ["listener_limit", "client_limit"]
            .into_iter()
            .zip(p.connections_refused),
    );
}

pub(super) fn tcp(out: &mut Exposition, p: &ProxySnapshot) {
    out.family_by(
        "sluice_tcp_connections_total",
        Kind::Counter,
        "Connections of kind = \"tcp\" listeners by outcome: proxied, denied (allow/deny), bad_client_hello (passthrough), no_upstream (a server name no passthrough entry takes), upstream_unavailable (no server could be connected to).",
        "outcome",
        TCP_OUTCOMES.iter().copied().zip(p.tcp),
    );
}

pub(super) fn proxy_protocol(out: &mut Exposition, p: &ProxySnapshot) {
    out.family_by(
        "sluice_proxy_protocol_total",
        Kind::Counter,
        "Connections of proxy_protocol listeners: header accepted, peer not in trusted_proxies (closed), header malformed or missing (closed), none within header_read_timeout (closed).",
        "outcome",
        PROXY_PROTOCOL_OUTCOMES.iter().copied().zip(p.proxy_protocol),
    );
}

pub(super) fn quic(out: &mut Exposition, p: &ProxySnapshot) {
    out.family_by(
        "sluice_quic_handshakes_total",
        Kind::Counter,
        "QUIC (HTTP/3) handshakes completed, by whether the session was resumed; also in sluice_tls_handshakes_total{transport=\"quic\"}.",
        "resumed",
        ["false", "true"].into_iter().zip(p.quic_handshakes),
    );
    out.single(
        "sluice_quic_connections_open",
        Kind::Gauge,
        "QUIC (HTTP/3) connections open now, handshakes in progress included.",
        p.quic_open,
    );
    out.single(
        "sluice_quic_retries_total",
        Kind::Counter,
        "QUIC Retry packets sent: new connections asked to prove their address (quic_retry).",
        p.quic_retries,
    );
    out.family_by(
        "sluice_quic_packets_dropped_total",
        Kind::Counter,
        "QUIC datagrams dropped by the endpoint: unparsable, unknown_connection (not an Initial, for no connection), bad_initial (under 1200 bytes or a short connection ID), queue_full (the connection's queue), accept_failed, draining (a new connection while the listener drains), bad_token (an Initial whose token is not our Retry's while address validation is required).",
        "reason",
        QUIC_DROPPED.iter().copied().zip(p.quic_dropped),
    );
}
