//! The response side of `ngx`: `ngx.header`, `ngx.status`, `ngx.ctx`, `ngx.say`/`print`,
//! `ngx.exit`, `ngx.redirect`, `ngx.arg` (body filter), `ngx.log` and the constants.

use crate::current::with_view;
use crate::view::{View, disabled};
use mlua::{Lua, LuaString, MultiValue, Table, Value};
use sluice_config::LuaPhase;

/// lua-nginx-module's log levels (`ngx.ERR`, …), in its numbering.
const LEVELS: [(&str, i64); 9] = [
    ("STDERR", 0),
    ("EMERG", 1),
    ("ALERT", 2),
    ("CRIT", 3),
    ("ERR", 4),
    ("WARN", 5),
    ("NOTICE", 6),
    ("INFO", 7),
    ("DEBUG", 8),
];

/// Status constants scripts name (`ngx.HTTP_FORBIDDEN`, …).
const STATUSES: [(&str, i64); 36] = [
    ("HTTP_CONTINUE", 100),
    ("HTTP_SWITCHING_PROTOCOLS", 101),
    ("HTTP_OK", 200),
    ("HTTP_CREATED", 201),
    ("HTTP_ACCEPTED", 202),
    ("HTTP_NO_CONTENT", 204),
    ("HTTP_PARTIAL_CONTENT", 206),
    ("HTTP_SPECIAL_RESPONSE", 300),
    ("HTTP_MOVED_PERMANENTLY", 301),
    ("HTTP_MOVED_TEMPORARILY", 302),
    ("HTTP_SEE_OTHER", 303),
    ("HTTP_NOT_MODIFIED", 304),
    ("HTTP_TEMPORARY_REDIRECT", 307),
    ("HTTP_PERMANENT_REDIRECT", 308),
    ("HTTP_BAD_REQUEST", 400),
    ("HTTP_UNAUTHORIZED", 401),
    ("HTTP_PAYMENT_REQUIRED", 402),
    ("HTTP_FORBIDDEN", 403),
    ("HTTP_NOT_FOUND", 404),
    ("HTTP_NOT_ALLOWED", 405),
    ("HTTP_NOT_ACCEPTABLE", 406),
    ("HTTP_REQUEST_TIMEOUT", 408),
    ("HTTP_CONFLICT", 409),
    ("HTTP_GONE", 410),
    ("HTTP_UPGRADE_REQUIRED", 426),
    ("HTTP_TOO_MANY_REQUESTS", 429),
    ("HTTP_CLOSE", 444),
    ("HTTP_ILLEGAL", 451),
    ("HTTP_INTERNAL_SERVER_ERROR", 500),
    ("HTTP_NOT_IMPLEMENTED", 501),
    ("HTTP_METHOD_NOT_IMPLEMENTED", 501),
    ("HTTP_BAD_GATEWAY", 502),
    ("HTTP_SERVICE_UNAVAILABLE", 503),
    ("HTTP_GATEWAY_TIMEOUT", 504),
    ("HTTP_VERSION_NOT_SUPPORTED", 505),
    ("HTTP_INSUFFICIENT_STORAGE", 507),
];

/// Appends `bytes` to `out` within `limit` (`crate::output`), else a Lua error (the
/// request's 500).
fn put(out: &mut Vec<u8>, bytes: &[u8], limit: usize) -> mlua::Result<()> {
    if bytes.len() > limit.saturating_sub(out.len()) {
        return Err(mlua::Error::runtime(format!(
            "output past [lua] max_memory ({limit} bytes)"
        )));
    }
    out.extend_from_slice(bytes);
    Ok(())
}

/// Appends the values of `ngx.say`/`ngx.print` as lua-nginx-module writes them: strings and
/// numbers as they are, nil as `nil`, booleans, `ngx.null` as `null`, tables (arrays) item
/// by item.
fn write_values(
    out: &mut Vec<u8>,
    values: &MultiValue,
    depth: usize,
    limit: usize,
) -> mlua::Result<()> {
    for v in values {
        write_value(out, v, depth, limit)?;
    }
    Ok(())
}

