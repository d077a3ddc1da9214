//! `mix`: a site's entrance at a fixed offered load, for the "site mix" row of `bench/run`.
//!
//! What a large site's gateway carries most of the time is not a storm of anything: requests
//! on connections that are already open (HTTP/2 and HTTP/1.1; small responses, compressible
//! pages, incompressible images), a few per cent of new connections (a fifth of them resuming
//! a session, the rest full handshakes on RSA and ECDSA certificates), and thousands of idle
//! connections held open by clients that went quiet. Every part arrives at its own rate
//! (open loop: a late response does not delay the next request), so each gateway is offered
//! exactly the same work and the comparison is the CPU it spent on it, and the latency of the
//! established requests (measured from when each request was due, so that a stalled
//! gateway cannot hide its stall by slowing the client down).
//!
//! The measured window starts after the idle connections are open and a warm-up has passed;
//! "window start" and "window end" are written to stderr at its edges so that the caller can
//! read the gateway's CPU time exactly over it.
//!
//! `--class` sends one class of the mix alone, on the mix's own schedule (the requests of the
//! other classes are skipped, not replaced), so that the gateway's CPU over the window is what
//! that class costs within the mix: the classes partition the mix, and their costs add up to
//! it but for what they share (`bench/mixclasses.py`).

use crate::{Counters, Target, percentile};
use anyhow::{Context as _, bail};
use boring::ssl::{
    SslConnector, SslMethod, SslSession, SslSessionCacheMode, SslSignatureAlgorithm, SslVerifyMode,
    SslVersion,
};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The mix. Defaults: 3,200 established requests a second (half on 16 HTTP/1.1
/// connections, half on 4 HTTP/2 ones), 100 new connections a second (3% of all requests),
/// 20% of them resumed, the full ones half RSA and half ECDSA, and 2,000 idle connections.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SiteMix {
    /// Keep-alive HTTP/1.1 connections.
    #[arg(long, default_value_t = 16)]
    http1: usize,
    /// Requests a second on each HTTP/1.1 connection.
    #[arg(long, default_value_t = 100)]
    http1_rate: u32,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 4)]
    http2: usize,
    /// Requests a second on each HTTP/2 connection (each its own stream, not waiting for
    /// the one before).
    #[arg(long, default_value_t = 400)]
    http2_rate: u32,
    /// New connections a second, one HTTP/1.1 request each.
    #[arg(long, default_value_t = 100)]
    new_rate: u32,
    /// Per cent of new connections that resume a session (TLS 1.3 ticket).
    #[arg(long, default_value_t = 20)]
    resume_percent: u32,
    /// Per cent of full handshakes that ask for ECDSA (the rest: RSA), by the signature
    /// algorithms the client offers.
    #[arg(long, default_value_t = 50)]
    ecdsa_percent: u32,
    /// Idle connections opened (one request each) before the window and held to its end.
    #[arg(long, default_value_t = 2000)]
    idle: usize,
    /// Traffic before the measured window starts.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// The compressible page (a site's HTML; the gateway compresses it).
    #[arg(long, default_value = "/gz1/page.html")]
    page: String,
    /// The incompressible response (an image; the gateway passes it through).
    #[arg(long, default_value = "/img.jpg")]
    image: String,
    /// One class of the mix alone (the others' requests skipped), or `all`.
    #[arg(long, value_enum, default_value_t = Class::All)]
    class: Class,
}

/// The mix's classes of traffic: each request and new connection belongs to exactly one.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Class {
    /// Every class: the mix itself.
    All,
    /// Small responses on established HTTP/2 connections.
    H2,
    /// Small responses on established HTTP/1.1 connections.
    H1,
    /// The compressible page, gzipped by the gateway (both protocols).
    Gzip,
    /// The incompressible image (both protocols).
    Image,
    /// New connections with a full handshake on the RSA-2048 certificate.
    FullRsa,
    /// New connections with a full handshake on the ECDSA P-256 certificate.
    FullEcdsa,
    /// New connections resuming a session.
    Resumed,
    /// The idle connections alone, held open through the window.
    Idle,
}

