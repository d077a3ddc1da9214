//! `ngx.shared.DICT:incr` through LuaJIT's FFI, for states whose JIT compiler is on (the
//! default; not with `[lua] jit = false`).
//!
//! Why the FFI: [`crate::ffi_lib`]. In the interpreter an FFI call costs more than a C
//! function: states whose compiler is off (`[lua] jit = false`) keep [`super::raw`]; one that
//! turns it off for good later (a chunk without the budget's polls) pays more per call here,
//! with the same answers.
//!
//! The FFI library is the crate's own ([`crate::ffi_lib`]), and the wrapper's upvalues are out
//! of reach without `debug`.

#![expect(
    unsafe_code,
    reason = "an FFI entry point that compiled Lua code calls"
)]

use super::SharedDict;
use mlua::{Function, Lua, Table};
use std::ffi::c_void;
use std::sync::Arc;

/// The Lua side: argument checks as [`super::raw`]'s fast path makes them, then the FFI
/// call; every other shape of call, and every call the FFI function did not make (it answers
/// NaN), goes to `slow` (the C closure). Five arguments and no out-parameter: in the
/// interpreter (a script's call outside a compiled loop) each FFI argument is converted
/// and each read of a cdata array is a metamethod call.
const WRAPPER: &str = r#"
local ffi, entry, slow, dict = ...
local c_incr = ffi.cast("double (*)(const void *, const char *, size_t, double, double)", entry)
local ptr = ffi.cast("const void *", dict)
local type, nan = type, 0 / 0
return function(self, key, value, init, init_ttl, ...)
    if type(key) == "string" and type(value) == "number" and init_ttl == nil then
        local len, kind = #key, type(init)
        if len > 0 and len <= 65535 and (kind == "nil" or kind == "number") then
            local n = c_incr(ptr, key, len, value, init or nan)
            if n == n then
                if init == nil then return n end
                return n, nil, false
            end
        end
    end
    return slow(self, key, value, init, init_ttl, ...)
end
"#;

/// Calls made through the FFI function, for the tests to tell which path ran.
#[cfg(test)]
pub(crate) static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `d:incr(key, by, init)` as compiled code calls it (`init` NaN: none): the new value, or
/// NaN where it made nothing (no such key, not a number, a result that would be NaN, a new
/// key that needs an eviction, a panic), which the C function then makes or refuses, with
/// the values it returns (`forcible` among them).
///
/// # Safety
/// `dict` is a live [`SharedDict`] (the wrapper holds the C closure, which holds it),
/// `key` points at `len` readable bytes (a Lua string the caller holds).
unsafe extern "C" fn incr(
    dict: *const c_void,
    key: *const u8,
    len: usize,
    by: f64,
    init: f64,
) -> f64 {
    #[cfg(test)]
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: as the function's contract says.
    let (d, key) = unsafe {
        (
            &*dict.cast::<SharedDict>(),
            std::slice::from_raw_parts(key, len),
        )
    };
    let init = (!init.is_nan()).then_some(init);
    // No unwinding may cross into compiled Lua code: a panic is a call not made, which the
    // C function then makes and reports as a Lua error.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.incr_unforced(key, by, init)
    }))
    .ok()
    .flatten()
    .unwrap_or(f64::NAN)
}

/// Puts the FFI `incr` in front of `t.incr` (the C closure) in `t`, an `ngx.shared.NAME`
/// table for `dict`, where the state's compiler is on ([`crate::ffi_lib::front`]).
pub(crate) fn install(lua: &Lua, t: &Table, dict: &Arc<SharedDict>) -> mlua::Result<()> {
    let slow: Function = t.raw_get("incr")?;
    let dict = Arc::as_ptr(dict).cast_mut().cast::<c_void>();
    let incr = crate::ffi_lib::front(lua, WRAPPER, incr as *mut c_void, slow, Some(dict))?;
    t.raw_set("incr", incr)
}
