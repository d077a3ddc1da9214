//! The response cache (`[route.cache]`) end to end: a real origin behind the gateway, every
//! Cache-Control rule that decides storing and serving, revalidation, collapsing, encoded
//! variants and their background upgrade, purge through the admin API, the bound.

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;

type OBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn page() -> Vec<u8> {
    html_page(100_000)
}

/// An origin whose paths each show one caching rule. It counts requests per path (with
/// query), keeps the conditional headers it was sent, and can change its version (ETag) or
/// fail with 500.
#[derive(Clone)]
struct CacheOrigin {
    addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, u64>>>,
    conditionals: Arc<Mutex<Vec<String>>>,
    /// Each request's method, by target, in order.
    methods: Arc<Mutex<HashMap<String, Vec<String>>>>,
    version: Arc<AtomicU64>,
    failing: Arc<AtomicBool>,
}

impl CacheOrigin {
    async fn start() -> CacheOrigin {
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let o = CacheOrigin {
            addr: socket.local_addr().unwrap(),
            hits: Default::default(),
            conditionals: Default::default(),
            methods: Default::default(),
            version: Arc::new(AtomicU64::new(1)),
            failing: Arc::new(AtomicBool::new(false)),
        };
        let page = Bytes::from(page());
        let state = o.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = socket.accept().await else {
                    return;
                };
                let (state, page) = (state.clone(), page.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let (state, page) = (state.clone(), page.clone());
                            async move { Ok::<_, Infallible>(state.respond(req, page).await) }
                        },
                    );
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        o
    }

    fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn methods(&self, path: &str) -> Vec<String> {
        self.methods
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    async fn respond(
        &self,
        req: http::Request<hyper::body::Incoming>,
        page: Bytes,
    ) -> http::Response<OBody> {
        let target = req.uri().path_and_query().unwrap().as_str().to_owned();
        let path = req.uri().path().to_owned();
        self.methods
            .lock()
            .unwrap()
            .entry(target.clone())
            .or_default()
            .push(req.method().to_string());
        let n = {
            let mut h = self.hits.lock().unwrap();
            let n = h.entry(target).or_insert(0);
            *n += 1;
            *n
        };
        let inm = req
            .headers()
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(v) = &inm {
            self.conditionals
                .lock()
                .unwrap()
                .push(format!("{path} {v}"));
        }
        let version = self.version.load(Ordering::SeqCst);
        let etag = format!("\"v{version}\"");
        let full = |b: Bytes| Full::new(b).boxed();
        let text = |cc: &str, body: String| {
            http::Response::builder()
                .header("content-type", "text/plain")
                .header("cache-control", cc)
                .body(full(Bytes::from(body)))
                .unwrap()
        };
        let revalidates = |cc: &str, body: String| {
            if inm.as_deref() == Some(etag.as_str()) {
                return http::Response::builder()
                    .status(304)
                    .header("etag", etag.as_str())
                    .header("cache-control", cc)
                    .body(full(Bytes::new()))
                    .unwrap();
            }
            http::Response::builder()
                .header("content-type", "text/plain")
                .header("etag", etag.as_str())
                .header("cache-control", cc)
                .body(full(Bytes::from(body)))
                .unwrap()
        };
        if self.failing.load(Ordering::SeqCst) && path != "/fresh" {
            return http::Response::builder()
                .status(500)
                .body(full(Bytes::from_static(b"origin down")))
                .unwrap();
        }
        match path.as_str() {
            "/fresh" | "/scan" => text("max-age=60", format!("{path} {n}")),
            "/no-store" => text("no-store", format!("no-store {n}")),
            "/private" => text("private, max-age=60", format!("private {n}")),
            "/s-maxage" => text("s-maxage=60, max-age=0", format!("s-maxage {n}")),
            "/auth" => text("max-age=60", format!("auth {n}")),
            "/auth-public" => text("public, max-age=60", format!("auth-public {n}")),
            "/cookie" => {
                let mut r = text("max-age=60", format!("cookie {n}"));
                r.headers_mut().insert("set-cookie", "s=1".parse().unwrap());
                r
            }
            "/expires" => {
                let when = SystemTime::now() + Duration::from_secs(120);
                let mut r = text("public", format!("expires {n}"));
                r.headers_mut().remove("cache-control");
                r.headers_mut()
                    .insert("expires", httpdate::fmt_http_date(when).parse().unwrap());
                r
            }
            "/expired" => {
                let mut r = text("public", format!("expired {n}"));
                r.headers_mut().remove("cache-control");
                r.headers_mut().insert("expires", "0".parse().unwrap());
                r
            }
            "/no-cache" => revalidates("no-cache", format!("no-cache v{version} {n}")),
            "/short" => revalidates("max-age=1", format!("short v{version} {n}")),
            "/swr" => text("max-age=1, stale-while-revalidate=30", format!("swr {n}")),
            "/sie" => text("max-age=1, stale-if-error=60", format!("sie {n}")),
            "/must" => text(
                "max-age=1, must-revalidate, stale-if-error=60",
                format!("must {n}"),
            ),
            "/vary" => {
                let lang = req
                    .headers()
                    .get("accept-language")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned();
                let mut r = text("max-age=60", format!("lang {lang} {n}"));
                r.headers_mut()
                    .insert("vary", "Accept-Language".parse().unwrap());
                r
            }
            "/vary-star" => {
                let mut r = text("max-age=60", format!("star {n}"));
                r.headers_mut().insert("vary", "*".parse().unwrap());
                r
            }
            "/slow" => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                text("max-age=60", format!("slow {n}"))
            }
            "/app.html" => http::Response::builder()
                .header("content-type", "text/html; charset=utf-8")
                .header("cache-control", "no-store")
                .body(full(Bytes::from(format!(
                    "<!doctype html><html><body><div id=\"result\">pending</div>\
                     <script>fetch('/page.html').then(r => r.text()).then(t => {{\
                       document.getElementById('result').textContent = 'LOADED ' + t.length + ' ' + (t.endsWith('</body></html>\\n') ? 'whole' : 'cut');\
                     }}).catch(e => {{ document.getElementById('result').textContent = 'ERROR ' + e; }});</script>\
                     <!-- {} --></body></html>",
                    "padding ".repeat(200)
                ))))
                .unwrap(),
            "/page.html" => http::Response::builder()
                .header("content-type", "text/html; charset=utf-8")
                .header("cache-control", "max-age=600")
                .header("etag", "\"p1\"")
                .body(full(page))
                .unwrap(),
            _ => http::Response::builder()
                .status(404)
                .body(full(Bytes::from_static(b"no such case")))
                .unwrap(),
        }
    }
}

