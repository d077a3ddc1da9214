//! `require "cjson"` and `"cjson.safe"`: OpenResty's lua-cjson (openresty/lua-cjson,
//! `lua_cjson.c`), in Rust, so that no C module is loaded into the gateway. Scripts written
//! for OpenResty see the same module: the same settings (each also a getter, each per module
//! instance, `cjson.new()` a fresh instance), the same decoder (a tokenizer and parser
//! mirroring the C one, [`decode`]) with its error texts and "at character N" positions, the
//! same encoder ([`encode`]: `%.14g` numbers, `/` escaped, sparse arrays refused,
//! `cjson.null`, `cjson.empty_array`, `array_mt`, `empty_array_mt`).
//!
//! The module's code follows lua-cjson's structure; lua-cjson is
//! Copyright (c) 2010-2012 Mark Pulford, MIT license (`testdata/LICENSE`).

mod config;
mod decode;
mod encode;
mod error;
mod numbers;
#[cfg(test)]
mod tests;

use config::Config;
use error::cjson_error;

use mlua::{Function, LightUserData, Lua, MultiValue, Table, Value};
use std::sync::{Arc, Mutex, PoisonError};

/// `cjson.empty_array`: a light userdata no other value equals (its address is this
/// static's), as lua-cjson's `&json_array`.
static EMPTY_ARRAY: u8 = 0;

fn empty_array() -> Value {
    Value::LightUserData(LightUserData(
        std::ptr::addr_of!(EMPTY_ARRAY).cast_mut().cast(),
    ))
}

/// `cjson.null`: the NULL light userdata (lua-cjson's, and `ngx.null`).
fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// The Lua values every instance of a state shares: lua-cjson keeps `array_mt` and
/// `empty_array_mt` in the registry so that all instances (`cjson`, `cjson.safe`,
/// `cjson.new()`) recognise one another's; `next` is the base library's, taken at install
/// so that a script's own `next` cannot change how tables are walked.
#[derive(Clone)]
struct Shared {
    array_mt: Table,
    empty_array_mt: Table,
    next: Function,
}

const REGISTRY_KEY: &str = "sluice.cjson.shared";

fn shared(lua: &Lua) -> mlua::Result<Shared> {
    let t: Table = lua.named_registry_value(REGISTRY_KEY)?;
    Ok(Shared {
        array_mt: t.raw_get("array_mt")?,
        empty_array_mt: t.raw_get("empty_array_mt")?,
        next: t.raw_get("next")?,
    })
}

/// One module table with its own settings: `safe` returns `nil, err` where the plain one
/// raises (lua-cjson's `lua_cjson_new` and `lua_cjson_safe_new`).
fn module(lua: &Lua, safe: bool) -> mlua::Result<Table> {
    let m = lua.create_table()?;
    let cfg = Arc::new(Mutex::new(Config::default()));
    let shared = shared(lua)?;
    m.raw_set(
        "encode",
        encode_function(lua, cfg.clone(), shared.clone(), safe)?,
    )?;
    m.raw_set(
        "decode",
        decode_function(lua, cfg.clone(), shared.clone(), safe)?,
    )?;
    config::install(lua, &m, &cfg)?;
    m.raw_set(
        "new",
        crate::guard::function(lua, "cjson.new", move |lua, _: MultiValue| {
            module(lua, safe)
        })?,
    )?;
    m.raw_set("null", null())?;
    m.raw_set("empty_array_mt", shared.empty_array_mt)?;
    m.raw_set("array_mt", shared.array_mt)?;
    m.raw_set("empty_array", empty_array())?;
    m.raw_set("_NAME", "cjson")?;
    m.raw_set("_VERSION", "2.1.0.11")?;
    Ok(m)
}

