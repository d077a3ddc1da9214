//! Functions OpenResty scripts commonly call beyond the core of the API
//! (`ngx.quote_sql_str`, `ngx.crc32_*`, `ngx.req.raw_header`, `ngx.req.get_post_args`,
//! `ngx.resp.get_headers`, `require "ngx.re"`, `"ngx.resp"`, `"resty.core"`, `os.getenv`),
//! and what a script meets when it calls a part of lua-nginx-module's API that Sluice does
//! not have: an error that says so, at request time, and a warning from `sluice check`.

use crate::api::text::decode_args;
use crate::current::with_view;
use mlua::{Lua, Table};

/// lua-nginx-module 0.10.23's API that Sluice does not have, by table (`""` is `ngx`
/// itself): calling one raises "… is not supported by Sluice", and `sluice check` warns
/// about a script that names one. docs/lua.md says why each is left out.
pub(crate) const UNSUPPORTED: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "location",
            "exec",
            "socket",
            "thread",
            "on_abort",
            "run_worker_thread",
        ],
    ),
    (
        "req",
        &[
            "socket",
            "init_body",
            "append_body",
            "finish_body",
            "get_body_file",
            "set_body_data",
            "set_body_file",
            "is_internal",
        ],
    ),
    ("timer", &["every", "running_count", "pending_count"]),
    ("worker", &["exiting", "pids"]),
];

/// Modules of lua-resty-core that Sluice does not have (`require` raises as above).
const UNSUPPORTED_MODULES: &[&str] = &[
    "ngx.semaphore",
    "ngx.balancer",
    "ngx.ssl",
    "ngx.ssl.session",
    "ngx.ocsp",
    "ngx.pipe",
    "ngx.process",
    "ngx.errlog",
    "ngx.upstream",
];

