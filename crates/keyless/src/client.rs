//! The gateway's `keyless` engine: private-key jobs signed by remote key servers.
//!
//! Each key server gets `connections` persistent TLS 1.3 connections (the gateway presents its
//! client certificate and checks the server's against `ca` and `server_name`); many requests
//! are in flight on each at once, matched to their responses by request id. A job goes to the
//! key server with the fewest requests in flight (ties rotate), and when that server fails
//! (connection lost, an error status, no answer within `timeout`, a result that does not
//! verify) to the next one, until every server that is up has been tried; then the job fails
//! and the offload dispatcher runs it on the next engine of the chain, which signs with the
//! local key when the certificate has one.
//!
//! A health task per key server reconnects closed connections and pings every
//! `ping_interval`; a server is up while a connection answers its pings, and traffic returns
//! to a restarted server at its first good ping. A lost connection fails its requests at once
//! (they move to another server without waiting for a timeout) and marks its server down.
//!
//! A key server that answers `unknown_key` is not asked for that key again for
//! [`UNKNOWN_KEY_TTL`] (or until it reconnects); while no server that is up may have the key,
//! the engine refuses its jobs at once as unsupported: they go straight to the next engine
//! without a round trip, and without counting as failures (which would open the engine's
//! breaker for every other key).
//!
//! The engine runs its sockets on a thread and runtime of its own ("sluice-keyless"), so it
//! is process-wide like every engine and outlives configuration reloads of the gateway.

use crate::protocol::{Frame, Message, Status};
use boring::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
use bytes::{Bytes, BytesMut};
use sluice_crypto::{KeyId, KeyJob, RemoteInput};
use sluice_offload::{Engine, EngineError, Pending, Reject, completer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// How long a key server that answered `unknown_key` for a key is not asked for it again.
/// Keys added on a key server are used within this time (at once when it restarts).
pub const UNKNOWN_KEY_TTL: Duration = Duration::from_secs(10);

/// A key server as the engine sees it (for `/metrics` and `/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStats {
    /// `host:port`.
    pub address: String,
    /// Answering pings.
    pub up: bool,
    /// Requests in flight.
    pub in_flight: usize,
    /// Requests it answered with a result.
    pub ok: u64,
    /// Requests that failed on it (connection lost, timeout, error status, bad result).
    pub failed: u64,
}

/// The remote-signing engine.
pub struct Keyless {
    shared: Arc<Shared>,
    handle: tokio::runtime::Handle,
    /// Dropped with the engine: ends its runtime and closes its connections.
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for Keyless {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyless")
            .field("servers", &self.stats())
            .finish_non_exhaustive()
    }
}

struct Shared {
    servers: Vec<Server>,
    connector: SslConnector,
    server_name: String,
    timeout: Duration,
    ping_interval: Duration,
    next_id: AtomicU32,
    rotate: AtomicUsize,
}

struct Server {
    address: String,
    connections: Vec<Mutex<Option<Arc<Conn>>>>,
    in_flight: AtomicUsize,
    up: AtomicBool,
    ok: AtomicU64,
    failed: AtomicU64,
    /// Key ids it answered `unknown_key` for, until when.
    missing: Mutex<HashMap<KeyId, Instant>>,
}

/// One open connection: a writer task fed by `writer`, a reader task completing `pending`.
struct Conn {
    writer: mpsc::Sender<Frame>,
    pending: Mutex<HashMap<u32, oneshot::Sender<(Status, Bytes)>>>,
    closed: AtomicBool,
    in_flight: AtomicUsize,
}

/// Why one attempt on one key server failed.
#[derive(Debug)]
enum AttemptError {
    NotConnected,
    Lost,
    Timeout,
    Status(Status, String),
    WrongResult(String),
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptError::NotConnected => write!(f, "not connected"),
            AttemptError::Lost => write!(f, "connection lost"),
            AttemptError::Timeout => write!(f, "no answer in time"),
            AttemptError::Status(s, m) => write!(f, "{}: {m}", s.name()),
            AttemptError::WrongResult(m) => write!(f, "wrong result: {m}"),
        }
    }
}

