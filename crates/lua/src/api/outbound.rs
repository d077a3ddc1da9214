//! The API that waits: `resty.http`'s `request_uri` and `ngx.sleep`. A script's call runs
//! on a coroutine (a runner, `state.rs`); waiting, it leaves a [`Pending`] in its view and yields,
//! and the gateway awaits it on the event loop (`Fetcher`: the gateway's own upstream
//! pools) while other requests run on the same state. The coroutine resumes with the result
//! in Lua's shape.
//!
//! Only `rewrite` and `access` may wait, as in lua-nginx-module (cosockets are disabled in
//! the filters, `log` and `init`); a timer's callback may not either (docs/lua.md says so).

use crate::current::with_view;
use crate::wait::{Outbound, Pending, Resumed};
use bytes::Bytes;
use http::{HeaderMap, Method, Uri};
use mlua::{Lua, MultiValue, Table, Value};
use std::time::Duration;

/// lua-resty-http's default: lua-nginx-module's 60 s socket timeouts.
const DEFAULT_TIMEOUT_MS: f64 = 60_000.0;

/// `ngx._outbound(uri, params, timeout_ms)`: the request from `request_uri`'s arguments
/// left in the view for the runner (`true`), or `nil, err` (lua-resty-http's errors for a
/// bad URI).
fn outbound(
    _: &Lua,
    (uri, params, timeout_ms): (String, Option<Table>, Option<f64>),
) -> mlua::Result<(bool, Option<String>)> {
    match build(&uri, params.as_ref(), timeout_ms) {
        Ok(call) => with_view(|v| {
            v.pending = Some(Pending::Http(Box::new(call)));
            Ok((true, None))
        }),
        Err(e) => Ok((false, Some(e))),
    }
}

fn build(uri: &str, params: Option<&Table>, timeout_ms: Option<f64>) -> Result<Outbound, String> {
    let parsed: Uri = uri.parse().map_err(|_| format!("bad uri: {uri}"))?;
    match parsed.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("bad uri: {uri} (http:// or https:// and a host)")),
    }
    let Some(authority) = parsed.authority().cloned() else {
        return Err(format!("bad uri: {uri}"));
    };
    let get = |k: &str| -> Value { params.and_then(|p| p.get(k).ok()).unwrap_or(Value::Nil) };
    let method = match get("method") {
        Value::Nil => Method::GET,
        v => Method::from_bytes(&crate::values::scalar_bytes(&v).map_err(|e| e.to_string())?)
            .map_err(|_| "bad method".to_owned())?,
    };
    let mut pq = parsed
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    if pq.is_empty() {
        pq.push('/');
    }
    match get("query") {
        Value::Nil => {}
        Value::String(s) => append_query(&mut pq, &s.to_string_lossy()),
        Value::Table(t) => {
            let q = crate::api::text::encode_args(&t).map_err(|e| e.to_string())?;
            append_query(&mut pq, &String::from_utf8_lossy(&q));
        }
        other => return Err(format!("bad query: {}", other.type_name())),
    }
    let full = Uri::builder()
        .scheme(parsed.scheme_str().unwrap_or("http"))
        .authority(authority.clone())
        .path_and_query(pq)
        .build()
        .map_err(|e| format!("bad uri: {e}"))?;
    let mut headers = HeaderMap::new();
    if let Value::Table(t) = get("headers") {
        for pair in t.pairs::<String, Value>() {
            let (name, value) = pair.map_err(|e| e.to_string())?;
            crate::api::req::set_header(
                &mut headers,
                &name,
                crate::api::req::Underscores::Kept,
                &value,
            )
            .map_err(|e| e.to_string())?;
        }
    }
    if !headers.contains_key(http::header::HOST) {
        let host = http::HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?;
        headers
            .try_insert(http::header::HOST, host)
            .map_err(|_| crate::api::req::too_many_headers().to_string())?;
    }
    let body = match get("body") {
        Value::Nil => Bytes::new(),
        v => Bytes::from(crate::values::scalar_bytes(&v).map_err(|e| e.to_string())?),
    };
    let ms = timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    let timeout = Duration::from_secs_f64((ms / 1000.0).clamp(0.001, 3600.0));
    Ok(Outbound {
        method,
        uri: full,
        headers,
        body,
        timeout,
        // The runner sets it: the state's bound.
        max_body: 0,
    })
}

fn append_query(pq: &mut String, q: &str) {
    let q = q.trim_start_matches('?');
    if q.is_empty() {
        return;
    }
    pq.push(if pq.contains('?') { '&' } else { '?' });
    pq.push_str(q);
}

