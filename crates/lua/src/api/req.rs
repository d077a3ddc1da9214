//! `ngx.req`: the request's method, URI, arguments, headers and body.

use crate::api::text::{
    ESCAPE_HEADER_NAME, ESCAPE_HEADER_VALUE, decode_args, encode_args, escape, kept,
};
use crate::cfunc::{delegate, text_at};
use crate::current::with_view;
use crate::view::{View, disabled};
use http::header::{HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Method, Uri};
use mlua::ffi;
use mlua::{Lua, LuaString, Table, Value};
use std::ffi::{c_int, c_void};

/// lua-nginx-module's method constants (`ngx.HTTP_GET`, …), as `ngx.req.set_method` takes.
pub(crate) const METHODS: [(&str, i64); 16] = [
    ("GET", 0x0002),
    ("HEAD", 0x0004),
    ("POST", 0x0008),
    ("PUT", 0x0010),
    ("DELETE", 0x0020),
    ("MKCOL", 0x0040),
    ("COPY", 0x0080),
    ("MOVE", 0x0100),
    ("OPTIONS", 0x0200),
    ("PROPFIND", 0x0400),
    ("PROPPATCH", 0x0800),
    ("LOCK", 0x1000),
    ("UNLOCK", 0x2000),
    ("PATCH", 0x4000),
    ("TRACE", 0x8000),
    ("CONNECT", 0x10000),
];

/// The view's URI with its path and query replaced.
fn with_path_and_query(view: &mut View, path: &str, query: Option<&str>) -> mlua::Result<()> {
    let pq = match query {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_owned(),
    };
    let pq =
        PathAndQuery::try_from(pq).map_err(|e| mlua::Error::runtime(format!("bad URI: {e}")))?;
    if view.facts.request_uri.is_none() {
        // `ngx.var.request_uri` stays the client's target, as NGINX's `$request_uri`.
        view.facts.request_uri = Some(
            view.uri
                .path_and_query()
                .map_or("/", PathAndQuery::as_str)
                .into(),
        );
    }
    let mut parts = std::mem::take(&mut view.uri).into_parts();
    parts.path_and_query = Some(pq);
    view.uri = Uri::from_parts(parts).map_err(|e| mlua::Error::runtime(format!("bad URI: {e}")))?;
    Ok(())
}

/// The query sent upstream (`ngx.var.args = …`, `ngx.req.set_uri_args`).
pub(crate) fn set_query(view: &mut View, query: Option<&str>) -> mlua::Result<()> {
    let path = view.uri.path().to_owned();
    // Bytes a query may not carry as they are (controls, space, `#`, 8-bit) are escaped.
    let query = query.map(|q| {
        String::from_utf8(escape(q.as_bytes(), |b| {
            (0x21..0x7f).contains(&b) && b != b'#'
        }))
        .unwrap_or_default()
    });
    with_path_and_query(view, &path, query.as_deref())
}

/// How a script's header name is spelled on the wire: as given (`ngx.req.set_header`,
/// `resty.http`), or with `_` as `-` (`ngx.header.content_type`, lua-nginx-module's
/// `lua_transform_underscores_in_response_headers`, on by default).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Underscores {
    Kept,
    AsDashes,
}

fn header_name(name: &str, underscores: Underscores) -> mlua::Result<HeaderName> {
    let name = match underscores {
        Underscores::Kept => name.to_owned(),
        Underscores::AsDashes => name.replace('_', "-"),
    };
    // What a name may not hold is percent-escaped, as lua-nginx-module escapes it.
    HeaderName::from_bytes(&escape(name.as_bytes(), |b| kept(ESCAPE_HEADER_NAME, b)))
        .map_err(|_| mlua::Error::runtime(format!("bad header name \"{name}\"")))
}

/// A header value from a script: a string or number; control characters but tab
/// percent-escaped (`a%0Ab`), as lua-nginx-module does: a script can never split a header
/// into two.
fn header_value(v: &Value) -> mlua::Result<HeaderValue> {
    let bytes = crate::values::scalar_bytes(v)?;
    HeaderValue::from_bytes(&escape(&bytes, |b| kept(ESCAPE_HEADER_VALUE, b)))
        .map_err(|_| mlua::Error::runtime("bad header value"))
}

