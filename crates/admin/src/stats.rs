//! The dashboard: the page at `/` of the admin listener and its data, `GET /api/v1/stats`.
//!
//! A sampler task reads the counters `/metrics` renders once a second and keeps the last
//! 15 minutes in memory ([`KEEP`] samples); the endpoint turns consecutive samples into
//! rates. Serving the page's data costs one serialisation, and a closed dashboard costs the
//! sampler alone: a few hundred atomic loads and one read of `/proc/self/stat` a second.

use crate::Sources;
use serde_json::{Map, Value, json};
use sluice_offload::{CountersSnapshot, FallbackReason, HistogramSnapshot};
use sluice_proxy::{ProxySnapshot, STATUS_CLASSES, TLS_VERSIONS};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The page, HTML, CSS and JavaScript in one file: nothing else is fetched but its data.
pub(crate) const PAGE: &str = include_str!("dashboard.html");

/// Samples kept: 15 minutes at one a second, plus the one the first rate is taken from.
pub(crate) const KEEP: usize = 15 * 60 + 1;

/// How often the sampler reads the counters.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);

/// The counters at one moment.
#[derive(Debug)]
struct Sample {
    unix: f64,
    proxy: ProxySnapshot,
    latency_us: HistogramSnapshot,
    /// The process's CPU time so far (user + system), seconds.
    cpu_s: Option<f64>,
    /// Each offload engine: its service (`crypto`, `compress`), counters and breaker.
    engines: Vec<(&'static str, CountersSnapshot, bool)>,
    /// Event-loop CPU the offload engines saved so far, seconds.
    saved_s: f64,
}

/// The last [`KEEP`] samples.
#[derive(Debug, Default)]
pub(crate) struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// Reads the counters now and keeps them, dropping the oldest sample beyond [`KEEP`].
    pub(crate) fn record(&self, s: &Sources) {
        let sample = take(s);
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() == KEEP {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// `GET /api/v1/stats`: rates over the kept samples, and the state now.
    ///
    /// Built under the lock, from the samples in place: copying 900 samples (each with every
    /// engine's counters) per fetch would cost more than the document. The sampler waits
    /// for the lock at most once a second, off the data plane.
    pub(crate) fn json(&self, s: &Sources) -> Value {
        let now = take(s);
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        document(s, samples.make_contiguous(), &now)
    }
}

/// Samples every [`PERIOD`] until dropped (the admin listener's task owns it).
pub(crate) async fn sample(history: Arc<History>, sources: Arc<Sources>) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        history.record(&sources);
    }
}

fn take(s: &Sources) -> Sample {
    let metrics = s.gateway.metrics();
    let offload = s.gateway.key_offload();
    let compressor = s.gateway.compressor();
    let mut engines = Vec::new();
    for (service, counters, breakers) in [
        ("crypto", offload.counters(), offload.breakers_open()),
        (
            "compress",
            compressor.engine_counters(),
            compressor.breakers_open(),
        ),
    ] {
        for (i, c) in counters.into_iter().enumerate() {
            let open = breakers.get(i).copied().unwrap_or(false);
            engines.push((service, c, open));
        }
    }
    Sample {
        unix: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        proxy: metrics.snapshot(),
        latency_us: metrics.latency_us(),
        cpu_s: process_cpu_seconds(),
        engines,
        saved_s: (offload.cpu_saved() + compressor.cpu_saved()).as_secs_f64(),
    }
}

