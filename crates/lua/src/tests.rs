use super::*;
use http::Method;
use std::net::SocketAddr;

fn routes(toml: &str) -> (Arc<LuaSettings>, Vec<Arc<Route>>) {
    let text = format!(
        "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"u\"\nservers = [{{ address = \"127.0.0.1:9\" }}]\n{toml}"
    );
    let s = sluice_config::load_str(&text, "lua.toml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"));
    (s.lua.clone(), s.routes.clone())
}

fn facts() -> Facts {
    Facts {
        route: "r".into(),
        client: "192.0.2.7:4567".parse::<SocketAddr>().unwrap(),
        local: "127.0.0.1:8443".parse().unwrap(),
        scheme: "https",
        request_id: Some("rid-1".into()),
        request_uri: None,
        arrived: std::time::Instant::now(),
    }
}

/// A GET of `uri` with no headers.
fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

/// `req` as a request phase's script gets it.
fn head(req: &mut Request<()>) -> RequestHead<'_, ()> {
    RequestHead {
        request: req,
        body: None,
        subject: None,
    }
}

/// A fetcher for the tests that make no outbound request (the e2e tests send real ones).
struct NoFetch;

impl Fetcher for NoFetch {
    async fn fetch(&self, _: Outbound) -> Result<Fetched, String> {
        Err("no outbound requests in this test".into())
    }
}

/// A request phase run to its end on a runtime of its own.
fn run(lua: &RequestLua, phase: LuaPhase, head: RequestHead<'_, ()>) -> Outcome {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(lua.run_request(phase, head, &NoFetch))
}

fn runtime(toml: &str) -> Arc<LuaRuntime> {
    let (settings, routes) = routes(toml);
    LuaRuntime::build(&settings, &routes, None)
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("a route has a script")
}

#[test]
fn a_script_reads_the_request_and_rewrites_it() {
    let rt = runtime(
        r#"[[route]]
name = "r"
upstream = "u"
[route.lua]
access = '''
local token = ngx.var.http_x_token
ngx.req.set_header("X-Seen", token .. ":" .. ngx.var.arg_a .. ":" .. ngx.var.uri)
ngx.req.clear_header("X-Token")
ngx.req.set_uri_args({ b = "2 3" })
ngx.ctx.who = ngx.var.remote_addr
'''
log = 'assert(ngx.ctx.who == "192.0.2.7")'
"#,
    );
    let scripts = rt.scripts("r").unwrap();
    let lua = scripts.request(facts());
    let mut req = get("/a/../b%20c?a=1");
    req.headers_mut().insert("x-token", "t0k".parse().unwrap());
    let out = run(&lua, LuaPhase::Access, head(&mut req));
    assert!(matches!(out, Outcome::Continue), "{out:?}");
    assert_eq!(req.headers_mut()["x-seen"], "t0k:1:/b c");
    assert!(req.headers_mut().get("x-token").is_none());
    assert_eq!(req.uri().query(), Some("b=2%203"));
    lua.run_log(200, 10);
    let stats = stats::for_script("r", LuaPhase::Log);
    assert_eq!(
        stats.errors.load(Ordering::Relaxed),
        0,
        "ngx.ctx carried to log"
    );
}

/// `ngx.var.request_uri` is the target as the client sent it where the gateway normalized
/// the path (the facts carry it), and `ngx.var.uri` the normalized path decoded, as NGINX
/// keeps `$request_uri` and `$uri` apart.
#[test]
fn request_uri_is_the_clients_own_target() {
    let rt = runtime(
        r#"[[route]]
name = "r"
upstream = "u"
[route.lua]
access = 'ngx.req.set_header("X-Seen", ngx.var.request_uri .. " " .. ngx.var.uri)'
"#,
    );
    let scripts = rt.scripts("r").unwrap();
    let sent = Facts {
        request_uri: Some("/a/./b%41?x=1".into()),
        ..facts()
    };
    for (facts, want) in [(sent, "/a/./b%41?x=1 /a/bA"), (facts(), "/a/bA?x=1 /a/bA")] {
        let lua = scripts.request(facts);
        let mut req = get("/a/bA?x=1");
        let out = run(&lua, LuaPhase::Access, head(&mut req));
        assert!(matches!(out, Outcome::Continue), "{out:?}");
        assert_eq!(req.headers_mut()["x-seen"], want);
    }
}