/// `ngx._sleep(seconds)`: the sleep left in the view for the runner.
fn sleep(_: &Lua, seconds: f64) -> mlua::Result<()> {
    if !(0.0..=86_400.0).contains(&seconds) {
        return Err(mlua::Error::runtime(
            "bad argument #1 to 'sleep': bad delay",
        ));
    }
    with_view(|v| {
        v.pending = Some(Pending::Sleep(Duration::from_secs_f64(seconds)));
        Ok(())
    })
}

/// The values the coroutine resumes with: `res` (lua-resty-http's response table: `status`,
/// `reason`, `headers`, `body`, `has_body`) or `nil, err`; nothing after a sleep.
pub(crate) fn resumed(lua: &Lua, r: Resumed) -> mlua::Result<MultiValue> {
    let fetched = match r {
        Resumed::Slept => return Ok(MultiValue::new()),
        Resumed::Http(Err(e)) => {
            return Ok(MultiValue::from_iter([
                Value::Nil,
                Value::String(lua.create_string(e)?),
            ]));
        }
        Resumed::Http(Ok(f)) => f,
    };
    let res = lua.create_table()?;
    res.set("status", fetched.status.as_u16())?;
    res.set("reason", fetched.status.canonical_reason().unwrap_or(""))?;
    let headers = lua.create_table()?;
    for name in fetched.headers.keys() {
        let all = fetched.headers.get_all(name);
        let v = if all.iter().count() == 1 {
            Value::String(lua.create_string(all.iter().next().map_or(&b""[..], |v| v.as_bytes()))?)
        } else {
            let list = lua.create_table()?;
            for v in all {
                list.push(lua.create_string(v.as_bytes())?)?;
            }
            Value::Table(list)
        };
        headers.set(name.as_str(), v)?;
    }
    res.set("headers", headers)?;
    res.set("has_body", !fetched.body.is_empty())?;
    res.set("body", lua.create_string(&fetched.body)?)?;
    Ok(MultiValue::from_iter([Value::Table(res)]))
}

/// `resty.http` (the `request_uri` shape of lua-resty-http) and `ngx.sleep`, over the
/// runner's coroutine: `wait` yields a pending call to the runner where the script may wait
/// (the runner's own coroutine, in `rewrite` or `access`), else raises OpenResty's error.
pub(crate) const LUA: &str = r#"
local PENDING, runners = ...
local ngx, yield, running, error = ngx, coroutine.yield, coroutine.running, error
local make, make_sleep = ngx._outbound, ngx._sleep
rawset(ngx, "_outbound", nil)
rawset(ngx, "_sleep", nil)

local function may_wait(what)
    if runners[running() or false] then return end
    local phase = ngx.get_phase()
    if phase ~= "rewrite" and phase ~= "access" and phase ~= "content" then
        error("API disabled in the context of " .. phase .. (phase == "timer" and "" or "_by_lua*"), 3)
    end
    error(what .. " cannot wait inside a coroutine the script made itself (Sluice waits only in the script's own)", 3)
end

rawset(ngx, "sleep", function(seconds)
    may_wait("ngx.sleep")
    make_sleep(seconds)
    yield(PENDING)
end)

local headers_mt = {
    __index = function(t, k)
        if type(k) ~= "string" then return nil end
        return rawget(t, (k:lower():gsub("_", "-")))
    end,
}

local http = { _VERSION = "0.17.1-sluice" }
local mt = { __index = http }
function http.new() return setmetatable({ timeout = 60000 }, mt) end
function http:set_timeout(ms) self.timeout = ms end
function http:set_timeouts(connect, send, read)
    self.timeout = (connect or 0) + (send or 0) + (read or 0)
end
function http:set_keepalive() return 1 end
function http:close() return 1 end
function http:request_uri(uri, params)
    may_wait("resty.http")
    local ok, err = make(uri, params, self.timeout)
    if not ok then return nil, err end
    local res, ferr = yield(PENDING)
    if not res then return nil, ferr end
    setmetatable(res.headers, headers_mt)
    return res
end
package.preload["resty.http"] = function() return http end
"#;

/// Installs what [`LUA`] takes from Rust.
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    ngx.raw_set(
        "_outbound",
        crate::guard::function(lua, "ngx._outbound", outbound)?,
    )?;
    ngx.raw_set("_sleep", crate::guard::function(lua, "ngx._sleep", sleep)?)
}