impl Keyless {
    /// Starts the engine: its thread, and a health task per key server that connects at
    /// once. Jobs submitted before the first connection is up are rejected as `Down`.
    ///
    /// Its settings are `[offload.keyless]` as the configuration loaded them (one struct for
    /// both: `fallback_local` is applied by `sluice-tls` when it loads certificates, since the
    /// engine itself only fails a job).
    pub fn start(
        config: &sluice_config::KeylessOffload,
    ) -> Result<Arc<Self>, boring::error::ErrorStack> {
        let mut b = SslConnector::builder(SslMethod::tls())?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
        if let Some((leaf, rest)) = config.certificate.split_first() {
            b.set_certificate(leaf)?;
            for c in rest {
                b.add_extra_chain_cert(c.clone())?;
            }
        }
        b.set_private_key(&config.key)?;
        let mut pinned = Vec::new();
        for c in &config.ca {
            b.cert_store_mut().add_cert(c.clone())?;
            pinned.push(c.to_der()?);
        }
        // A key server's certificate verifies when it chains to `ca`, or is itself one of
        // the certificates there (a self-signed certificate, pinned).
        b.set_verify_callback(SslVerifyMode::PEER, move |verified, ctx| {
            verified
                || ctx
                    .chain()
                    .and_then(|c| c.iter().next())
                    .and_then(|leaf| leaf.to_der().ok())
                    .is_some_and(|der| pinned.contains(&der))
        });
        let shared = Arc::new(Shared {
            servers: config
                .servers
                .iter()
                .map(|a| Server {
                    address: a.clone(),
                    connections: (0..config.connections.max(1))
                        .map(|_| Mutex::new(None))
                        .collect(),
                    in_flight: AtomicUsize::new(0),
                    up: AtomicBool::new(false),
                    ok: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                    missing: Mutex::new(HashMap::new()),
                })
                .collect(),
            connector: b.build(),
            server_name: config.server_name.clone(),
            timeout: config.timeout,
            ping_interval: config.ping_interval,
            next_id: AtomicU32::new(1),
            rotate: AtomicUsize::new(0),
        });
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sluice-keyless".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "keyless engine: no runtime");
                        return;
                    }
                };
                let _ = handle_tx.send(rt.handle().clone());
                rt.block_on(async move {
                    let _ = stopped.await;
                });
            })
            .map_err(|_| boring::error::ErrorStack::get())?;
        let handle = handle_rx
            .recv()
            .map_err(|_| boring::error::ErrorStack::get())?;
        for i in 0..shared.servers.len() {
            handle.spawn(health(shared.clone(), i));
        }
        Ok(Arc::new(Keyless {
            shared,
            handle,
            _stop: stop,
        }))
    }

    /// Each key server's state.
    pub fn stats(&self) -> Vec<ServerStats> {
        self.shared
            .servers
            .iter()
            .map(|s| ServerStats {
                address: s.address.clone(),
                up: s.up.load(Ordering::Relaxed),
                in_flight: s.in_flight.load(Ordering::Relaxed),
                ok: s.ok.load(Ordering::Relaxed),
                failed: s.failed.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Blocks (up to `limit`) until at least one key server is up; for start-up, so the
    /// first handshakes need not fall back. The engine's own thread does the connecting.
    pub fn wait_up(&self, limit: Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        loop {
            if self
                .shared
                .servers
                .iter()
                .any(|s| s.up.load(Ordering::Relaxed))
            {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Engine<KeyJob> for Keyless {
    fn name(&self) -> &str {
        "keyless"
    }

    fn submit(&self, job: KeyJob) -> Result<Pending<Vec<u8>>, Reject> {
        let Some(key_id) = job.key_id() else {
            return Err(Reject::Unsupported);
        };
        let mut up = self
            .shared
            .servers
            .iter()
            .filter(|s| s.up.load(Ordering::Relaxed))
            .peekable();
        if up.peek().is_none() {
            return Err(Reject::Down);
        }
        let now = Instant::now();
        if up.all(|s| s.lacks(key_id, now)) {
            return Err(Reject::Unsupported);
        }
        let (tx, pending) = completer();
        let shared = self.shared.clone();
        self.handle.spawn(async move {
            let _ = tx.send(shared.sign(&job).await);
        });
        Ok(pending)
    }
}

impl Shared {
    /// Up servers, fewest requests in flight first; ties in rotating order.
    fn order(&self) -> Vec<&Server> {
        let n = self.servers.len();
        let start = self.rotate.fetch_add(1, Ordering::Relaxed);
        let mut up: Vec<(usize, &Server)> = (0..n)
            .map(|i| &self.servers[(start + i) % n])
            .filter(|s| s.up.load(Ordering::Relaxed))
            .enumerate()
            .collect();
        up.sort_by_key(|(rank, s)| (s.in_flight.load(Ordering::Relaxed), *rank));
        up.into_iter().map(|(_, s)| s).collect()
    }

    async fn sign(&self, job: &KeyJob) -> Result<Vec<u8>, EngineError> {
        let Some(key_id) = job.key_id().copied() else {
            return Err(EngineError::Failed("the key has no key id".into()));
        };
        let mut errors = Vec::new();
        let now = Instant::now();
        for server in self.order() {
            if server.lacks(&key_id, now) {
                errors.push(format!("{}: unknown_key (remembered)", server.address));
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let frame = match job.remote_input() {
                RemoteInput::Sign { scheme, message } => {
                    Frame::sign(id, key_id, scheme as u16, message)
                }
                RemoteInput::Decrypt { ciphertext } => Frame::decrypt(id, key_id, ciphertext),
            };
            let result = match server.call(self, frame).await {
                Ok(body) => job
                    .check(&body)
                    .map(|()| body.to_vec())
                    .map_err(|e| AttemptError::WrongResult(e.to_string())),
                Err(e) => Err(e),
            };
            match result {
                Ok(out) => {
                    server.ok.fetch_add(1, Ordering::Relaxed);
                    return Ok(out);
                }
                Err(e) => {
                    server.failed.fetch_add(1, Ordering::Relaxed);
                    if matches!(e, AttemptError::Lost | AttemptError::NotConnected) {
                        server.up.store(false, Ordering::Relaxed);
                    }
                    if matches!(e, AttemptError::Status(Status::UnknownKey, _)) {
                        server.remember_missing(key_id);
                    }
                    tracing::debug!(server = %server.address, error = %e, "key server attempt failed");
                    errors.push(format!("{}: {e}", server.address));
                }
            }
        }
        if errors.is_empty() {
            errors.push("no key server is up".into());
        }
        Err(EngineError::Failed(format!(
            "no key server signed: {}",
            errors.join("; ")
        )))
    }
}

impl Server {
    /// Whether this server said lately that it has no key `id`.
    fn lacks(&self, id: &KeyId, now: Instant) -> bool {
        let missing = self.missing.lock().unwrap_or_else(|e| e.into_inner());
        missing.get(id).is_some_and(|&until| now < until)
    }

    fn remember_missing(&self, id: KeyId) {
        let now = Instant::now();
        let mut missing = self.missing.lock().unwrap_or_else(|e| e.into_inner());
        // Expired entries go when new ones come: the map holds at most the keys that missed
        // within the last TTL.
        missing.retain(|_, until| now < *until);
        missing.insert(id, now + UNKNOWN_KEY_TTL);
    }

    /// The open connection with the fewest requests in flight.
    fn connection(&self) -> Option<Arc<Conn>> {
        self.connections
            .iter()
            .filter_map(|slot| {
                slot.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .filter(|c| !c.closed.load(Ordering::Relaxed))
                    .cloned()
            })
            .min_by_key(|c| c.in_flight.load(Ordering::Relaxed))
    }

    /// One request on this server: the OK body, or why not.
    async fn call(&self, shared: &Shared, frame: Frame) -> Result<Bytes, AttemptError> {
        let conn = self.connection().ok_or(AttemptError::NotConnected)?;
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        conn.in_flight.fetch_add(1, Ordering::Relaxed);
        let result = conn.call(frame, shared.timeout).await;
        conn.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        result
    }
}

impl Conn {
    async fn call(&self, frame: Frame, timeout: Duration) -> Result<Bytes, AttemptError> {
        let id = frame.id;
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        if self.closed.load(Ordering::Relaxed) || self.writer.send(frame).await.is_err() {
            self.forget(id);
            return Err(AttemptError::Lost);
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok((Status::Ok, body))) => Ok(body),
            Ok(Ok((status, body))) => Err(AttemptError::Status(
                status,
                String::from_utf8_lossy(&body).into_owned(),
            )),
            Ok(Err(_)) => Err(AttemptError::Lost),
            Err(_) => {
                self.forget(id);
                Err(AttemptError::Timeout)
            }
        }
    }

    fn forget(&self, id: u32) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Marks the connection closed and fails everything pending on it.
    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Opens one connection to `address` and starts its reader and writer tasks.
async fn open(shared: &Shared, address: &str) -> Result<Arc<Conn>, String> {
    let tcp = tokio::time::timeout(
        shared.timeout.max(Duration::from_secs(1)),
        TcpStream::connect(address),
    )
    .await
    .map_err(|_| "connect timed out".to_owned())?
    .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let config = shared
        .connector
        .configure()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_boring::connect(config, &shared.server_name, tcp),
    )
    .await
    .map_err(|_| "TLS handshake timed out".to_owned())?
    .map_err(|e| format!("TLS handshake: {e}"))?;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (writer, mut frames) = mpsc::channel::<Frame>(1024);
    let conn = Arc::new(Conn {
        writer,
        pending: Mutex::new(HashMap::new()),
        closed: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
    });
    let c = conn.clone();
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(4096);
        while let Some(f) = frames.recv().await {
            f.encode(&mut buf);
            while let Ok(f) = frames.try_recv() {
                f.encode(&mut buf);
            }
            if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
                break;
            }
            buf.clear();
        }
        c.close();
    });
    let c = conn.clone();
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(8192);
        'read: loop {
            loop {
                match Frame::decode(&mut buf) {
                    Ok(Some(Frame {
                        id,
                        message: Message::Response { status, body, .. },
                    })) => {
                        let waiter = c
                            .pending
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&id);
                        if let Some(w) = waiter {
                            let _ = w.send((status, body));
                        }
                    }
                    Ok(Some(_)) | Err(_) => break 'read,
                    Ok(None) => break,
                }
            }
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        c.close();
    });
    Ok(conn)
}