impl Class {
    /// Whether traffic of class `c` is sent in this run.
    fn sends(self, c: Class) -> bool {
        self == Class::All || self == c
    }
}

/// Of every 20 established requests: 14 small responses (`Target::path`, the class of the
/// connection's protocol `small`), 3 pages, 3 images.
fn path_of(mix: &SiteMix, t: &Target, k: u64, small: Class) -> (String, Class) {
    match k % 20 {
        0..14 => (t.path.clone(), small),
        14..17 => (mix.page.clone(), Class::Gzip),
        _ => (mix.image.clone(), Class::Image),
    }
}

/// Key-exchange groups negotiated, by name (BoringSSL's), counted per connection.
#[derive(Default)]
struct KeyShares(Mutex<BTreeMap<&'static str, u64>>);

impl KeyShares {
    fn count<S>(&self, s: &tokio_boring::SslStream<S>) {
        self.add(s.ssl().curve_name().unwrap_or("none"));
    }

    fn add(&self, name: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name)
            .or_default() += 1;
    }

    fn to_json(&self) -> Value {
        json!(*self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Whether the `k`th of a sequence falls in the first `percent` of each hundred, spread
/// evenly (k = 4, 9, 14, ... for 20%).
fn spread(k: u64, percent: u32) -> bool {
    let p = u64::from(percent.min(100));
    (k + 1) * p / 100 != k * p / 100
}

/// Latencies (ms) and counts of the established requests due inside the window.
#[derive(Default)]
struct Established {
    c: Counters,
    lat: Mutex<Vec<f64>>,
    /// Groups of the established connections.
    groups: KeyShares,
}

impl Established {
    /// Counts a request that was due at `due`, if that was inside the window: its latency
    /// from then, or its failure (`proto` names it).
    fn record(&self, w: &Window, due: Instant, result: anyhow::Result<()>, proto: &str) {
        if !w.counts(due) {
            return;
        }
        match result {
            Ok(()) => {
                self.c.ok.fetch_add(1, Ordering::Relaxed);
                let ms = due.elapsed().as_secs_f64() * 1e3;
                self.lat.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
            }
            Err(err) => self.c.fail(format!("{proto}: {err:#}")),
        }
    }
}

/// The measured window: requests due before `start` are warm-up, none is due after `end`.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn counts(&self, due: Instant) -> bool {
        due >= self.start && due < self.end
    }
}

fn connector(
    alpn: &[u8],
    sigalgs: Option<&[SslSignatureAlgorithm]>,
) -> anyhow::Result<SslConnector> {
    let mut b = SslConnector::builder(SslMethod::tls())?;
    b.set_verify(SslVerifyMode::NONE);
    b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_alpn_protos(alpn)?;
    if let Some(s) = sigalgs {
        b.set_verify_algorithm_prefs(s)?;
    }
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    Ok(b.build())
}

/// New connections of one certificate kind: full handshakes offer only that kind's signature
/// algorithms; the latest ticket the gateway sent is what a resuming client presents.
struct Kind {
    name: &'static str,
    connector: SslConnector,
    session: Arc<Mutex<Option<SslSession>>>,
    full: AtomicU64,
    resumed: AtomicU64,
    /// Groups of the connections counted (inside the window).
    groups: KeyShares,
}

impl Kind {
    fn new(name: &'static str, sigalgs: &[SslSignatureAlgorithm]) -> anyhow::Result<Kind> {
        let session = Arc::new(Mutex::new(None));
        let mut b = SslConnector::builder(SslMethod::tls())?;
        b.set_verify(SslVerifyMode::NONE);
        b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
        b.set_alpn_protos(b"\x08http/1.1")?;
        b.set_verify_algorithm_prefs(sigalgs)?;
        b.set_session_cache_mode(SslSessionCacheMode::CLIENT);
        let keep = session.clone();
        b.set_new_session_callback(move |_, s| {
            *keep.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
        });
        Ok(Kind {
            name,
            connector: b.build(),
            session,
            full: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            groups: KeyShares::default(),
        })
    }

    /// One new connection, one request, close; returns whether the session was resumed and
    /// the group negotiated.
    async fn connect(&self, t: &Target, resume: bool) -> anyhow::Result<(bool, &'static str)> {
        let tcp = tokio::net::TcpStream::connect(t.addr).await?;
        tcp.set_nodelay(true)?;
        let mut cfg = self.connector.configure()?;
        cfg.set_verify_hostname(false);
        let ticket = resume
            .then(|| {
                self.session
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
            })
            .flatten();
        if let Some(s) = &ticket {
            // SAFETY: the session came from this kind's own connector (its new-session
            // callback), which is the context `cfg` was configured from.
            #[expect(unsafe_code, reason = "boring marks set_session unsafe")]
            unsafe {
                cfg.set_session(s)?;
            }
        }
        let mut s = tokio_boring::connect(cfg, &t.sni, tcp).await?;
        let resumed = s.ssl().session_reused();
        let group = s.ssl().curve_name().unwrap_or("none");
        crate::request_and_close(&mut s, t)
            .await
            .with_context(|| format!("{} connection", self.name))?;
        Ok((resumed, group))
    }
}

async fn open(
    connector: &SslConnector,
    t: &Target,
) -> anyhow::Result<tokio_boring::SslStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(t.addr).await?;
    tcp.set_nodelay(true)?;
    let mut cfg = connector.configure()?;
    cfg.set_verify_hostname(false);
    Ok(tokio_boring::connect(cfg, &t.sni, tcp).await?)
}

