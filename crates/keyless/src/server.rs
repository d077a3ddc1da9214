//! The key server: holds private keys and signs for gateways that prove who they are.
//!
//! Gateways connect over TLS 1.3 with a client certificate, issued by `client_ca` or pinned by
//! fingerprint; each key lists which clients may use it. A connection carries many requests
//! at once: each runs on the server's own crypto dispatcher (`inline`, `pool`, `mb`) and its
//! response goes back as soon as it is done, in completion order. At most `max_pending`
//! requests of one connection are in progress; beyond that the server stops reading from it,
//! so a client that floods it waits in its own socket buffer (back-pressure; no queue here
//! grows without bound). A malformed frame closes that connection alone.

use crate::protocol::{Frame, KeyId, Message, Op, ProtocolError, Status, hex};
use crate::server_config::{PinnedClient, ServerConfig};
use boring::hash::MessageDigest;
use boring::nid::Nid;
use boring::pkey::{PKey, Private};
use boring::ssl::{SslAcceptor, SslMethod, SslVerifyMode, SslVersion};
use boring::x509::{X509, X509Ref};
use bytes::BytesMut;
use sluice_crypto::{CryptoConfig, KeyJob, PrivateKey, SignatureScheme, VerifyPolicy};
use sluice_offload::Dispatcher;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};

/// Why a key server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A file could not be read or parsed.
    #[error("{path}: {message}\n  fix: {fix}")]
    File {
        /// Which file.
        path: String,
        /// What went wrong.
        message: String,
        /// What to do.
        fix: &'static str,
    },
    /// TLS setup failed.
    #[error("setting up TLS: {0}")]
    Tls(#[from] boring::error::ErrorStack),
    /// A socket could not be bound, or the engines could not start.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

/// A key the server holds.
struct ServedKey {
    key: Arc<PrivateKey>,
    /// The file's stem, for metrics and logs.
    name: String,
    clients: Option<Vec<String>>,
    operations: AtomicU64,
}

const OPS: [Op; 3] = [Op::Sign, Op::Decrypt, Op::Ping];
const STATUSES: usize = 9;

#[derive(Default)]
struct Stats {
    connections: AtomicU64,
    active: AtomicI64,
    refused: AtomicU64,
    malformed: AtomicU64,
    pending: AtomicI64,
    requests: [[AtomicU64; STATUSES]; 3],
}

struct State {
    keys: HashMap<KeyId, ServedKey>,
    dispatcher: Dispatcher<KeyJob>,
    pinned: Vec<PinnedClient>,
    max_pending: usize,
    stats: Stats,
}

/// A bound key server, ready to [`run`](KeyServer::run).
pub struct KeyServer {
    state: Arc<State>,
    acceptor: Arc<SslAcceptor>,
    listener: TcpListener,
    metrics: Option<TcpListener>,
}

impl std::fmt::Debug for KeyServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyServer")
            .field("listen", &self.listener.local_addr().ok())
            .field("keys", &self.state.keys.len())
            .finish_non_exhaustive()
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, ServerError> {
    std::fs::read(path).map_err(|e| ServerError::File {
        path: path.display().to_string(),
        message: format!("cannot read the {what}: {e}"),
        fix: "check the path (relative paths start at the configuration file's directory)",
    })
}

/// Loads a private key from PEM, refusing one that group or others may read.
pub fn load_private_key(path: &Path) -> Result<PKey<Private>, ServerError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        if mode & 0o077 != 0 {
            return Err(ServerError::File {
                path: path.display().to_string(),
                message: format!(
                    "the private key is readable by group or others (mode {mode:03o})"
                ),
                fix: "chmod 600 it",
            });
        }
    }
    let pem = read(path, "private key")?;
    PKey::private_key_from_pem(&pem).map_err(|e| ServerError::File {
        path: path.display().to_string(),
        message: format!("not a PEM private key: {e}"),
        fix: "give a PEM file that starts with -----BEGIN PRIVATE KEY----- (or RSA/EC PRIVATE KEY)",
    })
}

