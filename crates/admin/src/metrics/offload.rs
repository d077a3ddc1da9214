//! The offload engines: the event-loop CPU they saved, each engine's jobs (one set of
//! families across services, told apart by `service`), compression's results, and the
//! `keyless` engine's key servers.

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use sluice_compress::{ByteCount, Codec, SkipReason};
use sluice_offload::{CountersSnapshot, FallbackReason, FlushReason};

pub(super) fn cpu_saved(out: &mut Exposition, s: &Sources) {
    out.family_by(
        "sluice_offload_cpu_saved_seconds_total",
        Kind::Counter,
        "Event-loop CPU the offload engines saved: each job they ran, at its inline cost measured on this machine.",
        "service",
        [
            ("crypto", s.gateway.key_offload().cpu_saved()),
            ("compress", s.gateway.compressor().cpu_saved()),
        ]
        .map(|(service, saved)| (service, saved.as_secs_f64())),
    );
}

/// One counter of an engine.
type Reading = fn(&CountersSnapshot) -> i64;

/// The families of each engine's jobs: name, type, help, count.
const JOBS: [(&str, Kind, &str, Reading); 5] = [
    (
        "sluice_offload_jobs_submitted_total",
        Kind::Counter,
        "Jobs an engine accepted.",
        |c| c.submitted as i64,
    ),
    (
        "sluice_offload_jobs_completed_total",
        Kind::Counter,
        "Jobs an engine completed correctly.",
        |c| c.completed as i64,
    ),
    (
        "sluice_offload_jobs_failed_total",
        Kind::Counter,
        "Jobs an engine accepted and failed (errors, wrong results, missed deadlines).",
        |c| c.failed as i64,
    ),
    (
        "sluice_offload_jobs_in_flight",
        Kind::Gauge,
        "Jobs accepted and not finished.",
        |c| c.in_flight,
    ),
    (
        "sluice_offload_jobs_routed_past_total",
        Kind::Counter,
        "Jobs passed to the next engine by design: ones this engine never takes (an ECDSA key past mb, a key a key server does not hold). Routing, not a fault.",
        |c| c.routed_past as i64,
    ),
];

/// The `sluice_offload_jobs_*` and batch families, each written once with a `service` label
/// per offload service.
pub(super) fn engines(out: &mut Exposition, s: &Sources) {
    let services = [
        ("crypto", s.gateway.key_offload().counters()),
        ("compress", s.gateway.compressor().engine_counters()),
    ];
    let engines: Vec<(&str, &CountersSnapshot)> = services
        .iter()
        .flat_map(|(s, list)| list.iter().map(move |c| (*s, c)))
        .collect();
    for (name, kind, help, value) in JOBS {
        out.family(name, kind, help);
        for &(service, c) in &engines {
            out.sample(
                name,
                &[("service", service), ("engine", c.engine.as_str())],
                value(c),
            );
        }
    }
    let name = "sluice_offload_jobs_fell_back_total";
    out.family(
        name,
        Kind::Counter,
        "Jobs that left an engine for the next one because something went wrong there, by reason.",
    );
    for &(service, c) in &engines {
        for r in FallbackReason::ALL {
            let labels = [
                ("service", service),
                ("engine", c.engine.as_str()),
                ("reason", r.as_str()),
            ];
            out.sample(name, &labels, c.fell_back(r));
        }
    }
    let name = "sluice_offload_batch_flushes_total";
    out.family(
        name,
        Kind::Counter,
        "Batches flushed by batching engines, by reason.",
    );
    for &(service, c) in &engines {
        for (i, r) in FlushReason::ALL.iter().enumerate() {
            let labels = [
                ("service", service),
                ("engine", c.engine.as_str()),
                ("reason", r.as_str()),
            ];
            out.sample(name, &labels, c.flushes[i]);
        }
    }
}

/// `sluice_compress_*`: responses compressed or not, and the bytes through each engine.
pub(super) fn compression(out: &mut Exposition, s: &Sources) {
    let c = s.gateway.compressor().counters();
    out.family_by(
        "sluice_compress_responses_total",
        Kind::Counter,
        "Responses compressed, by codec.",
        "codec",
        [Codec::Gzip, Codec::Brotli, Codec::Zstd]
            .map(|codec| (codec.token(), c.compressed_count(codec))),
    );
    out.family_by(
        "sluice_compress_skipped_total",
        Kind::Counter,
        "Responses passed through uncompressed on a route with compression on, by reason.",
        "reason",
        SkipReason::ALL.map(|r| (r.as_str(), c.skipped_count(r))),
    );
    out.single(
        "sluice_compress_failed_total",
        Kind::Counter,
        "Responses aborted because compression failed on every engine.",
        c.failed_count(),
    );
    let bytes = c.bytes();
    for (name, help, pick) in [
        (
            "sluice_compress_bytes_in_total",
            "Bytes compressed, by codec and engine.",
            (|b: &ByteCount| b.bytes_in) as fn(&ByteCount) -> u64,
        ),
        (
            "sluice_compress_bytes_out_total",
            "Compressed bytes produced, by codec and engine.",
            |b: &ByteCount| b.bytes_out,
        ),
    ] {
        out.family(name, Kind::Counter, help);
        for b in &bytes {
            out.sample(
                name,
                &[("codec", b.codec.token()), ("engine", b.engine)],
                pick(b),
            );
        }
    }
}

/// The `keyless` engine's view of each key server (none without key servers).
pub(super) fn key_servers(out: &mut Exposition, s: &Sources) {
    let servers = s.gateway.key_offload().key_servers();
    if servers.is_empty() {
        return;
    }
    out.family_by(
        "sluice_keyless_server_up",
        Kind::Gauge,
        "Whether a key server answers its pings (1) or not (0).",
        "server",
        servers.iter().map(|k| (k.address.as_str(), u8::from(k.up))),
    );
    out.family_by(
        "sluice_keyless_server_in_flight",
        Kind::Gauge,
        "Requests in flight on a key server.",
        "server",
        servers.iter().map(|k| (k.address.as_str(), k.in_flight)),
    );
    let name = "sluice_keyless_server_requests_total";
    out.family(
        name,
        Kind::Counter,
        "Requests to a key server, by result (failed: connection lost, timeout, error status or a result that did not verify; the job then tried the next server).",
    );
    for k in &servers {
        for (result, v) in [("ok", k.ok), ("failed", k.failed)] {
            out.sample(
                name,
                &[("server", k.address.as_str()), ("result", result)],
                v,
            );
        }
    }
}