/// User + system CPU time of this process from `/proc/self/stat` (fields 14 and 15, in
/// clock ticks of 1/100 s, which Linux reports whatever the kernel's own tick rate).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// Per-second rates of `value` between consecutive samples.
fn rates(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> Vec<f64> {
    samples
        .windows(2)
        .map(|w| {
            let dt = w[1].unix - w[0].unix;
            if dt > 0.0 {
                ((value(&w[1]) - value(&w[0])) / dt).max(0.0)
            } else {
                0.0
            }
        })
        .collect()
}

/// A quantile of request latency in milliseconds per interval (`null` where none finished).
fn latency_ms(samples: &[Sample], q: f64) -> Vec<Option<f64>> {
    samples
        .windows(2)
        .map(|w| {
            w[1].latency_us
                .since(&w[0].latency_us)
                .quantile(q)
                .map(|us| us / 1000.0)
        })
        .collect()
}

fn engine_key(service: &str, engine: &str) -> String {
    format!("{service}/{engine}")
}

/// The dashboard's document: the series over the kept samples, the totals and each
/// engine now, and the sections `/status` shows too.
fn document(s: &Sources, samples: &[Sample], now: &Sample) -> Value {
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": crate::build_label::label(),
        "uptime_s": s.started.elapsed().as_secs(),
        "interval_s": PERIOD.as_secs_f64(),
        "config": crate::config_state::config_status(s),
        "series": series(samples, now),
        "totals": {
            "requests": now.proxy.requests.iter().sum::<u64>(),
            "handshakes": now.proxy.handshakes.iter().flatten().sum::<u64>(),
            "handshake_failures": now.proxy.handshake_failures,
            "quic_handshakes": now.proxy.quic_handshakes.iter().sum::<u64>(),
            "quic_connections_open": now.proxy.quic_open,
            "bytes_in": now.proxy.bytes[0],
            "bytes_out": now.proxy.bytes[1],
        },
        "cpu": { "used_s": now.cpu_s, "saved_s": now.saved_s },
        "engines": now.engines.iter().map(|e| engine(e, samples.last(), now)).collect::<Vec<_>>(),
        "compression": compression(s),
        "cache": crate::cache::status(s),
        "mirrors": crate::mirror::status(s),
        "auth": crate::auth::status(s),
        "lua": crate::scripting::status(s),
        "waf": crate::firewall::status(s),
        "trace_url": s.gateway.snapshot().tracing.as_ref().and_then(|t| t.trace_url.clone()),
        "fleet_mode": s.control.as_ref().is_some_and(|c| c.shared().is_some()),
        "upstreams": upstreams(s),
        "key_servers": key_servers(s),
        "acme": crate::certificates::status(),
        "ocsp": crate::certificates::ocsp_status(),
        "rate_limit_store": crate::rate_limit_store(s),
    })
}

/// The charts' series: per-second rates (and latency quantiles) between kept samples.
fn series(samples: &[Sample], now: &Sample) -> Value {
    let t: Vec<f64> = samples.iter().skip(1).map(|x| x.unix).collect();
    let mut requests = Map::new();
    for (i, class) in STATUS_CLASSES.iter().enumerate() {
        let r = rates(samples, |x| x.proxy.requests[i] as f64);
        requests.insert((*class).to_owned(), json!(r));
    }
    let mut handshakes = Map::new();
    for (v, version) in TLS_VERSIONS.iter().enumerate() {
        for (r, kind) in ["full", "resumed"].iter().enumerate() {
            let series = rates(samples, |x| x.proxy.handshakes[v][r] as f64);
            handshakes.insert(format!("{version} {kind}"), json!(series));
        }
    }
    let mut engine_jobs = Map::new();
    for (service, c, _) in &now.engines {
        let key = engine_key(service, &c.engine);
        let find = |x: &Sample| {
            x.engines
                .iter()
                .find(|(sv, e, _)| sv == service && e.engine == c.engine)
                .map_or(0.0, |(_, e, _)| e.completed as f64)
        };
        engine_jobs.insert(key, json!(rates(samples, find)));
    }
    json!({
        "t": t,
        "requests": requests,
        "handshakes": handshakes,
        "handshake_failures": rates(samples, |x| x.proxy.handshake_failures as f64),
        // Counted in `handshakes` (TLSv1.3) too: the share that came over QUIC.
        "quic_handshakes": rates(samples, |x| x.proxy.quic_handshakes.iter().sum::<u64>() as f64),
        "latency_p50_ms": latency_ms(samples, 0.5),
        "latency_p99_ms": latency_ms(samples, 0.99),
        "bytes_in": rates(samples, |x| x.proxy.bytes[0] as f64),
        "bytes_out": rates(samples, |x| x.proxy.bytes[1] as f64),
        "cpu": rates(samples, |x| x.cpu_s.unwrap_or(0.0)),
        "cpu_saved": rates(samples, |x| x.saved_s),
        "engine_jobs": engine_jobs,
    })
}