const TOKEN: &str = "cache-test-token-0123456789abcdef";

async fn gateway(origin: SocketAddr, extra: &str) -> TestGateway {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin.token");
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    TestGateway::start(
        &format!(
            r#"
[log]
access_log = "off"
[admin]
address = "127.0.0.1:0"
token_file = "admin.token"
[offload.compress]
engines = ["pool"]
[compression]
enabled = true
codecs = ["br", "zstd", "gzip"]
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "cached"
upstream = "o"
[route.cache]
upgrade_after = 3
{extra}
"#
        ),
        dir,
    )
    .await
}

struct Fetched {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Fetched {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn x_cache(&self) -> &str {
        self.header("x-cache").unwrap_or("(none)")
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body decoded as its Content-Encoding says.
    fn decoded(&self) -> Vec<u8> {
        decode_body(self.header("content-encoding"), &self.body)
    }
}

async fn fetch_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Fetched {
    let mut sender = http1_sender::<Full<Bytes>>(addr).await;
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "t.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Fetched {
        status,
        headers,
        body,
    }
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Fetched {
    fetch_with(addr, "GET", path, headers).await
}

/// Each directive: what is stored and served again, and what always goes upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cache_control_rule_decides_what_is_stored() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    // Stored and served again: max-age, s-maxage, Expires, public with Authorization.
    for (path, auth) in [
        ("/fresh", false),
        ("/s-maxage", false),
        ("/expires", false),
        ("/auth-public", true),
    ] {
        let h: &[(&str, &str)] = if auth {
            &[("authorization", "Bearer x")]
        } else {
            &[]
        };
        let first = get(at, path, h).await;
        assert_eq!((first.status, first.x_cache()), (200, "MISS"), "{path}");
        let second = get(at, path, h).await;
        assert_eq!(second.x_cache(), "HIT", "{path}");
        assert_eq!(second.body, first.body, "{path}: the stored body");
        assert!(second.header("age").is_some(), "{path}: Age on a hit");
        assert_eq!(o.hits(path), 1, "{path}: one upstream request");
    }
    // Never stored: no-store, private, Set-Cookie, Authorization without public, Vary: *,
    // an Expires in the past, and a request's own no-store.
    for (path, h) in [
        ("/no-store", None),
        ("/private", None),
        ("/cookie", None),
        ("/auth", Some(("authorization", "Bearer x"))),
        ("/vary-star", None),
        ("/expired", None),
    ] {
        let h: Vec<(&str, &str)> = h.into_iter().collect();
        for _ in 0..2 {
            let f = get(at, path, &h).await;
            assert_eq!(f.status, 200, "{path}");
            assert_ne!(f.x_cache(), "HIT", "{path}");
        }
        assert_eq!(o.hits(path), 2, "{path}: both went upstream");
    }
    let nostore = [("cache-control", "no-store")];
    let _ = get(at, "/fresh?request-no-store", &nostore).await;
    let again = get(at, "/fresh?request-no-store", &[]).await;
    assert_eq!(again.x_cache(), "MISS", "a request's no-store kept it out");
    // A request's no-cache: revalidated (the origin has no validator: fetched again).
    let f = get(at, "/fresh", &[("cache-control", "no-cache")]).await;
    assert_ne!(f.x_cache(), "HIT");
    assert_eq!(o.hits("/fresh"), 2);
    // A request's max-age=0 likewise; then the stored copy serves the others again.
    let _ = get(at, "/fresh", &[("cache-control", "max-age=0")]).await;
    assert_eq!(o.hits("/fresh"), 3);
    assert_eq!(get(at, "/fresh", &[]).await.x_cache(), "HIT");
    let c = gw.gateway().cache().snapshot();
    for reason in [
        "no_store",
        "private",
        "set_cookie",
        "authorization",
        "vary_star",
    ] {
        assert!(
            c.not_stored.iter().any(|(r, n)| *r == reason && *n >= 1),
            "{reason} counted: {:?}",
            c.not_stored
        );
    }
    // An unsafe method that succeeds invalidates the stored URL (RFC 9111 §4.4).
    let _ = fetch_with(at, "POST", "/fresh", &[]).await;
    assert_eq!(get(at, "/fresh", &[]).await.x_cache(), "MISS");
}

/// RFC 9211 `Cache-Status` says how each response was handled: forwarded and stored, a hit
/// with its freshness left, forwarded and not storable, an unsafe method, a revalidation that
/// the origin answered 304; and a route may turn it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_status_says_how_each_response_was_handled() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let status = |f: &Fetched| f.header("cache-status").unwrap_or("(none)").to_owned();
    let miss = get(at, "/fresh", &[]).await;
    assert_eq!(status(&miss), "sluice; fwd=miss; fwd-status=200; stored");
    let hit = get(at, "/fresh", &[]).await;
    let hit_status = status(&hit);
    let ttl: i64 = hit_status
        .strip_prefix("sluice; hit; ttl=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{hit_status}"));
    assert!(
        (55..=60).contains(&ttl),
        "max-age=60 less its age: {hit_status}"
    );
    let not_storable = get(at, "/no-store", &[]).await;
    assert_eq!(status(&not_storable), "sluice; fwd=miss; fwd-status=200");
    let post = fetch_with(at, "POST", "/fresh", &[]).await;
    assert!(
        status(&post).starts_with("sluice; fwd=method; fwd-status="),
        "{}",
        status(&post)
    );
    let _ = get(at, "/short", &[]).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let renewed = get(at, "/short", &[]).await;
    assert_eq!(renewed.x_cache(), "REVALIDATED");
    assert_eq!(status(&renewed), "sluice; fwd=stale; fwd-status=304");

    let off = gateway(o.addr, "cache_status = false").await;
    let at = off.addr("http");
    let _ = get(at, "/fresh?off", &[]).await;
    let hit = get(at, "/fresh?off", &[]).await;
    assert_eq!(hit.x_cache(), "HIT");
    assert_eq!(hit.header("cache-status"), None);
}

