//! Lua values as the API takes them: shared by `ngx`'s functions and `ngx.re`.

use mlua::Value;

/// A number as LuaJIT's `tostring` writes it (C's `%.14g`: `1/3` is `0.33333333333333`,
/// `1e15` is `1e+15`), which lua-nginx-module's output and header functions use too; mlua's
/// own conversion writes Rust's shortest round-trip form instead.
pub(crate) fn number_text(v: &Value) -> String {
    match v {
        Value::Integer(n) => fmt_g14(*n as f64),
        Value::Number(n) if n.is_nan() => "nan".to_owned(),
        Value::Number(n) if n.is_infinite() => if *n > 0.0 { "inf" } else { "-inf" }.to_owned(),
        Value::Number(n) => fmt_g14(*n),
        _ => String::new(),
    }
}

/// A string or number as bytes (`tostring` of a number, as Lua writes it).
pub(crate) fn scalar_bytes(v: &Value) -> mlua::Result<Vec<u8>> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Number(_) | Value::Integer(_) => Ok(number_text(v).into_bytes()),
        other => Err(mlua::Error::runtime(format!(
            "bad argument: string expected, got {}",
            other.type_name()
        ))),
    }
}

/// A string argument as lua-resty-core's string functions take one (`ngx.md5`,
/// `ngx.encode_base64`, `ngx.crc32_*`): `nil` and `false` are `""`, anything else its
/// `tostring` (numbers as Lua writes them).
pub(crate) struct Text(pub(crate) Vec<u8>);

impl mlua::FromLua for Text {
    fn from_lua(value: Value, _: &mlua::Lua) -> mlua::Result<Self> {
        Ok(Text(match &value {
            Value::Nil | Value::Boolean(false) => Vec::new(),
            Value::Boolean(true) => b"true".to_vec(),
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Number(_) | Value::Integer(_) => number_text(&value).into_bytes(),
            other => other.to_string()?.into_bytes(),
        }))
    }
}

/// What C's `lua_typename(L, lua_type(L, i))` says of a value (a light userdata is
/// "userdata", a LuaJIT cdata "cdata").
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::LightUserData(_) | Value::UserData(_) | Value::Error(_) => "userdata",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "cdata",
    }
}

/// A number as C's `%.14g` writes it (LuaJIT's `tostring`, lua-cjson's default precision).
pub(crate) fn fmt_g14(n: f64) -> String {
    fmt_g(n, 14)
}

/// A finite number as C's `%.{precision}g` writes it (`precision` 1 to 17): lua-cjson's
/// `fpconv_g_fmt` with `encode_number_precision`.
pub(crate) fn fmt_g(n: f64, precision: usize) -> String {
    let precision = precision.max(1);
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // `%e` rounding decides the exponent `%g` goes by (9.99e5 rounds to 1e6 at 2 digits).
    let sci = format!("{n:.*e}", precision - 1);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s.to_owned()
        }
    };
    let p = i64::try_from(precision).unwrap_or(17);
    if exp < -4 || exp >= p {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        let decimals = usize::try_from(p - 1 - exp).unwrap_or(0);
        trim(&format!("{n:.decimals$}"))
    }
}