/// Sets (or with nil or `""` removes, as lua-nginx-module does) `name` in `headers`; a
/// table sets several values.
pub(crate) fn set_header(
    headers: &mut http::HeaderMap,
    name: &str,
    underscores: Underscores,
    value: &Value,
) -> mlua::Result<()> {
    let name = header_name(name, underscores)?;
    headers.remove(&name);
    match value {
        Value::Nil => {}
        Value::String(s) if s.as_bytes().is_empty() => {}
        Value::Table(list) => {
            for v in list.sequence_values::<Value>() {
                headers
                    .try_append(name.clone(), header_value(&v?)?)
                    .map_err(|_| too_many_headers())?;
            }
        }
        v => {
            headers
                .try_insert(name, header_value(v)?)
                .map_err(|_| too_many_headers())?;
        }
    }
    Ok(())
}

/// The error for a header past what a header map holds (http's `HeaderMap`, 32,768
/// entries): NGINX has no such bound, but a request with that many headers is an attack or
/// a bug, and the map would panic.
pub(crate) fn too_many_headers() -> mlua::Error {
    mlua::Error::runtime("too many headers (at most 32768)")
}

/// `ngx.req.set_header(name, value)` with a string value, where the request may change.
#[expect(unsafe_code, reason = "a raw lua_CFunction (crate::cfunc)")]
unsafe extern "C-unwind" fn set_header_raw(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `var_index` (upvalue 1: the slow `set_header`); name and value are read
    // while they are on the stack.
    unsafe {
        let done = match (text_at(l, 1), text_at(l, 2)) {
            (Some(name), Some(value)) => {
                crate::guard::shielded(l, "ngx.req.set_header", || set_fast(name, value))
            }
            _ => false,
        };
        if done { 0 } else { delegate(l) }
    }
}