/// Keeps one key server's connections open and its `up` flag true to its pings.
async fn health(shared: Arc<Shared>, index: usize) {
    let mut logged_down = false;
    loop {
        let server = &shared.servers[index];
        let mut last_error = None;
        for slot in &server.connections {
            let open_now = slot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(|c| !c.closed.load(Ordering::Relaxed));
            if open_now {
                continue;
            }
            match open(&shared, &server.address).await {
                Ok(c) => *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(c),
                Err(e) => {
                    last_error = Some(e);
                    break;
                }
            }
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let ping = server.call(&shared, Frame::ping(id, b"sluice")).await;
        let up = ping.as_ref().is_ok_and(|b| &b[..] == b"sluice");
        let was = server.up.swap(up, Ordering::Relaxed);
        if up && !was {
            // A restarted key server may have been given the keys it lacked.
            server
                .missing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            tracing::info!(server = %server.address, "key server up");
            logged_down = false;
        } else if !up && !logged_down {
            let why = last_error.unwrap_or_else(|| match ping {
                Err(e) => e.to_string(),
                Ok(_) => "bad ping answer".into(),
            });
            tracing::warn!(server = %server.address, error = %why, "key server down");
            logged_down = true;
        }
        tokio::time::sleep(shared.ping_interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_is_remembered_per_server_until_its_ttl_ends() {
        let server = Server {
            address: "ks:1".into(),
            connections: Vec::new(),
            in_flight: AtomicUsize::new(0),
            up: AtomicBool::new(true),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            missing: Mutex::new(HashMap::new()),
        };
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let now = Instant::now();
        assert!(!server.lacks(&a, now));
        server.remember_missing(a);
        assert!(server.lacks(&a, Instant::now()));
        assert!(
            !server.lacks(&b, Instant::now()),
            "only the key it answered for"
        );
        assert!(!server.lacks(&a, now + UNKNOWN_KEY_TTL + Duration::from_millis(1)));
    }
}