/// The key id of a key: SHA-256 of its DER SubjectPublicKeyInfo.
pub fn key_id_of<T: boring::pkey::HasPublic>(
    key: &boring::pkey::PKeyRef<T>,
) -> Result<KeyId, boring::error::ErrorStack> {
    let spki = key.public_key_to_der()?;
    let digest = boring::hash::hash(MessageDigest::sha256(), &spki)?;
    let mut id = [0; 32];
    id.copy_from_slice(&digest);
    Ok(id)
}

/// SHA-256 of a certificate's DER: how `[[client]]` pins a gateway.
pub fn fingerprint(cert: &X509Ref) -> Option<[u8; 32]> {
    let d = cert.digest(MessageDigest::sha256()).ok()?;
    d.as_ref().try_into().ok()
}

impl KeyServer {
    /// Loads the keys and certificates of `config`, binds its sockets and starts its engines.
    pub async fn bind(config: &ServerConfig) -> Result<Self, ServerError> {
        let keys = served_keys(config)?;
        let acceptor = acceptor(config)?;
        let dispatcher = dispatcher(config)?;
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Io {
                    context: format!("listening on {addr}"),
                    source,
                })
        };
        let listener = bind(config.listen).await?;
        let metrics = match config.metrics {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        Ok(KeyServer {
            state: Arc::new(State {
                keys,
                dispatcher,
                pinned: config.clients.clone(),
                max_pending: config.max_pending,
                stats: Stats::default(),
            }),
            acceptor: Arc::new(acceptor),
            listener,
            metrics,
        })
    }

    /// Where gateways connect.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Where `/metrics` is served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The metrics text (Prometheus exposition format).
    pub fn metrics_text(&self) -> String {
        self.state.metrics()
    }

    /// Serves until the task is dropped.
    pub async fn run(self) {
        if let Some(m) = self.metrics {
            let state = self.state.clone();
            tokio::spawn(serve_metrics(m, state));
        }
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let state = self.state.clone();
            let acceptor = self.acceptor.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let handshake = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    tokio_boring::accept(&acceptor, tcp),
                )
                .await;
                let stream = match handshake {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        state.stats.refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, error = %e, "refused a client (TLS handshake failed; a client certificate that is neither issued by client_ca nor pinned?)");
                        return;
                    }
                    Err(_) => {
                        state.stats.refused.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                };
                let Some(client) = stream
                    .ssl()
                    .peer_certificate()
                    .and_then(|c| state.identify(&c))
                else {
                    state.stats.refused.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                state.stats.connections.fetch_add(1, Ordering::Relaxed);
                state.stats.active.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, %client, "gateway connected");
                let result = serve_connection(stream, client.clone(), state.clone()).await;
                state.stats.active.fetch_sub(1, Ordering::Relaxed);
                if let Err(e) = result {
                    tracing::warn!(%peer, %client, error = %e, "closed a connection");
                }
            });
        }
    }
}

/// The keys `config` serves, by key ID, each loaded and checked (a key the engines cannot
/// sign with names its file and what to give instead).
fn served_keys(config: &ServerConfig) -> Result<HashMap<KeyId, ServedKey>, ServerError> {
    let mut keys = HashMap::new();
    for entry in &config.keys {
        let pkey = load_private_key(&entry.file)?;
        let unsupported = |message: String| ServerError::File {
            path: entry.file.display().to_string(),
            message,
            fix: "serve RSA (2048 bits or more), ECDSA P-256/P-384 or Ed25519 keys",
        };
        let der = pkey.private_key_to_der_pkcs8()?;
        let key = PrivateKey::from_pkcs8(&der).map_err(|e| unsupported(e.to_string()))?;
        let id = key_id_of(&pkey)?;
        let name = entry
            .file
            .file_stem()
            .map_or_else(|| "key".into(), |s| s.to_string_lossy().into_owned());
        tracing::info!(key = %name, id = %hex(&id[..8]), kind = ?key.kind(), "serving key");
        keys.insert(
            id,
            ServedKey {
                key: Arc::new(key.with_key_id(id)),
                name,
                clients: entry.clients.clone(),
                operations: AtomicU64::new(0),
            },
        );
    }
    Ok(keys)
}

