//! Active health checks: one checker task per upstream group for the whole process (not one
//! per worker thread, so every request sees the same verdict), started with the group and
//! ended when the group is gone. A group whose definition did not change across a reload is
//! the same group, so its servers keep their state.
//!
//! Every `interval` the checker probes each server (at most [`CONCURRENCY`] at a time): a TCP
//! connect, or an HTTP GET over the group's protocol whose status must be in the configured
//! ranges (and whose body must contain the configured text). A server that is up goes down
//! after `unhealthy` consecutive failures; one that is down comes back only after `healthy`
//! consecutive passes. Each change is logged with its reason and kept for `/status`, the
//! health endpoint and `/metrics`.

use crate::upstreams::upstream::UpstreamGroup;
use bytes::Bytes;
use futures_util::StreamExt as _;
use http::{Request, header};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_config::{HealthCheck, HealthProbe, UpstreamProtocol};
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

/// Servers probed at once by one checker.
const CONCURRENCY: usize = 256;
/// Most of a check response's body that is read (for `body` matching).
const BODY_LIMIT: usize = 64 * 1024;

/// Starts the checker of `group` if it has one and a runtime is running (not in unit tests).
pub(crate) fn start(group: &Arc<UpstreamGroup>) {
    let Some(check) = group.config.health_check.clone() else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(run(Arc::downgrade(group), check));
}

