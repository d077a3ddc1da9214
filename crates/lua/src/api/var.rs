//! `ngx.var.NAME`: NGINX's variables a script reads, computed from the view at each read
//! (nothing is computed for a variable no script asks for).

use crate::api::spellings::header_name;
use crate::api::text::unescape;
use crate::cfunc::{delegate, push_bytes, str_at};
use crate::current::with_view;
use crate::view::{View, disabled};
use http::HeaderMap;
use http::header::HeaderName;
use mlua::ffi;
use mlua::{Lua, Table, Value};
use std::borrow::Cow;
use std::ffi::{c_int, c_void};

/// `ngx.var`'s value for `name`, or `None` (nil) for a variable Sluice does not have:
/// borrowed from the view where it holds the bytes (a header, the query), so that a read
/// copies once, into the Lua string.
pub(crate) fn get<'a>(view: &'a View, name: &str) -> Option<Cow<'a, [u8]>> {
    let uri = &view.uri;
    let query = uri.query();
    let f = &view.facts;
    let text = |s: &'a str| Some(Cow::Borrowed(s.as_bytes()));
    let owned = |s: String| Some(Cow::Owned(s.into_bytes()));
    match name {
        "uri" | "document_uri" => Some(Cow::Owned(normalized_path(uri.path().as_bytes()))),
        "request_uri" => match &f.request_uri {
            Some(sent) => text(sent),
            None => text(uri.path_and_query().map_or("/", |p| p.as_str())),
        },
        "args" | "query_string" => query.and_then(text),
        "is_args" => text(if query.is_some() { "?" } else { "" }),
        "host" => host(view),
        "http_host" => header(&view.headers, &http::header::HOST),
        "remote_addr" => owned(f.client.ip().to_string()),
        "remote_port" => owned(f.client.port().to_string()),
        "binary_remote_addr" => Some(Cow::Owned(match f.client.ip() {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        })),
        "server_addr" => owned(f.local.ip().to_string()),
        "server_port" => owned(f.local.port().to_string()),
        "scheme" => text(f.scheme),
        "https" => text(if f.scheme == "https" { "on" } else { "" }),
        "request_method" => text(view.method.as_str()),
        "server_protocol" => text(protocol(view.version)),
        "request_id" => f.request_id.as_deref().and_then(text),
        "remote_user" => view.subject.as_deref().and_then(text),
        "content_type" => header(&view.headers, &http::header::CONTENT_TYPE),
        "content_length" => header(&view.headers, &http::header::CONTENT_LENGTH),
        // The body where the route buffers it (`request_buffering`), as NGINX's
        // `$request_body` is the body read in memory.
        "request_body" => view.body.as_deref().map(Cow::Borrowed),
        "status" if view.status > 0 => owned(view.status.to_string()),
        "bytes_sent" => owned(view.bytes_sent.to_string()),
        "request_time" => owned(format!("{:.3}", f.arrived.elapsed().as_secs_f64())),
        "msec" => owned(format!("{:.3}", crate::api::text::now())),
        "time_iso8601" => owned(format!(
            "{}+00:00",
            crate::api::text::utc(std::time::SystemTime::now(), "T")
        )),
        "hostname" => owned(hostname()),
        "pid" => owned(std::process::id().to_string()),
        _ => prefixed(view, name),
    }
}

/// [`get`] for a name as a Lua string's bytes, or `None` where they are not UTF-8 (the slow
/// path says why). `http_*`, what scripts read most, goes to its header without the
/// table of names.
fn get_spelled<'a>(view: &'a View, name: &[u8]) -> Option<Option<Cow<'a, [u8]>>> {
    if let Some(h) = name.strip_prefix(b"http_") {
        return Some(header_name(h).and_then(|n| header(&view.headers, &n)));
    }
    std::str::from_utf8(name).ok().map(|name| get(view, name))
}

