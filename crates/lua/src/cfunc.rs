//! Raw `lua_CFunction`s for the calls scripts make on every request (`ngx.var.NAME`,
//! `ngx.req.set_header`, `ngx.shared.DICT:get/set/incr`).
//!
//! An mlua callback costs a closure dispatch, its arguments converted into reference-counted
//! values, and an error frame, per call: in bench/lua's profile more than the work the calls
//! do. These read their arguments in place on the Lua stack and push their results. Each
//! handles the common shapes only (string keys and values) and hands every other call, the
//! errors included, to the mlua function it stands in front of ([`delegate`]): one behaviour,
//! with the fast path for what scripts do most.

#![expect(unsafe_code, reason = "raw lua_CFunctions over LuaJIT's C API")]

use mlua::{Function, Lua, ffi};
use std::ffi::c_int;

/// The string at stack index `idx` (a string, not a number: numbers take the slow path).
///
/// # Safety
/// `l` is the state of a running C function and `idx` one of its arguments. The slice is
/// valid while that value stays on the stack: Lua strings do not move or change, and a
/// value on the stack is not collected. The caller uses it before it pops or returns.
pub(crate) unsafe fn str_at<'a>(l: *mut ffi::lua_State, idx: c_int) -> Option<&'a [u8]> {
    // SAFETY: as the function's contract says.
    unsafe {
        if ffi::lua_type(l, idx) != ffi::LUA_TSTRING {
            return None;
        }
        let mut len = 0usize;
        let p = ffi::lua_tolstring(l, idx, &mut len);
        (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len))
    }
}

/// The string at stack index `idx`, or the number there as its string: converted in place,
/// in this call's own argument slot, as `tostring` would (lua-resty-core converts header
/// values and dictionary keys so). One C API call where [`str_at`] makes two.
///
/// # Safety
/// As [`str_at`]; the caller accepts a number argument's slot turned into a string (the
/// slow path it may delegate to then sees the string).
pub(crate) unsafe fn text_at<'a>(l: *mut ffi::lua_State, idx: c_int) -> Option<&'a [u8]> {
    // SAFETY: as the function's contract says; `lua_tolstring` returns null for what is
    // neither a string nor a number.
    unsafe {
        let mut len = 0usize;
        let p = ffi::lua_tolstring(l, idx, &mut len);
        (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len))
    }
}

/// The number at `idx`, or `Some(None)` where the argument is absent or nil (`None` for
/// anything else: the slow path converts or refuses it). One C API call for the two
/// questions.
///
/// # Safety
/// `l` is the state of a running C function.
pub(crate) unsafe fn optional_number_at(l: *mut ffi::lua_State, idx: c_int) -> Option<Option<f64>> {
    // SAFETY: reading a stack slot's type (LUA_TNONE past the top) and number.
    unsafe {
        match ffi::lua_type(l, idx) {
            t if t <= ffi::LUA_TNIL => Some(None),
            ffi::LUA_TNUMBER => Some(Some(ffi::lua_tonumber(l, idx))),
            _ => None,
        }
    }
}

/// The number at `idx`, where it is one (not a numeric string: the slow path converts those).
///
/// # Safety
/// `l` is the state of a running C function.
pub(crate) unsafe fn number_at(l: *mut ffi::lua_State, idx: c_int) -> Option<f64> {
    // SAFETY: reading a stack slot's type and number.
    unsafe { (ffi::lua_type(l, idx) == ffi::LUA_TNUMBER).then(|| ffi::lua_tonumber(l, idx)) }
}

/// Whether the argument at `idx` is absent or nil.
///
/// # Safety
/// `l` is the state of a running C function.
pub(crate) unsafe fn nil_at(l: *mut ffi::lua_State, idx: c_int) -> bool {
    // SAFETY: reading a stack slot's type (LUA_TNONE past the top).
    unsafe { ffi::lua_type(l, idx) <= ffi::LUA_TNIL }
}

/// Pushes `bytes` as a Lua string.
///
/// # Safety
/// `l` is the state of a running C function with a free stack slot (every function gets
/// `LUA_MINSTACK`, 20).
pub(crate) unsafe fn push_bytes(l: *mut ffi::lua_State, bytes: &[u8]) {
    // SAFETY: Lua copies the bytes.
    unsafe { ffi::lua_pushlstring(l, bytes.as_ptr().cast(), bytes.len()) };
}

/// Calls the closure's slow function (its first upvalue) with this call's arguments and
/// returns its results: the calls the fast path does not take, errors included (raised by
/// the slow function through this frame, which holds no value with a destructor then).
///
/// # Safety
/// `l` is the state of a running C closure made by [`closure`].
pub(crate) unsafe fn delegate(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: the closure's first upvalue is the slow function (`closure`); calling it with
    // the n arguments, under the function, leaves its results as the stack.
    unsafe {
        let n = ffi::lua_gettop(l);
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
        ffi::lua_insert(l, 1);
        ffi::lua_call(l, n, ffi::LUA_MULTRET);
        ffi::lua_gettop(l)
    }
}

/// A C closure of `f` with `slow` as its first upvalue (what [`delegate`] calls) and
/// `data`, where given, as its second (a light userdata: what `f` works on).
pub(crate) fn closure(
    lua: &Lua,
    f: ffi::lua_CFunction,
    slow: Function,
    data: Option<*mut std::ffi::c_void>,
) -> mlua::Result<Function> {
    // SAFETY: `exec_raw` pushes the upvalues (`slow`, then `data`) and protects the call;
    // `lua_pushcclosure` takes them off the stack and leaves the closure, the one result.
    unsafe {
        match data {
            None => lua.exec_raw(slow, |state| ffi::lua_pushcclosure(state, f, 1)),
            Some(p) => {
                let data = mlua::LightUserData(p);
                lua.exec_raw((slow, data), |state| ffi::lua_pushcclosure(state, f, 2))
            }
        }
    }
}
