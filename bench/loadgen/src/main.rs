//! `sluice-loadgen`: the load generator of `bench/run`.
//!
//! Stock tools either reuse TLS sessions or cannot open a new connection per request fast
//! enough from one core, so the handshake scenarios use this: every connection does a full
//! handshake (no session cache, no tickets offered back), sends one request and closes. The
//! `latency` mode measures keep-alive request latency while a storm of new handshakes runs,
//! which is what an accelerator that keeps handshakes off the event loop should improve.
//!
//! Every loop is bounded by `--duration`; results are one JSON object on stdout.

use anyhow::{Context, bail};
use boring::ssl::{SslConnector, SslMethod, SslSessionCacheMode, SslVerifyMode, SslVersion};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod mix;
mod mqtt;
mod quic;
mod soak;
mod tcp;

#[derive(Parser, Debug)]
#[command(about = "Load generator for Sluice's benchmarks")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(clap::Args, Debug, Clone)]
struct Target {
    /// Gateway address.
    #[arg(long)]
    addr: SocketAddr,
    /// SNI and Host.
    #[arg(long, default_value = "localhost")]
    sni: String,
    /// "1.2" or "1.3".
    #[arg(long, default_value = "1.3")]
    tls: String,
    /// Request path.
    #[arg(long, default_value = "/")]
    path: String,
    /// Key-exchange groups to offer, e.g. "X25519" (default: BoringSSL's, the hybrid
    /// post-quantum X25519MLKEM768 first).
    #[arg(long)]
    groups: Option<String>,
    /// How long to run, e.g. "5s".
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// A client certificate (PEM chain) to present when the server asks (mutual TLS).
    #[arg(long, requires = "client_key")]
    client_cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "client_cert")]
    client_key: Option<std::path::PathBuf>,
    /// After the handshake, an MQTT 3.1.1 CONNECT (client identifier `lg-N`), its CONNACK
    /// and a DISCONNECT instead of an HTTP request (`bench/mqtt`).
    #[arg(long)]
    mqtt: bool,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Everything at once for `bench/reload`: keep-alive HTTP/1.1 and HTTP/2, full
    /// handshakes, WebSockets and server-sent-event streams, counting failures and cuts.
    Soak {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        mix: soak::Mix,
    },
    /// A site's entrance at a fixed offered load (`bench/run`'s "site mix"): paced
    /// requests on established HTTP/1.1 and HTTP/2 connections, new connections (some
    /// resumed, RSA and ECDSA), idle connections held open. `--duration` is the measured
    /// window, after the idle connections are open and a warm-up.
    Mix {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        mix: mix::SiteMix,
    },
    /// The upstream `soak` needs: `/ws` (echo), `/sse` (an event every 100 ms), else 1 KiB.
    Origin {
        /// Where to listen.
        #[arg(long)]
        addr: SocketAddr,
        /// How long to serve before exiting, e.g. "10m".
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// The upstream of `bench/stream`: echoes every byte.
    Echo {
        /// Where to listen.
        #[arg(long)]
        addr: SocketAddr,
        /// How long to serve before exiting, e.g. "10m".
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Layer-4 load through a TCP proxy to an echo server: messages back and forth on long
    /// connections, or (`--per-connection`) one exchange per new connection.
    Tcp {
        /// Gateway address.
        #[arg(long)]
        addr: SocketAddr,
        /// How long to run, e.g. "5s".
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Clients at once.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Bytes per message (each is echoed back).
        #[arg(long, default_value_t = 65536)]
        size: usize,
        /// A new connection per exchange.
        #[arg(long)]
        per_connection: bool,
    },
    /// New connection, full handshake, one request, close; as fast as possible.
    Handshake {
        #[command(flatten)]
        target: Target,
        /// Connections in flight at once.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// HTTP/3: new QUIC connection, full handshake, one request, close; as fast as possible.
    QuicHandshake {
        #[command(flatten)]
        target: Target,
        /// Connections in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// HTTP/3 requests on established QUIC connections, `--streams` in flight on each.
    QuicRequests {
        #[command(flatten)]
        target: Target,
        /// Connections.
        #[arg(long, default_value_t = 4)]
        connections: usize,
        /// Requests in flight per connection.
        #[arg(long, default_value_t = 16)]
        streams: usize,
    },
    /// HTTP/3 connections held idle (`bench/run`'s memory row): opens `--connections`, one
    /// request each, prints its JSON line once all are open, then holds them for
    /// `--duration` without a sound (no close) and exits.
    QuicIdle {
        #[command(flatten)]
        target: Target,
        /// Connections to open and hold.
        #[arg(long, default_value_t = 1000)]
        connections: usize,
    },
    /// MQTT-over-TLS devices held idle (`bench/mqtt`'s memory figure): opens
    /// `--connections`, each a CONNECT and its CONNACK, prints its JSON line once all are
    /// open, holds them silent for `--duration` and exits.
    MqttIdle {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        devices: mqtt::Devices,
        /// Connections to open and hold.
        #[arg(long, default_value_t = 1000)]
        connections: usize,
    },
    /// QoS 0 messages through an MQTT-over-TLS gateway (`bench/mqtt`'s relay figure):
    /// `--pairs` subscribers and publishers; a line once all are ready, then `--rate`
    /// messages a second for `--duration`.
    MqttPublish {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        devices: mqtt::Devices,
        /// Publishers, and as many subscribers (one topic each).
        #[arg(long, default_value_t = 50)]
        pairs: usize,
        /// Messages a second, all publishers together.
        #[arg(long, default_value_t = 20_000)]
        rate: u64,
        /// Payload bytes per message.
        #[arg(long, default_value_t = 100)]
        payload: usize,
    },
    /// Keep-alive request latency while a handshake storm runs.
    Latency {
        #[command(flatten)]
        target: Target,
        /// Keep-alive connections measuring latency (sequential requests each).
        #[arg(long, default_value_t = 4)]
        keepalive: usize,
        /// Connections of the handshake storm in flight at once (0: no storm).
        #[arg(long, default_value_t = 64)]
        storm: usize,
        /// Requests a second on each keep-alive connection, paced (0: back to back). A
        /// closed loop makes established traffic take every cycle it is given, so its
        /// latency and the storm's rate trade against each other; a site's established
        /// traffic arrives at its own rate.
        #[arg(long, default_value_t = 0)]
        rate: u32,
        /// Aim the storm at this address instead of the measured gateway: at a separate
        /// gateway on the same core, the storm then reaches the measured traffic only through
        /// the host (the kernel's network work, the shared core and caches), which bounds what
        /// any gateway's own isolation can achieve there.
        #[arg(long)]
        storm_addr: Option<SocketAddr>,
    },
    /// Sign requests to a key server (`sluice-keyserver`), pipelined on a few connections.
    Keyless {
        /// Key server address.
        #[arg(long)]
        addr: SocketAddr,
        /// The client certificate (PEM) the key server knows ...
        #[arg(long)]
        cert: std::path::PathBuf,
        /// ... and its key.
        #[arg(long)]
        key: std::path::PathBuf,
        /// The certificate whose key signs (its key id is what requests name).
        #[arg(long)]
        site: std::path::PathBuf,
        /// TLS signature scheme code point (0x0804 rsa_pss_rsae_sha256, 0x0403 ecdsa P-256).
        #[arg(long, default_value = "0x0804")]
        scheme: String,
        /// Connections.
        #[arg(long, default_value_t = 2)]
        connections: usize,
        /// Requests in flight per connection.
        #[arg(long, default_value_t = 32)]
        window: usize,
        /// How long to run, e.g. "5s".
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
}

/// Sign requests on one key-server connection with `window` in flight, until `stop`; counts
/// answers (`ok`, `failed`) and records each request's latency.
async fn keyless_connection(
    stream: tokio_boring::SslStream<TcpStream>,
    key_id: [u8; 32],
    scheme: u16,
    window: usize,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    lat: Arc<std::sync::Mutex<Vec<f64>>>,
) -> anyhow::Result<()> {
    use sluice_keyless::protocol::{Frame, Message, Status};
    let (mut rd, mut wr) = tokio::io::split(stream);
    let permits = Arc::new(tokio::sync::Semaphore::new(window));
    let sent: Arc<std::sync::Mutex<std::collections::HashMap<u32, Instant>>> = Default::default();
    let (p, st, sent_w) = (permits.clone(), stop.clone(), sent.clone());
    let writer = tokio::spawn(async move {
        let mut id = 0u32;
        // A TLS 1.3 CertificateVerify's signed content is about this long.
        let message = [0x20u8; 130];
        while !st.load(Ordering::Relaxed) {
            let Ok(permit) = p.acquire().await else { break };
            permit.forget();
            id = id.wrapping_add(1);
            sent_w
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, Instant::now());
            let f = Frame::sign(id, key_id, scheme, &message).to_bytes();
            if wr.write_all(&f).await.is_err() {
                break;
            }
        }
        anyhow::Ok(())
    });
    let mut buf = bytes::BytesMut::with_capacity(16 * 1024);
    while !stop.load(Ordering::Relaxed) {
        while let Some(f) = Frame::decode(&mut buf)? {
            let t0 = sent.lock().unwrap_or_else(|e| e.into_inner()).remove(&f.id);
            if let Some(t0) = t0 {
                lat.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(t0.elapsed().as_secs_f64() * 1000.0);
            }
            match f.message {
                Message::Response {
                    status: Status::Ok, ..
                } => counters.ok.fetch_add(1, Ordering::Relaxed),
                other => {
                    counters.fail(format!("{other:?}"));
                    0
                }
            };
            permits.add_permits(1);
        }
        let read = tokio::time::timeout(Duration::from_millis(200), rd.read_buf(&mut buf)).await;
        if let Ok(r) = read
            && r? == 0
        {
            bail!("the key server closed the connection");
        }
    }
    permits.close();
    writer.abort();
    Ok(())
}

fn connector(t: &Target) -> anyhow::Result<SslConnector> {
    let (tls, groups) = (t.tls.as_str(), t.groups.as_deref());
    let mut b = SslConnector::builder(SslMethod::tls())?;
    if let Some(g) = groups {
        b.set_curves_list(g)?;
    }
    if let (Some(cert), Some(key)) = (&t.client_cert, &t.client_key) {
        b.set_certificate_chain_file(cert)
            .with_context(|| format!("--client-cert {}", cert.display()))?;
        b.set_private_key_file(key, boring::ssl::SslFiletype::PEM)
            .with_context(|| format!("--client-key {}", key.display()))?;
    }
    b.set_verify(SslVerifyMode::NONE);
    // Every connection must be a full handshake: no client session cache.
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    let v = match tls {
        "1.2" => SslVersion::TLS1_2,
        "1.3" => SslVersion::TLS1_3,
        other => bail!("--tls {other}: use 1.2 or 1.3"),
    };
    b.set_min_proto_version(Some(v))?;
    b.set_max_proto_version(Some(v))?;
    b.set_alpn_protos(b"\x08http/1.1")?;
    Ok(b.build())
}

async fn tls_connect(
    connector: &SslConnector,
    t: &Target,
) -> anyhow::Result<tokio_boring::SslStream<TcpStream>> {
    let tcp = TcpStream::connect(t.addr).await?;
    tcp.set_nodelay(true)?;
    let mut cfg = connector.configure()?;
    cfg.set_verify_hostname(false);
    Ok(tokio_boring::connect(cfg, &t.sni, tcp).await?)
}

/// One full handshake and one request; returns whether the session was (wrongly) resumed.
async fn one_connection(connector: &SslConnector, t: &Target) -> anyhow::Result<bool> {
    let mut s = tls_connect(connector, t).await?;
    let resumed = s.ssl().session_reused();
    if t.mqtt {
        mqtt_session(&mut s).await?;
    } else {
        request_and_close(&mut s, t).await?;
    }
    Ok(resumed)
}

/// An MQTT 3.1.1 session on a new connection: CONNECT with a fresh client identifier, a
/// CONNACK that accepts it, DISCONNECT.
async fn mqtt_session(s: &mut tokio_boring::SslStream<TcpStream>) -> anyhow::Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = format!("lg-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60];
    body.extend(u16::try_from(id.len())?.to_be_bytes());
    body.extend(id.as_bytes());
    let mut packet = vec![0x10, u8::try_from(body.len())?];
    packet.extend(body);
    s.write_all(&packet).await?;
    let mut connack = [0u8; 4];
    s.read_exact(&mut connack).await?;
    if connack != [0x20, 0x02, 0x00, 0x00] {
        bail!("CONNACK {connack:02x?}");
    }
    s.write_all(&[0xE0, 0x00]).await?;
    let _ = s.shutdown().await;
    Ok(())
}

/// `GET t.path` with `Connection: close` on a new connection, read to its end: a 200 or an
/// error.
async fn request_and_close(
    s: &mut tokio_boring::SslStream<TcpStream>,
    t: &Target,
) -> anyhow::Result<()> {
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        t.path, t.sni
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::with_capacity(4096);
    s.read_to_end(&mut buf).await.or_else(|e| {
        // Some servers close without close_notify after Connection: close.
        if buf.is_empty() { Err(e) } else { Ok(0) }
    })?;
    if !buf.starts_with(b"HTTP/1.1 200") {
        bail!(
            "unexpected response: {:?}",
            String::from_utf8_lossy(&buf[..buf.len().min(80)])
        );
    }
    Ok(())
}

#[derive(Default)]
struct Counters {
    ok: AtomicU64,
    failed: AtomicU64,
    /// Requests retried once, as clients may when a reused connection closed under them
    /// before the request was processed (`soak`).
    retried: AtomicU64,
    resumed: AtomicU64,
    /// The first failure, to tell a broken setup from an overloaded one.
    first_error: std::sync::Mutex<Option<String>>,
}

impl Counters {
    fn fail(&self, why: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
    }

    fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

async fn storm(
    connector: Arc<SslConnector>,
    t: Arc<Target>,
    n: usize,
    stop: Arc<AtomicBool>,
    c: Arc<Counters>,
    lat: Option<Arc<std::sync::Mutex<Vec<f64>>>>,
) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (connector, t, stop, c, lat) = (
            connector.clone(),
            t.clone(),
            stop.clone(),
            c.clone(),
            lat.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                match tokio::time::timeout(Duration::from_secs(10), one_connection(&connector, &t))
                    .await
                {
                    Ok(Ok(resumed)) => {
                        c.ok.fetch_add(1, Ordering::Relaxed);
                        if resumed {
                            c.resumed.fetch_add(1, Ordering::Relaxed);
                        }
                        mine.push(start.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok(Err(e)) => c.fail(format!("{e:#}")),
                    Err(_) => c.fail("no response within 10 s".into()),
                }
            }
            if let Some(lat) = lat {
                lat.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// SCHED_IDLE for the calling thread (Linux policies are per thread), or nice 10 where the
/// kernel refuses it; returns which. The storm runs on the load core beside the origin and
/// the measured keep-alive thread: at nice 10 it still preempts them now and then, which
/// added its own sub-millisecond delays to the p99 being measured (stop 38's note); at
/// SCHED_IDLE it runs only when they have nothing to do.
fn lower_priority() -> &'static str {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid policy and a
    // parameter that lives for the call.
    #[expect(unsafe_code, reason = "sched_setscheduler has no std wrapper")]
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
        return "SCHED_IDLE";
    }
    // SAFETY: setpriority on the calling thread (who = 0) with a valid nice value.
    #[expect(unsafe_code, reason = "setpriority has no std wrapper")]
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
    "nice 10"
}

/// The JSON line of a QUIC mode.
fn quic_result(mode: &str, counters: &Counters, start: Instant) -> serde_json::Value {
    let elapsed = start.elapsed().as_secs_f64();
    let ok = counters.ok.load(Ordering::Relaxed);
    serde_json::json!({
        "mode": mode,
        "completed": ok,
        "failed": counters.failed.load(Ordering::Relaxed),
        "resumed": counters.resumed.load(Ordering::Relaxed),
        "first_error": counters.first_error(),
        "seconds": elapsed,
        "rate": ok as f64 / elapsed,
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass; RUSAGE_SELF is always valid.
    #[expect(unsafe_code, reason = "getrusage has no std wrapper")]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

async fn keepalive_latency(
    connector: Arc<SslConnector>,
    t: Arc<Target>,
    stop: Arc<AtomicBool>,
    rate: u32,
) -> anyhow::Result<Vec<f64>> {
    let s = tls_connect(&connector, &t)
        .await
        .context("keep-alive connection")?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    tokio::spawn(conn);
    let mut lat = Vec::new();
    let mut pace = (rate > 0).then(|| {
        let mut i = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    while !stop.load(Ordering::Relaxed) {
        if let Some(p) = &mut pace {
            p.tick().await;
        }
        let req = http::Request::get(t.path.as_str())
            .header("host", t.sni.as_str())
            .body(Empty::<Bytes>::new())?;
        let start = Instant::now();
        let resp = sender.send_request(req).await?;
        if resp.status() != 200 {
            bail!("keep-alive request got {}", resp.status());
        }
        resp.into_body().collect().await?;
        lat.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(lat)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // One thread: the load generator gets one core of its own in bench/run.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let out = rt.block_on(async move {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let cpu0 = cpu_seconds();
        let start = Instant::now();
        let result = match cli.mode {
            Mode::Soak { target, mix } => soak::run(target, mix).await?,
            Mode::Mix { target, mix } => mix::run(target, mix).await?,
            Mode::Origin { addr, duration } => soak::origin(addr, duration).await?,
            Mode::Echo { addr, duration } => tcp::echo(addr, duration).await?,
            Mode::Tcp {
                addr,
                duration,
                concurrency,
                size,
                per_connection,
            } => tcp::run(addr, duration, concurrency, size, per_connection).await?,
            Mode::Handshake {
                target,
                concurrency,
            } => {
                let connector = Arc::new(connector(&target)?);
                let duration = target.duration;
                let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
                let t = Arc::new(target);
                let run = tokio::spawn(storm(
                    connector,
                    t,
                    concurrency,
                    stop.clone(),
                    counters.clone(),
                    Some(lat.clone()),
                ));
                tokio::time::sleep(duration).await;
                stop.store(true, Ordering::Relaxed);
                run.await?;
                let elapsed = start.elapsed().as_secs_f64();
                let mut l = lat.lock().unwrap_or_else(|e| e.into_inner()).clone();
                l.sort_by(f64::total_cmp);
                let ok = counters.ok.load(Ordering::Relaxed);
                serde_json::json!({
                    "mode": "handshake",
                    "completed": ok,
                    "failed": counters.failed.load(Ordering::Relaxed),
                    "resumed": counters.resumed.load(Ordering::Relaxed),
                    "first_error": counters.first_error(),
                    "seconds": elapsed,
                    "rate": ok as f64 / elapsed,
                    "p50_ms": percentile(&l, 0.5),
                    "p99_ms": percentile(&l, 0.99),
                })
            }
            Mode::Keyless {
                addr,
                cert,
                key,
                site,
                scheme,
                connections,
                window,
                duration,
            } => {
                let scheme = u16::from_str_radix(scheme.trim_start_matches("0x"), 16)
                    .context("--scheme: a hex code point such as 0x0804")?;
                let site = boring::x509::X509::from_pem(&std::fs::read(&site)?)?;
                let site_key = site.public_key()?;
                let key_id = sluice_keyless::key_id_of(&site_key)?;
                let mut b = SslConnector::builder(SslMethod::tls())?;
                b.set_verify(SslVerifyMode::NONE);
                let cert = boring::x509::X509::from_pem(&std::fs::read(&cert)?)?;
                let key = boring::pkey::PKey::private_key_from_pem(&std::fs::read(&key)?)?;
                b.set_certificate(&cert)?;
                b.set_private_key(&key)?;
                let connector = b.build();
                let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
                let mut tasks = Vec::new();
                for _ in 0..connections {
                    let tcp = TcpStream::connect(addr).await?;
                    tcp.set_nodelay(true)?;
                    let mut cfg = connector.configure()?;
                    cfg.set_verify_hostname(false);
                    let s = tokio_boring::connect(cfg, "localhost", tcp).await?;
                    tasks.push(tokio::spawn(keyless_connection(
                        s,
                        key_id,
                        scheme,
                        window,
                        stop.clone(),
                        counters.clone(),
                        lat.clone(),
                    )));
                }
                let start = Instant::now();
                tokio::time::sleep(duration).await;
                stop.store(true, Ordering::Relaxed);
                for t in tasks {
                    t.await??;
                }
                let elapsed = start.elapsed().as_secs_f64();
                let mut l = lat.lock().unwrap_or_else(|e| e.into_inner()).clone();
                l.sort_by(f64::total_cmp);
                let ok = counters.ok.load(Ordering::Relaxed);
                serde_json::json!({
                    "mode": "keyless",
                    "completed": ok,
                    "failed": counters.failed.load(Ordering::Relaxed),
                    "first_error": counters.first_error(),
                    "seconds": elapsed,
                    "rate": ok as f64 / elapsed,
                    "p50_ms": percentile(&l, 0.5),
                    "p99_ms": percentile(&l, 0.99),
                })
            }
            Mode::QuicHandshake {
                target,
                concurrency,
            } => {
                quic::handshakes(
                    target.addr,
                    target.sni,
                    target.path,
                    concurrency,
                    target.duration,
                    counters.clone(),
                )
                .await?;
                quic_result("quic-handshake", &counters, start)
            }
            Mode::QuicRequests {
                target,
                connections,
                streams,
            } => {
                quic::requests(
                    target.addr,
                    target.sni,
                    target.path,
                    connections,
                    streams,
                    target.duration,
                    counters.clone(),
                )
                .await?;
                quic_result("quic-requests", &counters, start)
            }
            Mode::QuicIdle {
                target,
                connections,
            } => {
                let held = quic::idle(
                    target.addr,
                    &target.sni,
                    &target.path,
                    connections,
                    &counters,
                )
                .await?;
                // A line now (the benchmark measures while the connections are held), and
                // the usual one at the end.
                let line = quic_result("quic-idle", &counters, start);
                println!("{line}");
                std::io::Write::flush(&mut std::io::stdout())?;
                tokio::time::sleep(target.duration).await;
                drop(held);
                line
            }
            Mode::MqttIdle {
                target,
                devices,
                connections,
            } => {
                mqtt::idle(
                    &connector(&target)?,
                    &target,
                    &devices,
                    connections,
                    &counters,
                )
                .await?
            }
            Mode::MqttPublish {
                target,
                devices,
                pairs,
                rate,
                payload,
            } => {
                let c = connector(&target)?;
                mqtt::publish(&c, &target, &devices, pairs, rate, payload, &counters).await?
            }
            Mode::Latency {
                target,
                keepalive,
                storm: storm_n,
                rate,
                storm_addr,
            } => {
                let connector = Arc::new(connector(&target)?);
                let duration = target.duration;
                let storm_target = Arc::new(Target {
                    addr: storm_addr.unwrap_or(target.addr),
                    ..target.clone()
                });
                let t = Arc::new(target);
                let storm_task = tokio::spawn(storm(
                    connector.clone(),
                    storm_target.clone(),
                    storm_n,
                    stop.clone(),
                    counters.clone(),
                    None,
                ));
                // The measured keep-alive clients get a thread (and runtime) of their own,
                // and the storm's thread a lower priority, so that the figure is the
                // gateway's latency, not time spent queued behind the load generator's own
                // storm handshakes (client-side verification and key exchange).
                let (ka_connector, ka_target, ka_stop) =
                    (connector.clone(), t.clone(), stop.clone());
                let measured = std::thread::Builder::new().name("keepalive".into()).spawn(
                    move || -> anyhow::Result<Vec<f64>> {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        rt.block_on(async move {
                            let mut ka = Vec::new();
                            for _ in 0..keepalive {
                                ka.push(tokio::spawn(keepalive_latency(
                                    ka_connector.clone(),
                                    ka_target.clone(),
                                    ka_stop.clone(),
                                    rate,
                                )));
                            }
                            let mut lat = Vec::new();
                            for k in ka {
                                lat.extend(k.await??);
                            }
                            anyhow::Ok(lat)
                        })
                    },
                )?;
                let storm_priority = lower_priority();
                tokio::time::sleep(duration).await;
                stop.store(true, Ordering::Relaxed);
                let mut lat = measured
                    .join()
                    .map_err(|_| anyhow::anyhow!("the keep-alive thread panicked"))??;
                storm_task.await?;
                let elapsed = start.elapsed().as_secs_f64();
                lat.sort_by(f64::total_cmp);
                serde_json::json!({
                    "mode": "latency",
                    "requests": lat.len(),
                    "rate": lat.len() as f64 / elapsed,
                    "p50_ms": percentile(&lat, 0.5),
                    "p99_ms": percentile(&lat, 0.99),
                    "storm_completed": counters.ok.load(Ordering::Relaxed),
                    "storm_failed": counters.failed.load(Ordering::Relaxed),
                    "first_error": counters.first_error(),
                    "storm_rate": counters.ok.load(Ordering::Relaxed) as f64 / elapsed,
                    "storm_priority": storm_priority,
                    "storm_addr": storm_target.addr.to_string(),
                    "seconds": elapsed,
                })
            }
        };
        let mut result = result;
        result["loadgen_cpu_s"] = serde_json::json!(cpu_seconds() - cpu0);
        anyhow::Ok(result)
    })?;
    println!("{out}");
    Ok(())
}
