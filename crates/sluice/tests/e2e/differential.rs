//! Sluice's HTTP/1.1 parser against NGINX's and HAProxy's, on the same malformed requests.
//!
//! Each request of the corpus (request-smuggling shapes from the literature — CL.TE, TE.CL,
//! TE.TE obfuscations, duplicate lengths, chunk-size tricks — and RFC 9112's "MUST"s) goes to
//! the three gateways, each in front of an origin of its own that records every request it
//! receives. Sluice must never be laxer than the stricter of the other two: for every request
//! its origin receives at most as many requests as the stricter gateway's origin did (so a
//! request the stricter gateway refused never reaches Sluice's origin either, and a smuggled
//! second request never gets through where the other did not let it).
//!
//! NGINX and HAProxy are Debian's (`scripts/deps` installs them), started here on free ports
//! with configurations of their own and stopped by PID.

use crate::http::plain_cfg;
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The corpus: a name, and the request with `{n}` standing for the case's path prefix (every
/// request line of a case, smuggled ones included, starts with it so the origin can tell
/// cases apart when they run at once).
const CORPUS: &[(&str, &str)] = &[
    ("valid GET", "GET /{n}/ok HTTP/1.1\r\nHost: a\r\n\r\n"),
    (
        "valid POST with a length",
        "POST /{n}/ok HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
    ),
    (
        "valid chunked POST",
        "POST /{n}/ok HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    ),
    // CL.TE and TE.CL: both framings at once, a second request hidden behind the first.
    (
        "CL.TE",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /{n}/smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
    ),
    (
        "TE.CL",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n2a\r\nGET /{n}/smuggled HTTP/1.1\r\nHost: a\r\n\r\n\r\n0\r\n\r\n",
    ),
    // TE.TE: a Transfer-Encoding one parser sees and another does not.
    (
        "TE with a space before the colon",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE xchunked",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE chunked twice",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE chunked, identity",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE identity",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc",
    ),
    (
        "TE gzip, chunked",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE with a tab",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE with a vertical tab",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE folded",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE in HTTP/1.0",
        "POST /{n}/a HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    // Content-Length forms.
    (
        "two equal lengths",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    ),
    (
        "two different lengths",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc",
    ),
    (
        "a length list",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc",
    ),
    (
        "a signed length",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
    ),
    (
        "a negative length",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
    ),
    (
        "a hexadecimal length",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\nabc",
    ),
    (
        "a length with a space inside",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\nabc",
    ),
    (
        "an overflowing length",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\nabc",
    ),
    (
        "a length after a tab",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length:\t3\r\n\r\nabc",
    ),
    (
        "a length followed by a tab",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\t\r\n\r\nabc",
    ),
    (
        "an empty length",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
    ),
    // Chunk-size tricks.
    (
        "a 0x chunk size",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n",
    ),
    (
        "a negative chunk size",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n",
    ),
    (
        "an overflowing chunk size",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff3\r\nabc\r\n0\r\n\r\n",
    ),
    (
        "chunk data without its CRLF",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX0\r\n\r\n",
    ),
    (
        "a chunk size with a leading space",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n 3\r\nabc\r\n0\r\n\r\n",
    ),
    (
        "a chunk extension with a bare CR",
        "POST /{n}/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;a\rb\r\nabc\r\n0\r\n\r\n",
    ),
    // Heads.
    ("no Host in HTTP/1.1", "GET /{n}/a HTTP/1.1\r\n\r\n"),
    (
        "two Hosts",
        "GET /{n}/a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ),
    (
        "a Host with a space",
        "GET /{n}/a HTTP/1.1\r\nHost: a b\r\n\r\n",
    ),
    (
        "a Host with a slash",
        "GET /{n}/a HTTP/1.1\r\nHost: a/b\r\n\r\n",
    ),
    (
        "a Host with two dots in a row",
        "GET /{n}/a HTTP/1.1\r\nHost: a..b\r\n\r\n",
    ),
    ("an empty Host", "GET /{n}/a HTTP/1.1\r\nHost:\r\n\r\n"),
    (
        "a folded header",
        "GET /{n}/a HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n 2\r\n\r\n",
    ),
    (
        "a bare CR in a value",
        "GET /{n}/a HTTP/1.1\r\nHost: a\r\nX-A: 1\r2\r\n\r\n",
    ),
    (
        "a NUL in a value",
        "GET /{n}/a HTTP/1.1\r\nHost: a\r\nX-A: 1\x002\r\n\r\n",
    ),
    (
        "a space in a field name",
        "GET /{n}/a HTTP/1.1\r\nHost: a\r\nX A: 1\r\n\r\n",
    ),
    (
        "a field without a colon",
        "GET /{n}/a HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n",
    ),
    ("bare LF line ends", "GET /{n}/a HTTP/1.1\nHost: a\n\n"),
    (
        "a bare LF inside a value",
        "GET /{n}/a HTTP/1.1\r\nHost: a\r\nX-A: 1\n2\r\n\r\n",
    ),
    ("HTTP/0.9", "GET /{n}/a\r\n\r\n"),
    ("HTTP/1.2", "GET /{n}/a HTTP/1.2\r\nHost: a\r\n\r\n"),
    (
        "HTTP/2.0 in a request line",
        "GET /{n}/a HTTP/2.0\r\nHost: a\r\n\r\n",
    ),
    (
        "a lower-case version",
        "GET /{n}/a http/1.1\r\nHost: a\r\n\r\n",
    ),
    (
        "a method with a slash",
        "GE/T /{n}/a HTTP/1.1\r\nHost: a\r\n\r\n",
    ),
    (
        "two spaces after the method",
        "GET  /{n}/a HTTP/1.1\r\nHost: a\r\n\r\n",
    ),
    (
        "a target without a slash",
        "GET {n}/a HTTP/1.1\r\nHost: a\r\n\r\n",
    ),
    (
        "a target with a control byte",
        "GET /{n}/a\x01 HTTP/1.1\r\nHost: a\r\n\r\n",
    ),
    (
        "an asterisk target for GET",
        "GET * HTTP/1.1\r\nHost: a\r\n\r\n",
    ),
];

/// An origin that records the path of every request it receives.
struct Recorder {
    addr: SocketAddr,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    async fn start() -> Recorder {
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = socket.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        seen.lock().unwrap().push(req.uri().path().to_owned());
                        async {
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                                b"recorded",
                            ))))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .http1_only()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Recorder { addr, paths }
    }

    /// Requests of case `n` received so far.
    fn count(&self, n: usize) -> usize {
        let prefix = format!("/c{n}/");
        self.paths
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(&prefix))
            .count()
    }
}

