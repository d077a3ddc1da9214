//! What one `access` call of `bench/lua`'s script costs inside `sluice-lua`, without the
//! proxy around it: the request's Lua made, the script run over a request head, the head
//! handed back. Nanoseconds per call, best of several rounds, on one thread.
//!
//!   cargo run --release -p sluice-lua --example call_cost [-- CALLS] [max_instructions]
//!
//! A developer's tool for comparing builds of the scripting path on one machine; the
//! figures that count side by side with NGINX are `bench/lua`'s.

use http::{HeaderMap, HeaderValue, Request, Uri};
use sluice_config::LuaPhase;
use sluice_lua::{Facts, Fetched, Fetcher, LuaRuntime, Outbound, RequestHead};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

const ACCESS: &str = r#"
local token = ngx.var.http_x_token
ngx.req.set_header("X-Token-Seen", token or "none")
ngx.req.set_header("X-Gateway", "lua")
local n = ngx.shared.counts:incr("hits", 1, 0)
if not n then return ngx.exit(500) end
"#;

struct NoFetch;

impl Fetcher for NoFetch {
    async fn fetch(&self, _: Outbound) -> Result<Fetched, String> {
        Err("no outbound requests here".into())
    }
}

/// Polls `f` once: the script never waits, so it is ready at once.
fn ready<T>(f: impl Future<Output = T>) -> T {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the script waited"),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let calls: u32 = args.next().map_or(200_000, |a| a.parse().expect("CALLS"));
    let budget = args
        .next()
        .map_or(String::new(), |b| format!("max_instructions = {b}\n"));
    let text = format!(
        "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"u\"\nservers = [{{ address = \"127.0.0.1:9\" }}]\n\
         [lua]\nshared_dicts = {{ counts = \"1m\" }}\n{budget}\
         [[route]]\nname = \"r\"\nlisteners = [\"l\"]\nupstream = \"u\"\n\
         [route.lua]\naccess = '''{ACCESS}'''\n"
    );
    let config = sluice_config::load_str(&text, "call_cost.toml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"));
    let runtime = LuaRuntime::build(&config.lua, &config.routes, None)
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("a script");
    let scripts = runtime.scripts("r").expect("route r");
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
    headers.insert(
        "user-agent",
        HeaderValue::from_static("h2load nghttp2/1.52.0"),
    );
    headers.insert("accept", HeaderValue::from_static("*/*"));
    headers.insert("x-token", HeaderValue::from_static("abc"));
    // The request's making alone, subtracted: what is left is the Lua's.
    let mut floor = f64::MAX;
    for _ in 0..7 {
        let started = Instant::now();
        for _ in 0..calls / 10 {
            let mut req = Request::get(Uri::from_static("/1k"))
                .body(())
                .expect("request");
            *req.headers_mut() = headers.clone();
            std::hint::black_box(req);
        }
        floor = floor.min(started.elapsed().as_nanos() as f64 / f64::from(calls / 10));
    }
    let client = "127.0.0.1:40000".parse().expect("address");
    let local = "127.0.0.1:8080".parse().expect("address");
    let mut best = f64::MAX;
    for _ in 0..7 {
        let started = Instant::now();
        for _ in 0..calls {
            let lua = scripts.request(Facts {
                route: "r".into(),
                client,
                local,
                scheme: "http",
                request_id: None,
                request_uri: None,
                arrived: Instant::now(),
            });
            let mut req = Request::get(Uri::from_static("/1k"))
                .body(())
                .expect("request");
            *req.headers_mut() = headers.clone();
            let head = RequestHead {
                request: &mut req,
                body: None,
                subject: None,
            };
            std::hint::black_box(ready(lua.run_request(LuaPhase::Access, head, &NoFetch)));
            std::hint::black_box(req);
        }
        best = best.min(started.elapsed().as_nanos() as f64 / f64::from(calls));
    }
    println!(
        "ns per access call (best of 7 rounds of {calls}, the request's making taken off): {:.0}",
        best - floor
    );
}
