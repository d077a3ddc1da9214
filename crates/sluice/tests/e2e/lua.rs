//! Scripting (`[route.lua]`): the same scripts in Debian's NGINX with lua-nginx-module
//! (libnginx-mod-http-lua 0.10.23 with lua-resty-core) and in Sluice, statuses, headers and
//! bodies compared; and the faults a script must not turn into an outage.
//!
//! Differences by design, named where they show: a script's `ngx.exit(status)` without
//! output gets Sluice's one-line body where NGINX sends its HTML error page.

use crate::differential::{Child, binary, wait_listening};
use crate::support::*;
use std::net::SocketAddr;
use std::path::Path;

/// The scripts both gateways run, by location: (path prefix, phase, code).
const SCRIPTS: [(&str, &str, &str); 8] = [
    (
        "/rewrite/",
        "access",
        r#"
local h = ngx.req.get_headers()
ngx.req.set_header("X-Client-Token", h.x_token or "none")
ngx.req.set_header("X-Method", ngx.req.get_method())
ngx.req.set_header("X-Arg", ngx.var.arg_name or "")
ngx.req.clear_header("X-Token")
"#,
    ),
    (
        "/token/",
        "access",
        r#"
if ngx.var.http_authorization ~= "Bearer let-me-in" then
    ngx.header["WWW-Authenticate"] = 'Bearer realm="lua"'
    return ngx.exit(ngx.HTTP_UNAUTHORIZED)
end
ngx.req.set_header("X-Checked", "yes")
"#,
    ),
    (
        "/count/",
        "access",
        r#"
local n, err = ngx.shared.counts:incr("hits", 1, 0)
ngx.header["X-Count"] = n
ngx.say("count=", n, " err=", err)
return ngx.exit(200)
"#,
    ),
    (
        "/re/",
        "access",
        r#"
local new, n = ngx.re.sub(ngx.var.uri, "^/re/v([0-9]+)/(?<rest>.*)$", "/echo/version$1/$2", "jo")
if n and n > 0 then ngx.req.set_uri(new) end
local m = ngx.re.match(ngx.var.arg_id or "", [[^([a-z]+)-(\d+)$]], "jo")
-- A table's order is Lua's hash order, which differs between two VMs: a string here.
if m then ngx.req.set_uri_args("kind=" .. m[1] .. "&num=" .. m[2]) end
"#,
    ),
    (
        "/json/",
        "access",
        r#"
local cjson = require "cjson"
local args = ngx.req.get_uri_args()
ngx.header["Content-Type"] = "application/json"
-- lua-nginx-module 0.10.23 has no named captures in replacement templates: an error.
local _, _, named = ngx.re.sub("x", "(?<a>x)", "${a}")
ngx.say(cjson.encode({ name = args.name or "anon", n = tonumber(args.n) or 0, list = { 1, 2.5, "x/y" }, named = named }))
return ngx.exit(ngx.HTTP_OK)
"#,
    ),
    (
        "/call/",
        "access",
        r#"
local http = require "resty.http"
local cjson = require "cjson"
local httpc = http.new()
httpc:set_timeout(5000)
local up, err = httpc:request_uri("http://ORIGIN/upload", { method = "POST", body = "ping" })
if not up then ngx.say("upload failed: ", err) return ngx.exit(502) end
ngx.sleep(0.01)
local seen = assert(httpc:request_uri("http://ORIGIN/headers", { headers = { ["X-From-Lua"] = "yes" } }))
local echo = assert(httpc:request_uri("http://ORIGIN/echo/x", { query = { q = "a b" } }))
local down = httpc:request_uri("http://CLOSED/")
ngx.header["X-Sub-Status"] = up.status
ngx.header["Content-Type"] = "application/json"
ngx.say(cjson.encode({
    upload = up.body, from_lua = cjson.decode(seen.body).headers["x-from-lua"],
    echo = echo.body, failed = down == nil,
}))
return ngx.exit(200)
"#,
    ),
    (
        "/upper/",
        "header_filter",
        r#"
ngx.header.content_length = nil
ngx.header["X-Filtered"] = ngx.status
"#,
    ),
    (
        "/upper/",
        "body_filter",
        r#"
ngx.arg[1] = ngx.re.gsub(ngx.arg[1], "api", "API", "jo")
if ngx.arg[2] then ngx.arg[1] = ngx.arg[1] .. "!" end
"#,
    ),
];

/// Where the scripts' outbound calls go: `ORIGIN` the origin, `CLOSED` a port nothing
/// listens on (an upstream of its own in Sluice, which calls only what it is configured for).
fn script(code: &str, origin: SocketAddr) -> String {
    code.replace("ORIGIN", &origin.to_string())
        .replace("CLOSED", CLOSED)
}