/// `$host`: the request's host (the target's authority, else `Host`) without its port, in
/// lower case; computed when read, from the head as it stands (`ngx.req.set_header("Host")`
/// changes it, as in lua-nginx-module).
fn host(view: &View) -> Option<Cow<'_, [u8]>> {
    let given = view
        .uri
        .authority()
        .map(http::uri::Authority::as_str)
        .or_else(|| view.headers.get(http::header::HOST)?.to_str().ok())
        .unwrap_or_default();
    let name = host_name(given);
    Some(if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase().into_bytes())
    } else {
        Cow::Borrowed(name.as_bytes())
    })
}

/// `http_*`, `cookie_*`, `arg_*` and `sent_http_*`.
fn prefixed<'a>(view: &'a View, name: &str) -> Option<Cow<'a, [u8]>> {
    // The header name through the spellings kept per thread: `name` is a Lua string's bytes
    // on the fast path, the same ones request after request.
    if let Some(h) = name.strip_prefix("http_") {
        return header(&view.headers, &header_name(h.as_bytes())?);
    }
    if let Some(h) = name.strip_prefix("sent_http_") {
        return header(&view.response_headers, &header_name(h.as_bytes())?);
    }
    if let Some(c) = name.strip_prefix("cookie_") {
        return cookie(&view.headers, c.as_bytes()).map(Cow::Borrowed);
    }
    if let Some(a) = name.strip_prefix("arg_") {
        return arg(view.uri.query()?.as_bytes(), a.as_bytes()).map(Cow::Borrowed);
    }
    None
}

/// A request header's value as NGINX 1.22's `$http_NAME`: the first, except `Cookie`
/// (joined by `; `) and `X-Forwarded-For` (joined by `, `). `name` is in lower case.
fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<Cow<'a, [u8]>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?.as_bytes();
    let sep: &[u8] = match name.as_str() {
        "cookie" => b"; ",
        "x-forwarded-for" => b", ",
        _ => return Some(Cow::Borrowed(first)),
    };
    let mut out = first.to_vec();
    let mut joined = false;
    for v in values {
        out.extend_from_slice(sep);
        out.extend_from_slice(v.as_bytes());
        joined = true;
    }
    Some(if joined {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(first)
    })
}

/// `$cookie_NAME`: the first cookie of that name (case-sensitive, as NGINX).
fn cookie<'a>(headers: &'a HeaderMap, name: &[u8]) -> Option<&'a [u8]> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let at = pair.iter().position(|&b| b == b'=')?;
            (pair[..at].trim_ascii() == name).then(|| pair[at + 1..].trim_ascii())
        })
}

/// `$arg_NAME`: the first argument of that name (compared without case, as NGINX), as sent.
fn arg<'a>(query: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    query.split(|&b| b == b'&').find_map(|pair| {
        // NGINX's `ngx_http_arg` finds `name=` only: `?flag` has no `$arg_flag`.
        let at = pair.iter().position(|&b| b == b'=')?;
        let (k, v) = (&pair[..at], &pair[at + 1..]);
        k.eq_ignore_ascii_case(name).then_some(v)
    })
}

/// The host without a port, lower case (`$host`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