/// One engine now: its counters, and its rates since the `previous` sample.
fn engine(
    (service, c, open): &(&'static str, CountersSnapshot, bool),
    previous: Option<&Sample>,
    now: &Sample,
) -> Value {
    let before = previous.and_then(|p| {
        p.engines
            .iter()
            .find(|(sv, e, _)| sv == service && e.engine == c.engine)
            .map(|(_, e, _)| e)
    });
    let dt = previous.map_or(0.0, |p| now.unix - p.unix);
    let per_s = |now: u64, then: u64| {
        if dt > 0.0 {
            now.saturating_sub(then) as f64 / dt
        } else {
            0.0
        }
    };
    let fell_back: Map<String, Value> = FallbackReason::ALL
        .iter()
        .map(|r| (r.as_str().to_owned(), json!(c.fell_back(*r))))
        .collect();
    let fell_back_per_s: Map<String, Value> = FallbackReason::ALL
        .iter()
        .map(|r| {
            let then = before.map_or(0, |b| b.fell_back(*r));
            (r.as_str().to_owned(), json!(per_s(c.fell_back(*r), then)))
        })
        .collect();
    let batches = c.batch_size.total() > 0;
    json!({
        "service": service,
        "engine": c.engine,
        "breaker_open": open,
        "jobs_per_s": per_s(c.completed, before.map_or(0, |b| b.completed)),
        "in_flight": c.in_flight,
        "submitted": c.submitted,
        "completed": c.completed,
        "failed": c.failed,
        "fell_back": fell_back,
        "fell_back_per_s": fell_back_per_s,
        "routed_past": c.routed_past,
        "latency_p50_us": c.latency_us.quantile(0.5),
        "latency_p99_us": c.latency_us.quantile(0.99),
        "batch_sizes": batches.then(|| c.batch_size.bounds.iter().map(|b| b.to_string())
            .chain(std::iter::once("more".to_owned()))
            .zip(&c.batch_size.counts)
            .filter(|(_, n)| **n > 0)
            .map(|(b, n)| json!([b, n]))
            .collect::<Vec<_>>()),
    })
}

/// Bytes through each compression codec and engine.
fn compression(s: &Sources) -> Vec<Value> {
    s.gateway
        .compressor()
        .counters()
        .bytes()
        .iter()
        .map(|b| {
            json!({
                "codec": b.codec.token(), "engine": b.engine,
                "bytes_in": b.bytes_in, "bytes_out": b.bytes_out,
            })
        })
        .collect()
}

/// Every upstream server's state.
fn upstreams(s: &Sources) -> Vec<Value> {
    s.gateway
        .upstream_health()
        .iter()
        .flat_map(|h| {
            h.servers.iter().map(move |srv| {
                json!({
                    "upstream": h.name, "server": srv.address,
                    "state": if srv.up { "up" } else { "down" },
                    "reason": srv.reason, "active": srv.in_flight,
                })
            })
        })
        .collect()
}

/// The `keyless` engine's key servers.
fn key_servers(s: &Sources) -> Vec<Value> {
    s.gateway
        .key_offload()
        .key_servers()
        .iter()
        .map(|k| json!({ "server": k.address, "up": k.up, "in_flight": k.in_flight, "ok": k.ok, "failed": k.failed }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix: f64, requests_2xx: u64, latencies: &[u64]) -> Sample {
        let h = sluice_offload::Histogram::new(sluice_proxy::REQUEST_LATENCY_BUCKETS_US);
        for &v in latencies {
            h.observe(v);
        }
        let mut proxy = ProxySnapshot::default();
        proxy.requests[1] = requests_2xx;
        Sample {
            unix,
            proxy,
            latency_us: h.snapshot(),
            cpu_s: Some(unix / 10.0),
            engines: Vec::new(),
            saved_s: 0.0,
        }
    }

    #[test]
    fn rates_are_differences_over_the_time_between_samples() {
        let s = [at(100.0, 10, &[]), at(101.0, 30, &[]), at(103.0, 50, &[])];
        assert_eq!(rates(&s, |x| x.proxy.requests[1] as f64), vec![20.0, 10.0]);
        let cpu = rates(&s, |x| x.cpu_s.unwrap());
        assert!((cpu[0] - 0.1).abs() < 1e-9 && (cpu[1] - 0.1).abs() < 1e-9);
        // A counter that went back (a restart) reads as no traffic, not a negative rate.
        let s = [at(100.0, 10, &[]), at(101.0, 5, &[])];
        assert_eq!(rates(&s, |x| x.proxy.requests[1] as f64), vec![0.0]);
    }

    #[test]
    fn latency_quantiles_are_per_interval() {
        // Cumulative histograms: the second interval adds only slow requests.
        let s = [
            at(0.0, 0, &[]),
            at(1.0, 4, &[100, 100, 100, 100]),
            at(
                2.0,
                8,
                &[100, 100, 100, 100, 90_000, 90_000, 90_000, 90_000],
            ),
        ];
        let p50 = latency_ms(&s, 0.5);
        assert!(p50[0].unwrap() <= 0.25, "first interval: fast ({p50:?})");
        assert!(
            p50[1].unwrap() > 50.0,
            "second interval: slow only ({p50:?})"
        );
        let empty = [at(0.0, 0, &[]), at(1.0, 0, &[])];
        assert_eq!(latency_ms(&empty, 0.99), vec![None]);
    }

    #[test]
    fn the_process_cpu_time_is_read_from_proc() {
        let a = process_cpu_seconds().expect("/proc/self/stat parses");
        let b = process_cpu_seconds().expect("/proc/self/stat parses");
        assert!(
            a >= 0.0 && b >= a,
            "CPU time never goes back ({a} then {b})"
        );
    }

    #[test]
    fn the_page_asks_only_its_own_listener() {
        // No absolute URL: everything it loads or fetches is on the admin listener.
        assert!(!PAGE.contains("http://") && !PAGE.contains("https://"));
        assert!(PAGE.contains("fetch(\"/api/v1/stats\""));
    }
}
