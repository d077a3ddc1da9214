//! Test support: origins, gateways on port 0, and real TLS/HTTP clients.

use boring::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_config::load_str_cached;
use sluice_proxy::{AccessLog, Gateway};
use sluice_tls::selfsigned::{KeyKind, generate, write_pair};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// An in-process origin server that names itself in every response.
pub struct Origin {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    /// Released by a test to let `/hold` finish its body.
    pub release: Arc<Notify>,
    /// What `/healthz` answers: 200 "ok" while true, 503 otherwise.
    pub healthy: Arc<std::sync::atomic::AtomicBool>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Origin {
    pub async fn start(name: &'static str) -> Origin {
        Self::start_with(name, false, "127.0.0.1:0".parse().unwrap()).await
    }

    /// An origin on `at` (another loopback address, a chosen port); `None` if it is taken.
    pub async fn start_on(name: &'static str, at: SocketAddr) -> Option<Origin> {
        TcpListener::bind(at).await.ok()?;
        Some(Self::start_with(name, false, at).await)
    }

    /// An origin that speaks cleartext HTTP/2 only (prior knowledge).
    pub async fn start_h2(name: &'static str) -> Origin {
        Self::start_with(name, true, "127.0.0.1:0".parse().unwrap()).await
    }

    async fn start_with(name: &'static str, h2_only: bool, at: SocketAddr) -> Origin {
        let socket = TcpListener::bind(at).await.unwrap();
        let addr = socket.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        let healthy = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (h, r, ok) = (hits.clone(), release.clone(), healthy.clone());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            loop {
                let mut stopped_accept = stopped.clone();
                let accepted = tokio::select! {
                    a = socket.accept() => a,
                    _ = stopped_accept.wait_for(|s| *s) => return,
                };
                let Ok((tcp, _)) = accepted else { return };
                let (h, r, ok) = (h.clone(), r.clone(), ok.clone());
                let mut stopped_conn = stopped.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let health = req.uri().path() == "/healthz";
                        if !health {
                            h.fetch_add(1, Ordering::SeqCst);
                        }
                        let healthy = ok.load(Ordering::SeqCst);
                        let r = r.clone();
                        async move {
                            if health {
                                let (status, body) = if healthy {
                                    (200, "ok")
                                } else {
                                    (503, "failing")
                                };
                                let mut resp = text(body);
                                *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
                                return Ok(resp);
                            }
                            origin_respond(name, req, r).await
                        }
                    });
                    let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    if h2_only {
                        b = b.http2_only();
                    }
                    tokio::select! {
                        _ = b.serve_connection_with_upgrades(TokioIo::new(tcp), svc) => {}
                        // Going away: drop the connection without a goodbye.
                        _ = stopped_conn.wait_for(|s| *s) => {}
                    }
                });
            }
        });
        Origin {
            addr,
            hits,
            release,
            healthy,
            stop,
        }
    }

    /// Closes the listening socket and every open connection, like a crashed server.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Requests served, health checks (`/healthz`) not counted.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn text(s: impl Into<Bytes>) -> Response<Body> {
    Response::new(Full::new(s.into()).boxed())
}