fn request(path: &str, t: &Target) -> anyhow::Result<http::Request<Empty<Bytes>>> {
    Ok(http::Request::get(path)
        .header("host", t.sni.as_str())
        // What browsers send: the gateway compresses what its configuration says to.
        .header("accept-encoding", "gzip")
        .body(Empty::<Bytes>::new())?)
}

async fn check(resp: hyper::Result<http::Response<hyper::body::Incoming>>) -> anyhow::Result<()> {
    let resp = resp?;
    if resp.status() != 200 {
        bail!("status {}", resp.status());
    }
    resp.into_body().collect().await?;
    Ok(())
}

/// One paced HTTP/1.1 connection: request k is due at `first + k / rate`; a late one is
/// sent at once, its latency counted from when it was due.
async fn http1(
    connector: Arc<SslConnector>,
    t: Arc<Target>,
    mix: Arc<SiteMix>,
    first: Instant,
    w: Window,
    e: Arc<Established>,
) -> anyhow::Result<()> {
    let s = open(&connector, &t).await.context("HTTP/1.1 connection")?;
    e.groups.count(&s);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    tokio::spawn(conn);
    let period = period(mix.http1_rate);
    for k in 0u64.. {
        let due = first + period * u32::try_from(k)?;
        if due >= w.end {
            break;
        }
        let (path, class) = path_of(&mix, &t, k, Class::H1);
        if !mix.class.sends(class) {
            continue;
        }
        tokio::time::sleep_until(due).await;
        let result = async {
            sender.ready().await?;
            check(sender.send_request(request(&path, &t)?).await).await
        }
        .await;
        e.record(&w, due, result, "HTTP/1.1");
        if sender.is_closed() {
            break;
        }
    }
    Ok(())
}