const CLOSED: &str = "127.0.0.1:9";

/// lua-resty-http's `request_uri` for NGINX (Debian packages no lua-resty-http): HTTP/1.0
/// over a cosocket, the response in lua-resty-http's shape. Sluice has its own
/// (`resty.http`, built in); the scripts are the same.
const RESTY_HTTP: &str = r#"
local _M = {}
local mt = { __index = _M }
function _M.new() return setmetatable({ timeout = 60000 }, mt) end
function _M:set_timeout(ms) self.timeout = ms end
function _M:request_uri(uri, params)
    params = params or {}
    local host, port, path = uri:match("^http://([^:/]+):?(%d*)(.*)$")
    if not host then return nil, "bad uri" end
    if path == "" then path = "/" end
    if params.query then
        local q = type(params.query) == "table" and ngx.encode_args(params.query) or params.query
        path = path .. (path:find("?", 1, true) and "&" or "?") .. q
    end
    local sock = ngx.socket.tcp()
    sock:settimeout(self.timeout)
    local ok, err = sock:connect(host, tonumber(port) or 80)
    if not ok then return nil, err end
    local body = params.body or ""
    local req = { (params.method or "GET") .. " " .. path .. " HTTP/1.0\r\nHost: " .. host .. ":" .. port .. "\r\n" }
    if #body > 0 then req[#req + 1] = "Content-Length: " .. #body .. "\r\n" end
    for k, v in pairs(params.headers or {}) do req[#req + 1] = k .. ": " .. v .. "\r\n" end
    req[#req + 1] = "\r\n" .. body
    sock:send(req)
    local line, rerr = sock:receive("*l")
    if not line then return nil, rerr end
    local headers = setmetatable({}, { __index = function(t, k) return rawget(t, k:lower()) end })
    while true do
        local h = sock:receive("*l")
        if not h or h == "" then break end
        local k, v = h:match("^([^:]+):%s*(.*)$")
        if k then headers[k:lower()] = v end
    end
    local rest = sock:receive("*a")
    sock:close()
    return { status = tonumber(line:match("^HTTP/%d%.%d (%d+)")), headers = headers, body = rest }
end
return _M
"#;

/// Debian's NGINX with lua-nginx-module running [`SCRIPTS`] in front of `origin`.
fn start_nginx(dir: &Path, port: u16, origin: SocketAddr) -> Child {
    let d = dir.display();
    let mut locations = String::new();
    let mut prefixes: Vec<&str> = SCRIPTS.iter().map(|s| s.0).collect();
    prefixes.dedup();
    for prefix in prefixes {
        locations.push_str(&format!("        location {prefix} {{\n"));
        for (p, phase, code) in SCRIPTS {
            if p == prefix {
                let code = script(code, origin);
                locations.push_str(&format!("            {phase}_by_lua_block {{ {code} }}\n"));
            }
        }
        let strip = match prefix {
            "/re/" => String::new(),
            p => format!("rewrite ^{p}(.*)$ /$1 break;"),
        };
        locations.push_str(&format!(
            "            {strip}\n            proxy_pass http://{origin};\n        }}\n"
        ));
    }
    let conf = format!(
        r#"
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
master_process off;
worker_processes 1;
error_log {d}/nginx-error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/nginx-body;
    proxy_temp_path {d}/nginx-proxy;
    fastcgi_temp_path {d}/nginx-fcgi;
    uwsgi_temp_path {d}/nginx-uwsgi;
    scgi_temp_path {d}/nginx-scgi;
    lua_shared_dict counts 1m;
    lua_package_path "{d}/lualib/?.lua;;";
    server {{
        listen 127.0.0.1:{port};
{locations}
    }}
}}
"#
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    std::fs::create_dir_all(dir.join("lualib/resty")).unwrap();
    std::fs::write(dir.join("lualib/resty/http.lua"), RESTY_HTTP).unwrap();
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

/// Sluice's configuration of [`SCRIPTS`]: one route per prefix.
fn sluice_config(origin: SocketAddr, admin: bool) -> String {
    let mut out = format!(
        "[[listener]]\nname = \"web\"\naddress = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"api\"\nservers = [{{ address = \"{origin}\" }}]\n\
         [[upstream]]\nname = \"gone\"\nservers = [{{ address = \"{CLOSED}\" }}]\n\
         [lua]\nshared_dicts = {{ counts = \"1m\" }}\n"
    );
    if admin {
        out.push_str("[admin]\naddress = \"127.0.0.1:0\"\n");
    }
    let mut prefixes: Vec<&str> = SCRIPTS.iter().map(|s| s.0).collect();
    prefixes.dedup();
    for prefix in prefixes {
        let name = prefix.trim_matches('/');
        let strip = if prefix == "/re/" {
            String::new()
        } else {
            format!("strip_prefix = \"{}\"\n", prefix.trim_end_matches('/'))
        };
        out.push_str(&format!(
            "[[route]]\nname = \"{name}\"\npath_prefix = \"{prefix}\"\n{strip}upstream = \"api\"\n[route.lua]\n"
        ));
        for (p, phase, code) in SCRIPTS {
            if p == prefix {
                let code = script(code, origin);
                out.push_str(&format!("{phase} = '''{code}'''\n"));
            }
        }
    }
    out
}

/// What is compared of a response: status, the named headers, the body (JSON parsed, so
/// that key order does not count; the origin's `/headers` as the headers it was sent).
fn seen(got: &Got, headers: &[&str], upstream: &[&str]) -> String {
    let mut out = format!("{}", got.status);
    for h in headers {
        let v = got.headers.get(*h).map(|v| v.to_str().unwrap_or("?"));
        out.push_str(&format!(" {h}={v:?}"));
    }
    match serde_json::from_str::<serde_json::Value>(&got.body) {
        Ok(v) if !upstream.is_empty() => {
            for h in upstream {
                out.push_str(&format!(" upstream {h}={}", v["headers"][*h]));
            }
        }
        Ok(v) => out.push_str(&format!(" json={v}")),
        Err(_) => out.push_str(&format!(" body={:?}", got.body)),
    }
    out
}

/// One differential case: name, path, request headers, response headers compared, headers
/// the origin saw compared.
type Case<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a [&'a str],
    &'a [&'a str],
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_scripts_answer_as_in_nginx_with_lua() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let origin = Origin::start("api").await;
    let nginx_port = free_port();
    let _nginx = start_nginx(&d, nginx_port, origin.addr);
    let nginx: SocketAddr = ([127, 0, 0, 1], nginx_port).into();
    let gw = TestGateway::start(&sluice_config(origin.addr, false), dir).await;
    wait_listening(nginx).await;
    let web = gw.addr("web");
    let token_header = [("x-token", "t0k"), ("authorization", "Bearer let-me-in")];
    let cases: Vec<Case<'_>> = vec![
        (
            "headers rewritten",
            "/rewrite/headers?name=bob",
            &token_header[..1],
            &[],
            &["x-client-token", "x-method", "x-arg", "x-token"],
        ),
        ("no token", "/token/whoami", &[], &["www-authenticate"], &[]),
        (
            "wrong token",
            "/token/whoami",
            &[("authorization", "Bearer nope")],
            &["www-authenticate"],
            &[],
        ),
        (
            "good token",
            "/token/headers",
            &token_header[1..],
            &[],
            &["x-checked"],
        ),
        (
            "counter 1",
            "/count/",
            &[],
            &["x-count", "content-type"],
            &[],
        ),
        ("counter 2", "/count/", &[], &["x-count"], &[]),
        ("re rewrite", "/re/v2/a/b?id=abc-42", &[], &[], &[]),
        ("re no match", "/re/other?id=ABC", &[], &[], &[]),
        (
            "json api",
            "/json/?name=ann&n=7",
            &[],
            &["content-type"],
            &[],
        ),
        (
            "outbound http",
            "/call/",
            &[],
            &["x-sub-status", "content-type"],
            &[],
        ),
        (
            "body filter",
            "/upper/whoami",
            &[],
            &["x-filtered", "content-length"],
            &[],
        ),
    ];
    let mut table = String::new();
    let mut differ = Vec::new();
    for (name, path, headers, compare, upstream) in &cases {
        let a = crate::auth::get(nginx, path, headers).await;
        let b = crate::auth::get(web, path, headers).await;
        let (sa, sb) = (seen(&a, compare, upstream), seen(&b, compare, upstream));
        // A script's exit without output: NGINX's HTML error page, Sluice's one line.
        let (sa, sb) = if a.status >= 400 && a.body.contains("<html>") {
            (
                sa.replace(&format!(" body={:?}", a.body), ""),
                sb.replace(&format!(" body={:?}", b.body), ""),
            )
        } else {
            (sa, sb)
        };
        table.push_str(&format!("{name:14} nginx: {sa}\n{:14} sluice: {sb}\n", ""));
        if sa != sb {
            differ.push(*name);
        }
    }
    eprintln!("{table}");
    assert!(
        differ.is_empty(),
        "differ from NGINX + lua: {differ:?}\n{table}"
    );
    // What the `/re/` script sent upstream, spelled out (both gateways agreed on it).
    let re = crate::auth::get(web, "/re/v2/a/b?id=abc-42", &[]).await;
    assert_eq!(re.body, "/echo/version2/a/b?kind=abc&num=42");
    let filtered = crate::auth::get(web, "/upper/whoami", &[]).await;
    assert_eq!(filtered.body, "API!");
}