/// The key server's TLS side: TLS 1.3 only, its own certificate chain and key, and a client
/// certificate required that chains to `client_ca` or whose leaf is pinned.
fn acceptor(config: &ServerConfig) -> Result<SslAcceptor, ServerError> {
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls())?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
    let chain = X509::stack_from_pem(&read(&config.certificate, "certificate")?).map_err(|e| {
        ServerError::File {
            path: config.certificate.display().to_string(),
            message: format!("not a PEM certificate chain: {e}"),
            fix: "give the key server's certificate, leaf first, in PEM",
        }
    })?;
    let Some((leaf, rest)) = chain.split_first() else {
        return Err(ServerError::File {
            path: config.certificate.display().to_string(),
            message: "holds no certificate".into(),
            fix: "give the key server's certificate, leaf first, in PEM",
        });
    };
    b.set_certificate(leaf)?;
    for c in rest {
        b.add_extra_chain_cert(c.clone())?;
    }
    let own_key = load_private_key(&config.key)?;
    b.set_private_key(&own_key)?;
    b.check_private_key()?;
    if let Some(ca) = &config.client_ca {
        let cas = X509::stack_from_pem(&read(ca, "client CA")?).map_err(|e| ServerError::File {
            path: ca.display().to_string(),
            message: format!("not a PEM certificate: {e}"),
            fix: "give the CA that issues the gateways' client certificates, in PEM",
        })?;
        for c in &cas {
            b.cert_store_mut().add_cert(c.clone())?;
        }
    }
    let pinned: Vec<[u8; 32]> = config.clients.iter().map(|c| c.fingerprint).collect();
    b.set_verify_callback(
        SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
        move |verified, ctx| {
            // Chains to the client CA; or, whatever the chain error, a pinned leaf.
            verified
                || ctx
                    .chain()
                    .and_then(|c| c.iter().next())
                    .and_then(fingerprint)
                    .is_some_and(|f| pinned.contains(&f))
        },
    );
    Ok(b.build())
}

/// The crypto engines the keys' operations run on: `pool_threads` (one per core unless set).
fn dispatcher(config: &ServerConfig) -> Result<Dispatcher<KeyJob>, ServerError> {
    let threads = config
        .pool_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let crypto = CryptoConfig {
        engines: config.engines.clone(),
        pool_threads: threads,
        pool_capacity: 64 * threads,
        ..CryptoConfig::default()
    };
    sluice_crypto::build_dispatcher(&crypto, None).map_err(|source| ServerError::Io {
        context: "starting the crypto engines".into(),
        source,
    })
}

impl State {
    /// A connected client's name: a pinned fingerprint's, else the certificate's common name.
    fn identify(&self, cert: &X509Ref) -> Option<Arc<str>> {
        if let Some(fp) = fingerprint(cert)
            && let Some(p) = self.pinned.iter().find(|p| p.fingerprint == fp)
        {
            return Some(p.name.as_str().into());
        }
        let cn = cert.subject_name().entries_by_nid(Nid::COMMONNAME).next()?;
        Some(cn.data().as_utf8().ok()?.to_string().into())
    }