fn write_value(out: &mut Vec<u8>, v: &Value, depth: usize, limit: usize) -> mlua::Result<()> {
    match v {
        Value::String(s) => put(out, &s.as_bytes(), limit)?,
        Value::Nil => put(out, b"nil", limit)?,
        Value::Boolean(b) => put(out, if *b { b"true" } else { b"false" }, limit)?,
        Value::LightUserData(p) if p.0.is_null() => put(out, b"null", limit)?,
        Value::Number(_) | Value::Integer(_) => {
            put(out, crate::values::number_text(v).as_bytes(), limit)?;
        }
        // An array's elements up to its largest index, `nil`s included, as
        // lua-nginx-module writes them; a key that is not a positive integer is refused.
        Value::Table(t) if depth < 32 => {
            let mut last = 0;
            for pair in t.clone().pairs::<Value, Value>() {
                match pair?.0 {
                    Value::Integer(i) if i > 0 => last = last.max(i),
                    Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => last = last.max(n as i64),
                    _ => return Err(mlua::Error::runtime("non-array table found")),
                }
            }
            for i in 1..=last {
                write_value(out, &t.raw_get::<Value>(i)?, depth + 1, limit)?;
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad argument to 'ngx.say' (string, number, boolean, nil, ngx.null or array table expected, got {})",
                other.type_name()
            )));
        }
    }
    Ok(())
}

/// What `ngx.log` writes: its arguments joined, as lua-nginx-module's `log_wrapper` takes
/// them: a table only with a `__tostring` metamethod, no functions or userdata.
fn log_text(values: &MultiValue) -> mlua::Result<String> {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let n = i + 2;
        match v {
            Value::Table(t) => {
                let printable = t
                    .metatable()
                    .is_some_and(|m| m.contains_key("__tostring").unwrap_or(false));
                if !printable {
                    return Err(mlua::Error::runtime(format!(
                        "bad argument #{n} to 'log' (expected table to have __tostring metamethod)"
                    )));
                }
                out.extend_from_slice(v.to_string()?.as_bytes());
            }
            Value::Function(_) | Value::UserData(_) | Value::Thread(_) => {
                return Err(mlua::Error::runtime(format!(
                    "bad argument #{n} to 'log' (string, number, boolean, or nil expected, got {})",
                    v.type_name()
                )));
            }
            v => write_value(&mut out, v, 32, usize::MAX)?,
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `ngx.log(level, ...)` (and `print`, at NOTICE): to the gateway's log with the script's
/// place, the route and the request ID.
fn log(lua: &Lua, level: i64, values: &MultiValue) -> mlua::Result<()> {
    let text = log_text(values)?;
    let place = lua
        .inspect_stack(1, |d| {
            let src = d.source();
            format!(
                "{}:{}",
                src.short_src.as_deref().unwrap_or("?"),
                d.current_line().unwrap_or(0)
            )
        })
        .unwrap_or_default();
    let (route, request) = with_view(|v| {
        Ok((
            v.facts.route.to_string(),
            v.facts.request_id.as_deref().unwrap_or_default().to_owned(),
        ))
    })
    .unwrap_or_default();
    match level {
        ..=4 => tracing::error!(target: "sluice::lua", route, request, "[lua] {place}: {text}"),
        5 => tracing::warn!(target: "sluice::lua", route, request, "[lua] {place}: {text}"),
        6 | 7 => tracing::info!(target: "sluice::lua", route, request, "[lua] {place}: {text}"),
        _ => tracing::debug!(target: "sluice::lua", route, request, "[lua] {place}: {text}"),
    }
    Ok(())
}

/// A header of the response in hand: a string, a list for several, nil for none.
fn response_header(lua: &Lua, view: &View, name: &str) -> mlua::Result<Value> {
    let name = name.replace('_', "-").to_ascii_lowercase();
    let values: Vec<_> = view
        .response_headers
        .get_all(name.as_str())
        .iter()
        .collect();
    match values.as_slice() {
        [] => Ok(Value::Nil),
        [one] => Ok(Value::String(lua.create_string(one.as_bytes())?)),
        many => Ok(Value::Table(
            lua.create_sequence_from(
                many.iter()
                    .map(|v| lua.create_string(v.as_bytes()))
                    .collect::<mlua::Result<Vec<_>>>()?,
            )?,
        )),
    }
}

/// `ngx.ctx`: the request's table, made at first use and kept in the registry until the
/// request ends.
fn ctx(lua: &Lua) -> mlua::Result<Table> {
    let existing = with_view(|v| match &v.ctx {
        Some(k) => lua.registry_value::<Table>(k).map(Some),
        None => Ok(None),
    })?;
    if let Some(t) = existing {
        return Ok(t);
    }
    let t = lua.create_table()?;
    let key = lua.create_registry_value(t.clone())?;
    with_view(|v| {
        v.ctx = Some(key);
        Ok(())
    })?;
    Ok(t)
}

/// Installs the response side of `ngx`, and its metatable for `status` and `ctx`.
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    install_constants(ngx)?;
    install_output(lua, ngx)?;
    install_header(lua, ngx)?;
    install_arg(lua, ngx)?;
    ngx.set(
        "log",
        crate::guard::function(lua, "ngx.log", |lua, (level, rest): (i64, MultiValue)| {
            if !(0..=8).contains(&level) {
                return Err(mlua::Error::runtime(format!("bad log level: {level}")));
            }
            log(lua, level, &rest)
        })?,
    )?;
    lua.globals().set(
        "print",
        crate::guard::function(lua, "print", |lua, rest: MultiValue| log(lua, 6, &rest))?,
    )?;
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        crate::guard::function(lua, "ngx.__index", ngx_index)?,
    )?;
    meta.set(
        "__newindex",
        crate::guard::function(lua, "ngx.__newindex", ngx_newindex)?,
    )?;
    ngx.set_metatable(Some(meta))?;
    Ok(())
}