/// A HEAD that misses is fetched upstream as a GET and stored: its client gets the head (with
/// the body's length, no body), and the GET after it is a hit without going upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_miss_is_fetched_as_a_get_and_stored() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let head = fetch_with(at, "HEAD", "/fresh?head", &[]).await;
    assert_eq!((head.status, head.x_cache()), (200, "MISS"));
    assert!(head.body.is_empty(), "a HEAD's answer has no body");
    assert_eq!(
        head.header("content-length"),
        Some("/fresh 1".len().to_string().as_str()),
        "the GET's length"
    );
    assert_eq!(o.methods("/fresh?head"), ["GET"], "fetched as a GET");
    let mut got = None;
    for _ in 0..100 {
        let f = get(at, "/fresh?head", &[]).await;
        if f.x_cache() == "HIT" {
            got = Some(f);
            break;
        }
        // The body is read into the store beside the HEAD's answer.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hit = got.expect("the GET after the HEAD is a hit");
    assert_eq!(
        hit.text(),
        "/fresh 1",
        "upstream saw {:?}; cache {:?}",
        o.methods("/fresh?head"),
        gw.gateway().cache().snapshot()
    );
    assert_eq!(o.hits("/fresh?head"), 1, "one upstream request in all");
}

/// Byte ranges from a stored whole response, as NGINX's cache serves them: a miss is fetched
/// whole (upstream never sees the Range) and stored; then one range is a 206 with
/// `Content-Range`, several a `multipart/byteranges` 206, a range past the end 416, and an
/// `If-Range` that does not hold the whole body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_are_answered_from_a_stored_whole_response() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let first = get(at, "/fresh?r", &[("range", "bytes=0-3")]).await;
    assert_eq!(
        (first.status, first.x_cache()),
        (200, "MISS"),
        "fetched whole"
    );
    let whole = first.text();
    assert_eq!(whole, "/fresh 1");
    let len = whole.len();
    let one = get(at, "/fresh?r", &[("range", "bytes=0-3")]).await;
    assert_eq!((one.status, one.x_cache()), (206, "HIT"));
    assert_eq!(one.text(), &whole[..4]);
    assert_eq!(
        one.header("content-range").map(str::to_owned),
        Some(format!("bytes 0-3/{len}"))
    );
    let suffix = get(at, "/fresh?r", &[("range", "bytes=-2")]).await;
    assert_eq!(
        (suffix.status, suffix.text()),
        (206, whole[len - 2..].to_owned())
    );
    let two = get(at, "/fresh?r", &[("range", "bytes=0-0,-1")]).await;
    assert_eq!(two.status, 206);
    let ct = two.header("content-type").unwrap_or_default().to_owned();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("{ct}"));
    let text = two.text();
    assert_eq!(text.matches(&format!("--{boundary}")).count(), 3, "{text}");
    assert!(
        text.contains(&format!("content-range: bytes 0-0/{len}")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "content-range: bytes {}-{}/{len}",
            len - 1,
            len - 1
        )),
        "{text}"
    );
    let past = get(at, "/fresh?r", &[("range", &format!("bytes={len}-"))]).await;
    assert_eq!(past.status, 416);
    assert_eq!(
        past.header("content-range").map(str::to_owned),
        Some(format!("bytes */{len}"))
    );
    let not_matching = get(
        at,
        "/fresh?r",
        &[("range", "bytes=0-3"), ("if-range", "\"other\"")],
    )
    .await;
    assert_eq!(
        (not_matching.status, not_matching.text()),
        (200, whole.clone())
    );
    assert_eq!(
        o.hits("/fresh?r"),
        1,
        "every range from the one stored response"
    );
}