    fn count(&self, op: Op, status: Status) {
        let o = OPS.iter().position(|x| *x == op).unwrap_or(0);
        self.stats.requests[o][status as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The key `id`, if `client` may use it.
    fn key_for(&self, id: &KeyId, client: &str) -> Result<&ServedKey, (Status, String)> {
        let Some(k) = self.keys.get(id) else {
            return Err((
                Status::UnknownKey,
                format!("no key with id {}", hex(&id[..8])),
            ));
        };
        if let Some(allowed) = &k.clients
            && !allowed.iter().any(|c| c == client)
        {
            return Err((
                Status::Forbidden,
                format!("client `{client}` may not use key `{}`", k.name),
            ));
        }
        Ok(k)
    }

    /// Runs one request and returns its response.
    async fn handle(&self, client: &str, id: u32, message: Message) -> Frame {
        let (op, result) = match message {
            Message::Sign {
                key_id,
                scheme,
                message,
            } => (Op::Sign, self.sign(client, &key_id, scheme, &message).await),
            Message::Decrypt { key_id, ciphertext } => (
                Op::Decrypt,
                self.decrypt(client, &key_id, &ciphertext).await,
            ),
            Message::Ping { payload } => (Op::Ping, Ok(payload.to_vec())),
            Message::Response { .. } => unreachable!("responses are refused by the reader"),
        };
        match result {
            Ok(body) => {
                self.count(op, Status::Ok);
                Frame::response(id, op, Status::Ok, body)
            }
            Err((status, message)) => {
                self.count(op, status);
                tracing::debug!(%client, status = status.name(), %message, "request refused");
                Frame::response(id, op, status, message.into_bytes())
            }
        }
    }

    async fn sign(
        &self,
        client: &str,
        key_id: &KeyId,
        scheme: u16,
        message: &[u8],
    ) -> Result<Vec<u8>, (Status, String)> {
        let k = self.key_for(key_id, client)?;
        let unsupported = || {
            (
                Status::Unsupported,
                format!("key `{}` does not sign with scheme {scheme:#06x}", k.name),
            )
        };
        let scheme = SignatureScheme::from_u16(scheme).ok_or_else(unsupported)?;
        let job = KeyJob::sign(k.key.clone(), scheme, message, VerifyPolicy::Rsa)
            .ok_or_else(unsupported)?;
        let out = self
            .dispatcher
            .run(job)
            .await
            .map_err(|e| (Status::CryptoFailed, e.to_string()))?;
        k.operations.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    async fn decrypt(
        &self,
        client: &str,
        key_id: &KeyId,
        ciphertext: &[u8],
    ) -> Result<Vec<u8>, (Status, String)> {
        let k = self.key_for(key_id, client)?;
        if !matches!(k.key.kind(), sluice_crypto::KeyKind::Rsa(_)) {
            return Err((
                Status::Unsupported,
                format!("key `{}` is not an RSA key", k.name),
            ));
        }
        let job = KeyJob::decrypt(k.key.clone(), ciphertext).ok_or_else(|| {
            (
                Status::BadRequest,
                "the ciphertext is not the modulus length".to_owned(),
            )
        })?;
        let out = self
            .dispatcher
            .run(job)
            .await
            .map_err(|e| (Status::CryptoFailed, e.to_string()))?;
        k.operations.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    fn metrics(&self) -> String {
        let s = &self.stats;
        let mut out = String::with_capacity(2048);
        let l = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let g = |v: &AtomicI64| v.load(Ordering::Relaxed);
        metric(
            &mut out,
            "sluice_keyserver_connections_total",
            "counter",
            "Gateway connections accepted.",
            l(&s.connections),
        );
        metric(
            &mut out,
            "sluice_keyserver_connections_active",
            "gauge",
            "Gateway connections open.",
            g(&s.active),
        );
        metric(
            &mut out,
            "sluice_keyserver_refused_handshakes_total",
            "counter",
            "TLS handshakes refused (no, or an unknown, client certificate).",
            l(&s.refused),
        );
        metric(
            &mut out,
            "sluice_keyserver_malformed_frames_total",
            "counter",
            "Connections closed for a malformed frame.",
            l(&s.malformed),
        );
        metric(
            &mut out,
            "sluice_keyserver_pending_requests",
            "gauge",
            "Requests in progress.",
            g(&s.pending),
        );
        let _ = writeln!(
            out,
            "# HELP sluice_keyserver_requests_total Requests answered, by operation and status.\n# TYPE sluice_keyserver_requests_total counter"
        );
        for (o, op) in OPS.iter().enumerate() {
            for st in 0..STATUSES {
                let v = s.requests[o][st].load(Ordering::Relaxed);
                if v > 0 || st == 0 {
                    let _ = writeln!(
                        out,
                        "sluice_keyserver_requests_total{{op=\"{}\",status=\"{}\"}} {v}",
                        format!("{op:?}").to_lowercase(),
                        Status::from_u16(st as u16).name()
                    );
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP sluice_keyserver_key_operations_total Private-key operations done, by key.\n# TYPE sluice_keyserver_key_operations_total counter"
        );
        let mut keys: Vec<_> = self.keys.iter().collect();
        keys.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        for (id, k) in keys {
            let _ = writeln!(
                out,
                "sluice_keyserver_key_operations_total{{key=\"{}\",key_id=\"{}\"}} {}",
                k.name,
                hex(&id[..8]),
                k.operations.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sluice_keyserver_engine_jobs_total Private-key jobs by engine and outcome.\n# TYPE sluice_keyserver_engine_jobs_total counter"
        );
        for c in self.dispatcher.counters() {
            for (what, v) in [
                ("completed", c.completed),
                ("failed", c.failed),
                ("fell_back", c.fell_back.iter().copied().sum::<u64>()),
            ] {
                let _ = writeln!(
                    out,
                    "sluice_keyserver_engine_jobs_total{{engine=\"{}\",outcome=\"{what}\"}} {v}",
                    c.engine
                );
            }
        }
        out
    }
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// Serves one gateway connection until it closes or sends a malformed frame.
async fn serve_connection(
    stream: tokio_boring::SslStream<TcpStream>,
    client: Arc<str>,
    state: Arc<State>,
) -> Result<(), ProtocolError> {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::channel::<Frame>(state.max_pending + 4);
    let writer = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(4096);
        while let Some(f) = rx.recv().await {
            f.encode(&mut buf);
            // Everything else already done goes in the same write.
            while let Ok(f) = rx.try_recv() {
                f.encode(&mut buf);
            }
            if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
                return;
            }
            buf.clear();
        }
        let _ = wr.shutdown().await;
    });
    let permits = Arc::new(Semaphore::new(state.max_pending));
    let mut buf = BytesMut::with_capacity(8192);
    let result = 'conn: loop {
        loop {
            let frame = match Frame::decode(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    state.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    if let ProtocolError::BadVersion(_) = e
                        && buf.len() >= 8
                    {
                        let id = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
                        let _ = tx
                            .send(Frame::response(
                                id,
                                Op::Ping,
                                Status::BadVersion,
                                &b"this key server speaks protocol version 1"[..],
                            ))
                            .await;
                    }
                    break 'conn Err(e);
                }
            };
            if let Message::Response { .. } = frame.message {
                state.stats.malformed.fetch_add(1, Ordering::Relaxed);
                break 'conn Err(ProtocolError::UnknownOpcode(0x80));
            }
            // Back-pressure: at `max_pending` requests in progress, stop reading until one
            // finishes.
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break 'conn Ok(());
            };
            let (state, client, tx) = (state.clone(), client.clone(), tx.clone());
            state.stats.pending.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let response = state.handle(&client, frame.id, frame.message).await;
                state.stats.pending.fetch_sub(1, Ordering::Relaxed);
                let _ = tx.send(response).await;
                drop(permit);
            });
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break Ok(()),
            Ok(_) => {}
        }
    };
    drop(tx);
    if result.is_err() {
        // A malformed frame: nothing more is read; what is already queued (a bad-version
        // answer, requests in progress) goes out for at most a second, then the connection
        // closes.
        let abort = writer.abort_handle();
        if tokio::time::timeout(std::time::Duration::from_secs(1), writer)
            .await
            .is_err()
        {
            abort.abort();
        }
    } else {
        let _ = writer.await;
    }
    result
}

/// A minimal HTTP/1.1 responder for `GET /metrics`.
async fn serve_metrics(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                match tcp.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            let (status, body) = if head.starts_with(b"GET /metrics ") {
                ("200 OK", state.metrics())
            } else {
                ("404 Not Found", "try GET /metrics\n".to_owned())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tcp.write_all(response.as_bytes()).await;
            let _ = tcp.shutdown().await;
        });
    }
}
