//! Layer-4 load for `bench/stream`: an echo server (the upstream) and two clients, one that
//! streams messages back and forth on a few long connections (throughput) and one that opens
//! a connection per small exchange (connection rate).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Echoes every byte back until `duration` has passed.
pub(crate) async fn echo(
    addr: SocketAddr,
    duration: Duration,
) -> anyhow::Result<serde_json::Value> {
    let socket = TcpListener::bind(addr).await?;
    let serve = async {
        loop {
            let Ok((tcp, _)) = socket.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let (mut r, mut w) = tcp.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    };
    let _ = tokio::time::timeout(duration, serve).await;
    Ok(serde_json::json!({ "mode": "echo" }))
}

#[derive(Default)]
struct Count {
    exchanges: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicU64,
}

/// `concurrency` clients for `duration`. With `per_connection`, each exchange is a new
/// connection (connect, `size` bytes there and back, close); otherwise each client keeps one
/// connection and sends `size`-byte messages, reading each echo before the next.
pub(crate) async fn run(
    addr: SocketAddr,
    duration: Duration,
    concurrency: usize,
    size: usize,
    per_connection: bool,
) -> anyhow::Result<serde_json::Value> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(Count::default());
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (stop, count, first_error) = (stop.clone(), count.clone(), first_error.clone());
        tasks.push(tokio::spawn(async move {
            let message = vec![0x5au8; size];
            let mut back = vec![0u8; size];
            let mut conn: Option<TcpStream> = None;
            while !stop.load(Ordering::Relaxed) {
                let result = async {
                    let mut tcp = match conn.take() {
                        Some(c) => c,
                        None => {
                            let c = TcpStream::connect(addr).await?;
                            c.set_nodelay(true)?;
                            c
                        }
                    };
                    tcp.write_all(&message).await?;
                    tcp.read_exact(&mut back).await?;
                    if !per_connection {
                        conn = Some(tcp);
                    }
                    anyhow::Ok(())
                };
                match tokio::time::timeout(Duration::from_secs(10), result).await {
                    Ok(Ok(())) => {
                        count.exchanges.fetch_add(1, Ordering::Relaxed);
                        count.bytes.fetch_add(2 * size as u64, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => {
                        count.failed.fetch_add(1, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(format!("{e:#}"));
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(_) => {
                        count.failed.fetch_add(1, Ordering::Relaxed);
                        conn = None;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let exchanges = count.exchanges.load(Ordering::Relaxed);
    let bytes = count.bytes.load(Ordering::Relaxed);
    Ok(serde_json::json!({
        "mode": if per_connection { "tcp-connections" } else { "tcp-throughput" },
        "completed": exchanges,
        "bytes": bytes,
        "failed": count.failed.load(Ordering::Relaxed),
        "first_error": first_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        "seconds": elapsed,
        "rate": exchanges as f64 / elapsed,
        "mb_per_s": bytes as f64 / elapsed / 1e6,
    }))
}
