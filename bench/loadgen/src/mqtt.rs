//! MQTT over TLS for `bench/mqtt`: devices held idle (the gateway's memory per connection)
//! and QoS 0 messages published at a fixed rate through the gateway to subscribers that
//! also connect through it (the gateway's CPU per message relayed).
//!
//! Both print a first JSON line once their connections are open (the benchmark reads the
//! gateway's memory or starts its CPU count then) and the usual one at the end.

use crate::{Counters, Target};
use anyhow::{Context, bail};
use boring::ssl::SslConnector;
use futures_util::StreamExt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

type Tls = tokio_boring::SslStream<TcpStream>;

/// What `mqtt-idle` and `mqtt-publish` are asked for besides the target.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Devices {
    /// Connections opened from 127.0.0.1 ..= 127.0.0.N (each source address has its own
    /// ephemeral ports: 100,000 connections need several).
    #[arg(long, default_value_t = 8)]
    sources: u8,
    /// Connections being opened at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The CONNECT's keep alive, in seconds (no PINGREQ is sent while held: a broker closes
    /// a device silent for 1.5 times this).
    #[arg(long, default_value_t = 900)]
    keepalive: u16,
}

/// A 3.1.1 CONNECT (clean session) for `id`.
fn connect_packet(id: &str, keepalive: u16) -> anyhow::Result<Vec<u8>> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0x02];
    body.extend(keepalive.to_be_bytes());
    body.extend(u16::try_from(id.len())?.to_be_bytes());
    body.extend(id.as_bytes());
    Ok(packet(0x10, &body))
}

/// A packet: its first byte, the Variable Byte Integer length, then `body`.
fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    let mut len = body.len();
    loop {
        let mut b = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            b |= 0x80;
        }
        out.push(b);
        if len == 0 {
            break;
        }
    }
    out.extend(body);
    out
}

/// A string field: its 2-byte length, then its bytes.
fn string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u16).to_be_bytes().to_vec();
    out.extend(s.as_bytes());
    out
}

/// A TLS connection from `source` through which `id` has connected (CONNACK 0 read).
async fn open(
    connector: &SslConnector,
    t: &Target,
    source: Ipv4Addr,
    id: &str,
    keepalive: u16,
) -> anyhow::Result<Tls> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    let tcp = socket.connect(t.addr).await?;
    tcp.set_nodelay(true)?;
    let mut cfg = connector.configure()?;
    cfg.set_verify_hostname(false);
    let mut s = tokio_boring::connect(cfg, &t.sni, tcp).await?;
    s.write_all(&connect_packet(id, keepalive)?).await?;
    let mut connack = [0u8; 4];
    s.read_exact(&mut connack).await?;
    if connack != [0x20, 0x02, 0x00, 0x00] {
        bail!("CONNACK {connack:02x?}");
    }
    Ok(s)
}

/// Opens `n` connections (clients `{prefix}-0` …), `d.concurrency` at a time, each from the
/// next source address. Failures are counted, not fatal.
async fn open_many(
    connector: &SslConnector,
    t: &Target,
    d: &Devices,
    prefix: &str,
    n: usize,
    counters: &Counters,
) -> Vec<Tls> {
    let sources = d.sources.max(1);
    futures_util::stream::iter(0..n)
        .map(|i| async move {
            let source = Ipv4Addr::new(127, 0, 0, 1 + (i % usize::from(sources)) as u8);
            let id = format!("{prefix}-{i}");
            open(connector, t, source, &id, d.keepalive).await
        })
        .buffer_unordered(d.concurrency.max(1))
        .filter_map(|r| async move {
            match r {
                Ok(s) => {
                    counters.ok.fetch_add(1, Ordering::Relaxed);
                    Some(s)
                }
                Err(e) => {
                    counters.fail(format!("{e:#}"));
                    None
                }
            }
        })
        .collect()
        .await
}

/// Prints `line` at once (the benchmark acts on it while the connections are held).
fn announce(line: &serde_json::Value) -> anyhow::Result<()> {
    println!("{line}");
    std::io::Write::flush(&mut std::io::stdout())?;
    Ok(())
}

/// `mqtt-idle`: opens `n` devices, announces them, holds them silent for `t.duration`.
pub(crate) async fn idle(
    connector: &SslConnector,
    t: &Target,
    d: &Devices,
    n: usize,
    counters: &Counters,
) -> anyhow::Result<serde_json::Value> {
    let start = Instant::now();
    let held = open_many(connector, t, d, "idle", n, counters).await;
    let line = serde_json::json!({
        "mode": "mqtt-idle",
        "completed": held.len(),
        "failed": counters.failed.load(Ordering::Relaxed),
        "first_error": counters.first_error(),
        "seconds": start.elapsed().as_secs_f64(),
    });
    announce(&line)?;
    tokio::time::sleep(t.duration).await;
    drop(held);
    Ok(line)
}

