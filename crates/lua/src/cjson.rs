//! `require "cjson"` and `"cjson.safe"`: lua-cjson's encoder and decoder as OpenResty ships
//! them (numbers as `%.14g`, `/` escaped, an empty table an object, sparse arrays refused,
//! `cjson.null`), in Rust, so that no C module is loaded into the gateway.

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

/// `cjson.empty_array`: a light userdata no other value equals (its address is this
/// static's).
static EMPTY_ARRAY: u8 = 0;

fn empty_array() -> Value {
    Value::LightUserData(LightUserData(
        std::ptr::addr_of!(EMPTY_ARRAY).cast_mut().cast(),
    ))
}

/// A number as C's `%.14g` writes it.
pub(crate) fn fmt_g14(n: f64) -> String {
    if n == 0.0 {
        return if n.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{n:.13e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s.to_owned()
        }
    };
    if !(-4..14).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        let decimals = usize::try_from(13 - exp).unwrap_or(0);
        trim(&format!("{n:.decimals$}"))
    }
}

/// What the encoder was told (`encode_empty_table_as_object`).
#[derive(Clone, Copy)]
struct Options {
    empty_table_as_object: bool,
    /// The most bytes the text may come to (`crate::output::output_limit`).
    limit: usize,
}

fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => Some(*n),
        Value::Integer(n) => Some(*n as f64),
        _ => None,
    }
}

/// Whether `t` is an array, and its length (lua-cjson: every key a positive integer, and
/// not excessively sparse: at most twice as long as it has items, or up to 10).
fn array_len(t: &Table) -> mlua::Result<Option<usize>> {
    let (mut max, mut items) = (0usize, 0usize);
    for kv in t.clone().pairs::<Value, Value>() {
        let (k, _) = kv?;
        match number(&k) {
            Some(n) if n >= 1.0 && n.fract() == 0.0 => {
                max = max.max(n as usize);
                items += 1;
            }
            _ => return Ok(None),
        }
    }
    if max > 10 && max > items * 2 {
        return Err(mlua::Error::runtime(
            "Cannot serialise table: excessively sparse array",
        ));
    }
    Ok(Some(max))
}

fn encode(out: &mut Vec<u8>, v: &Value, opts: Options, depth: usize) -> mlua::Result<()> {
    if depth > 1000 {
        return Err(mlua::Error::runtime(
            "Cannot serialise, excessive nesting (1001)",
        ));
    }
    // A table repeated at every level doubles the text per level: the result is bounded as
    // a call's output is (checked per value, so it passes the bound by one string at most).
    if out.len() > opts.limit {
        return Err(mlua::Error::runtime(format!(
            "Cannot serialise: result past [lua] max_memory ({} bytes)",
            opts.limit
        )));
    }
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        v if *v == empty_array() => out.extend_from_slice(b"[]"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(_) | Value::Integer(_) => {
            let n = number(v).unwrap_or(0.0);
            if !n.is_finite() {
                return Err(mlua::Error::runtime(
                    "Cannot serialise number: must not be NaN or Infinity",
                ));
            }
            out.extend_from_slice(fmt_g14(n).as_bytes());
        }
        Value::String(s) => encode_string(out, &s.as_bytes()),
        Value::Table(t) => {
            let is_array_mt = t
                .metatable()
                .and_then(|m| m.raw_get::<bool>("__sluice_array").ok())
                .unwrap_or(false);
            match array_len(t)? {
                Some(0) if opts.empty_table_as_object && !is_array_mt => {
                    out.extend_from_slice(b"{}")
                }
                Some(len) => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        encode(out, &t.raw_get::<Value>(i)?, opts, depth + 1)?;
                    }
                    out.push(b']');
                }
                None => {
                    out.push(b'{');
                    let mut first = true;
                    for kv in t.clone().pairs::<Value, Value>() {
                        let (k, val) = kv?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            Value::String(s) => encode_string(out, &s.as_bytes()),
                            k if number(k).is_some() => {
                                encode_string(out, fmt_g14(number(k).unwrap_or(0.0)).as_bytes());
                            }
                            _ => {
                                return Err(mlua::Error::runtime(
                                    "Cannot serialise table: table key must be a number or string",
                                ));
                            }
                        }
                        out.push(b':');
                        encode(out, &val, opts, depth + 1)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )));
        }
    }
    Ok(())
}

