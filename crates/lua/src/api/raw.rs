//! `ngx.var.NAME` and `ngx.req.set_header` as raw C functions ([`crate::cfunc`]): a
//! variable read and a header set with a string value, in place; anything else goes to
//! their mlua functions.

#![expect(unsafe_code, reason = "raw lua_CFunctions over LuaJIT's C API")]

use crate::cfunc::{delegate, push_bytes, str_at};
use http::header::{HeaderName, HeaderValue};
use mlua::ffi;
use std::ffi::c_int;

/// `ngx.var`'s `__index(t, name)`.
pub(crate) unsafe extern "C-unwind" fn var_index(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: called by Lua as a C closure made by `cfunc::closure` (upvalue 1: the slow
    // `__index`); the name's bytes are read while it is on the stack.
    unsafe {
        let found = str_at(l, 2)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|name| crate::view::try_with(|v| crate::api::var::get(v, name)));
        match found {
            Some(Some(bytes)) => push_bytes(l, &bytes),
            Some(None) => ffi::lua_pushnil(l),
            None => return delegate(l),
        }
        1
    }
}

/// `ngx.req.set_header(name, value)` with a string value, where the request may change.
pub(crate) unsafe extern "C-unwind" fn set_header(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `var_index` (upvalue 1: the slow `set_header`); name and value are read
    // while they are on the stack.
    unsafe {
        let done = match (str_at(l, 1), str_at(l, 2)) {
            (Some(name), Some(value)) => set(name, value),
            _ => false,
        };
        if done { 0 } else { delegate(l) }
    }
}

/// Sets the header, if the call may and both are valid (else the slow path says why).
fn set(name: &[u8], value: &[u8]) -> bool {
    let name = if name.contains(&b'_') {
        HeaderName::from_bytes(
            &name
                .iter()
                .map(|&b| if b == b'_' { b'-' } else { b })
                .collect::<Vec<u8>>(),
        )
    } else {
        HeaderName::from_bytes(name)
    };
    let (Ok(name), Ok(value)) = (name, HeaderValue::from_bytes(value)) else {
        return false;
    };
    crate::view::try_with(|v| {
        if !v.request_writable() {
            return false;
        }
        v.headers.insert(name, value);
        true
    })
    .unwrap_or(false)
}