/// `ngx.HTTP_*` statuses and methods, the log levels, `ngx.OK` and the others, `ngx.null`.
fn install_constants(ngx: &Table) -> mlua::Result<()> {
    for (name, n) in LEVELS.iter().chain(STATUSES.iter()) {
        ngx.set(*name, *n)?;
    }
    for (name, n) in crate::api::req::METHODS {
        ngx.set(format!("HTTP_{name}"), n)?;
    }
    for (name, n) in [
        ("OK", 0),
        ("ERROR", -1),
        ("AGAIN", -2),
        ("DONE", -4),
        ("DECLINED", -5),
    ] {
        ngx.set(name, n)?;
    }
    ngx.set(
        "null",
        Value::LightUserData(mlua::LightUserData(std::ptr::null_mut())),
    )
}

/// `ngx`'s `__index`: `ngx.status`, `ngx.ctx`, `ngx.headers_sent`, `ngx.is_subrequest`.
fn ngx_index(lua: &Lua, (_, k): (Table, LuaString)) -> mlua::Result<Value> {
    match &*k.as_bytes() {
        // 0 until set, 200 once a script's answer sent its head without one.
        b"status" => with_view(|v| {
            let sent = if v.status == 0 && v.header_sent {
                200
            } else {
                v.status
            };
            Ok(Value::Integer(i64::from(sent)))
        }),
        b"ctx" => Ok(Value::Table(ctx(lua)?)),
        b"headers_sent" => with_view(|v| {
            Ok(Value::Boolean(
                v.header_sent || matches!(v.phase, LuaPhase::BodyFilter | LuaPhase::Log),
            ))
        }),
        b"is_subrequest" => Ok(Value::Boolean(false)),
        _ => Ok(Value::Nil),
    }
}

/// `ngx`'s `__newindex`: `ngx.status` and `ngx.ctx`; any other field is set on `ngx`.
fn ngx_newindex(lua: &Lua, (t, k, value): (Table, LuaString, Value)) -> mlua::Result<()> {
    match &*k.as_bytes() {
        b"status" => set_status(&value),
        b"ctx" => {
            let Value::Table(new) = value else {
                return Err(mlua::Error::runtime("ngx.ctx must be a table"));
            };
            let key = lua.create_registry_value(new)?;
            with_view(|v| {
                v.ctx = Some(key);
                Ok(())
            })
        }
        _ => t.raw_set(k, value),
    }
}