/// `[route.cache] key` keys by a header and leaves the query out; `bypass` sends a request
/// with the named cookie upstream without the cache (and keeps its response out); a purge of
/// the URL names its entries whatever the further key parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_key_and_bypass_follow_the_route() {
    let o = CacheOrigin::start().await;
    let gw = gateway(
        o.addr,
        "key = [\"header:X-Device\"]\nbypass = [\"cookie:session\"]",
    )
    .await;
    let at = gw.addr("http");
    let mobile = [("x-device", "mobile")];
    assert_eq!(get(at, "/fresh?a", &mobile).await.x_cache(), "MISS");
    // Another query, same device: the query is not in the key.
    assert_eq!(get(at, "/fresh?b", &mobile).await.x_cache(), "HIT");
    // Another device: another entry.
    assert_eq!(
        get(at, "/fresh?a", &[("x-device", "desk")]).await.x_cache(),
        "MISS"
    );
    assert_eq!(
        get(at, "/fresh?a", &[("x-device", "desk")]).await.x_cache(),
        "HIT"
    );
    // A session cookie bypasses: upstream, and not stored.
    let session = [("x-device", "tv"), ("cookie", "session=abc")];
    let bypassed = get(at, "/fresh?a", &session).await;
    assert_eq!(bypassed.x_cache(), "BYPASS");
    assert_eq!(
        bypassed.header("cache-status"),
        Some("sluice; fwd=bypass; fwd-status=200")
    );
    assert_eq!(
        get(at, "/fresh?a", &[("x-device", "tv")]).await.x_cache(),
        "MISS"
    );
    // "0" does not bypass (NGINX's reading).
    let zero = [("x-device", "tv"), ("cookie", "session=0")];
    assert_eq!(get(at, "/fresh?a", &zero).await.x_cache(), "HIT");
    // A purge of the URL (its path: the query is not in this route's key) names every
    // device's entry.
    gw.gateway()
        .cache()
        .purge("t.test", "/fresh", false, std::time::SystemTime::now());
    for device in ["mobile", "desk", "tv"] {
        assert_eq!(
            get(at, "/fresh?a", &[("x-device", device)]).await.x_cache(),
            "MISS",
            "{device}"
        );
    }
}