/// One paced HTTP/2 connection: each request is a stream of its own, sent when due whether
/// or not the ones before have been answered.
async fn http2(
    connector: Arc<SslConnector>,
    t: Arc<Target>,
    mix: Arc<SiteMix>,
    first: Instant,
    w: Window,
    e: Arc<Established>,
) -> anyhow::Result<()> {
    let s = open(&connector, &t).await.context("HTTP/2 connection")?;
    e.groups.count(&s);
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s)).await?;
    tokio::spawn(conn);
    let period = period(mix.http2_rate);
    let mut streams = tokio::task::JoinSet::new();
    for k in 0u64.. {
        let due = first + period * u32::try_from(k)?;
        if due >= w.end {
            break;
        }
        let (path, class) = path_of(&mix, &t, k, Class::H2);
        if !mix.class.sends(class) {
            continue;
        }
        tokio::time::sleep_until(due).await;
        let (mut sender, req, e) = (sender.clone(), request(&path, &t)?, e.clone());
        streams.spawn(async move {
            let result = check(sender.send_request(req).await).await;
            e.record(&w, due, result, "HTTP/2");
        });
        // Reap finished streams as we go (the set would otherwise hold every one).
        while streams.try_join_next().is_some() {}
    }
    // Streams still open at the end: given until the caller's grace to finish.
    while streams.join_next().await.is_some() {}
    Ok(())
}

/// Opens `n` idle HTTP/1.1 connections (ECDSA, one request each), 32 at a time; returns the
/// senders and connection tasks, which must live until the end of the run.
async fn idle(
    n: usize,
    t: Arc<Target>,
) -> anyhow::Result<Vec<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>> {
    let connector = Arc::new(connector(
        b"\x08http/1.1",
        Some(&[SslSignatureAlgorithm::ECDSA_SECP256R1_SHA256]),
    )?);
    let mut set = tokio::task::JoinSet::new();
    let mut held = Vec::with_capacity(n);
    let mut started = 0;
    while held.len() < n {
        while started < n && set.len() < 32 {
            let (connector, t) = (connector.clone(), t.clone());
            set.spawn(async move {
                let s = open(&connector, &t).await?;
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
                tokio::spawn(conn);
                check(sender.send_request(request(&t.path, &t)?).await).await?;
                anyhow::Ok(sender)
            });
            started += 1;
        }
        match set.join_next().await {
            Some(r) => held.push(r?.context("an idle connection")?),
            None => break,
        }
    }
    Ok(held)
}