#[test]
fn exit_say_and_redirect_end_the_request() {
    let rt = runtime(
        r#"[[route]]
name = "deny"
upstream = "u"
[route.lua]
access = '''
if not ngx.var.arg_ok then
    ngx.header["WWW-Authenticate"] = "Bearer"
    pcall(ngx.exit, 401)
    error("not reached: ngx.exit is not caught by pcall")
end
'''
[[route]]
name = "say"
upstream = "u"
[route.lua]
access = '''
ngx.status = 201
ngx.say("hello ", 42, " ", true, " ", nil)
return ngx.exit(ngx.HTTP_CREATED)
'''
[[route]]
name = "go"
upstream = "u"
[route.lua]
rewrite = 'return ngx.redirect("/elsewhere", 301)'
"#,
    );
    let lua = rt.scripts("deny").unwrap().request(facts());
    match run(&lua, LuaPhase::Access, head(&mut get("/"))) {
        Outcome::Respond(s, h, b) => {
            assert_eq!(s, 401);
            assert_eq!(h["www-authenticate"], "Bearer");
            // NGINX's error page for the status.
            assert_eq!(h["content-type"], "text/html");
            assert!(String::from_utf8_lossy(&b).contains("<title>401 Unauthorized</title>"));
        }
        other => panic!("{other:?}"),
    }
    let lua = rt.scripts("deny").unwrap().request(facts());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut get("/?ok=1"))),
        Outcome::Continue
    ));
    let lua = rt.scripts("say").unwrap().request(facts());
    match run(&lua, LuaPhase::Access, head(&mut get("/"))) {
        Outcome::Respond(s, _, b) => {
            assert_eq!(s, 201);
            assert_eq!(&b[..], b"hello 42 true nil\n");
        }
        other => panic!("{other:?}"),
    }
    let lua = rt.scripts("go").unwrap().request(facts());
    match run(&lua, LuaPhase::Rewrite, head(&mut get("/"))) {
        Outcome::Respond(s, h, _) => {
            assert_eq!(s, 301);
            assert_eq!(h["location"], "/elsewhere");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_compile_error_names_the_file_and_line() {
    let (settings, routes) = routes(
        "[[route]]\nname = \"r\"\nupstream = \"u\"\n[route.lua]\naccess = '''\nlocal x = 1\nif x then\n'''\n",
    );
    let e = LuaRuntime::build(&settings, &routes, None).unwrap_err();
    // The configuration's line 12 holds `if x then`; the error is at the end of the chunk.
    assert!(e.starts_with("lua.toml:1"), "{e}");
    assert!(e.contains("'end' expected"), "{e}");
    assert_eq!(check(&settings, &routes), Some(e));
}

#[test]
fn runtime_errors_fail_and_endless_loops_are_stopped() {
    let rt = runtime(
        r#"[lua]
max_instructions = 100000
[[route]]
name = "boom"
upstream = "u"
[route.lua]
access = 'local t = nil; return t.field'
[[route]]
name = "spin"
upstream = "u"
[route.lua]
access = '''
while true do
    pcall(function() while true do end end)
end
'''
[[route]]
name = "backtrack"
upstream = "u"
[route.lua]
access = '''
local s = ("a"):rep(20000)
while true do
    pcall(string.find, s, ".-.-.-.-b")
    pcall(string.gsub, s, ".-.-.-.-b", "")
    for _ in s:gmatch(".-.-.-.-b") do end
end
'''
[[route]]
name = "spin_in_coroutine"
upstream = "u"
[route.lua]
access = '''
coroutine.wrap(function() while true do end end)()
'''
"#,
    );
    let lua = rt.scripts("boom").unwrap().request(facts());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut get("/"))),
        Outcome::Failed
    ));
    assert!(
        stats::for_script("boom", LuaPhase::Access)
            .errors
            .load(Ordering::Relaxed)
            >= 1
    );
    // `backtrack`: a Lua pattern that backtracks meets the budget too, inside the one call
    // that matches it (LuaJIT's own matcher held its thread for good: about 10¹⁵ steps).
    for route in ["spin", "backtrack"] {
        let lua = rt.scripts(route).unwrap().request(facts());
        assert!(matches!(
            run(&lua, LuaPhase::Access, head(&mut get("/"))),
            Outcome::Failed
        ));
        assert!(
            stats::for_script(route, LuaPhase::Access)
                .stopped
                .load(Ordering::Relaxed)
                >= 1,
            "{route}"
        );
    }
    // A loop in a coroutine of the script's own meets the budget too.
    let lua = rt.scripts("spin_in_coroutine").unwrap().request(facts());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut get("/"))),
        Outcome::Failed
    ));
    assert_eq!(
        stats::for_script("spin_in_coroutine", LuaPhase::Access)
            .stopped
            .load(Ordering::Relaxed),
        1
    );
    // The state serves the next call, and the hook the stopped ones had is off.
    let lua = rt.scripts("boom").unwrap().request(facts());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut get("/"))),
        Outcome::Failed
    ));
    assert!(
        !lua.state().budget_armed(),
        "the count hook outlived its call"
    );
}

