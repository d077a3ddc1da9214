//! Lua values as the API takes them: shared by `ngx`'s functions and `ngx.re`.

use mlua::Value;

/// A number as LuaJIT's `tostring` writes it (C's `%.14g`: `1/3` is `0.33333333333333`,
/// `1e15` is `1e+15`), which lua-nginx-module's output and header functions use too; mlua's
/// own conversion writes Rust's shortest round-trip form instead.
pub(crate) fn number_text(v: &Value) -> String {
    match v {
        Value::Integer(n) => crate::cjson::fmt_g14(*n as f64),
        Value::Number(n) if n.is_nan() => "nan".to_owned(),
        Value::Number(n) if n.is_infinite() => if *n > 0.0 { "inf" } else { "-inf" }.to_owned(),
        Value::Number(n) => crate::cjson::fmt_g14(*n),
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