/// A server started here and stopped by PID when dropped.
pub(crate) struct Child(pub(crate) std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Debian binary: on `PATH`, or in `/usr/sbin` (not on a non-root user's `PATH`).
pub(crate) fn binary(name: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|p| p.exists())
        })
        .unwrap_or_default();
    on_path
        .or_else(|| Some(Path::new("/usr/sbin").join(name)).filter(|p| p.exists()))
        .unwrap_or_else(|| panic!("{name} is not installed: run scripts/deps"))
}

/// Debian's NGINX in the foreground on `dir` (its configuration, pid, temporary files and
/// error log there, at `log_level`), serving `servers` (the `server` blocks of its `http`
/// block); `lua` loads lua-nginx-module first. Stopped by PID when the value is dropped.
pub(crate) fn nginx_with(dir: &Path, servers: &str, lua: bool, log_level: &str) -> Child {
    let d = dir.display();
    let modules = if lua {
        "load_module /usr/lib/nginx/modules/ndk_http_module.so;\n\
         load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;\n"
    } else {
        ""
    };
    let conf = format!(
        r#"{modules}
daemon off;
master_process off;
worker_processes 1;
error_log {d}/nginx-error.log {log_level};
pid {d}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/nginx-body;
    proxy_temp_path {d}/nginx-proxy;
    fastcgi_temp_path {d}/nginx-fcgi;
    uwsgi_temp_path {d}/nginx-uwsgi;
    scgi_temp_path {d}/nginx-scgi;
{servers}
}}
"#
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = std::process::Command::new(binary("nginx"))
        .arg("-c")
        .arg(&path)
        .arg("-p")
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nginx starts");
    Child(child)
}