/// The names in `source` of API functions Sluice does not have (`ngx.location.capture`,
/// `ngx.req.socket`, `require "ngx.semaphore"`): a scan of the text for the names, so a
/// name in a comment or a string counts too, which is why `sluice check` only warns.
pub(crate) fn unsupported_in(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (table, names) in UNSUPPORTED {
        for name in *names {
            let full = if table.is_empty() {
                format!("ngx.{name}")
            } else {
                format!("ngx.{table}.{name}")
            };
            let named = source.match_indices(&full).any(|(at, _)| {
                let before = source[..at].chars().next_back();
                let after = source[at + full.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if named {
                found.push(full);
            }
        }
    }
    for module in UNSUPPORTED_MODULES {
        if [format!("\"{module}\""), format!("'{module}'")]
            .iter()
            .any(|quoted| source.contains(quoted.as_str()))
        {
            found.push(format!("require \"{module}\""));
        }
    }
    found
}

/// `ngx.quote_sql_str`: MySQL's quoting, as lua-nginx-module's `ngx_http_lua_escape_sql_str`.
fn quote_sql(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    out.push(b'\'');
    for &b in s {
        match b {
            0 => out.extend_from_slice(b"\\0"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x1a => out.extend_from_slice(b"\\Z"),
            b'\\' | b'\'' | b'"' => out.extend_from_slice(&[b'\\', b]),
            b => out.push(b),
        }
    }
    out.push(b'\'');
    out
}

/// `ngx.req.raw_header(no_request_line)`: the request's head as text. Rebuilt from the
/// head the gateway parsed: names in lower case and in the gateway's order, where NGINX
/// returns the client's own bytes.
fn raw_header(v: &crate::view::View, no_request_line: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if !no_request_line {
        let target = v.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let version = match v.version {
            http::Version::HTTP_10 => "HTTP/1.0",
            http::Version::HTTP_2 => "HTTP/2.0",
            http::Version::HTTP_3 => "HTTP/3.0",
            _ => "HTTP/1.1",
        };
        out.extend_from_slice(format!("{} {target} {version}\r\n", v.method).as_bytes());
    }
    for (name, value) in &v.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The Lua half: the stubs of [`UNSUPPORTED`], `require "ngx.re"` (lua-resty-core's
/// `split`, over `ngx.re.match`), `"ngx.resp"` (`add_header`), `"resty.core"` and
/// `os.getenv`. Given `UNSUPPORTED` and the unsupported modules.
const LUA: &str = r#"
local unsupported, modules = ...
local ngx, error, setmetatable, rawset = ngx, error, setmetatable, rawset
local function stub(name)
    return function()
        error(name .. " is not supported by Sluice (docs/lua.md lists the API it has)", 2)
    end
end
local function stub_table(name)
    return setmetatable({}, { __index = function(_, k) return stub(name .. "." .. k) end })
end
local TABLES = { location = true, socket = true, thread = true }
for table_name, names in pairs(unsupported) do
    local t = table_name == "" and ngx or ngx[table_name]
    for _, name in ipairs(names) do
        local full = table_name == "" and ("ngx." .. name) or ("ngx." .. table_name .. "." .. name)
        if table_name == "" and TABLES[name] then
            rawset(t, name, stub_table(full))
        else
            rawset(t, name, stub(full))
        end
    end
end
for _, module in ipairs(modules) do
    package.preload[module] = function()
        error(module .. " is not supported by Sluice (docs/lua.md lists the API it has)", 2)
    end
end

-- lua-resty-core's ngx.re.split (BSD), its matching done by ngx.re.match with a ctx.
local match, sub, max = ngx.re.match, string.sub, math.max
local function split_helper(subj, regex, opts, ctx)
    local at = { pos = max(ctx.pos, 0) + 1 }
    local m, err = match(subj, regex, opts, at)
    if err then return nil, nil, nil, err end
    if not m then return nil end
    local to = at.pos - 1
    local from = to - #m[0]
    if from == to then ctx.pos = to + 1 else ctx.pos = to end
    if m[1] then return from + 1, to + 1, m[1] end
    return from + 1, to + 1
end
local function split(subj, regex, opts, ctx, limit, res)
    subj = tostring(subj)
    ctx = ctx or {}
    ctx.pos = ctx.pos or 1
    limit = limit or 0
    if res == nil then res = {} elseif type(res) ~= "table" then error("res is not a table", 2) end
    local len = #subj
    if ctx.pos > len then res[1] = nil return res end
    local sub_idx, res_idx, last_empty = ctx.pos, 0, nil
    ctx.pos = sub_idx - 1
    local count = 1
    while limit <= 0 or count < limit do
        local from, to, capture, err = split_helper(subj, regex, opts, ctx)
        if err then return nil, err end
        if not from then break end
        if last_empty then sub_idx = last_empty end
        if from == to then last_empty = from end
        if from > sub_idx or not last_empty then
            count = count + 1
            res_idx = res_idx + 1
            res[res_idx] = sub(subj, sub_idx, from - 1)
            if capture then res_idx = res_idx + 1 res[res_idx] = capture end
            sub_idx = to
            if sub_idx > len then break end
        end
    end
    if limit <= 0 and sub_idx > len then
        for i = res_idx, 1, -1 do
            if res[i] ~= "" then res_idx = i break end
            res[i] = nil
        end
    else
        res_idx = res_idx + 1
        res[res_idx] = sub(subj, sub_idx)
    end
    res[res_idx + 1] = nil
    return res
end
local ngx_re = { split = split, opt = function() end,
                 version = "0.1.25" }
package.preload["ngx.re"] = function() return ngx_re end

local ngx_resp = { version = "0.1.25" }
function ngx_resp.add_header(key, value)
    local cur = ngx.header[key]
    if cur == nil then ngx.header[key] = value return end
    if type(cur) ~= "table" then cur = { cur } end
    if type(value) == "table" then
        for _, v in ipairs(value) do cur[#cur + 1] = v end
    else
        cur[#cur + 1] = value
    end
    ngx.header[key] = cur
end
package.preload["ngx.resp"] = function() return ngx_resp end

package.loaded["ngx"] = ngx

-- What lua-resty-core gives is built in: requiring it is a no-op, as it is in OpenResty.
local resty_core = { version = "0.1.25" }
package.preload["resty.core"] = function() return resty_core end
package.preload["resty.core.base"] = function() return resty_core end

-- NGINX's workers see no environment unless `env NAME;` lists it: nothing here.
os.getenv = function(_) return nil end
"#;

/// Installs this module's functions in `ngx` (after `ngx.req`, `ngx.re` and `ngx.header`).
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    ngx.set(
        "quote_sql_str",
        crate::guard::function(lua, "ngx.quote_sql_str", |lua, s: crate::values::Text| {
            lua.create_string(quote_sql(&s.0))
        })?,
    )?;
    for name in ["crc32_short", "crc32_long"] {
        ngx.set(
            name,
            crate::guard::function(lua, "ngx.crc32", |_, s: crate::values::Text| {
                Ok(crc32fast::hash(&s.0))
            })?,
        )?;
    }
    let req: Table = ngx.get("req")?;
    req.set(
        "raw_header",
        crate::guard::function(lua, "ngx.req.raw_header", |lua, no_line: Option<bool>| {
            let text = with_view(|v| Ok(raw_header(v, no_line.unwrap_or(false))))?;
            lua.create_string(text)
        })?,
    )?;
    req.set(
        "get_post_args",
        crate::guard::function(lua, "ngx.req.get_post_args", |lua, max: Option<usize>| {
            let (body, bodiless) = with_view(|v| {
                let length = v.headers.get(http::header::CONTENT_LENGTH);
                let bodiless = !v.headers.contains_key(http::header::TRANSFER_ENCODING)
                    && length.is_none_or(|l| l.as_bytes() == b"0");
                Ok((v.body.clone(), bodiless))
            })?;
            // A request without a body has no arguments (nothing to read).
            let body = if bodiless { Some(bytes::Bytes::new()) } else { body };
            let Some(body) = body else {
                return Err(mlua::Error::runtime(
                    "no request body found; maybe you should turn on lua_need_request_body? (in Sluice: request_buffering = true on the route)",
                ));
            };
            let (args, truncated) = decode_args(lua, &body, max.unwrap_or(100))?;
            Ok((args, truncated.then_some("truncated")))
        })?,
    )?;
    install_resp(lua, ngx)?;
    let lists = lua.create_table()?;
    for (table, names) in UNSUPPORTED {
        lists.set(*table, lua.create_sequence_from(names.iter().copied())?)?;
    }
    let modules = lua.create_sequence_from(UNSUPPORTED_MODULES.iter().copied())?;
    lua.load(LUA)
        .set_name("=sluice")
        .call::<()>((lists, modules))
}

/// `ngx.resp.get_headers(max, raw)`: the response's headers as the phase has them (those
/// set so far in `rewrite`/`access`, the upstream's in `header_filter`), as
/// `ngx.req.get_headers` gives the request's.
fn install_resp(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let resp = lua.create_table()?;
    resp.set(
        "get_headers",
        crate::guard::function(
            lua,
            "ngx.resp.get_headers",
            |lua, (max, raw): (Option<usize>, Option<bool>)| {
                let (headers, truncated) = crate::api::req::headers_table(
                    lua,
                    |v| &v.response_headers,
                    max.unwrap_or(100),
                    raw.unwrap_or(false),
                )?;
                Ok((headers, truncated.then_some("truncated")))
            },
        )?,
    )?;
    ngx.set("resp", resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_strings_are_quoted_as_lua_nginx_module_does() {
        assert_eq!(
            quote_sql(b"it's \"x\"\n\0\x1a\\\r\t\x08"),
            b"'it\\'s \\\"x\\\"\\n\\0\\Z\\\\\\r\\t\\b'".to_vec()
        );
    }

    #[test]
    fn unsupported_names_are_found_as_names_only() {
        let found = unsupported_in(
            "local r = ngx.location.capture('/x')\nngx.exec('/y')\nlocal s = require \"ngx.semaphore\"\nngx.execute_later()\nmy.ngx.exec()",
        );
        assert_eq!(
            found,
            ["ngx.location", "ngx.exec", "require \"ngx.semaphore\""]
        );
        assert!(unsupported_in("ngx.say(ngx.var.uri)").is_empty());
    }
}