/// `ngx.status = value`: a number, or a numeric string as lua-resty-core's `tonumber`
/// takes it; too late (the head sent) it is logged and ignored, as lua-nginx-module does.
fn set_status(value: &Value) -> mlua::Result<()> {
    let status = match value {
        Value::Integer(n) => *n,
        Value::Number(n) => *n as i64,
        Value::String(s) => match s.to_str().ok().and_then(|t| t.trim().parse::<f64>().ok()) {
            Some(n) => n as i64,
            None => return Err(mlua::Error::runtime("ngx.status must be a number")),
        },
        _ => return Err(mlua::Error::runtime("ngx.status must be a number")),
    };
    with_view(|v| {
        if !v.response_writable() {
            late_write(v, "ngx.status");
            return Ok(());
        }
        v.status = u16::try_from(status)
            .ok()
            .filter(|s| (100..1000).contains(s))
            .ok_or_else(|| mlua::Error::runtime(format!("bad ngx.status: {status}")))?;
        Ok(())
    })
}

/// `ngx.say`, `ngx.print`, `ngx.flush`, `ngx.eof`, `ngx.exit`'s record, `ngx.redirect`'s.
fn install_output(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let writer = |newline: bool| {
        move |lua: &Lua, values: MultiValue| {
            let limit = crate::output::output_limit(lua);
            with_view(|v| {
                if !v.answers() {
                    return Err(disabled(v.phase));
                }
                if v.eof_seen {
                    return Ok((Value::Nil, Some("seen eof")));
                }
                // All of a call's output or none of it (a script may catch the error).
                let before = v.output.len();
                let written = write_values(&mut v.output, &values, 0, limit)
                    .and_then(|()| put(&mut v.output, &b"\n"[..usize::from(newline)], limit));
                if written.is_err() {
                    v.output.truncate(before);
                }
                written?;
                v.header_sent = true;
                Ok((Value::Integer(1), None))
            })
        }
    };
    ngx.set("say", crate::guard::function(lua, "ngx.say", writer(true))?)?;
    ngx.set(
        "print",
        crate::guard::function(lua, "ngx.print", writer(false))?,
    )?;
    // The answer is sent whole when the call ends: `send_headers` and `eof` send its head
    // (then `ngx.status` and `ngx.header` stay as they are); `flush` sends what was
    // written, nothing before output (lua-nginx-module's answers).
    let sends = |how: &'static str| {
        move |_: &Lua, _: MultiValue| {
            with_view(|v| {
                if !v.answers() {
                    return Err(disabled(v.phase));
                }
                if v.eof_seen {
                    return Ok((None, Some("seen eof")));
                }
                match how {
                    "flush" if !v.header_sent => return Ok((None, Some("nothing to flush"))),
                    "eof" => v.eof_seen = true,
                    _ => {}
                }
                v.header_sent = true;
                Ok((Some(1), None))
            })
        }
    };
    ngx.set(
        "flush",
        crate::guard::function(lua, "ngx.flush", sends("flush"))?,
    )?;
    ngx.set(
        "send_headers",
        crate::guard::function(lua, "ngx.send_headers", sends("send_headers"))?,
    )?;
    ngx.set("eof", crate::guard::function(lua, "ngx.eof", sends("eof"))?)?;
    // `ngx.exit` and `ngx.redirect` are Lua (state.rs): they record here, then end the
    // script with an error only the runner knows.
    ngx.set(
        "_record_exit",
        crate::guard::function(lua, "ngx._record_exit", |_, status: i64| {
            with_view(|v| {
                if matches!(v.phase, LuaPhase::BodyFilter | LuaPhase::Log) {
                    return Err(disabled(v.phase));
                }
                v.exit = Some(status);
                Ok(())
            })
        })?,
    )?;
    ngx.set(
        "_record_redirect",
        crate::guard::function(lua, "ngx._record_redirect", record_redirect)?,
    )?;
    Ok(())
}