fn start_nginx(dir: &Path, port: u16, origin: SocketAddr) -> Child {
    let servers = format!(
        r#"
    upstream o {{ server {origin}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://o;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_request_buffering off;
            # The client half-closes after its request: finish the exchange regardless.
            proxy_ignore_client_abort on;
        }}
    }}"#
    );
    nginx_with(dir, &servers, false, "warn")
}

fn start_haproxy(dir: &Path, port: u16, origin: SocketAddr) -> Child {
    let conf = format!(
        r#"
global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 5s
    timeout server 5s
    timeout http-request 5s
frontend f
    bind 127.0.0.1:{port}
    default_backend b
backend b
    server o {origin}
"#
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, conf).unwrap();
    let child = std::process::Command::new(binary("haproxy"))
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("haproxy starts");
    Child(child)
}

pub(crate) async fn wait_listening(addr: SocketAddr) {
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("nothing listens on {addr} after 10 s");
}

/// Sends `raw`, half-closes, and reads until the gateway closes (bounded); the first status
/// code it answered, if any.
async fn send(addr: SocketAddr, raw: &[u8]) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(raw).await.ok()?;
    let _ = s.shutdown().await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    text.strip_prefix("HTTP/1.")
        .and_then(|t| t.get(2..5))
        .and_then(|c| c.parse().ok())
}

#[tokio::test]
async fn sluice_is_never_laxer_than_the_stricter_of_nginx_and_haproxy() {
    let dir = tempfile::tempdir().unwrap();
    let (o_sluice, o_nginx, o_haproxy) = (
        Recorder::start().await,
        Recorder::start().await,
        Recorder::start().await,
    );
    let gw = TestGateway::plain(&plain_cfg(
        "",
        "",
        &format!("{{ address = \"{}\" }}", o_sluice.addr),
    ))
    .await;
    let nginx_port = free_port();
    let haproxy_port = free_port();
    let _nginx = start_nginx(dir.path(), nginx_port, o_nginx.addr);
    let _haproxy = start_haproxy(dir.path(), haproxy_port, o_haproxy.addr);
    let sluice = gw.addr("http");
    let nginx: SocketAddr = ([127, 0, 0, 1], nginx_port).into();
    let haproxy: SocketAddr = ([127, 0, 0, 1], haproxy_port).into();
    wait_listening(nginx).await;
    wait_listening(haproxy).await;

    // Every case to every gateway at once; the origins tell the cases apart by path.
    let runs = CORPUS.iter().enumerate().map(|(n, (_, raw))| {
        let raw = raw.replace("{n}", &format!("c{n}"));
        async move {
            tokio::join!(
                send(sluice, raw.as_bytes()),
                send(nginx, raw.as_bytes()),
                send(haproxy, raw.as_bytes())
            )
        }
    });
    let answers = futures_util::future::join_all(runs).await;
    // Requests a gateway forwarded after its client went away arrive a moment later.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut laxer = Vec::new();
    let mut table = String::new();
    for (n, ((name, _), (s, g, h))) in CORPUS.iter().zip(answers).enumerate() {
        let (cs, cn, ch) = (o_sluice.count(n), o_nginx.count(n), o_haproxy.count(n));
        table.push_str(&format!(
            "{name:45} sluice {s:?}/{cs} nginx {g:?}/{cn} haproxy {h:?}/{ch}\n"
        ));
        if cs > cn.min(ch) {
            laxer.push(*name);
        }
    }
    println!("status/requests forwarded per gateway:\n{table}");
    assert!(
        laxer.is_empty(),
        "Sluice forwarded more than the stricter gateway for {laxer:?}:\n{table}"
    );
    // The corpus is not vacuous: valid requests get through everywhere, and each gateway
    // refused some.
    for (n, (name, _)) in CORPUS.iter().enumerate().take(3) {
        assert_eq!(
            (o_sluice.count(n), o_nginx.count(n), o_haproxy.count(n)),
            (1, 1, 1),
            "{name}:\n{table}"
        );
    }
    let refused = |o: &Recorder| (0..CORPUS.len()).filter(|n| o.count(*n) == 0).count();
    assert!(refused(&o_sluice) >= 20, "{table}");
    assert!(refused(&o_nginx) > 0 && refused(&o_haproxy) > 0, "{table}");
}