async fn origin_respond(
    name: &'static str,
    req: Request<Incoming>,
    release: Arc<Notify>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Ok(match path.as_str() {
        "/whoami" => text(name),
        // The path and query as this origin received them.
        p if p.starts_with("/echo") => text(
            req.uri()
                .path_and_query()
                .map_or(String::new(), |pq| pq.to_string()),
        ),
        "/headers" => {
            let map: serde_json::Map<String, serde_json::Value> = req
                .headers()
                .iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect();
            let v =
                serde_json::json!({ "version": format!("{:?}", req.version()), "headers": map });
            text(v.to_string())
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(param("ms").unwrap_or(1000))).await;
            text(name)
        }
        // 500 from the origins named in `who` (comma-separated), 200 from the others.
        "/fail_on" => {
            let who = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("who="))
                .unwrap_or("");
            if who.split(',').any(|w| w == name) {
                let mut resp = text(format!("{name} failing"));
                *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                resp
            } else {
                text(name)
            }
        }
        // Slow on the origin named in `who` only: one slow server in a group.
        "/slow_on" => {
            if query.split('&').any(|kv| kv == format!("who={name}")) {
                tokio::time::sleep(Duration::from_millis(param("ms").unwrap_or(1000))).await;
            }
            text(name)
        }
        // `n` bytes of a repeating pattern (a large body).
        "/bytes" => {
            let n = param("n").unwrap_or(0) as usize;
            text(
                (0..n)
                    .map(|i| b"0123456789abcdef"[i % 16])
                    .collect::<Vec<u8>>(),
            )
        }
        // The request's trailer fields as this origin received them (`none` without any),
        // then the body's length.
        "/trailers" => {
            let collected = req.into_body().collect().await.ok();
            let trailers = collected.as_ref().and_then(|c| c.trailers()).map_or_else(
                || "none".to_owned(),
                |t| {
                    t.iter()
                        .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v.as_bytes())))
                        .collect::<Vec<_>>()
                        .join(",")
                },
            );
            let n = collected.map_or(0, |c| c.to_bytes().len());
            text(format!("{trailers} {n}"))
        }
        "/upload" => {
            let n = req
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes().len())
                .unwrap_or(0);
            text(format!("{name} got {n} bytes"))
        }
        // `n` chunks of 2 KiB, one every `ms` milliseconds: a download that lasts.
        "/drip" => {
            let (n, ms) = (param("n").unwrap_or(10), param("ms").unwrap_or(100));
            let (mut tx, body) = http_body_util::Channel::<Bytes, Infallible>::new(2);
            tokio::spawn(async move {
                for i in 0..n {
                    if tx.send_data(drip_chunk(i)).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            });
            Response::new(body.boxed())
        }
        "/hold" => {
            // First chunk now, the rest only when the test says so.
            let (mut tx, body) = http_body_util::Channel::<Bytes, Infallible>::new(2);
            tokio::spawn(async move {
                let _ = tx.send_data(Bytes::from_static(b"first chunk\n")).await;
                release.notified().await;
                let _ = tx.send_data(Bytes::from_static(b"second chunk\n")).await;
            });
            Response::new(body.boxed())
        }
        _ => text(format!("{name} {path}")),
    })
}

/// Chunk `i` of the origin's `/drip` (2 KiB of the chunk's number, so a lost or repeated
/// chunk shows).
pub fn drip_chunk(i: u64) -> Bytes {
    Bytes::from(vec![b'a' + (i % 26) as u8; 2048])
}

/// A WebSocket echo server (raw TCP + tungstenite), as an upstream.
pub async fn ws_echo_server() -> SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A port on which nothing listens (bound, then released).
pub async fn dead_port() -> SocketAddr {
    let s = TcpListener::bind("127.0.0.1:0").await.unwrap();
    s.local_addr().unwrap()
}

/// Certificates for tests, written once per test into its temp dir.
pub fn write_cert(dir: &Path, stem: &str, kind: KeyKind, hosts: &[&str]) {
    let (cert, key) = generate(kind, hosts, 30).unwrap();
    write_pair(dir, stem, &cert, &key).unwrap();
}

/// A gateway started from TOML text; `{dir}` in the text is replaced by a temp dir that also
/// holds the certificates the test wrote.
pub struct TestGateway {
    pub gateway: Option<Arc<Gateway>>,
    /// Kept so that certificate and key files live as long as the gateway.
    _dir: tempfile::TempDir,
    /// Certificates of the last load, as `sluice run` keeps them between reloads.
    certs: sluice_config::CertCache,
}

impl TestGateway {
    pub async fn start(toml: &str, dir: tempfile::TempDir) -> TestGateway {
        Self::start_inner(toml, dir, false).await
    }

    /// Like [`TestGateway::start`], with the access log `[log]` asks for (`start` discards it).
    pub async fn start_logged(toml: &str, dir: tempfile::TempDir) -> TestGateway {
        Self::start_inner(toml, dir, true).await
    }