/// What `ngx.redirect(uri, status?)` records: the `Location` and the status (301, 302,
/// 303, 307 or 308, as lua-nginx-module allows; a URI with CR or LF is refused).
fn record_redirect(_: &Lua, (uri, status): (LuaString, Option<i64>)) -> mlua::Result<()> {
    let status = status.unwrap_or(302);
    if ![301, 302, 303, 307, 308].contains(&status) {
        return Err(mlua::Error::runtime(format!(
            "only ngx.HTTP_MOVED_TEMPORARILY, ngx.HTTP_MOVED_PERMANENTLY, ngx.HTTP_PERMANENT_REDIRECT, ngx.HTTP_SEE_OTHER, and ngx.HTTP_TEMPORARY_REDIRECT are allowed, not {status}"
        )));
    }
    if uri.as_bytes().iter().any(|b| matches!(b, b'\r' | b'\n')) {
        return Err(mlua::Error::runtime(format!(
            "unsafe uri \"{}\" arg #1",
            uri.to_string_lossy().escape_default()
        )));
    }
    with_view(|v| {
        if !v.answers() {
            return Err(disabled(v.phase));
        }
        crate::api::req::set_header(
            &mut v.response_headers,
            "location",
            crate::api::req::Underscores::Kept,
            &Value::String(uri),
        )?;
        v.exit = Some(status);
        Ok(())
    })
}

/// A write to the response's head after it was sent: logged and ignored, as
/// lua-nginx-module does.
fn late_write(v: &View, what: &str) {
    tracing::error!(
        target: "sluice::lua",
        route = &*v.facts.route,
        request = v.facts.request_id.as_deref().unwrap_or(""),
        "attempt to set {what} after sending out response headers"
    );
}

/// `ngx.header.NAME`: read and written on the response in hand.
fn install_header(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let header = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        crate::guard::function(lua, "ngx.header.__index", |lua, (_, k): (Table, String)| {
            with_view(|v| response_header(lua, v, &k))
        })?,
    )?;
    meta.set(
        "__newindex",
        crate::guard::function(
            lua,
            "ngx.header.__newindex",
            |_, (_, k, value): (Table, String, Value)| {
                with_view(|v| {
                    if !v.response_writable() {
                        // lua-nginx-module logs it and goes on.
                        late_write(v, "ngx.header.HEADER");
                        return Ok(());
                    }
                    crate::api::req::set_header(
                        &mut v.response_headers,
                        &k,
                        crate::api::req::Underscores::AsDashes,
                        &value,
                    )
                })
            },
        )?,
    )?;
    header.set_metatable(Some(meta))?;
    ngx.set("header", header)
}

/// `ngx.arg[1]` (the piece of body) and `ngx.arg[2]` (whether it is the last) in
/// `body_filter`.
fn install_arg(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let arg = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        crate::guard::function(lua, "ngx.arg.__index", |lua, (_, i): (Table, i64)| {
            with_view(|v| {
                if v.phase != LuaPhase::BodyFilter {
                    return Ok(Value::Nil);
                }
                match i {
                    1 => Ok(Value::String(
                        lua.create_string(v.chunk.as_deref().unwrap_or_default())?,
                    )),
                    2 => Ok(Value::Boolean(v.eof)),
                    _ => Ok(Value::Nil),
                }
            })
        })?,
    )?;
    meta.set(
        "__newindex",
        crate::guard::function(
            lua,
            "ngx.arg.__newindex",
            |lua, (_, i, value): (Table, i64, Value)| {
                let limit = crate::output::output_limit(lua);
                with_view(|v| {
                    if v.phase != LuaPhase::BodyFilter {
                        return Err(disabled(v.phase));
                    }
                    match i {
                        1 => {
                            let mut out = Vec::new();
                            if !value.is_nil() {
                                write_value(&mut out, &value, 0, limit)?;
                            }
                            v.chunk = Some(out.into());
                        }
                        2 => v.eof = value.as_boolean().unwrap_or(false),
                        _ => {}
                    }
                    Ok(())
                })
            },
        )?,
    )?;
    arg.set_metatable(Some(meta))?;
    ngx.set("arg", arg)
}