/// What a conversion returns: its value, or for its own error (`luaL_error` in the C
/// module) in `cjson.safe` `nil, message`, else the error prefixed with the calling Lua
/// line, as `luaL_error` does (none under `cjson.safe`, whose wrapper is the C caller).
/// An error from a script's metamethod (`__len`, `__index`) passes as it came, even
/// through `cjson.safe`: it may be `ngx.exit` or the instruction budget's stop, which no
/// `pcall` may catch.
fn finish(lua: &Lua, r: mlua::Result<Value>, safe: bool) -> mlua::Result<MultiValue> {
    let e = match r {
        Ok(v) => return Ok(MultiValue::from_vec(vec![v])),
        Err(e) => e,
    };
    match cjson_error(&e) {
        Some(text) if safe => Ok(MultiValue::from_vec(vec![
            Value::Nil,
            Value::String(lua.create_string(text)?),
        ])),
        Some(text) => Err(mlua::Error::runtime(format!(
            "{}{text}",
            crate::raise::place(lua, 1)
        ))),
        None => Err(e),
    }
}

/// The one argument of `encode` or `decode` (lua-cjson: "expected 1 argument"). In
/// `cjson.safe` the wrapper checks this and raises; the C function it calls checks its
/// argument's type under `pcall`, where LuaJIT names no function ('?').
fn one_argument(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    if args.len() != 1 {
        return Err(config::arg_error(lua, 1, "expected 1 argument", false));
    }
    Ok(args.into_iter().next().unwrap_or(Value::Nil))
}

fn encode_function(
    lua: &Lua,
    cfg: Arc<Mutex<Config>>,
    shared: Shared,
    safe: bool,
) -> mlua::Result<Function> {
    crate::guard::function(lua, "cjson.encode", move |lua, args: MultiValue| {
        let v = one_argument(lua, args)?;
        let cfg = cfg.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let r = encode::encode(lua, &v, &cfg, &shared)
            .and_then(|out| Ok(Value::String(lua.create_string(out)?)));
        finish(lua, r, safe)
    })
}

fn decode_function(
    lua: &Lua,
    cfg: Arc<Mutex<Config>>,
    shared: Shared,
    safe: bool,
) -> mlua::Result<Function> {
    crate::guard::function(lua, "cjson.decode", move |lua, args: MultiValue| {
        let v = one_argument(lua, args)?;
        let opts = {
            let c = cfg.lock().unwrap_or_else(PoisonError::into_inner);
            decode::Options {
                invalid_numbers: c.decode_invalid_numbers,
                max_depth: c.decode_max_depth,
                allow_comment: c.decode_allow_comment,
                array_mt: c
                    .decode_array_with_array_mt
                    .then(|| shared.array_mt.clone()),
            }
        };
        let r = match &v {
            Value::String(s) => decode::decode(lua, &s.as_bytes(), &opts),
            Value::Integer(_) | Value::Number(_) => {
                let n = lua.coerce_number(v.clone())?.unwrap_or(0.0);
                decode::decode(lua, crate::values::fmt_g14(n).as_bytes(), &opts)
            }
            other => Err(config::arg_error(
                lua,
                1,
                &format!("string expected, got {}", crate::values::type_name(other)),
                safe,
            )),
        };
        finish(lua, r, safe)
    })
}

/// Puts `cjson` and `cjson.safe` in `package.preload`.
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let shared = lua.create_table()?;
    shared.raw_set("array_mt", lua.create_table()?)?;
    shared.raw_set("empty_array_mt", lua.create_table()?)?;
    shared.raw_set("next", lua.globals().raw_get::<Function>("next")?)?;
    lua.set_named_registry_value(REGISTRY_KEY, shared)?;
    let preload: Table = lua.globals().get::<Table>("package")?.get("preload")?;
    preload.set(
        "cjson",
        crate::guard::function(lua, "require \"cjson\"", |lua, _: MultiValue| {
            module(lua, false)
        })?,
    )?;
    preload.set(
        "cjson.safe",
        crate::guard::function(lua, "require \"cjson.safe\"", |lua, _: MultiValue| {
            module(lua, true)
        })?,
    )?;
    Ok(())
}