/// `[lua] max_instructions` and `shared_dicts` small, four routes: a plain one, one whose
/// script fails, one that never ends, one that fills a dictionary.
fn faulty_config(origin: SocketAddr) -> String {
    format!(
        r#"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{{ address = "{origin}" }}]
[lua]
max_instructions = 2000000
shared_dicts = {{ small = "8k" }}
[[route]]
name = "plain"
path_prefix = "/plain/"
strip_prefix = "/plain"
upstream = "api"
[route.lua]
access = 'ngx.req.set_header("X-Lua", "1")'
[[route]]
name = "boom"
path_prefix = "/boom/"
upstream = "api"
[route.lua]
access = '''
local t = nil
return t.field
'''
[[route]]
name = "spin"
path_prefix = "/spin/"
upstream = "api"
[route.lua]
access = 'while true do end'
[[route]]
name = "fill"
path_prefix = "/fill/"
upstream = "api"
[route.lua]
access = '''
local d = ngx.shared.small
local evicted, refused = 0, 0
for i = 1, 200 do
    local ok, err, forcible = d:set("k" .. i, string.rep("v", 100))
    if forcible then evicted = evicted + 1 end
    local ok2, err2 = d:safe_add("s" .. i, string.rep("w", 100))
    if not ok2 and err2 == "no memory" then refused = refused + 1 end
end
ngx.say(evicted > 0, " ", refused > 0, " ", d:get("k200") ~= nil, " ", d:free_space() < 8192)
return ngx.exit(200)
'''
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_endless_script_costs_its_route_only() {
    let origin = Origin::start("api").await;
    let config = faulty_config(origin.addr);
    let gw = TestGateway::start(&config, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let (admin, _server) = admin_for(&gw).await;
    // Runtime errors under load beside a plain route: every plain request answered.
    let mut tasks = Vec::new();
    for i in 0..40 {
        tasks.push(tokio::spawn(async move {
            let path = if i % 2 == 0 {
                "/plain/whoami"
            } else {
                "/boom/x"
            };
            (path, crate::auth::get(web, path, &[]).await.status)
        }));
    }
    for t in tasks {
        let (path, status) = t.await.unwrap();
        let want = if path.starts_with("/plain") { 200 } else { 500 };
        assert_eq!(status, want, "{path}");
    }
    // An endless loop: stopped (500), and the other routes keep being served.
    let spin = tokio::spawn(async move { crate::auth::get(web, "/spin/x", &[]).await.status });
    assert_eq!(
        crate::auth::get(web, "/plain/whoami", &[]).await.status,
        200
    );
    assert_eq!(spin.await.unwrap(), 500);
    assert_eq!(
        crate::auth::get(web, "/plain/whoami", &[]).await.status,
        200
    );
    // A dictionary at its bound: `set` evicts (forcible), `safe_add` refuses, the newest stays.
    let fill = crate::auth::get(web, "/fill/", &[]).await;
    assert_eq!(fill.body, "true true true true\n");
    // Counted on /metrics.
    let metrics = http1_get(admin, "x", "/metrics").await.body;
    for line in [
        "sluice_lua_errors_total{route=\"boom\",phase=\"access\"} 20",
        "sluice_lua_stopped_total{route=\"spin\",phase=\"access\"} 1",
    ] {
        assert!(metrics.contains(line), "no `{line}` in /metrics");
    }
    assert!(
        metrics.contains("sluice_lua_shared_dict_bytes{dict=\"small\",kind=\"capacity\"} 8192")
    );
    let status = http1_get(admin, "x", "/status").await.body;
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(
        status["lua"]["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["route"] == "spin" && s["stopped"] == 1),
        "{}",
        status["lua"]
    );

    // A reload whose script does not compile is refused; the old scripts serve on.
    let broken = config.replace("ngx.req.set_header(\"X-Lua\", \"1\")", "if then");
    let refused = gw.reload(&broken).await.unwrap_err().to_string();
    assert!(
        refused.contains("test.toml:") && refused.contains("near 'then'"),
        "{refused}"
    );
    let plain = crate::auth::get(web, "/plain/headers", &[]).await;
    assert_eq!(
        crate::auth::upstream_header(&plain, "x-lua").as_deref(),
        Some("1")
    );
    // A reload that changes the script is applied, without a request lost.
    let changed = config.replace("\"X-Lua\", \"1\"", "\"X-Lua\", \"2\"");
    gw.reload(&changed).await.unwrap();
    let plain = crate::auth::get(web, "/plain/headers", &[]).await;
    assert_eq!(
        crate::auth::upstream_header(&plain, "x-lua").as_deref(),
        Some("2")
    );
}

#[test]
fn sluice_check_names_a_scripts_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("guard.lua");
    std::fs::write(&script, "local a = 1\nlocal b = = 2\n").unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        "[[listener]]\nname = \"web\"\naddress = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"api\"\nservers = [{ address = \"127.0.0.1:9\" }]\n\
         [[route]]\nname = \"r\"\nupstream = \"api\"\n[route.lua]\naccess_file = \"guard.lua\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("guard.lua:2:"), "{err}");
}

/// A script that calls a part of lua-nginx-module's API Sluice does not have passes the
/// check with a warning that names the call (the call raises when reached), and a route
/// whose `content` script answers needs no upstream.
#[test]
fn sluice_check_warns_about_api_sluice_does_not_have() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        "[[listener]]\nname = \"web\"\naddress = \"127.0.0.1:0\"\n\
         [[route]]\nname = \"page\"\n[route.lua]\n\
         content = '''\nlocal res = ngx.location.capture(\"/sub\")\nngx.say(ngx.var.uri)\n'''\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning:")
            && err.contains("route `page` [route.lua] content calls ngx.location"),
        "{err}"
    );
    assert!(!err.contains("ngx.say"), "{err}");
}

