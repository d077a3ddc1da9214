//! `ngx.shared.DICT:get/set/incr` as raw C functions ([`crate::cfunc`]) for string keys and
//! string, number or boolean values; every other call goes to the dictionary's mlua method.
//!
//! `ngx.shared.DICT` is a table: `get`, `set` and `incr` are C closures over the dictionary,
//! and any other method is the userdata's ([`DictHandle`]), bound on first use.

#![expect(unsafe_code, reason = "raw lua_CFunctions over LuaJIT's C API")]

use super::{DictHandle, SharedDict, Stored, Write, answer, init_ttl, ttl};
use crate::cfunc::{
    closure, delegate, nil_at, number_at, optional_number_at, push_bytes, str_at, text_at,
};
use crate::guard;
use mlua::{Function, Lua, Table, ffi};
use std::ffi::c_int;
use std::sync::Arc;

/// Binds the userdata's methods for the table: `bind(name)` is `function(_, ...) return
/// ud:name(...) end`; the table's `__index` binds a method on first use.
const BIND: &str = r#"
local ud = ...
local function bind(name)
    local m = ud[name]
    if type(m) ~= "function" then return m end
    return function(_, ...) return m(ud, ...) end
end
return bind, { __index = function(t, k)
    local f = bind(k)
    rawset(t, k, f)
    return f
end }
"#;

/// `ngx.shared.NAME` for `dict`.
pub(crate) fn handle(lua: &Lua, dict: &Arc<SharedDict>) -> mlua::Result<Table> {
    let ud = lua.create_userdata(DictHandle(dict.clone()))?;
    let (bind, meta): (Function, Table) = lua.load(BIND).set_name("=sluice").call(ud)?;
    // The closures' pointer to the dictionary stays valid while they exist: each holds its
    // slow function, which holds the userdata, which holds the `Arc`.
    let ptr = Arc::as_ptr(dict).cast_mut().cast::<std::ffi::c_void>();
    let t = lua.create_table()?;
    let fast: [(&str, ffi::lua_CFunction); 3] = [("get", get), ("set", set), ("incr", incr)];
    for (name, f) in fast {
        let slow: Function = bind.call(name)?;
        t.raw_set(name, closure(lua, f, slow, Some(ptr))?)?;
    }
    super::jit::install(lua, &t, dict)?;
    t.set_metatable(Some(meta))?;
    Ok(t)
}

/// The dictionary of a closure made by [`handle`].
///
/// # Safety
/// `l` is the state of a running closure made by [`handle`], which the returned reference
/// may not outlive.
unsafe fn dict<'a>(l: *mut ffi::lua_State) -> &'a SharedDict {
    // SAFETY: upvalue 2 is the `Arc::as_ptr` of a dictionary the closure keeps alive
    // (`handle`), for longer than this call.
    unsafe { &*ffi::lua_touserdata(l, ffi::lua_upvalueindex(2)).cast::<SharedDict>() }
}

/// The key at `idx`: a non-empty string of at most 65,535 bytes, or a number as its string
/// (else the slow path, which answers `nil, err` or raises as lua-resty-core does).
///
/// # Safety
/// As [`text_at`].
unsafe fn key_at<'a>(l: *mut ffi::lua_State, idx: c_int) -> Option<&'a [u8]> {
    // SAFETY: as the function's contract says.
    unsafe { text_at(l, idx).filter(|k| !k.is_empty() && k.len() <= 65535) }
}

/// Pushes a stored value.
///
/// # Safety
/// As [`push_bytes`].
unsafe fn push_stored(l: *mut ffi::lua_State, v: &Stored) {
    // SAFETY: pushing one value into a free slot.
    unsafe {
        match v {
            Stored::Bool(b) => ffi::lua_pushboolean(l, c_int::from(*b)),
            Stored::Number(n) => ffi::lua_pushnumber(l, *n),
            Stored::Str(s) => push_bytes(l, s),
        }
    }
}

