//! Lua values as the API takes them: shared by `ngx`'s functions and `ngx.re`.

use mlua::Value;

/// A string or number as bytes (`tostring` of a number, as Lua writes it).
pub(crate) fn scalar_bytes(v: &Value) -> mlua::Result<Vec<u8>> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Number(_) | Value::Integer(_) => Ok(v.to_string()?.into_bytes()),
        other => Err(mlua::Error::runtime(format!(
            "bad argument: string expected, got {}",
            other.type_name()
        ))),
    }
}