/// A call held inside one C function that no budget interrupts (a Lua pattern backtracking
/// over a long subject, with the instruction budget off: `max_instructions = 0`) holds its
/// worker thread for good, as it holds an NGINX worker process. Every other request, scripted or not, is still answered on the other threads
/// (before `liveness.rs`, no thread took the event loop's driver after the stuck one and the
/// whole gateway stopped answering), and SIGTERM still ends the process. A process of its
/// own: the stuck thread stays with it.
#[test]
fn a_call_stuck_in_a_c_function_costs_its_worker_thread_only() {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("one CPU: the gateway has one worker thread, which the stuck call takes");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let origin = rt.block_on(Origin::start("api"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[global]
shutdown_timeout = "1s"
[log]
access_log = "off"
[lua]
max_instructions = 0
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = [{{ address = "{}" }}]
[[route]]
name = "stuck"
path_prefix = "/stuck"
[route.lua]
content = 'local s = ("a"):rep(20000) s:find(".-.-.-.-b")'
[[route]]
name = "scripted"
path_prefix = "/scripted/"
strip_prefix = "/scripted"
upstream = "api"
[route.lua]
access = 'ngx.req.set_header("X-Lua", "1")'
[[route]]
name = "plain"
path_prefix = "/plain/"
strip_prefix = "/plain"
upstream = "api"
"#,
            origin.addr
        ),
    )
    .unwrap();
    // No admin listener: its tasks woke the runtime from outside and hid the stall.
    let mut gw = crate::cli::start_from(
        crate::cli::sluice(),
        &config,
        &dir.path().join("sluice.pid"),
    );
    let web = gw.http;
    rt.block_on(async {
        let stuck = tokio::spawn(async move { crate::auth::get(web, "/stuck", &[]).await });
        // Long enough for the call to be held in the pattern, on its thread.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let within = std::time::Duration::from_secs(10);
        for i in 0..10 {
            let plain = crate::auth::get(web, "/plain/whoami", &[]);
            let plain = tokio::time::timeout(within, plain).await;
            let plain = plain.unwrap_or_else(|_| panic!("plain request {i} not answered"));
            assert_eq!(plain.status, 200);
            let scripted = crate::auth::get(web, "/scripted/headers", &[]);
            let scripted = tokio::time::timeout(within, scripted).await;
            let scripted = scripted.unwrap_or_else(|_| panic!("scripted request {i} not answered"));
            assert_eq!(
                crate::auth::upstream_header(&scripted, "x-lua").as_deref(),
                Some("1")
            );
        }
        assert!(!stuck.is_finished(), "the stuck call answered");
        stuck.abort();
    });
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    // Bounded: a process that does not end fails the test rather than hang it.
    let mut ended = None;
    for _ in 0..600 {
        ended = gw.child.try_wait().unwrap();
        if ended.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        ended.is_some(),
        "SIGTERM did not end a gateway with a stuck thread"
    );
}