#[test]
fn a_short_call_runs_without_the_count_hook_and_a_long_one_gets_it() {
    // The long call is a loop that only the hook, armed by the watchdog, can stop.
    let rt = runtime(
        r#"[lua]
max_instructions = 1000000
[[route]]
name = "short"
upstream = "u"
[route.lua]
access = 'ngx.req.set_header("X-Ran", "1")'
[[route]]
name = "long"
upstream = "u"
[route.lua]
access = 'local n = 0; while true do n = n + 1 end'
"#,
    );
    let lua = rt.scripts("short").unwrap().request(facts());
    for _ in 0..1000 {
        let mut req = get("/");
        assert!(matches!(
            run(&lua, LuaPhase::Access, head(&mut req)),
            Outcome::Continue
        ));
        assert_eq!(req.headers_mut()["x-ran"], "1");
        assert!(
            !lua.state().budget_armed(),
            "a short call armed the count hook"
        );
    }
    let long = rt.scripts("long").unwrap().request(facts());
    assert!(matches!(
        run(&long, LuaPhase::Access, head(&mut get("/"))),
        Outcome::Failed
    ));
    assert_eq!(
        stats::for_script("long", LuaPhase::Access)
            .stopped
            .load(Ordering::Relaxed),
        1
    );
    assert!(!long.state().budget_armed());
}

#[test]
fn filters_see_and_change_the_response() {
    let rt = runtime(
        r#"[lua]
shared_dicts = { hits = "1m" }
[[route]]
name = "f"
upstream = "u"
[route.lua]
access = 'ngx.ctx.n = ngx.shared.hits:incr("k", 1, 0)'
header_filter = '''
ngx.header["X-Hits"] = ngx.ctx.n
ngx.header["Content-Length"] = nil
ngx.status = 203
'''
body_filter = '''
local chunk, eof = ngx.arg[1], ngx.arg[2]
ngx.arg[1] = string.upper(chunk)
if eof then ngx.arg[1] = ngx.arg[1] .. "!" end
'''
"#,
    );
    let scripts = rt.scripts("f").unwrap();
    for n in 1..=2 {
        let lua = scripts.request(facts());
        assert!(matches!(
            run(&lua, LuaPhase::Access, head(&mut get("/"))),
            Outcome::Continue
        ));
        let mut status = StatusCode::OK;
        let mut headers = HeaderMap::new();
        headers.insert("content-length", "5".parse().unwrap());
        assert!(lua.run_header_filter(&mut HeaderMap::new(), &mut status, &mut headers));
        assert_eq!(status, 203);
        assert_eq!(headers["x-hits"], n.to_string().as_str());
        assert!(headers.get("content-length").is_none());
        let (out, eof) = lua
            .run_body_filter(Bytes::from_static(b"abc"), false)
            .unwrap();
        assert_eq!((&out[..], eof), (&b"ABC"[..], false));
        let (out, eof) = lua.run_body_filter(Bytes::new(), true).unwrap();
        assert_eq!((&out[..], eof), (&b"!"[..], true));
    }
    assert_eq!(rt.dictionaries()[0].0, "hits");
}