/// New connections at `new_rate`, each its own task, until the window ends.
async fn new_connections(
    t: Arc<Target>,
    mix: Arc<SiteMix>,
    w: Window,
    kinds: Arc<[Kind; 2]>,
    c: Arc<Counters>,
) {
    let period = period(mix.new_rate);
    let first = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let (mut fulls, mut resumes) = (0u64, 0u64);
    for k in 0u64.. {
        let Ok(k32) = u32::try_from(k) else { break };
        let due = first + period * k32;
        if due >= w.end || mix.new_rate == 0 {
            break;
        }
        let resume = spread(k, mix.resume_percent);
        let kind = if resume {
            resumes += 1;
            usize::from(resumes % 2 == 0)
        } else {
            fulls += 1;
            usize::from(spread(fulls, mix.ecdsa_percent))
        };
        let class = match (resume, kind) {
            (true, _) => Class::Resumed,
            (false, 0) => Class::FullRsa,
            (false, _) => Class::FullEcdsa,
        };
        if !mix.class.sends(class) {
            continue;
        }
        tokio::time::sleep_until(due).await;
        let (t, kinds, c) = (t.clone(), kinds.clone(), c.clone());
        tasks.spawn(async move {
            let k = &kinds[kind];
            let result = tokio::time::timeout(Duration::from_secs(10), k.connect(&t, resume)).await;
            if !w.counts(due) {
                return;
            }
            match result {
                Ok(Ok((resumed, group))) => {
                    if resumed { &k.resumed } else { &k.full }.fetch_add(1, Ordering::Relaxed);
                    k.groups.add(group);
                    c.ok.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(e)) => c.fail(format!("{e:#}")),
                Err(_) => c.fail(format!("{} connection: no response within 10 s", k.name)),
            }
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// Two kinds' key-share counts together.
fn merged(a: &KeyShares, b: &KeyShares) -> Value {
    let mut all = a.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (k, v) in b.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        *all.entry(k).or_default() += v;
    }
    json!(all)
}

/// The time between two requests at `rate` a second.
fn period(rate: u32) -> Duration {
    Duration::from_secs_f64(1.0 / f64::from(rate.max(1)))
}

/// Where the `i`th of `n` connections paced at `rate` starts within one period, so that
/// their requests interleave instead of arriving together.
fn phase(i: usize, n: usize, rate: u32) -> Duration {
    period(rate).mul_f64(i as f64 / n as f64)
}

fn mark(what: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{what}");
    let _ = err.flush();
}

/// Runs the mix against `t` (its `duration` is the measured window) and returns the figures.
pub(crate) async fn run(t: Target, mix: SiteMix) -> anyhow::Result<Value> {
    let (t, mix) = (Arc::new(t), Arc::new(mix));
    let idle_n = if mix.class.sends(Class::Idle) {
        mix.idle
    } else {
        0
    };
    let held = idle(idle_n, t.clone()).await?;
    let kinds = Arc::new([
        Kind::new(
            "RSA",
            &[
                SslSignatureAlgorithm::RSA_PSS_RSAE_SHA256,
                SslSignatureAlgorithm::RSA_PKCS1_SHA256,
            ],
        )?,
        Kind::new("ECDSA", &[SslSignatureAlgorithm::ECDSA_SECP256R1_SHA256])?,
    ]);
    let start = Instant::now() + mix.warmup;
    let w = Window {
        start,
        end: start + t.duration,
    };
    // Established traffic gets a thread of its own (on the same core), and the new
    // connections' thread a lower priority, so that the latency measured is the gateway's,
    // not time queued behind the client's own handshake crypto.
    let est = Arc::new(Established::default());
    let (et, em, ee) = (t.clone(), mix.clone(), est.clone());
    let established = std::thread::Builder::new()
        .name("established".into())
        .spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let c1 = Arc::new(connector(b"\x08http/1.1", None)?);
                let c2 = Arc::new(connector(b"\x02h2", None)?);
                let now = Instant::now();
                let mut tasks = Vec::new();
                for i in 0..em.http1 {
                    let phase = phase(i, em.http1, em.http1_rate);
                    tasks.push(tokio::spawn(http1(
                        c1.clone(),
                        et.clone(),
                        em.clone(),
                        now + phase,
                        w,
                        ee.clone(),
                    )));
                }
                for i in 0..em.http2 {
                    let phase = phase(i, em.http2, em.http2_rate);
                    tasks.push(tokio::spawn(http2(
                        c2.clone(),
                        et.clone(),
                        em.clone(),
                        now + phase,
                        w,
                        ee.clone(),
                    )));
                }
                for task in tasks {
                    if let Err(e) = task.await? {
                        ee.c.fail(format!("{e:#}"));
                    }
                }
                anyhow::Ok(())
            })
        })?;
    crate::lower_priority();
    let fresh = Arc::new(Counters::default());
    let news = tokio::spawn(new_connections(
        t.clone(),
        mix.clone(),
        w,
        kinds.clone(),
        fresh.clone(),
    ));
    tokio::time::sleep_until(w.start).await;
    mark("window start");
    tokio::time::sleep_until(w.end).await;
    mark("window end");
    // Requests still in flight at the end are given a grace to finish (counted if due
    // inside the window), then the run ends whatever is left.
    let _ = tokio::time::timeout(Duration::from_secs(10), news).await;
    established
        .join()
        .map_err(|_| anyhow::anyhow!("the established-traffic thread panicked"))??;
    let still_open = held.iter().filter(|s| !s.is_closed()).count();
    drop(held);
    let seconds = (w.end - w.start).as_secs_f64();
    let mut lat = est.lat.lock().unwrap_or_else(|e| e.into_inner()).clone();
    lat.sort_by(f64::total_cmp);
    let established_ok = est.c.ok.load(Ordering::Relaxed);
    let new_ok = fresh.ok.load(Ordering::Relaxed);
    let failed = est.c.failed.load(Ordering::Relaxed) + fresh.failed.load(Ordering::Relaxed);
    let offered_established =
        f64::from(mix.http1_rate) * mix.http1 as f64 + f64::from(mix.http2_rate) * mix.http2 as f64;
    Ok(json!({
        "mode": "mix",
        "seconds": seconds,
        "completed": established_ok + new_ok,
        "rate": (established_ok + new_ok) as f64 / seconds,
        // The whole mix's, whatever the class sent: what a class's share is counted against.
        "offered_rate": offered_established + f64::from(mix.new_rate),
        "class": format!("{:?}", mix.class).to_lowercase(),
        "failed": failed,
        "first_error": est.c.first_error().or_else(|| fresh.first_error()),
        "p50_ms": percentile(&lat, 0.5),
        "p99_ms": percentile(&lat, 0.99),
        "p999_ms": percentile(&lat, 0.999),
        "established": established_ok,
        "new_connections": new_ok,
        "full_rsa": kinds[0].full.load(Ordering::Relaxed),
        "full_ecdsa": kinds[1].full.load(Ordering::Relaxed),
        "resumed": kinds[0].resumed.load(Ordering::Relaxed) + kinds[1].resumed.load(Ordering::Relaxed),
        "key_shares_new": merged(&kinds[0].groups, &kinds[1].groups),
        "key_shares_established": est.groups.to_json(),
        "idle_opened": idle_n,
        "idle_still_open": still_open,
    }))
}