/// `mqtt-publish`: `pairs` subscribers (each to its own topic `bench/I`) and `pairs`
/// publishers, all through the gateway; once all are connected and subscribed it announces
/// so, then the publishers send `rate` QoS 0 messages a second between them, each
/// `payload` bytes, for `t.duration`. Counts what the subscribers received.
pub(crate) async fn publish(
    connector: &SslConnector,
    t: &Target,
    d: &Devices,
    pairs: usize,
    rate: u64,
    payload: usize,
    counters: &Counters,
) -> anyhow::Result<serde_json::Value> {
    let mut subscribers = Vec::with_capacity(pairs);
    for i in 0..pairs {
        let source = Ipv4Addr::new(127, 0, 0, 1 + (i % usize::from(d.sources.max(1))) as u8);
        let mut s = open(connector, t, source, &format!("sub-{i}"), d.keepalive)
            .await
            .with_context(|| format!("subscriber {i}"))?;
        let mut body = vec![0, 1];
        body.extend(string(&format!("bench/{i}")));
        body.push(0);
        s.write_all(&packet(0x82, &body)).await?;
        let mut suback = [0u8; 5];
        s.read_exact(&mut suback).await?;
        if suback != [0x90, 0x03, 0, 1, 0] {
            bail!("SUBACK {suback:02x?}");
        }
        subscribers.push(s);
    }
    let publishers = open_many(connector, t, d, "pub", pairs, counters).await;
    if publishers.len() != pairs {
        bail!("publishers: {:?}", counters.first_error());
    }
    announce(&serde_json::json!({"mode": "mqtt-publish", "ready": true}))?;
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = subscribers
        .into_iter()
        .map(|s| tokio::spawn(count_publishes(s, received.clone(), stop.clone())))
        .collect();
    let start = Instant::now();
    let per_publisher = rate as f64 / pairs as f64;
    let writers: Vec<_> = publishers
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let mut body = string(&format!("bench/{i}"));
            body.extend(std::iter::repeat_n(b'x', payload));
            let message = packet(0x30, &body);
            tokio::spawn(paced(s, message, per_publisher, t.duration))
        })
        .collect();
    let mut published = 0u64;
    for w in writers {
        published += w.await??;
    }
    let seconds = start.elapsed().as_secs_f64();
    // What is in flight arrives within moments; then the readers stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.abort();
    }
    let received = received.load(Ordering::Relaxed);
    Ok(serde_json::json!({
        "mode": "mqtt-publish",
        "published": published,
        "received": received,
        "completed": received,
        "failed": published.saturating_sub(received),
        "seconds": seconds,
        "rate": received as f64 / seconds,
    }))
}

/// Writes `message` at `per_second`, in 10 ms ticks, for `duration`; returns how many.
async fn paced(
    mut s: Tls,
    message: Vec<u8>,
    per_second: f64,
    duration: Duration,
) -> anyhow::Result<u64> {
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut sent, mut batch) = (0u64, Vec::new());
    while start.elapsed() < duration {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * per_second) as u64;
        batch.clear();
        for _ in sent..due {
            batch.extend_from_slice(&message);
        }
        if !batch.is_empty() {
            s.write_all(&batch).await?;
            sent = due;
        }
    }
    s.flush().await?;
    // The connection stays open until the subscribers have read (a close could lose them).
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(s);
    });
    Ok(sent)
}

/// Counts the PUBLISH packets arriving on `s` until `stop`.
async fn count_publishes(mut s: Tls, received: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let mut buf = bytes::BytesMut::with_capacity(64 * 1024);
    while !stop.load(Ordering::Relaxed) {
        match s.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        while let Some((first, len)) = header(&buf) {
            if buf.len() < len {
                break;
            }
            if first >> 4 == 3 {
                received.fetch_add(1, Ordering::Relaxed);
            }
            let _ = buf.split_to(len);
        }
    }
}

/// A whole packet's first byte and length (header included), once its header has arrived.
fn header(buf: &[u8]) -> Option<(u8, usize)> {
    let (mut len, mut shift) = (0usize, 0);
    for (i, b) in buf.iter().enumerate().skip(1).take(4) {
        len |= usize::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return Some((buf[0], 1 + i + len));
        }
        shift += 7;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip_through_the_header() {
        for n in [0usize, 1, 127, 128, 16_383, 16_384, 300_000] {
            let p = packet(0x30, &vec![0; n]);
            assert_eq!(header(&p), Some((0x30, p.len())), "{n}");
        }
        assert_eq!(header(&[0x30, 0x80]), None, "an unfinished length");
    }
}