/// A stale entry is revalidated with its ETag: a 304 renews it (the body is not sent
/// again); a changed ETag replaces it. `no-cache` revalidates every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidation_with_304_and_with_a_changed_etag() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let first = get(at, "/short", &[]).await;
    assert_eq!(first.text(), "short v1 1");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let renewed = get(at, "/short", &[]).await;
    assert_eq!(renewed.x_cache(), "REVALIDATED");
    assert_eq!(
        renewed.text(),
        "short v1 1",
        "the stored body, renewed by the 304"
    );
    assert!(
        o.conditionals
            .lock()
            .unwrap()
            .contains(&"/short \"v1\"".to_owned()),
        "the gateway sent the stored ETag: {:?}",
        o.conditionals.lock().unwrap()
    );
    o.version.store(2, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let changed = get(at, "/short", &[]).await;
    assert_eq!(changed.x_cache(), "EXPIRED");
    assert_eq!(changed.text(), "short v2 3");
    // no-cache: stored, but every request revalidates (304 while the version holds).
    let a = get(at, "/no-cache", &[]).await;
    let b = get(at, "/no-cache", &[]).await;
    assert_eq!((a.x_cache(), b.x_cache()), ("MISS", "REVALIDATED"));
    assert_eq!(b.text(), a.text());
    assert_eq!(o.hits("/no-cache"), 2);
}

/// A client's own conditional request is answered 304 from the store, for the identity
/// body's ETag and for the weakened one of an encoded variant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_conditionals_are_answered_from_the_store() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let _ = get(at, "/page.html", &[]).await;
    let plain = get(at, "/page.html", &[("if-none-match", "\"p1\"")]).await;
    assert_eq!((plain.status, plain.x_cache()), (304, "HIT"));
    assert!(plain.body.is_empty());
    assert_eq!(plain.header("etag"), Some("\"p1\""));
    let br = get(at, "/page.html", &[("accept-encoding", "br")]).await;
    let weak = br.header("etag").unwrap().to_owned();
    assert_eq!(weak, "W/\"p1\"");
    let again = get(
        at,
        "/page.html",
        &[("accept-encoding", "br"), ("if-none-match", weak.as_str())],
    )
    .await;
    assert_eq!(again.status, 304);
    let other = get(at, "/page.html", &[("if-none-match", "\"zz\"")]).await;
    assert_eq!(other.status, 200);
    assert_eq!(o.hits("/page.html"), 1);
    assert!(gw.gateway().cache().snapshot().not_modified >= 2);
}

