//! HTTP/3 load for `bench/run` (no packaged HTTP/3 load generator exists): quiche clients on
//! UDP, each connection a full handshake (no session kept, no 0-RTT).
//!
//! - `quic-handshake`: new connection, full handshake, one GET, close; `--concurrency` at once;
//! - `quic-requests`: `--connections` established connections, each with `--streams` GETs in
//!   flight, back to back (HTTP/3's counterpart of `h2load -c 4 -m 16`).

use anyhow::{Context as _, bail};
use quiche::h3::{self, NameValue};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

use crate::Counters;

/// One client connection and its socket.
struct Client {
    conn: quiche::Connection,
    socket: UdpSocket,
    h3: Option<h3::Connection>,
    buf: Vec<u8>,
    out: Vec<u8>,
}

fn config() -> anyhow::Result<quiche::Config> {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION)?;
    c.verify_peer(false);
    c.set_application_protos(h3::APPLICATION_PROTOCOL)?;
    c.set_max_idle_timeout(10_000);
    c.set_max_recv_udp_payload_size(65_527);
    c.set_max_send_udp_payload_size(1_350);
    c.set_initial_max_data(64 << 20);
    c.set_initial_max_stream_data_bidi_local(4 << 20);
    c.set_initial_max_stream_data_bidi_remote(4 << 20);
    c.set_initial_max_stream_data_uni(4 << 20);
    c.set_initial_max_streams_bidi(1000);
    c.set_initial_max_streams_uni(16);
    c.set_disable_active_migration(true);
    Ok(c)
}

impl Client {
    /// Connects and completes the handshake and HTTP/3's setup.
    async fn connect(
        addr: SocketAddr,
        sni: &str,
        cfg: &mut quiche::Config,
    ) -> anyhow::Result<Client> {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        socket.connect(addr).await?;
        let mut scid = [0u8; 16];
        boring::rand::rand_bytes(&mut scid)?;
        let scid = quiche::ConnectionId::from_ref(&scid);
        let conn = quiche::connect(Some(sni), &scid, socket.local_addr()?, addr, cfg)?;
        let mut c = Client {
            conn,
            socket,
            h3: None,
            buf: vec![0; 65_535],
            out: vec![0; 1_350],
        };
        while !c.conn.is_established() {
            c.io().await?;
        }
        c.h3 = Some(h3::Connection::with_transport(
            &mut c.conn,
            &h3::Config::new()?,
        )?);
        Ok(c)
    }

