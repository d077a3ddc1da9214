//! lua-cjson's settings: one [`Config`] per module instance, and the functions that set and
//! return them (`cjson.encode_max_depth(5)` sets, `cjson.encode_max_depth()` returns the
//! current value), with the C module's argument checks and their error texts (LuaJIT's
//! `luaL_argerror`: "bad argument #1 to 'encode_max_depth' (expected integer between 1 and
//! 2147483647)"), so that a script that probes or tunes them sees what OpenResty shows.

use crate::values::type_name;
use mlua::{Lua, MultiValue, Table, Value};
use std::sync::{Arc, Mutex, PoisonError};

/// `json_config_t`, with lua-cjson's defaults.
#[derive(Clone, Debug)]
pub(super) struct Config {
    pub(super) encode_sparse_convert: bool,
    pub(super) encode_sparse_ratio: i32,
    pub(super) encode_sparse_safe: i32,
    pub(super) encode_max_depth: i32,
    pub(super) decode_max_depth: i32,
    /// 0: refuse NaN and Infinity; 1: write them as JavaScript does; 2: write `null`.
    pub(super) encode_invalid_numbers: u8,
    pub(super) encode_number_precision: i32,
    /// Only reported back: Sluice builds each text in a buffer of its own.
    pub(super) encode_keep_buffer: bool,
    pub(super) encode_empty_table_as_object: bool,
    pub(super) encode_escape_forward_slash: bool,
    pub(super) encode_skip_unsupported_value_types: bool,
    /// `None` writes compact text; the C module keeps the string up to its first NUL.
    pub(super) encode_indent: Option<Vec<u8>>,
    pub(super) decode_invalid_numbers: bool,
    pub(super) decode_array_with_array_mt: bool,
    pub(super) decode_allow_comment: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            encode_sparse_convert: false,
            encode_sparse_ratio: 2,
            encode_sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            encode_number_precision: 14,
            encode_keep_buffer: true,
            encode_empty_table_as_object: true,
            encode_escape_forward_slash: true,
            encode_skip_unsupported_value_types: false,
            encode_indent: None,
            decode_invalid_numbers: true,
            decode_array_with_array_mt: false,
            decode_allow_comment: false,
        }
    }
}

/// LuaJIT's `luaL_argerror` from a C function ([`crate::raise::bad_argument`]); under
/// `cjson.safe`'s wrapper (`inner`), which calls the C function from C, LuaJIT names no
/// function ('?') and no line.
pub(super) fn arg_error(lua: &Lua, narg: usize, msg: &str, inner: bool) -> mlua::Error {
    if inner {
        return super::error::raise(format!("bad argument #{narg} to '?' ({msg})"));
    }
    mlua::Error::runtime(crate::raise::bad_argument(lua, 0, narg, msg))
}

/// `json_arg_init`: at most `n` arguments ("found too many arguments"), padded with nil.
fn arg_init(lua: &Lua, args: MultiValue, n: usize) -> mlua::Result<Vec<Value>> {
    if args.len() > n {
        return Err(arg_error(lua, n + 1, "found too many arguments", false));
    }
    let mut v: Vec<Value> = args.into_iter().collect();
    v.resize(n, Value::Nil);
    Ok(v)
}

/// C's `(int)(lua_Integer)n` on x86-64: truncation, out of range (and NaN) as
/// `INT64_MIN`, then the low 32 bits.
fn c_int(n: f64) -> i32 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    let wide = if n.is_nan() || !(-LIMIT..LIMIT).contains(&n) {
        i64::MIN
    } else {
        n as i64
    };
    wide as i32
}

/// `json_integer_option`: a number between `min` and `max` (a numeric string counts, as
/// `luaL_checkinteger` takes it); the range error names argument #1 whichever it was, as
/// the C module does.
fn integer_option(
    lua: &Lua,
    v: &Value,
    narg: usize,
    setting: &mut i32,
    (min, max): (i32, i32),
) -> mlua::Result<Value> {
    if !v.is_nil() {
        let Some(n) = lua.coerce_number(v.clone())? else {
            let msg = format!("number expected, got {}", type_name(v));
            return Err(arg_error(lua, narg, &msg, false));
        };
        let value = c_int(n);
        if !(min..=max).contains(&value) {
            let msg = format!("expected integer between {min} and {max}");
            return Err(arg_error(lua, 1, &msg, false));
        }
        *setting = value;
    }
    Ok(Value::Integer(i64::from(*setting)))
}

/// `luaL_checkstring` as a C string: a number is converted (`%.14g`), the text ends at its
/// first NUL.
fn check_c_string(lua: &Lua, v: &Value, narg: usize) -> mlua::Result<Vec<u8>> {
    let bytes = match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Integer(_) | Value::Number(_) => {
            crate::values::fmt_g14(lua.coerce_number(v.clone())?.unwrap_or(0.0)).into_bytes()
        }
        other => {
            let msg = format!("string expected, got {}", type_name(other));
            return Err(arg_error(lua, narg, &msg, false));
        }
    };
    Ok(bytes.split(|&b| b == 0).next().unwrap_or_default().to_vec())
}