/// stale-while-revalidate serves the stale copy and refreshes it in the background;
/// stale-if-error serves it while the origin fails, unless must-revalidate forbids it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_and_stale_if_error() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    for path in ["/swr", "/sie", "/must"] {
        assert_eq!(get(at, path, &[]).await.x_cache(), "MISS");
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let stale = get(at, "/swr", &[]).await;
    assert_eq!((stale.x_cache(), stale.text().as_str()), ("STALE", "swr 1"));
    wait_until(|| o.hits("/swr") == 2).await;
    // The refresh stored the new response.
    let mut refreshed = String::new();
    for _ in 0..50 {
        refreshed = get(at, "/swr", &[]).await.text();
        if refreshed == "swr 2" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refreshed, "swr 2");
    o.failing.store(true, Ordering::SeqCst);
    let sie = get(at, "/sie", &[]).await;
    assert_eq!(
        (sie.status, sie.x_cache(), sie.text().as_str()),
        (200, "STALE", "sie 1")
    );
    let must = get(at, "/must", &[]).await;
    assert_eq!(
        must.status, 500,
        "must-revalidate: the origin's error, not the stale copy"
    );
    // A dead origin (no response at all) is an error too.
    o.failing.store(false, Ordering::SeqCst);
}

/// Vary: one entry per value of the named request header; Accept-Encoding is not part of
/// the key (the entry holds the encodings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vary_keys_by_the_named_request_headers() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let en = get(at, "/vary", &[("accept-language", "en")]).await;
    let fr = get(at, "/vary", &[("accept-language", "fr")]).await;
    assert_eq!(
        (en.text().as_str(), fr.text().as_str()),
        ("lang en 1", "lang fr 2")
    );
    let en2 = get(
        at,
        "/vary",
        &[("accept-language", "en"), ("accept-encoding", "gzip")],
    )
    .await;
    assert_eq!(en2.x_cache(), "HIT");
    assert_eq!(en2.text(), "lang en 1");
    let fr2 = get(at, "/vary", &[("accept-language", "fr")]).await;
    assert_eq!((fr2.x_cache(), fr2.text().as_str()), ("HIT", "lang fr 2"));
    assert_eq!(o.hits("/vary"), 2);
}

/// 100 concurrent misses of one URL make one upstream request; all get its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_misses_make_one_upstream_request() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let tasks: Vec<_> = (0..100)
        .map(|_| tokio::spawn(async move { get(at, "/slow", &[]).await.text() }))
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), "slow 1");
    }
    assert_eq!(o.hits("/slow"), 1);
    assert!(gw.gateway().cache().snapshot().collapsed >= 1);
}

/// Each encoding is made once, on its first request, and kept; one served often is
/// upgraded in the background to its codec's best level: smaller, decoding to the origin's
/// bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_are_made_once_and_upgraded_in_the_background() {
    let o = CacheOrigin::start().await;
    // Upgrades as fast as serving (nice 0): the default's 1% of a busy core could take
    // minutes while CI runs tests side by side.
    let gw = gateway(o.addr, "[cache]\nupgrade_share_percent = 100").await;
    let at = gw.addr("http");
    let cache = gw.gateway().cache();
    let want = page();
    let first = get(at, "/page.html", &[("accept-encoding", "br")]).await;
    assert_eq!(first.x_cache(), "MISS");
    assert_eq!(first.decoded(), want, "the miss, compressed on its way");
    let mut sizes = HashMap::new();
    for coding in ["br", "gzip", "zstd"] {
        let f = get(at, "/page.html", &[("accept-encoding", coding)]).await;
        assert_eq!(
            (f.x_cache(), f.header("content-encoding")),
            ("HIT", Some(coding))
        );
        assert_eq!(f.decoded(), want, "{coding}");
        assert_eq!(
            f.header("content-length"),
            Some(f.body.len().to_string().as_str())
        );
        sizes.insert(coding, f.body.len());
    }
    let made = cache.snapshot().variants_made;
    assert_eq!(
        made,
        vec![("identity", 0), ("gzip", 1), ("br", 1), ("zstd", 1)]
    );
    // Served again: the same variant, not made again.
    for _ in 0..3 {
        let f = get(at, "/page.html", &[("accept-encoding", "br")]).await;
        assert_eq!(f.body.len(), sizes["br"]);
    }
    assert_eq!(cache.snapshot().variants_made, made);
    // The third serving queued the upgrade; the upgrade thread does it.
    wait_until_within(60, || cache.snapshot().upgrades.contains(&("br", 1))).await;
    let upgraded = get(at, "/page.html", &[("accept-encoding", "br")]).await;
    assert!(
        upgraded.body.len() < sizes["br"],
        "brotli 11 ({}) is smaller than the route's level ({})",
        upgraded.body.len(),
        sizes["br"]
    );
    assert_eq!(upgraded.decoded(), want);
    let identity = get(at, "/page.html", &[]).await;
    assert_eq!(
        (identity.x_cache(), identity.body.len()),
        ("HIT", want.len())
    );
    let head = fetch_with(at, "HEAD", "/page.html", &[("accept-encoding", "gzip")]).await;
    assert_eq!((head.status, head.x_cache()), (200, "HIT"));
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    assert_eq!(o.hits("/page.html"), 1);
    let s = cache.snapshot();
    assert!(
        s.cpu_saved_s > 0.0,
        "hits on stored variants count as CPU saved"
    );
    assert!(s.served_bytes.iter().any(|(c, n)| *c == "br" && *n > 0));
}