/// `ngx.req.set_header` in a state whose code is compiled (`crate::ffi_lib`):
/// [`set_header_ffi`] for two strings, then the C function for every call it did not make.
const SET_HEADER_WRAPPER: &str = r#"
local ffi, entry, slow = ...
local c_set = ffi.cast("int (*)(const char *, size_t, const char *, size_t)", entry)
local type = type
return function(name, value, ...)
    if type(name) == "string" and type(value) == "string" and c_set(name, #name, value, #value) == 1 then
        return
    end
    return slow(name, value, ...)
end
"#;

/// Calls made through [`set_header_ffi`] that set the header, for the tests.
#[cfg(test)]
pub(crate) static FFI_SETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `ngx.req.set_header(name, value)` as compiled code calls it: 1 where it set the header
/// ([`set_fast`]), 0 where it did not (a name or value the fast path leaves, no request, a
/// panic): the C function then sets it or raises.
///
/// # Safety
/// `name` and `value` point at `name_len` and `value_len` readable bytes (Lua strings the
/// caller holds).
#[expect(
    unsafe_code,
    reason = "an FFI entry point that compiled Lua code calls"
)]
unsafe extern "C" fn set_header_ffi(
    name: *const u8,
    name_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    // SAFETY: as the function's contract says.
    let (name, value) = unsafe {
        (
            std::slice::from_raw_parts(name, name_len),
            std::slice::from_raw_parts(value, value_len),
        )
    };
    // No unwinding may cross into compiled Lua code: a panic is a call not made.
    let done = std::panic::catch_unwind(|| set_fast(name, value)).unwrap_or(false);
    #[cfg(test)]
    if done {
        FFI_SETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    c_int::from(done)
}

/// Sets the header, if the call may and both are valid (else the slow path says why).
fn set_fast(name: &[u8], value: &[u8]) -> bool {
    // Names with `_` (kept as they are, unlike `ngx.var.http_*`'s) and empty values (a
    // removal) take the slow path.
    if name.contains(&b'_') || value.is_empty() {
        return false;
    }
    let (Some(name), Some(value)) = (
        crate::api::spellings::header_name(name),
        crate::api::spellings::header_value(value),
    ) else {
        return false;
    };
    crate::current::try_with(|v| {
        if !v.request_writable() {
            return false;
        }
        // Past the map's bound the slow path raises the error.
        v.headers.try_insert(name, value).is_ok()
    })
    .unwrap_or(false)
}

/// `ngx.req.get_headers()`'s table (and `ngx.resp.get_headers()`'s, of the headers `which`
/// picks from the view): lower-case names, a repeated header's values in a list, and
/// (unless `raw`) a metatable that finds `Foo_Bar` as `foo-bar`; and whether `max` cut it
/// short (`"truncated"`).
pub(crate) fn headers_table(
    lua: &Lua,
    which: fn(&View) -> &http::HeaderMap,
    max: usize,
    raw: bool,
) -> mlua::Result<(Table, bool)> {
    let max = if max == 0 { usize::MAX } else { max };
    let (pairs, total): (Vec<(String, Vec<u8>)>, usize) = with_view(|v| {
        let headers = which(v);
        Ok((
            headers
                .iter()
                .take(max)
                .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
                .collect(),
            headers.len(),
        ))
    })?;
    let t = lua.create_table_with_capacity(0, pairs.len())?;
    for (k, v) in pairs {
        let v = Value::String(lua.create_string(v)?);
        match t.raw_get::<Value>(k.as_str())? {
            Value::Nil => t.raw_set(k, v)?,
            Value::Table(list) => list.raw_push(v)?,
            first => t.raw_set(k, lua.create_sequence_from([first, v])?)?,
        }
    }
    if !raw {
        let meta: Table = lua.named_registry_value("sluice.headers_meta")?;
        t.set_metatable(Some(meta))?;
    }
    Ok((t, total > max))
}

/// Installs `ngx.req`.
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        crate::guard::function(
            lua,
            "ngx.req.get_headers().__index",
            |_, (t, k): (Table, LuaString)| {
                let normal = k.to_str()?.to_ascii_lowercase().replace('_', "-");
                t.raw_get::<Value>(normal)
            },
        )?,
    )?;
    lua.set_named_registry_value("sluice.headers_meta", meta)?;

    let req = lua.create_table()?;
    req.set(
        "get_headers",
        crate::guard::function(
            lua,
            "ngx.req.get_headers",
            |lua, (max, raw): (Option<usize>, Option<bool>)| {
                let (headers, truncated) = headers_table(
                    lua,
                    |v| &v.headers,
                    max.unwrap_or(100),
                    raw.unwrap_or(false),
                )?;
                Ok((headers, truncated.then_some("truncated")))
            },
        )?,
    )?;
    let slow = crate::guard::function(
        lua,
        "ngx.req.set_header",
        |_, (name, value): (String, Value)| {
            with_view(|v| {
                if !v.request_writable() {
                    return Err(disabled(v.phase));
                }
                set_header(&mut v.headers, &name, Underscores::Kept, &value)
            })
        },
    )?;
    let set = crate::cfunc::closure(lua, set_header_raw, slow, None)?;
    let set = crate::ffi_lib::front(
        lua,
        SET_HEADER_WRAPPER,
        set_header_ffi as *mut c_void,
        set,
        None,
    )?;
    req.set("set_header", set)?;
    req.set(
        "clear_header",
        crate::guard::function(lua, "ngx.req.clear_header", |_, name: String| {
            with_view(|v| {
                if !v.request_writable() {
                    return Err(disabled(v.phase));
                }
                set_header(&mut v.headers, &name, Underscores::Kept, &Value::Nil)
            })
        })?,
    )?;
    req.set(
        "get_method",
        crate::guard::function(lua, "ngx.req.get_method", |_, ()| {
            with_view(|v| Ok(v.method.as_str().to_owned()))
        })?,
    )?;
    req.set(
        "set_method",
        crate::guard::function(lua, "ngx.req.set_method", |_, code: i64| {
            let name = METHODS
                .iter()
                .find(|(_, c)| *c == code)
                .map(|(n, _)| *n)
                .ok_or_else(|| mlua::Error::runtime(format!("unsupported HTTP method: {code}")))?;
            with_view(|v| {
                if !v.request_writable() {
                    return Err(disabled(v.phase));
                }
                v.method = Method::from_bytes(name.as_bytes()).map_err(mlua::Error::external)?;
                Ok(())
            })
        })?,
    )?;
    install_uri(lua, &req)?;
    install_body(lua, &req)?;
    ngx.set("req", req)
}