/// `json_enum_option` with `bool_true` 1: a boolean, or one of `options` by name
/// (`luaL_checkoption`); reported as a boolean while it is 0 or 1, else by name.
fn enum_option(
    lua: &Lua,
    v: &Value,
    narg: usize,
    setting: &mut u8,
    options: &[&str],
) -> mlua::Result<Value> {
    match v {
        Value::Nil => {}
        Value::Boolean(b) => *setting = u8::from(*b),
        other => {
            let name = check_c_string(lua, other, narg)?;
            let Some(i) = options.iter().position(|o| o.as_bytes() == name) else {
                let msg = format!("invalid option '{}'", String::from_utf8_lossy(&name));
                return Err(arg_error(lua, narg, &msg, false));
            };
            *setting = u8::try_from(i).unwrap_or(0);
        }
    }
    Ok(match *setting {
        0 | 1 => Value::Boolean(*setting == 1),
        n => Value::String(lua.create_string(options[usize::from(n)])?),
    })
}

const ON_OFF: &[&str] = &["off", "on"];

/// [`enum_option`] on a `bool` setting.
fn bool_option(lua: &Lua, v: &Value, narg: usize, setting: &mut bool) -> mlua::Result<Value> {
    let mut n = u8::from(*setting);
    let r = enum_option(lua, v, narg, &mut n, ON_OFF)?;
    *setting = n == 1;
    Ok(r)
}

/// A setting function: `f` gets the padded arguments and the instance's settings.
type Setter = fn(&Lua, &[Value], &mut Config) -> mlua::Result<MultiValue>;

/// One result, as most setting functions return.
fn one(v: Value) -> MultiValue {
    MultiValue::from_vec(vec![v])
}

/// A bool setting's function, by the field it sets.
macro_rules! bool_setter {
    ($field:ident) => {
        (|lua, a, c| Ok(one(bool_option(lua, &a[0], 1, &mut c.$field)?))) as Setter
    };
}

/// An integer setting's function, by the field it sets and its range.
macro_rules! int_setter {
    ($field:ident, $min:expr, $max:expr) => {
        (|lua, a, c| {
            let range = ($min, $max);
            Ok(one(integer_option(lua, &a[0], 1, &mut c.$field, range)?))
        }) as Setter
    };
}

/// lua-cjson's setting functions: name, arity, what they do.
const SETTERS: &[(&str, usize, Setter)] = &[
    ("encode_sparse_array", 3, sparse_array),
    (
        "encode_max_depth",
        1,
        int_setter!(encode_max_depth, 1, i32::MAX),
    ),
    (
        "decode_max_depth",
        1,
        int_setter!(decode_max_depth, 1, i32::MAX),
    ),
    (
        "encode_number_precision",
        1,
        int_setter!(encode_number_precision, 1, 16),
    ),
    (
        "encode_empty_table_as_object",
        1,
        bool_setter!(encode_empty_table_as_object),
    ),
    (
        "decode_array_with_array_mt",
        1,
        bool_setter!(decode_array_with_array_mt),
    ),
    (
        "decode_allow_comment",
        1,
        bool_setter!(decode_allow_comment),
    ),
    ("encode_keep_buffer", 1, bool_setter!(encode_keep_buffer)),
    (
        "decode_invalid_numbers",
        1,
        bool_setter!(decode_invalid_numbers),
    ),
    (
        "encode_escape_forward_slash",
        1,
        bool_setter!(encode_escape_forward_slash),
    ),
    (
        "encode_skip_unsupported_value_types",
        1,
        bool_setter!(encode_skip_unsupported_value_types),
    ),
    ("encode_invalid_numbers", 1, |lua, a, c| {
        let options = &["off", "on", "null"];
        Ok(one(enum_option(
            lua,
            &a[0],
            1,
            &mut c.encode_invalid_numbers,
            options,
        )?))
    }),
    ("encode_indent", 1, indent),
];

/// `encode_sparse_array(convert, ratio, safe)`: returns all three.
fn sparse_array(lua: &Lua, a: &[Value], c: &mut Config) -> mlua::Result<MultiValue> {
    let convert = bool_option(lua, &a[0], 1, &mut c.encode_sparse_convert)?;
    let ratio = integer_option(lua, &a[1], 2, &mut c.encode_sparse_ratio, (0, i32::MAX))?;
    let safe = integer_option(lua, &a[2], 3, &mut c.encode_sparse_safe, (0, i32::MAX))?;
    Ok(MultiValue::from_vec(vec![convert, ratio, safe]))
}

/// `encode_indent(s)`: "" turns indenting off; returns the indent ("" when off).
fn indent(lua: &Lua, a: &[Value], c: &mut Config) -> mlua::Result<MultiValue> {
    if !a[0].is_nil() {
        let whole = match &a[0] {
            Value::String(s) => s.as_bytes().len(),
            _ => 1,
        };
        let text = check_c_string(lua, &a[0], 1)?;
        c.encode_indent = (whole > 0).then_some(text);
    }
    let current = c.encode_indent.clone().unwrap_or_default();
    Ok(one(Value::String(lua.create_string(current)?)))
}

/// Sets the setting functions of module table `m`, all on the instance's `cfg`.
pub(super) fn install(lua: &Lua, m: &Table, cfg: &Arc<Mutex<Config>>) -> mlua::Result<()> {
    for &(name, arity, f) in SETTERS {
        let cfg = cfg.clone();
        let func = crate::guard::function(lua, "cjson (a setting)", move |lua, args| {
            let a = arg_init(lua, args, arity)?;
            let mut c = cfg.lock().unwrap_or_else(PoisonError::into_inner);
            f(lua, &a, &mut c)
        })?;
        m.raw_set(name, func)?;
    }
    Ok(())
}