/// Purge through the admin API: one URL (every variant of it), or a prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_by_key_and_by_prefix_through_the_admin_api() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "").await;
    let at = gw.addr("http");
    let (admin, _task) = admin_for(&gw).await;
    for p in ["/fresh", "/fresh?a", "/fresh?b", "/expires"] {
        let _ = get(at, p, &[]).await;
        assert_eq!(get(at, p, &[]).await.x_cache(), "HIT", "{p}");
    }
    let purge = |body: serde_json::Value, token: &'static str| async move {
        let tcp = tokio::net::TcpStream::connect(admin).await.unwrap();
        let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = http::Request::post("/api/v1/cache/purge")
            .header("host", "admin")
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        collect(s.send_request(req).await.unwrap()).await
    };
    let denied = purge(
        serde_json::json!({"host": "t.test", "path": "/fresh"}),
        "wrong-token-0123456789abcdef",
    )
    .await;
    assert_eq!(denied.status, 401);
    let bad = purge(serde_json::json!({"host": "t.test"}), TOKEN).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let ok = purge(
        serde_json::json!({"host": "t.test", "path": "/fresh"}),
        TOKEN,
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(get(at, "/fresh", &[]).await.x_cache(), "MISS");
    assert_eq!(
        get(at, "/fresh?a", &[]).await.x_cache(),
        "HIT",
        "another URL stays"
    );
    let ok = purge(
        serde_json::json!({"host": "t.test", "prefix": "/fresh?"}),
        TOKEN,
    )
    .await;
    assert_eq!(ok.status, 200);
    assert_eq!(get(at, "/fresh?a", &[]).await.x_cache(), "MISS");
    assert_eq!(get(at, "/fresh?b", &[]).await.x_cache(), "MISS");
    assert_eq!(get(at, "/expires", &[]).await.x_cache(), "HIT");
    let metrics = sluice_admin::metrics(&sluice_admin::Sources {
        gateway: gw.gateway().clone(),
        control: None,
        started: std::time::Instant::now(),
    });
    for line in [
        "sluice_cache_purges_total 2",
        "sluice_cache_requests_total{outcome=\"hit\"} ",
        "sluice_cache_max_bytes 268435456",
    ] {
        assert!(metrics.contains(line), "missing `{line}` in:\n{metrics}");
    }
}

/// A scan of distinct URLs through the gateway: the store's bytes never pass the bound,
/// and a page hit all along survives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_holds_under_a_scan() {
    let o = CacheOrigin::start().await;
    let gw = gateway(o.addr, "[cache]\nmax_size = \"1m\"").await;
    let at = gw.addr("http");
    let cache = gw.gateway().cache();
    let _ = get(at, "/page.html", &[]).await;
    let mut sender = http1_sender::<Full<Bytes>>(at).await;
    for i in 0..3000 {
        let req = http::Request::get(format!("/scan?{i}"))
            .header("host", "t.test")
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.ready().await.unwrap();
        let _ = collect(sender.send_request(req).await.unwrap()).await;
        if i % 100 == 0 {
            let _ = get(at, "/page.html", &[]).await;
            assert!(cache.bytes() <= 1 << 20, "{} bytes at {i}", cache.bytes());
        }
    }
    assert!(cache.bytes() <= 1 << 20);
    assert!(cache.entries() > 10);
    assert_eq!(get(at, "/page.html", &[]).await.x_cache(), "HIT");
    assert_eq!(o.hits("/page.html"), 1);
}