fn decode(lua: &Lua, v: serde_json::Value) -> mlua::Result<Value> {
    Ok(match v {
        serde_json::Value::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
        serde_json::Value::Bool(b) => Value::Boolean(b),
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, decode(lua, item)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, item) in map {
                t.raw_set(k, decode(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// One module table: `safe` returns `nil, err` where the plain one raises.
fn module(lua: &Lua, safe: bool) -> mlua::Result<Table> {
    let m = lua.create_table()?;
    let empty_as_object = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = empty_as_object.clone();
    m.set(
        "encode",
        crate::guard::function(lua, "cjson.encode", move |lua, v: Value| {
            let mut out = Vec::new();
            let opts = Options {
                empty_table_as_object: flag.load(std::sync::atomic::Ordering::Relaxed),
                limit: crate::output::output_limit(lua),
            };
            // One value on success, as lua-cjson (`ngx.say(cjson.encode(t))` prints it alone).
            match encode(&mut out, &v, opts, 0) {
                Ok(()) => Ok(MultiValue::from_vec(vec![Value::String(
                    lua.create_string(out)?,
                )])),
                Err(e) if safe => Ok(MultiValue::from_vec(vec![
                    Value::Nil,
                    Value::String(lua.create_string(e.to_string())?),
                ])),
                Err(e) => Err(e),
            }
        })?,
    )?;
    m.set(
        "decode",
        crate::guard::function(lua, "cjson.decode", move |lua, s: mlua::LuaString| {
            match serde_json::from_slice::<serde_json::Value>(&s.as_bytes()) {
                Ok(v) => Ok((decode(lua, v)?, None)),
                Err(e) if safe => Ok((
                    Value::Nil,
                    Some(format!("Expected value but found invalid token: {e}")),
                )),
                Err(e) => Err(mlua::Error::runtime(format!(
                    "Expected value but found invalid token: {e}"
                ))),
            }
        })?,
    )?;
    let flag = empty_as_object;
    m.set(
        "encode_empty_table_as_object",
        crate::guard::function(
            lua,
            "cjson.encode_empty_table_as_object",
            move |_, on: Value| {
                if let Value::Boolean(b) = on {
                    flag.store(b, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(flag.load(std::sync::atomic::Ordering::Relaxed))
            },
        )?,
    )?;
    // Accepted for scripts that tune them; Sluice keeps lua-cjson's defaults.
    for name in [
        "encode_sparse_array",
        "encode_max_depth",
        "decode_max_depth",
        "encode_number_precision",
        "encode_keep_buffer",
        "encode_invalid_numbers",
        "decode_invalid_numbers",
    ] {
        m.set(
            name,
            crate::guard::function(lua, "cjson (a setting)", |_, _: mlua::MultiValue| Ok(()))?,
        )?;
    }
    m.set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    m.set("empty_array", empty_array())?;
    let array_mt = lua.create_table()?;
    array_mt.raw_set("__sluice_array", true)?;
    m.set("array_mt", array_mt.clone())?;
    m.set("empty_array_mt", array_mt)?;
    m.set("_NAME", if safe { "cjson.safe" } else { "cjson" })?;
    m.set("_VERSION", "2.1.0.10")?;
    Ok(m)
}

/// Puts `cjson` and `cjson.safe` in `package.preload`.
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let preload: Table = lua.globals().get::<Table>("package")?.get("preload")?;
    preload.set(
        "cjson",
        crate::guard::function(lua, "require \"cjson\"", |lua, _: mlua::MultiValue| {
            module(lua, false)
        })?,
    )?;
    preload.set(
        "cjson.safe",
        crate::guard::function(lua, "require \"cjson.safe\"", |lua, _: mlua::MultiValue| {
            module(lua, true)
        })?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_percent_14g() {
        assert_eq!(fmt_g14(1.0), "1");
        assert_eq!(fmt_g14(-3.0), "-3");
        assert_eq!(fmt_g14(0.1), "0.1");
        assert_eq!(fmt_g14(1.0 / 3.0), "0.33333333333333");
        assert_eq!(fmt_g14(1e20), "1e+20");
        assert_eq!(fmt_g14(123456789012345.0), "1.2345678901234e+14");
        assert_eq!(fmt_g14(0.00001), "1e-05");
        assert_eq!(fmt_g14(12345678901234.0), "12345678901234");
    }

    #[test]
    fn encodes_and_decodes_as_lua_cjson() {
        let lua = Lua::new();
        install(&lua).unwrap();
        let out: String = lua
            .load(
                r#"local cjson = require "cjson"
                return cjson.encode({1, 2.5, "a/b", true, cjson.null})"#,
            )
            .eval()
            .unwrap();
        assert_eq!(out, r#"[1,2.5,"a\/b",true,null]"#);
        let out: String = lua
            .load(r#"return require("cjson").encode({})"#)
            .eval()
            .unwrap();
        assert_eq!(out, "{}");
        let out: String = lua
            .load(r#"return require("cjson").encode({a = {x = 1}})"#)
            .eval()
            .unwrap();
        assert_eq!(out, r#"{"a":{"x":1}}"#);
        let r: (i64, String, bool) = lua
            .load(
                r#"local t = require("cjson").decode('{"n": 3, "s": "x", "l": [1, null]}')
                return t.n, t.s, t.l[2] == require("cjson").null"#,
            )
            .eval()
            .unwrap();
        assert_eq!(r, (3, "x".into(), true));
        let safe: (Value, String) = lua
            .load(r#"return require("cjson.safe").decode("{bad")"#)
            .eval()
            .unwrap();
        assert!(
            safe.0.is_nil() && safe.1.contains("Expected value"),
            "{}",
            safe.1
        );
        let sparse = lua
            .load(r#"return require("cjson").encode({[1] = 1, [100] = 2})"#)
            .eval::<String>();
        assert!(sparse.is_err());
    }
}