    async fn start_inner(toml: &str, dir: tempfile::TempDir, logged: bool) -> TestGateway {
        let text = toml.replace("{dir}", &dir.path().display().to_string());
        let certs = sluice_config::CertCache::new();
        let snapshot = Arc::new(
            load_str_cached(&text, "test.toml", dir.path(), &certs)
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let gateway = if logged {
            Gateway::start(snapshot).await.unwrap()
        } else {
            Gateway::start_with_log(snapshot, AccessLog::off())
                .await
                .unwrap()
        };
        TestGateway {
            gateway: Some(Arc::new(gateway)),
            _dir: dir,
            certs,
        }
    }

    /// Loads `toml` (with `{dir}` filled in, like [`TestGateway::start`]) and applies it, as a
    /// reload does. Panics on a configuration error; returns what applying said.
    pub async fn reload(
        &self,
        toml: &str,
    ) -> Result<sluice_proxy::ApplyReport, sluice_proxy::ProxyError> {
        let text = toml.replace("{dir}", &self.dir().display().to_string());
        let snapshot = load_str_cached(&text, "test.toml", self.dir(), &self.certs)
            .unwrap_or_else(|e| panic!("{e}"));
        self.gateway().apply(Arc::new(snapshot)).await
    }

    /// The directory `{dir}` names.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// A gateway whose configuration needs no files.
    pub async fn plain(toml: &str) -> TestGateway {
        Self::start(toml, tempfile::tempdir().unwrap()).await
    }

    pub fn addr(&self, listener: &str) -> SocketAddr {
        self.gateway.as_ref().unwrap().local_addr(listener).unwrap()
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        self.gateway.as_ref().unwrap()
    }
}

/// What a TLS client saw.
pub struct Handshake {
    pub stream: tokio_boring::SslStream<TcpStream>,
    pub key_bits: u32,
    pub key_is_rsa: bool,
    pub alpn_h2: bool,
    /// The negotiated cipher suite's OpenSSL name.
    pub cipher: String,
    /// The key-exchange group agreed, as BoringSSL names it.
    pub group: String,
    /// Filled with the session (ticket) the server issues, once it has arrived.
    pub session: Arc<std::sync::Mutex<Option<boring::ssl::SslSession>>>,
}

/// Options of a TLS client.
#[derive(Clone, Default)]
pub struct ClientOpts {
    pub sni: Option<&'static str>,
    pub alpn: Vec<&'static [u8]>,
    /// e.g. "RSA-PSS+SHA256:RSA+SHA256" for a client without ECDSA.
    pub sigalgs: Option<&'static str>,
    pub max_version: Option<SslVersion>,
    pub session: Option<boring::ssl::SslSession>,
    /// TLS 1.2 cipher suites, e.g. "AES128-GCM-SHA256" for an RSA-key-exchange-only client.
    pub ciphers: Option<&'static str>,
    /// Key-exchange groups offered, e.g. "X25519" (default: BoringSSL's).
    pub groups: Option<&'static str>,
    /// A client certificate (PEM chain) and its key, sent when the server asks.
    pub client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

pub async fn tls_connect(addr: SocketAddr, opts: &ClientOpts) -> Result<Handshake, String> {
    let mut b = SslConnector::builder(SslMethod::tls()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    if !opts.alpn.is_empty() {
        let mut wire = Vec::new();
        for p in &opts.alpn {
            wire.push(p.len() as u8);
            wire.extend_from_slice(p);
        }
        b.set_alpn_protos(&wire).unwrap();
    }
    if let Some(s) = opts.sigalgs {
        b.set_sigalgs_list(s).unwrap();
    }
    if let Some(v) = opts.max_version {
        b.set_max_proto_version(Some(v)).unwrap();
    }
    if let Some(c) = opts.ciphers {
        b.set_cipher_list(c).unwrap();
    }
    if let Some(g) = opts.groups {
        b.set_curves_list(g).unwrap();
    }
    if let Some((cert, key)) = &opts.client_cert {
        b.set_certificate_chain_file(cert).unwrap();
        b.set_private_key_file(key, boring::ssl::SslFiletype::PEM)
            .unwrap();
    }
    let session = Arc::new(std::sync::Mutex::new(None));
    let slot = session.clone();
    b.set_session_cache_mode(boring::ssl::SslSessionCacheMode::CLIENT);
    b.set_new_session_callback(move |_, s| {
        *slot.lock().unwrap() = Some(s);
    });
    let connector = b.build();
    let mut config = connector.configure().unwrap();
    config.set_verify_hostname(false);
    config.set_use_server_name_indication(opts.sni.is_some());
    if let Some(session) = &opts.session {
        #[allow(
            unsafe_code,
            reason = "the session comes from a connection with the same context settings"
        )]
        // SAFETY: the session was produced by a connector built the same way (same method).
        unsafe {
            config.set_session(session).unwrap();
        }
    }
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let stream = tokio_boring::connect(config, opts.sni.unwrap_or("ignored.invalid"), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let cert = stream
        .ssl()
        .peer_certificate()
        .ok_or("no peer certificate")?;
    let key = cert.public_key().unwrap();
    Ok(Handshake {
        key_bits: key.bits(),
        key_is_rsa: key.rsa().is_ok(),
        alpn_h2: stream.ssl().selected_alpn_protocol() == Some(b"h2"),
        cipher: stream
            .ssl()
            .current_cipher()
            .map(|c| c.name().to_string())
            .unwrap_or_default(),
        group: stream.ssl().curve_name().unwrap_or_default().to_owned(),
        stream,
        session,
    })
}

/// A minimal response as the tests see it.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: String,
}

/// One request with a header, on a fresh connection.
pub async fn get_with(addr: SocketAddr, path: &str, header: (&str, &str)) -> Got {
    let req = http::Request::get(path)
        .header("host", "x")
        .header(header.0, header.1)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    http1_send(TcpStream::connect(addr).await.unwrap(), req).await
}

/// One HTTP/1.1 request on a fresh plain connection.
pub async fn http1_get(addr: SocketAddr, host: &str, path: &str) -> Got {
    let req = Request::get(path)
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap();
    http1_send(TcpStream::connect(addr).await.unwrap(), req).await
}

/// An HTTP/1.1 client connection to `addr`, for several requests or streaming bodies.
pub async fn http1_sender<B>(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

pub async fn http1_send<S>(io: S, req: Request<Full<Bytes>>) -> Got
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    collect(sender.send_request(req).await.unwrap()).await
}

pub async fn http2_send<S>(io: S, req: Request<Full<Bytes>>) -> Got
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(conn);
    collect(sender.send_request(req).await.unwrap()).await
}