#[cfg(test)]
mod tests {
    use super::{Class, spread};

    /// Every established request belongs to exactly one class, in the mix's proportions, and
    /// a class run sends only its own.
    #[test]
    fn classes_partition_the_established_requests() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            target: crate::Target,
            #[command(flatten)]
            mix: super::SiteMix,
        }
        let Args { target: t, mix } =
            Args::parse_from(["mix", "--addr", "127.0.0.1:1", "--path", "/1k"]);
        let mut counts = std::collections::HashMap::new();
        for k in 0..2000 {
            for small in [Class::H1, Class::H2] {
                let (path, class) = super::path_of(&mix, &t, k, small);
                let expected = match class {
                    Class::H1 | Class::H2 => "/1k",
                    Class::Gzip => "/gz1/page.html",
                    Class::Image => "/img.jpg",
                    other => panic!("an established request of class {other:?}"),
                };
                assert_eq!(path, expected);
                *counts.entry(class).or_insert(0) += 1;
                let sent: Vec<Class> =
                    [Class::All, Class::H1, Class::H2, Class::Gzip, Class::Image]
                        .into_iter()
                        .filter(|c| c.sends(class))
                        .collect();
                assert_eq!(sent, [Class::All, class]);
            }
        }
        assert_eq!(counts[&Class::H1], 1400);
        assert_eq!(counts[&Class::H2], 1400);
        assert_eq!(counts[&Class::Gzip], 600);
        assert_eq!(counts[&Class::Image], 600);
    }

    #[test]
    fn spread_picks_the_share_asked_evenly() {
        let picked: Vec<u64> = (0..20).filter(|&k| spread(k, 20)).collect();
        assert_eq!(picked, [4, 9, 14, 19]);
        assert_eq!((0..1000).filter(|&k| spread(k, 50)).count(), 500);
        assert_eq!((0..100).filter(|&k| spread(k, 0)).count(), 0);
        assert_eq!((0..100).filter(|&k| spread(k, 100)).count(), 100);
    }
}