#[test]
fn a_state_is_bounded_in_memory() {
    let rt = runtime(
        r#"[lua]
max_memory = "4m"
max_instructions = 0
[[route]]
name = "hog"
upstream = "u"
[route.lua]
access = '''
local t = {}
for i = 1, 1000000 do t[i] = string.rep("x", 64) .. i end
'''
[[route]]
name = "small"
upstream = "u"
[route.lua]
access = 'ngx.req.set_header("X-Ok", "1")'
"#,
    );
    let lua = rt.scripts("hog").unwrap().request(facts());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut get("/"))),
        Outcome::Failed
    ));
    // The state collects what the failed call left and serves the next one.
    let lua = rt.scripts("small").unwrap().request(facts());
    let mut req = get("/");
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut req)),
        Outcome::Continue
    ));
    assert_eq!(req.headers_mut()["x-ok"], "1");
    assert!(
        rt.memory().iter().all(|m| *m <= 4 << 20),
        "{:?}",
        rt.memory()
    );
}

/// Answers a script's outbound requests from a table of its own, noting each request and
/// whether the state was free while the script waited.
struct Answering {
    state: Arc<state::State>,
    seen: Mutex<Vec<(Outbound, bool)>>,
}

impl Fetcher for Answering {
    async fn fetch(&self, call: Outbound) -> Result<Fetched, String> {
        let free = self.state.is_free();
        let path = call.uri.path().to_owned();
        self.seen.lock().unwrap().push((call, free));
        if path == "/down" {
            return Err("connection refused".into());
        }
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.append("set-cookie", "a=1".parse().unwrap());
        headers.append("set-cookie", "b=2".parse().unwrap());
        Ok(Fetched {
            status: StatusCode::CREATED,
            headers,
            body: Bytes::from_static(b"{\"user\":\"ann\"}"),
        })
    }
}

#[test]
fn a_script_waits_for_outbound_requests_with_its_state_free() {
    let rt = runtime(
        r#"[[route]]
name = "call"
upstream = "u"
[route.lua]
access = '''
local http = require "resty.http"
local httpc = http.new()
httpc:set_timeout(1500)
local res, err = httpc:request_uri("http://u/check?x=1", {
    method = "POST", body = "payload", query = { who = "bob" },
    headers = { ["X-From-Lua"] = "yes" },
})
assert(res, err)
local cjson = require "cjson"
ngx.sleep(0.001)
local down, derr = httpc:request_uri("http://u/down")
ngx.req.set_header("X-Got", res.status .. " " .. res.reason .. " " .. cjson.decode(res.body).user
    .. " " .. res.headers["Content-Type"] .. " " .. #res.headers.set_cookie
    .. " " .. tostring(down) .. " " .. derr .. " " .. ngx.get_phase())
'''
header_filter = '''
local ok, err = pcall(function() return require("resty.http").new():request_uri("http://u/") end)
ngx.header["X-Filter"] = tostring(ok) .. " " .. err
'''
"#,
    );
    let scripts = rt.scripts("call").unwrap();
    let lua = scripts.request(facts());
    let fetcher = Answering {
        state: lua.state().clone(),
        seen: Mutex::default(),
    };
    let mut req = get("/in");
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(lua.run_request(LuaPhase::Access, head(&mut req), &fetcher));
    assert!(matches!(out, Outcome::Continue), "{out:?}");
    assert_eq!(
        req.headers_mut()["x-got"],
        "201 Created ann application/json 2 nil connection refused access"
    );
    let seen = fetcher.seen.into_inner().unwrap();
    assert_eq!(seen.len(), 2);
    let (call, free) = &seen[0];
    assert!(free, "the state is free while a script waits");
    assert_eq!(call.method, Method::POST);
    assert_eq!(call.uri.to_string(), "http://u/check?x=1&who=bob");
    assert_eq!(call.headers["x-from-lua"], "yes");
    assert_eq!(call.headers["host"], "u");
    assert_eq!(&call.body[..], b"payload");
    assert_eq!(call.timeout, Duration::from_millis(1500));
    assert!(call.max_body > 0);
    let stats = stats::for_script("call", LuaPhase::Access);
    assert_eq!(stats.outbound.load(Ordering::Relaxed), 2);
    assert_eq!(stats.outbound_failures.load(Ordering::Relaxed), 1);
    // The filters may not wait, as in lua-nginx-module.
    let mut status = StatusCode::OK;
    let mut headers = HeaderMap::new();
    assert!(lua.run_header_filter(&mut HeaderMap::new(), &mut status, &mut headers));
    let filter = headers["x-filter"].to_str().unwrap();
    assert!(
        filter.starts_with("false ")
            && filter.contains("API disabled in the context of header_filter_by_lua*"),
        "{filter}"
    );
}