    /// Sends what quiche has, then waits for a datagram (or quiche's timer) and feeds it.
    async fn io(&mut self) -> anyhow::Result<()> {
        self.flush().await?;
        if self.conn.is_closed() {
            bail!("connection closed: {:?}", self.conn.peer_error());
        }
        let wait = self.conn.timeout().unwrap_or(Duration::from_secs(5));
        match tokio::time::timeout(wait, self.socket.recv(&mut self.buf)).await {
            Err(_) => self.conn.on_timeout(),
            Ok(n) => {
                let n = n?;
                let info = quiche::RecvInfo {
                    from: self.socket.peer_addr()?,
                    to: self.socket.local_addr()?,
                };
                // Then whatever else already arrived, without waiting.
                let mut len = n;
                loop {
                    let _ = self.conn.recv(&mut self.buf[..len], info);
                    match self.socket.try_recv(&mut self.buf) {
                        Ok(m) => len = m,
                        Err(_) => break,
                    }
                }
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> anyhow::Result<()> {
        loop {
            match self.conn.send(&mut self.out) {
                Ok((n, _)) => {
                    self.socket.send(&self.out[..n]).await?;
                }
                Err(quiche::Error::Done) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn get(&mut self, sni: &str, path: &str) -> anyhow::Result<u64> {
        let req = [
            h3::Header::new(b":method", b"GET"),
            h3::Header::new(b":scheme", b"https"),
            h3::Header::new(b":authority", sni.as_bytes()),
            h3::Header::new(b":path", path.as_bytes()),
        ];
        let h3 = self.h3.as_mut().context("HTTP/3 not set up")?;
        Ok(h3.send_request(&mut self.conn, &req, true)?)
    }

    /// One GET, waited for until its stream finishes; an error unless it was a 200.
    async fn fetch(&mut self, sni: &str, path: &str) -> anyhow::Result<()> {
        let id = self.get(sni, path)?;
        let (mut statuses, mut done) = (HashMap::new(), Vec::new());
        loop {
            self.events(&mut statuses, &mut done)?;
            if let Some(&(_, status)) = done.iter().find(|(d, _)| *d == id) {
                if status != 200 {
                    bail!("status {status}");
                }
                return Ok(());
            }
            self.io().await?;
        }
    }

    /// HTTP/3 events: the status of each stream that finished.
    fn events(
        &mut self,
        statuses: &mut HashMap<u64, u16>,
        done: &mut Vec<(u64, u16)>,
    ) -> anyhow::Result<()> {
        let h3 = self.h3.as_mut().context("HTTP/3 not set up")?;
        loop {
            match h3.poll(&mut self.conn) {
                Ok((id, h3::Event::Headers { list, .. })) => {
                    let status = list
                        .iter()
                        .find(|h| h.name() == b":status")
                        .and_then(|h| std::str::from_utf8(h.value()).ok()?.parse().ok())
                        .unwrap_or(0);
                    statuses.insert(id, status);
                }
                Ok((id, h3::Event::Data)) => {
                    while h3.recv_body(&mut self.conn, id, &mut self.buf).is_ok() {}
                }
                Ok((id, h3::Event::Finished)) => done.push((id, statuses.remove(&id).unwrap_or(0))),
                Ok((id, h3::Event::Reset(code))) => bail!("stream {id} reset ({code:#x})"),
                Ok(_) => {}
                Err(h3::Error::Done) => return Ok(()),
                Err(e) => bail!("HTTP/3: {e}"),
            }
        }
    }

    async fn close(mut self) {
        let _ = self.conn.close(true, 0x100, b"");
        let _ = self.flush().await;
    }
}

/// One full handshake and one request.
async fn one(
    addr: SocketAddr,
    sni: &str,
    path: &str,
    cfg: &mut quiche::Config,
) -> anyhow::Result<bool> {
    let mut c = Client::connect(addr, sni, cfg).await?;
    let resumed = c.conn.is_resumed();
    c.fetch(sni, path).await?;
    c.close().await;
    Ok(resumed)
}

/// `quic-idle`: `n` connections opened one after another, one request each (its answer read
/// and acknowledged), then kept: only quiche's connection and the socket, no buffers.
pub(crate) async fn idle(
    addr: SocketAddr,
    sni: &str,
    path: &str,
    n: usize,
    counters: &Counters,
) -> anyhow::Result<Vec<(quiche::Connection, UdpSocket)>> {
    let mut cfg = config()?;
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = Client::connect(addr, sni, &mut cfg).await?;
        c.fetch(sni, path).await?;
        // Acknowledge what arrived, so that the server has nothing left to resend.
        c.flush().await?;
        counters.ok.fetch_add(1, Ordering::Relaxed);
        held.push((c.conn, c.socket));
    }
    Ok(held)
}

/// `quic-handshake`.
pub(crate) async fn handshakes(
    addr: SocketAddr,
    sni: String,
    path: String,
    concurrency: usize,
    duration: Duration,
    counters: Arc<Counters>,
) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (sni, path, stop, counters) =
            (sni.clone(), path.clone(), stop.clone(), counters.clone());
        let mut cfg = config()?;
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(
                    Duration::from_secs(10),
                    one(addr, &sni, &path, &mut cfg),
                )
                .await
                {
                    Ok(Ok(resumed)) => {
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                        if resumed {
                            counters.resumed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(Err(e)) => counters.fail(format!("{e:#}")),
                    Err(_) => counters.fail("no answer in 10 s".into()),
                }
            }
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

/// `quic-requests`: established connections, `streams` requests in flight on each.
pub(crate) async fn requests(
    addr: SocketAddr,
    sni: String,
    path: String,
    connections: usize,
    streams: usize,
    duration: Duration,
    counters: Arc<Counters>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (sni, path, counters) = (sni.clone(), path.clone(), counters.clone());
        let mut cfg = config()?;
        let mut c = Client::connect(addr, &sni, &mut cfg).await?;
        tasks.push(tokio::spawn(async move {
            let (mut statuses, mut done) = (HashMap::new(), Vec::new());
            let mut in_flight = 0;
            while Instant::now() < deadline {
                while in_flight < streams {
                    match c.get(&sni, &path) {
                        Ok(_) => in_flight += 1,
                        Err(_) => break, // no stream credit yet
                    }
                }
                if let Err(e) = c.events(&mut statuses, &mut done) {
                    counters.fail(format!("{e:#}"));
                    return;
                }
                let answered = !done.is_empty();
                for (_, status) in done.drain(..) {
                    in_flight -= 1;
                    if status == 200 {
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                    } else {
                        counters.fail(format!("status {status}"));
                    }
                }
                if answered {
                    continue; // the next requests go out before waiting for anything
                }
                if let Err(e) = c.io().await {
                    counters.fail(format!("{e:#}"));
                    return;
                }
            }
            c.close().await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