pub async fn collect(resp: Response<Incoming>) -> Got {
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| String::from_utf8_lossy(&c.to_bytes()).into_owned())
        .unwrap_or_default();
    Got {
        status: parts.status.as_u16(),
        version: parts.version,
        headers: parts.headers,
        body,
    }
}

/// Sends raw bytes on a fresh connection and returns everything read until the server closes
/// or `limit` passes.
pub async fn raw_exchange(addr: SocketAddr, bytes: &[u8], limit: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls `cond` every 20 ms; panics after 10 s (a bound, not a timing assertion).
pub async fn wait_until(cond: impl FnMut() -> bool) {
    wait_until_within(10, cond).await;
}

/// [`wait_until`] with a bound of `secs` seconds, for work that runs at a low priority and
/// may wait long on a busy machine (CI runs tests side by side).
pub async fn wait_until_within(secs: u64, mut cond: impl FnMut() -> bool) {
    for _ in 0..secs * 50 {
        if cond() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("condition not reached within {secs} s");
}

/// A real redis-server (Debian's, from scripts/deps) on 127.0.0.1 and a free port, in a
/// temporary folder, stopped by PID when dropped.
pub struct Redis {
    pub port: u16,
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
    /// Serving TLS only, to clients with a certificate of its CA: the folder with `ca.crt`,
    /// `redis.crt`/`.key` (its own) and `client.crt`/`.key` (one it accepts).
    tls: Option<std::path::PathBuf>,
}

impl Redis {
    pub async fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Redis {
            port,
            child: None,
            dir: tempfile::tempdir().unwrap(),
            tls: None,
        };
        r.restart().await;
        r
    }

    /// A Redis on TLS only (`--tls-port`, its cleartext port off) that asks every client for
    /// a certificate of its own CA; the CA and the certificates are written into `pki`.
    pub async fn start_tls(pki: &Path) -> Redis {
        issue(pki, "ca", "redis test CA", None, &[]);
        let ca = boring::x509::X509::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
        let ca_key =
            boring::pkey::PKey::private_key_from_pem(&std::fs::read(pki.join("ca.key")).unwrap())
                .unwrap();
        issue(pki, "redis", "redis", Some((&ca, &ca_key)), &["127.0.0.1"]);
        issue(pki, "client", "client", Some((&ca, &ca_key)), &[]);
        let mut r = Redis {
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().unwrap(),
            tls: Some(pki.to_path_buf()),
        };
        r.restart().await;
        r
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// Starts it (again, on the same port) and waits until it accepts connections.
    pub async fn restart(&mut self) {
        let mut command = std::process::Command::new("redis-server");
        match &self.tls {
            None => command.args(["--port", &self.port.to_string()]),
            Some(pki) => command
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .arg("--tls-cert-file")
                .arg(pki.join("redis.crt"))
                .arg("--tls-key-file")
                .arg(pki.join("redis.key"))
                .arg("--tls-ca-cert-file")
                .arg(pki.join("ca.crt"))
                .args(["--tls-auth-clients", "yes"]),
        };
        let child = command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is needed (scripts/deps installs Debian's redis-server)");
        self.child = Some(child);
        for _ in 0..250 {
            if TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server did not listen on {} within 5 s", self.port);
    }

    /// Kills it (SIGKILL, by PID) and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released: a server started right after takes it).
pub fn free_port() -> u16 {
    // Below Linux's ephemeral range (32768-60999 by default): a port bind(0) hands out there
    // may be taken by any connection's source port before the gateway binds it (a gateway
    // of a fleet test once found its listener's port so taken, under CI's load). Ports here
    // are only ever taken by a bind, and each is handed out once per run (free for TCP and
    // UDP: a listener with HTTP/3 binds both).
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id() % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port in {FIRST}-{}", FIRST + SPAN);
}

/// A real etcd (Debian's etcd-server, from scripts/deps) on 127.0.0.1 with free ports and a
/// temporary data directory, stopped by PID when dropped.
pub struct Etcd {
    pub port: u16,
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
    /// Serving TLS only, to clients with a certificate of its CA: the folder with `ca.crt`,
    /// `etcd.crt`/`.key` (its own) and `client.crt`/`.key` (one it accepts).
    tls: Option<std::path::PathBuf>,
}

impl Etcd {
    pub async fn start() -> Etcd {
        let mut e = Etcd {
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().unwrap(),
            tls: None,
        };
        e.restart().await;
        e
    }

    /// An etcd on `https://` that asks every client for a certificate of its own CA; the CA and
    /// the certificates are written into `pki`.
    pub async fn start_tls(pki: &Path) -> Etcd {
        issue(pki, "ca", "etcd test CA", None, &[]);
        let ca = boring::x509::X509::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
        let ca_key =
            boring::pkey::PKey::private_key_from_pem(&std::fs::read(pki.join("ca.key")).unwrap())
                .unwrap();
        issue(
            pki,
            "etcd",
            "etcd",
            Some((&ca, &ca_key)),
            &["127.0.0.1", "localhost"],
        );
        issue(pki, "client", "client", Some((&ca, &ca_key)), &[]);
        let mut e = Etcd {
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().unwrap(),
            tls: Some(pki.to_path_buf()),
        };
        e.restart().await;
        e
    }

    /// `host:port` of its client endpoint (`https://host:port` when it serves TLS).
    pub fn endpoint(&self) -> String {
        match self.tls {
            Some(_) => format!("https://127.0.0.1:{}", self.port),
            None => format!("127.0.0.1:{}", self.port),
        }
    }

    /// How a gateway reaches it over TLS with the client certificate (and `user`).
    pub fn tls_source(&self, user: Option<(&str, &str)>) -> sluice_config::FleetSource {
        let pki = self.tls.as_ref().expect("an etcd started with start_tls");
        let read = |name: &str| std::fs::read(pki.join(name)).unwrap();
        sluice_config::FleetSource {
            endpoints: vec![self.endpoint()],
            prefix: "/sluice".into(),
            cache_file: None,
            ca_pem: Some(read("ca.crt")),
            client_identity: Some((read("client.crt"), read("client.key"))),
            user: user.map(|(u, p)| (u.to_owned(), p.to_owned())),
            keyring: Vec::new(),
            ticket_key_rotation: Duration::from_secs(3600),
            timeout: Duration::from_secs(2),
        }
    }

    /// Starts it (again, on the same data) on its port and waits until it answers.
    pub async fn restart(&mut self) {
        self.kill();
        let peer = free_port();
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{peer}");
        let mut command = std::process::Command::new("etcd");
        if let Some(pki) = &self.tls {
            command
                .arg("--cert-file")
                .arg(pki.join("etcd.crt"))
                .arg("--key-file")
                .arg(pki.join("etcd.key"))
                .arg("--trusted-ca-file")
                .arg(pki.join("ca.crt"))
                .arg("--client-cert-auth");
        }
        let child = command
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--name", "default"])
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("etcd is needed (scripts/deps installs Debian's etcd-server)");
        self.child = Some(child);
        for _ in 0..500 {
            let etcd = match &self.tls {
                Some(_) => sluice_fleet::Etcd::connect(&self.tls_source(None)).await,
                None => sluice_fleet::Etcd::connect_to(&self.endpoint(), "/probe").await,
            };
            if let Ok(etcd) = etcd
                && etcd.load_all().await.is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("etcd did not answer on {} within 10 s", self.port);
    }

    /// The same data on another port (gateways configured with the old one cannot reach it).
    pub async fn move_to(&mut self, port: u16) {
        self.port = port;
        self.restart().await;
    }

    /// A client for the fleet's prefix.
    pub async fn client(&self, prefix: &str) -> sluice_fleet::Etcd {
        sluice_fleet::Etcd::connect_to(&self.endpoint(), prefix)
            .await
            .unwrap()
    }

    /// Kills it (SIGKILL, by PID) and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A certificate for `cn` issued by `ca` (or a CA certificate, self-signed, when `ca` is
/// `None`), written as `stem.crt` and `stem.key`. An issued one is for clients and servers
/// both, with `hosts` (DNS names or IP addresses) as its subject alternative names.
pub fn issue(
    dir: &Path,
    stem: &str,
    cn: &str,
    ca: Option<(
        &boring::x509::X509,
        &boring::pkey::PKey<boring::pkey::Private>,
    )>,
    hosts: &[&str],
) {
    use boring::pkey::PKey;
    use boring::x509::extension::{BasicConstraints, ExtendedKeyUsage, KeyUsage};
    use boring::x509::{X509, X509NameBuilder};
    let group = boring::ec::EcGroup::from_curve_name(boring::nid::Nid::X9_62_PRIME256V1).unwrap();
    let key = PKey::from_ec_key(boring::ec::EcKey::generate(&group).unwrap()).unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_nid(boring::nid::Nid::COMMONNAME, cn)
        .unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    let serial = boring::bn::BigNum::from_u32(rand_serial())
        .unwrap()
        .to_asn1_integer()
        .unwrap();
    b.set_serial_number(&serial).unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(ca.map_or(&name, |(c, _)| c.subject_name()))
        .unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&boring::asn1::Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&boring::asn1::Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    if ca.is_none() {
        b.append_extension(&BasicConstraints::new().critical().ca().build().unwrap())
            .unwrap();
        b.append_extension(&KeyUsage::new().critical().key_cert_sign().build().unwrap())
            .unwrap();
    } else {
        b.append_extension(&BasicConstraints::new().critical().build().unwrap())
            .unwrap();
        b.append_extension(
            &KeyUsage::new()
                .critical()
                .digital_signature()
                .build()
                .unwrap(),
        )
        .unwrap();
        b.append_extension(
            &ExtendedKeyUsage::new()
                .client_auth()
                .server_auth()
                .build()
                .unwrap(),
        )
        .unwrap();
        if !hosts.is_empty() {
            let ctx = b.x509v3_context(ca.map(|(c, _)| &**c), None);
            let san = sluice_tls::selfsigned::subject_alt_names(hosts)
                .build(&ctx)
                .unwrap();
            b.append_extension(&san).unwrap();
        }
    }
    b.sign(
        ca.map_or(&key, |(_, k)| k),
        boring::hash::MessageDigest::sha256(),
    )
    .unwrap();
    sluice_tls::selfsigned::write_pair(dir, stem, &b.build(), &key).unwrap();
}

fn rand_serial() -> u32 {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed) as u32
}

/// An admin listener on a free port for `gw` (no controller: reads only).
pub async fn admin_for(gw: &TestGateway) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    sluice_admin::serve(
        "127.0.0.1:0".parse().unwrap(),
        sluice_admin::Sources {
            gateway: gw.gateway().clone(),
            control: None,
            started: std::time::Instant::now(),
        },
    )
    .await
    .unwrap()
}

/// Headless Chromium (Debian's `chromium`, installed by scripts/deps): loads `url` with the
/// common flags plus `extra`, in a fresh profile; returns stdout and stderr (with
/// `--enable-logging=stderr`, the page's console lines are marked `:CONSOLE`).
pub async fn headless_chromium(url: &str, extra: &[String]) -> (String, String) {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok()
        })
        .unwrap_or_else(|| {
            panic!("headless Chromium is needed: install Debian's `chromium` (scripts/deps does)")
        });
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(extra)
    .arg(url)
    .env("HOME", profile.path())
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish loading {url} in 90 s"))
        .expect("chromium runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A tool `scripts/deps` builds or installs into its cache (`SLUICE_TOOLS` overrides): the Go
/// tools, and aioquic's virtual environment (`aioquic/bin/python3`).
pub fn tool(name: &str) -> std::path::PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let dir = var("SLUICE_TOOLS")
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("sluice/bin")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/sluice/bin")))
        .unwrap_or_default();
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/deps, which puts {name} into ~/.cache/sluice/bin",
        path.display()
    );
    path
}

/// HTML of at least `len` bytes: rows of markup with numbers that vary, so that it
/// compresses about as a page does (the compression and cache tests' page).
pub fn html_page(len: usize) -> Vec<u8> {
    let mut s = String::from("<!doctype html><html><body>\n");
    let mut i = 0u64;
    while s.len() < len {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(&format!(
            "<div class=\"row r{}\"><a href=\"/item/{}\">Item {}</a> costs {}.{:02}</div>\n",
            i >> 61,
            i >> 40,
            i >> 50,
            i >> 56,
            (i >> 30) % 100
        ));
    }
    s.push_str("</body></html>\n");
    s.into_bytes()
}

/// A response body decoded as its `Content-Encoding` says (`None`: as it is).
pub fn decode_body(encoding: Option<&str>, data: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    match encoding {
        None => out = data.to_vec(),
        Some("gzip") => {
            // One member: GzDecoder stops after the first, like some browsers.
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("zstd") => out = zstd::stream::decode_all(data).unwrap(),
        Some("br") => {
            brotli_decompressor::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some(other) => panic!("unexpected content-encoding {other}"),
    }
    out
}