/// `[cache.disk]`: a gateway started again on the same directory serves what the first one
/// stored, encoded variants included, without going upstream; a purge removes it from disk
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_tier_serves_across_a_restart() {
    let o = CacheOrigin::start().await;
    let disk = tempfile::tempdir().unwrap();
    let extra = format!(
        "[cache.disk]\npath = \"{}\"\nmax_size = \"64m\"",
        disk.path().display()
    );
    let want = page();
    {
        let gw = gateway(o.addr, &extra).await;
        let at = gw.addr("http");
        let _ = get(at, "/page.html", &[]).await;
        let br = get(at, "/page.html", &[("accept-encoding", "br")]).await;
        assert_eq!(br.x_cache(), "HIT");
        let _ = get(at, "/fresh", &[]).await;
        let cache = gw.gateway().cache();
        // Written by the disk thread: the page with its br variant, and /fresh.
        wait_until(|| {
            cache
                .disk()
                .is_some_and(|(d, _)| d.writes >= 3 && d.entries == 2)
        })
        .await;
    }
    let gw = gateway(o.addr, &extra).await;
    let at = gw.addr("http");
    let br = get(at, "/page.html", &[("accept-encoding", "br")]).await;
    assert_eq!(br.x_cache(), "HIT", "served from disk after the restart");
    assert_eq!(br.decoded(), want);
    let identity = get(at, "/page.html", &[]).await;
    assert_eq!(identity.body, want);
    assert_eq!(get(at, "/fresh", &[]).await.text(), "/fresh 1");
    assert_eq!(o.hits("/page.html"), 1);
    assert_eq!(o.hits("/fresh"), 1);
    let cache = gw.gateway().cache();
    assert_eq!(
        gw.gateway().cache().snapshot().variants_made[2],
        ("br", 0),
        "not made again"
    );
    assert!(cache.disk().unwrap().0.reads >= 2);
    assert!(
        cache
            .purge_requested("t.test", "/fresh", false, std::time::SystemTime::now())
            .unwrap(),
        "recorded on disk"
    );
    wait_until(|| cache.disk().is_some_and(|(d, _)| d.entries == 1)).await;
    drop(gw);
    let gw = gateway(o.addr, &extra).await;
    assert_eq!(
        get(gw.addr("http"), "/fresh", &[]).await.x_cache(),
        "MISS",
        "purged from disk"
    );
    assert_eq!(o.hits("/fresh"), 2);
}

/// A real browser loads a page whose script fetches the cached page, twice (two browser
/// runs, no browser cache between them): the second is served from the gateway's cache in
/// the encoding Chromium asked for, and decodes to the whole page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chromium_loads_a_page_from_the_cache() {
    use sluice_tls::selfsigned::KeyKind;
    let o = CacheOrigin::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "local", KeyKind::EcdsaP256, &["localhost"]);
    let gw = TestGateway::start(
        &format!(
            r#"
[log]
access_log = "off"
[offload.compress]
engines = ["pool"]
[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
[[certificate]]
name = "local"
cert = "local.crt"
key = "local.key"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "all"
upstream = "o"
[route.compression]
enabled = true
codecs = ["br", "zstd", "gzip"]
[route.cache]
"#,
            origin = o.addr
        ),
        dir,
    )
    .await;
    let url = format!("https://localhost:{}/app.html", gw.addr("https").port());
    let want = format!("LOADED {} whole", page().len());
    for load in 1..=2 {
        let (dom, stderr) = headless_chromium(
            &url,
            &[
                "--ignore-certificate-errors".to_owned(),
                "--virtual-time-budget=10000".to_owned(),
                "--dump-dom".to_owned(),
            ],
        )
        .await;
        assert!(dom.contains(&want), "load {load}: {dom}\nstderr: {stderr}");
    }
    assert_eq!(
        o.hits("/page.html"),
        1,
        "the second load came from the cache"
    );
    assert_eq!(o.hits("/app.html"), 2, "no-store: never cached");
    let c = gw.gateway().cache().snapshot();
    assert!(c.count("HIT") >= 1, "{c:?}");
    let encoded: u64 = c
        .served_bytes
        .iter()
        .filter(|(k, _)| *k != "identity")
        .map(|(_, n)| n)
        .sum();
    assert!(encoded > 0, "Chromium got an encoded variant: {c:?}");
}