#[test]
fn a_failed_call_carries_its_traceback_and_its_runner_serves_the_next() {
    let rt = runtime(
        r#"[[route]]
name = "tb"
upstream = "u"
[route.lua]
access = '''
local function inner() error("deep failure") end
if ngx.var.arg_fail then inner() end
ngx.req.set_header("X-Ran", "1")
'''
"#,
    );
    let scripts = rt.scripts("tb").unwrap();
    let lua = scripts.request(facts());
    let mut view = View::new(LuaPhase::Access, facts());
    view.uri = "/?fail=1".parse().unwrap();
    match lua.state().start(0, &mut view) {
        state::Step::Ended(state::Ended::Failed(message)) => {
            assert!(message.contains("deep failure"), "{message}");
            assert!(message.contains("stack traceback"), "{message}");
            assert!(
                message.contains("in function 'inner'") || message.contains("inner"),
                "{message}"
            );
        }
        _ => panic!("the call fails"),
    }
    let mut req = get("/");
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut req)),
        Outcome::Continue
    ));
    assert_eq!(req.headers_mut()["x-ran"], "1");
}

/// The raw C functions (`cfunc`) and the mlua functions they stand in front of answer
/// alike: each shape below takes one path or the other.
#[test]
fn the_fast_calls_answer_as_the_slow_ones() {
    let rt = runtime(
        r##"[lua]
shared_dicts = { t = "1m" }
[[route]]
name = "fast"
upstream = "u"
[route.lua]
access = '''
local d = ngx.shared.t
local out = {}
local function add(...)
    for i = 1, select("#", ...) do out[#out + 1] = tostring((select(i, ...))) end
end
add(ngx.var.http_x_a, ngx.var.nope)
ngx.req.set_header("X_Under", "u")
ngx.req.set_header("X-Num", 42)
ngx.req.set_header("X-List", { "a", "b" })
ngx.req.set_header("X-A", nil)
local ok, err = pcall(ngx.req.set_header, "bad name", "v")
add(ok, err ~= nil)
add((pcall(ngx.req.set_header, "X-Bad", "a\nb")))
add(d:set("s", "str")) add(d:get("s"))
add(d:set("n", 1.5, 0)) add(d:get("n"))
add(d:set("b", true)) add(d:get("b"))
add(d:set("f", "x", 0, 7)) add(d:get("f"))
add(d:incr("n", 2))
add(d:incr("s", 1))
add(d:incr("new", 1))
add(d:incr("new", 1, 10))
add(d:incr(5, 1, 0)) add(d:get(5))
add(d:get("missing"))
add((pcall(d.get, d, "")))
add(d:ttl("n"))
add(d:capacity() > 0)
ngx.req.set_header("X-Out", table.concat(out, ","))
'''
header_filter = 'ngx.header["X-Late"] = tostring((pcall(ngx.req.set_header, "X-Late", "v")))'
"##,
    );
    let lua = rt.scripts("fast").unwrap().request(facts());
    let mut req = get("/");
    req.headers_mut().insert("x-a", "va".parse().unwrap());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut req)),
        Outcome::Continue
    ));
    assert_eq!(
        req.headers_mut()["x-out"],
        "va,nil,true,false,true,true,nil,false,str,true,nil,false,1.5,true,nil,false,true,\
         true,nil,false,x,7,3.5,nil,not a number,nil,not found,11,nil,false,1,nil,false,1,nil,\
         true,0,true"
    );
    // `ngx.req.set_header` keeps `_` in a name, as lua-nginx-module does.
    assert_eq!(req.headers_mut()["x_under"], "u");
    assert_eq!(req.headers_mut()["x-num"], "42");
    let list: Vec<_> = req.headers_mut().get_all("x-list").iter().collect();
    assert_eq!(list, ["a", "b"]);
    assert!(req.headers_mut().get("x-a").is_none());
    let (mut status, mut headers) = (StatusCode::OK, HeaderMap::new());
    assert!(lua.run_header_filter(req.headers_mut(), &mut status, &mut headers));
    assert_eq!(
        headers["x-late"], "false",
        "the request's head is fixed after access"
    );
    assert!(req.headers_mut().get("x-late").is_none());
}