/// `get_uri_args`, `set_uri_args`, `set_uri`, `http_version`, `start_time`.
fn install_uri(lua: &Lua, req: &Table) -> mlua::Result<()> {
    req.set(
        "get_uri_args",
        crate::guard::function(lua, "ngx.req.get_uri_args", |lua, max: Option<usize>| {
            let query = with_view(|v| Ok(v.uri.query().unwrap_or("").to_owned()))?;
            let (args, truncated) = decode_args(lua, query.as_bytes(), max.unwrap_or(100))?;
            Ok((args, truncated.then_some("truncated")))
        })?,
    )?;
    req.set(
        "set_uri_args",
        crate::guard::function(lua, "ngx.req.set_uri_args", |_, args: Value| {
            let query = match &args {
                Value::Table(t) => String::from_utf8(encode_args(t)?).unwrap_or_default(),
                Value::String(s) => s.to_str()?.to_owned(),
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "bad argument #1 to 'set_uri_args' (string or table expected, got {})",
                        other.type_name()
                    )));
                }
            };
            with_view(|v| {
                if !v.request_writable() {
                    return Err(disabled(v.phase));
                }
                set_query(v, Some(&query))
            })
        })?,
    )?;
    req.set(
        "set_uri",
        crate::guard::function(lua, "ngx.req.set_uri", |_, (uri, jump): (LuaString, Option<bool>)| {
            if jump.unwrap_or(false) {
                return Err(mlua::Error::runtime(
                    "ngx.req.set_uri(uri, true): Sluice does not route a request again; the route stays, the new URI goes upstream (call it with jump = false)",
                ));
            }
            let uri = uri.as_bytes();
            if uri.is_empty() {
                return Err(mlua::Error::runtime("attempt to use zero-length uri"));
            }
            // The URI is given unescaped (as `$uri`): what a path may not carry is escaped.
            let path = String::from_utf8(escape(&uri, |b| {
                (0x21..0x7f).contains(&b) && !matches!(b, b'?' | b'#' | b'%')
            }))
            .unwrap_or_default();
            with_view(|v| {
                if !v.request_writable() {
                    return Err(disabled(v.phase));
                }
                let query = v.uri.query().map(str::to_owned);
                with_path_and_query(v, &path, query.as_deref())
            })
        })?,
    )?;
    req.set(
        "http_version",
        crate::guard::function(lua, "ngx.req.http_version", |_, ()| {
            with_view(|v| {
                Ok(match v.version {
                    http::Version::HTTP_10 => 1.0,
                    http::Version::HTTP_2 => 2.0,
                    http::Version::HTTP_3 => 3.0,
                    http::Version::HTTP_09 => 0.9,
                    _ => 1.1,
                })
            })
        })?,
    )?;
    req.set(
        "start_time",
        crate::guard::function(lua, "ngx.req.start_time", |_, ()| {
            with_view(|v| {
                let start = std::time::SystemTime::now() - v.facts.arrived.elapsed();
                let d = start
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                Ok(d.as_millis() as f64 / 1000.0)
            })
        })?,
    )?;
    Ok(())
}

/// `read_body`, `get_body_data`, `discard_body`: the body is there where the route buffers
/// it (`request_buffering = true`, as `lua_need_request_body on`), else `get_body_data` is nil.
fn install_body(lua: &Lua, req: &Table) -> mlua::Result<()> {
    req.set(
        "read_body",
        crate::guard::function(lua, "ngx.req.read_body", |_, ()| Ok(()))?,
    )?;
    req.set(
        "discard_body",
        // The body is gone for the script (`get_body_data` is nil after), as in NGINX.
        crate::guard::function(lua, "ngx.req.discard_body", |_, ()| {
            with_view(|v| {
                v.body = None;
                Ok(())
            })
        })?,
    )?;
    req.set(
        "get_body_data",
        crate::guard::function(lua, "ngx.req.get_body_data", |lua, ()| {
            let body = with_view(|v| Ok(v.body.clone()))?;
            match body {
                Some(b) if !b.is_empty() => Ok(Value::String(lua.create_string(&b)?)),
                _ => Ok(Value::Nil),
            }
        })?,
    )?;
    Ok(())
}