fn protocol(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        http::Version::HTTP_09 => "HTTP/0.9",
        _ => "HTTP/1.1",
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// `$uri`: the path decoded, `.` and `..` segments resolved and slashes merged, as NGINX
/// normalizes it (`merge_slashes on`).
pub(crate) fn normalized_path(path: &[u8]) -> Vec<u8> {
    let decoded = unescape(path, false);
    let mut segments: Vec<&[u8]> = Vec::new();
    for seg in decoded.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = Vec::with_capacity(decoded.len());
    for s in &segments {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    let trailing = decoded.ends_with(b"/") || decoded.ends_with(b"/.") || decoded.ends_with(b"/..");
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    out
}

/// Installs `ngx.var`: reads of the variables above, and writes of `args` where the request
/// may still change.
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let var = lua.create_table()?;
    let meta = lua.create_table()?;
    let slow = crate::guard::function(
        lua,
        "ngx.var.__index",
        |lua, (_, name): (Table, mlua::LuaString)| {
            let name = name.to_str()?;
            with_view(|v| match get(v, &name) {
                Some(bytes) => Ok(Value::String(lua.create_string(&*bytes)?)),
                None => Ok(Value::Nil),
            })
        },
    )?;
    let index = crate::cfunc::closure(lua, var_index, slow, None)?;
    let index = crate::ffi_lib::front(lua, INDEX_WRAPPER, var_get as *mut c_void, index, None)?;
    meta.set("__index", index)?;
    meta.set(
        "__newindex",
        crate::guard::function(
            lua,
            "ngx.var.__newindex",
            |_, (_, name, value): (Table, mlua::LuaString, Value)| {
                let name = name.to_str()?.to_owned();
                with_view(|v| set(v, &name, &value))
            },
        )?,
    )?;
    var.set_metatable(Some(meta))?;
    ngx.set("var", var)
}

/// `ngx.var`'s `__index(t, name)`.
#[expect(unsafe_code, reason = "a raw lua_CFunction (crate::cfunc)")]
unsafe extern "C-unwind" fn var_index(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: called by Lua as a C closure made by `cfunc::closure` (upvalue 1: the slow
    // `__index`); the name's bytes are read while it is on the stack. A borrowed value
    // leaves `try_with` as a pointer and a length into the view, which lives until the call
    // ends (`current::lend`) and which nothing changes between here and the push.
    unsafe {
        // Pushed outside `try_with`, so that Lua's error on a failed push does not unwind
        // through the slot's guard.
        // None: no view, or not UTF-8 (the slow path); Some(None): nil.
        let found = str_at(l, 2).and_then(|name| {
            crate::guard::shielded(l, "ngx.var", || {
                crate::current::try_with(|v| {
                    get_spelled(v, name).map(|value| {
                        value.map(|value| match value {
                            Cow::Borrowed(b) => (b.as_ptr(), b.len(), None),
                            Cow::Owned(o) => (std::ptr::null(), 0, Some(o)),
                        })
                    })
                })
                .flatten()
            })
        });
        match found {
            Some(Some((_, _, Some(owned)))) => push_bytes(l, &owned),
            Some(Some((at, len, None))) => push_bytes(l, std::slice::from_raw_parts(at, len)),
            Some(None) => ffi::lua_pushnil(l),
            None => return delegate(l),
        }
        1
    }
}

/// `ngx.var`'s `__index` in a state whose code is compiled (`crate::ffi_lib`): [`var_get`],
/// then the C function for every read it did not make. The value is copied into a Lua string
/// before anything else runs (scripts have no finalizers: `newproxy` is removed), while the
/// bytes it points at are still as [`var_get`] left them.
const INDEX_WRAPPER: &str = r#"
local ffi, entry, slow = ...
local c_get = ffi.cast("int (*)(const char *, size_t, const char **, size_t *)", entry)
local at, len = ffi.new("const char *[1]"), ffi.new("size_t[1]")
local type, to_string = type, ffi.string
return function(t, name)
    if type(name) == "string" then
        local found = c_get(name, #name, at, len)
        if found == 1 then return to_string(at[0], len[0]) end
        if found == 0 then return nil end
    end
    return slow(t, name)
end
"#;

thread_local! {
    /// A computed value (not bytes the view holds) that [`var_get`] answered, until the next:
    /// [`INDEX_WRAPPER`] copies it first.
    static COMPUTED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Calls made through [`var_get`] that answered, for the tests to tell which path ran.
#[cfg(test)]
pub(crate) static FFI_READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `ngx.var[name]` as compiled code reads it: 1 with the value's bytes at `*at` (`*len`
/// of them, valid until the view changes or the next call), 0 for nil, -1 where it made no
/// read (no request, a panic): the C function then reads or raises.
///
/// # Safety
/// `name` points at `name_len` readable bytes (a Lua string the caller holds); `at` and `len`
/// are writable.
#[expect(
    unsafe_code,
    reason = "an FFI entry point that compiled Lua code calls"
)]
unsafe extern "C" fn var_get(
    name: *const u8,
    name_len: usize,
    at: *mut *const u8,
    len: *mut usize,
) -> c_int {
    // SAFETY: as the function's contract says.
    let name = unsafe { std::slice::from_raw_parts(name, name_len) };
    // No unwinding may cross into compiled Lua code: a panic is a read not made.
    let found = std::panic::catch_unwind(|| {
        crate::current::try_with(|v| {
            get_spelled(v, name).map(|value| {
                value.map(|value| match value {
                    Cow::Borrowed(b) => (b.as_ptr(), b.len()),
                    Cow::Owned(o) => COMPUTED.with(|c| {
                        let mut c = c.borrow_mut();
                        *c = o;
                        (c.as_ptr(), c.len())
                    }),
                })
            })
        })
        .flatten()
    });
    match found.ok().flatten() {
        Some(Some((p, n))) => {
            #[cfg(test)]
            FFI_READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // SAFETY: as the function's contract says; the bytes are the view's (lent for the
            // whole call into Lua, unchanged until the script changes it) or `COMPUTED`'s.
            unsafe {
                *at = p;
                *len = n;
            }
            1
        }
        Some(None) => 0,
        None => -1,
    }
}

/// `ngx.var.NAME = value`: `args` (the query sent upstream) is the writable one.
fn set(view: &mut View, name: &str, value: &Value) -> mlua::Result<()> {
    if name != "args" {
        return Err(mlua::Error::runtime(format!(
            "variable \"{name}\" not found for writing; Sluice lets scripts write ngx.var.args only (ngx.req.set_header, ngx.req.set_uri for the rest)"
        )));
    }
    if !view.request_writable() {
        return Err(disabled(view.phase));
    }
    let query = match value {
        Value::Nil => None,
        Value::String(s) => Some(s.to_str()?.to_owned()),
        Value::Number(_) | Value::Integer(_) => Some(crate::values::number_text(value)),
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad value for ngx.var.args: {}",
                other.type_name()
            )));
        }
    };
    crate::api::req::set_query(view, query.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_is_normalized_as_nginx_does() {
        assert_eq!(normalized_path(b"/a//b/./c/../d%20e"), b"/a/b/d e");
        assert_eq!(normalized_path(b"/a/b/"), b"/a/b/");
        assert_eq!(normalized_path(b"/.."), b"/");
        assert_eq!(normalized_path(b"/a+b"), b"/a+b");
    }

    #[test]
    fn cookies_args_and_hosts() {
        let mut h = HeaderMap::new();
        h.append("cookie", "a=1; sid=xyz".parse().unwrap());
        h.append("cookie", "b=2".parse().unwrap());
        assert_eq!(cookie(&h, b"sid").unwrap(), b"xyz");
        assert_eq!(cookie(&h, b"b").unwrap(), b"2");
        assert!(cookie(&h, b"SID").is_none());
        assert_eq!(
            &*header(&h, &http::header::COOKIE).unwrap(),
            b"a=1; sid=xyz; b=2"
        );
        assert_eq!(arg(b"x=1&Token=abc%20d&y", b"token").unwrap(), b"abc%20d");
        // NGINX finds `name=` only: `?y` has no `$arg_y`.
        assert!(arg(b"x=1&y", b"y").is_none());
        assert_eq!(arg(b"x=1&y=", b"y").unwrap(), b"");
        assert_eq!(host_name("Example.com:8443"), "Example.com");
        assert_eq!(host_name("[::1]:80"), "[::1]");
    }
}