/// Pushes `err` as a string, or nil.
///
/// # Safety
/// As [`push_bytes`].
unsafe fn push_err(l: *mut ffi::lua_State, err: Option<&str>) {
    // SAFETY: pushing one value into a free slot.
    unsafe {
        match err {
            Some(e) => push_bytes(l, e.as_bytes()),
            None => ffi::lua_pushnil(l),
        }
    }
}

/// `d:get(key)`: `value` (and `flags` where they are not 0), or `nil`: one value unless
/// there are flags, as lua-resty-core returns (`ngx.say(d:get(k))` shows no `nil`).
unsafe extern "C-unwind" fn get(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: a closure made by `handle`; the key is read while it is on the stack.
    unsafe {
        let Some(key) = key_at(l, 2) else {
            return delegate(l);
        };
        let d = dict(l);
        match guard::shielded(l, "ngx.shared.DICT:get", || d.get(key, false)) {
            Some((v, flags, _)) => {
                push_stored(l, &v);
                if flags == 0 {
                    return 1;
                }
                ffi::lua_pushnumber(l, f64::from(flags));
                2
            }
            None => {
                ffi::lua_pushnil(l);
                1
            }
        }
    }
}

/// `d:set(key, value, exptime)` for a string, number or boolean value: `ok, err, forcible`.
unsafe extern "C-unwind" fn set(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `get`; the value's bytes are copied before anything is pushed.
    unsafe {
        let value = match ffi::lua_type(l, 3) {
            ffi::LUA_TSTRING => str_at(l, 3).map(|s| Stored::Str(s.to_vec())),
            ffi::LUA_TNUMBER => number_at(l, 3).map(Stored::Number),
            ffi::LUA_TBOOLEAN => Some(Stored::Bool(ffi::lua_toboolean(l, 3) != 0)),
            _ => None,
        };
        // An exptime the slow path refuses (negative, not a number) goes there.
        let exptime = if nil_at(l, 4) {
            Some(None)
        } else {
            number_at(l, 4).and_then(|t| ttl(Some(t)).ok())
        };
        let (Some(key), Some(value), Some(exptime), true) =
            (key_at(l, 2), value, exptime, nil_at(l, 5))
        else {
            return delegate(l);
        };
        let d = dict(l);
        let (ok, err, forcible) = guard::shielded(l, "ngx.shared.DICT:set", move || {
            answer(d.write(Write::Set, key, Some(value), exptime, 0))
        });
        ffi::lua_pushboolean(l, c_int::from(ok));
        push_err(l, err);
        ffi::lua_pushboolean(l, c_int::from(forcible));
        3
    }
}

/// `d:incr(key, by, init, init_ttl)`: `n` (`n, nil, forcible` with `init`; `nil, err`
/// when it cannot), as lua-resty-core returns.
unsafe extern "C-unwind" fn incr(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `get`.
    unsafe {
        let (Some(key), Some(by), Some(init), Some(ttl)) = (
            key_at(l, 2),
            number_at(l, 3),
            optional_number_at(l, 4),
            optional_number_at(l, 5),
        ) else {
            return delegate(l);
        };
        // An init_ttl the slow path refuses (negative, or without init) goes there.
        let Ok(init_ttl) = init_ttl(ttl, init) else {
            return delegate(l);
        };
        let d = dict(l);
        match guard::shielded(l, "ngx.shared.DICT:incr", || {
            d.incr(key, by, init, init_ttl)
        }) {
            Ok((n, forcible)) => {
                ffi::lua_pushnumber(l, n);
                if init.is_none() {
                    return 1;
                }
                ffi::lua_pushnil(l);
                ffi::lua_pushboolean(l, c_int::from(forcible));
                3
            }
            Err(e) => {
                ffi::lua_pushnil(l);
                push_err(l, Some(e));
                2
            }
        }
    }
}