async fn run(group: Weak<UpstreamGroup>, check: HealthCheck) {
    let n = match group.upgrade() {
        Some(g) => g.servers.len(),
        None => return,
    };
    let mut streaks = vec![Streak::default(); n];
    let mut ticker = tokio::time::interval(check.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(g) = group.upgrade() else { return };
        let h2 = g.config.protocol == UpstreamProtocol::H2;
        let proxy = g.config.send_proxy_protocol;
        let tls = g.tls.clone();
        let addrs: Vec<SocketAddr> = g.servers.iter().map(|s| s.addr).collect();
        let check_ref = &check;
        let results: Vec<(usize, Result<(), String>)> =
            futures_util::stream::iter(addrs.into_iter().enumerate())
                .map(|(i, addr)| {
                    let tls = tls.clone();
                    async move { (i, probe(check_ref, addr, h2, proxy, tls.as_deref()).await) }
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        for (i, result) in results {
            let server = &g.servers[i];
            let up = server.checked_up();
            match (streaks[i].record(up, result.is_ok(), &check), result) {
                (Some(true), _) => {
                    let passes = check.healthy.get();
                    server.set_checked(true, format!("{passes} health checks in a row passed"));
                    tracing::info!(upstream = %g.config.name, server = %server.addr, "health checks pass again; the server is back in use");
                }
                (Some(false), Err(reason)) => {
                    tracing::warn!(upstream = %g.config.name, server = %server.addr, %reason, failures = check.unhealthy.get(), "health checks fail; the server is out of use");
                    server.set_checked(false, reason);
                }
                (None, Err(reason)) if !up => server.note_reason(reason),
                _ => {}
            }
        }
    }
}

/// Consecutive passes and failures of one server's checks.
#[derive(Debug, Clone, Copy, Default)]
struct Streak {
    passes: u32,
    fails: u32,
}

impl Streak {
    /// Records a check of a server that is `up`; returns the new verdict when it changes:
    /// down after `unhealthy` failures in a row, up again after `healthy` passes in a row.
    fn record(&mut self, up: bool, passed: bool, check: &HealthCheck) -> Option<bool> {
        if passed {
            self.fails = 0;
            self.passes = self.passes.saturating_add(1);
            (!up && self.passes >= check.healthy.get()).then_some(true)
        } else {
            self.passes = 0;
            self.fails = self.fails.saturating_add(1);
            (up && self.fails >= check.unhealthy.get()).then_some(false)
        }
    }
}

/// One check of one server; the error says what failed.
///
/// A server that expects the PROXY protocol (`send_proxy_protocol`) gets the header of the
/// balancer's own connection first (v1 `UNKNOWN`, v2 `LOCAL`), like HAProxy's
/// `check-send-proxy`: it would close a connection without one.
async fn probe(
    check: &HealthCheck,
    addr: SocketAddr,
    h2: bool,
    proxy: Option<sluice_config::ProxyProtocol>,
    tls: Option<&crate::upstreams::upstream_tls::UpstreamConnector>,
) -> Result<(), String> {
    let attempt = async {
        let mut tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        if let Some(v) = proxy {
            use tokio::io::AsyncWriteExt as _;
            tcp.write_all(&crate::proxy_protocol::local_header(v))
                .await
                .map_err(|e| format!("PROXY protocol header: {e}"))?;
        }
        let HealthProbe::Http {
            path,
            host,
            statuses,
            body,
        } = &check.probe
        else {
            return Ok(());
        };
        let _ = tcp.set_nodelay(true);
        // `[upstream.tls]`: the check speaks TLS, and a server whose certificate fails
        // verification fails its check.
        let tcp = crate::upstreams::upstream_tls::UpstreamIo::start(tls, addr, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let authority = host
            .clone()
            .unwrap_or_else(|| crate::text::addr_string(&addr));
        let builder = if h2 {
            Request::get(format!("http://{authority}{path}"))
        } else {
            Request::get(path.as_str())
                .header(header::HOST, authority.as_str())
                .header(header::CONNECTION, "close")
        };
        let req = builder
            .header(header::USER_AGENT, "sluice-health-check")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("request: {e}"))?;
        let resp = if h2 {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
                    .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
            tokio::spawn(conn);
            sender.send_request(req).await
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| format!("HTTP handshake: {e}"))?;
            tokio::spawn(conn);
            sender.send_request(req).await
        }
        .map_err(|e| format!("request: {e}"))?;
        let status = resp.status().as_u16();
        if !statuses.iter().any(|&(lo, hi)| (lo..=hi).contains(&status)) {
            return Err(format!("status {status}"));
        }
        if let Some(want) = body {
            let got = Limited::new(resp.into_body(), BODY_LIMIT)
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            if !String::from_utf8_lossy(&got).contains(want.as_str()) {
                return Err(format!("body lacks {want:?}"));
            }
        }
        Ok(())
    };
    match tokio::time::timeout(check.timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {:?}", check.timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;
    use std::time::Duration;

    fn check(healthy: u32, unhealthy: u32) -> HealthCheck {
        HealthCheck {
            probe: HealthProbe::Tcp,
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            healthy: NonZeroU32::new(healthy).unwrap(),
            unhealthy: NonZeroU32::new(unhealthy).unwrap(),
        }
    }

    #[test]
    fn down_after_unhealthy_failures_in_a_row_and_up_after_healthy_passes_in_a_row() {
        let c = check(2, 3);
        let mut s = Streak::default();
        let mut up = true;
        let mut run = |s: &mut Streak, passed: bool| {
            let verdict = s.record(up, passed, &c);
            if let Some(v) = verdict {
                up = v;
            }
            verdict
        };
        assert_eq!(run(&mut s, false), None);
        assert_eq!(run(&mut s, false), None);
        assert_eq!(run(&mut s, true), None, "a pass resets the failures");
        assert_eq!(run(&mut s, false), None);
        assert_eq!(run(&mut s, false), None);
        assert_eq!(run(&mut s, false), Some(false), "third failure in a row");
        assert_eq!(run(&mut s, false), None, "already down");
        // Alternating results never bring it back.
        for _ in 0..5 {
            assert_eq!(run(&mut s, true), None);
            assert_eq!(run(&mut s, false), None);
        }
        assert_eq!(run(&mut s, true), None);
        assert_eq!(run(&mut s, true), Some(true), "second pass in a row");
        assert_eq!(run(&mut s, true), None, "already up");
    }
}