/// A fetcher whose exchange holds a large state across its await, as the gateway's does (a
/// connection pool's checkout, TLS, HTTP/1 or HTTP/2 exchange).
struct LargeFetch;

impl Fetcher for LargeFetch {
    async fn fetch(&self, _: Outbound) -> Result<Fetched, String> {
        let scratch = [0u8; 8192];
        tokio::task::yield_now().await;
        Err(format!(
            "{}",
            scratch.iter().map(|&b| usize::from(b)).sum::<usize>()
        ))
    }
}

#[test]
fn a_call_that_does_not_wait_carries_no_exchange_in_its_future() {
    // A call that waits is boxed by the proxy (`lua_finish`) and moved; the exchange's
    // future is boxed inside it when a script waits, so its size does not make every
    // waiting call's box as large.
    let rt = runtime(
        "[[route]]\nname = \"r\"\nlisteners = [\"l\"]\nupstream = \"u\"\n[route.lua]\naccess = 'return'\n",
    );
    let lua = rt.scripts("r").unwrap().request(facts());
    let mut req = get("/");
    let call = lua.run_request(LuaPhase::Access, head(&mut req), &LargeFetch);
    let size = std::mem::size_of_val(&call);
    assert!(size < 4096, "the access call's future is {size} bytes");
}

#[test]
fn host_is_the_requests_own_in_lower_case_without_its_port() {
    let rt = runtime(
        r#"[[route]]
name = "r"
upstream = "u"
[route.lua]
access = '''
ngx.req.set_header("X-Host", ngx.var.host)
ngx.req.set_header("Host", "Moved.example:81")
ngx.req.set_header("X-Moved", ngx.var.host)
ngx.req.set_header("X-Header", ngx.var.http_x_mixed_Case)
'''
"#,
    );
    let lua = rt.scripts("r").unwrap().request(facts());
    let mut req = get("/");
    req.headers_mut()
        .insert("host", "WWW.Example.COM:8443".parse().unwrap());
    req.headers_mut()
        .insert("x-mixed-case", "v".parse().unwrap());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut req)),
        Outcome::Continue
    ));
    assert_eq!(req.headers_mut()["x-host"], "www.example.com");
    assert_eq!(req.headers_mut()["x-moved"], "moved.example");
    assert_eq!(req.headers_mut()["x-header"], "v");
    // An absolute target's authority wins over `Host` (HTTP/2's `:authority`).
    let lua = rt.scripts("r").unwrap().request(facts());
    let mut req = get("https://[::1]:8443/x");
    req.headers_mut().insert("host", "other".parse().unwrap());
    assert!(matches!(
        run(&lua, LuaPhase::Access, head(&mut req)),
        Outcome::Continue
    ));
    assert_eq!(req.headers_mut()["x-host"], "[::1]");
}

#[test]
fn a_waiting_call_dropped_on_another_thread_leaves_its_state_serving() {
    // The request goes away while its script sleeps: its runner is dropped (under the
    // state's gate, on whatever thread drops it), and the state runs the next call.
    let rt = runtime(
        r#"[[route]]
name = "r"
upstream = "u"
[route.lua]
access = '''
if ngx.var.arg_wait then ngx.sleep(30) end
ngx.req.set_header("X-Ran", "1")
'''
"#,
    );
    let scripts = rt.scripts("r").unwrap();
    let lua = scripts.request(facts());
    let mut waiting_req = get("/?wait=1");
    let waiting = match lua.start_request(LuaPhase::Access, &mut head(&mut waiting_req)) {
        Started::Waiting(w) => w,
        Started::Done(o) => panic!("the call did not wait: {o:?}"),
    };
    assert!(lua.state().is_free(), "a waiting call holds no gate");
    std::thread::spawn(move || drop(waiting)).join().unwrap();
    assert!(lua.state().is_free());
    for _ in 0..3 {
        let next = scripts.request(facts());
        let mut req = get("/");
        assert!(matches!(
            run(&next, LuaPhase::Access, head(&mut req)),
            Outcome::Continue
        ));
        assert_eq!(req.headers()["x-ran"], "1");
    }
}

mod budget;
mod fuzz;
mod gate;
mod jit;
mod robustness;
