//! No script can stop the process: every Rust function LuaJIT calls is registered through
//! here, and a panic in it (a logic bug: arguments are validated before they reach code
//! that can panic) becomes a Lua error that names the function, which the request gets as
//! its 500.
//!
//! mlua 0.12 catches a callback's panic too, but only to carry it through Lua as an error
//! value and resume it when it reaches Rust again (`Function::call`): on the gateway's
//! thread, with the request's task. A raw `lua_CFunction` ([`crate::cfunc`]) has no mlua
//! frame at all: its panic unwinds into LuaJIT, which catches it as a foreign exception,
//! and Rust aborts the process ("Rust panics must be rethrown"). So the closures are
//! wrapped here ([`function`], [`method`]) and the raw functions run their Rust work under
//! [`shielded`].
//!
//! Rust cannot catch a foreign exception either: a Lua error raised through
//! `catch_unwind` aborts ("Rust cannot catch foreign exceptions"). Inside an mlua callback
//! every Lua API call is protected by mlua, so wrapping the whole closure is sound; in a raw
//! function only code that calls no raising Lua API (nothing that allocates, calls or
//! raises) runs under [`shielded`].

#![expect(
    unsafe_code,
    reason = "raising a raw C function's panic as a Lua error"
)]

use mlua::{FromLuaMulti, Function, IntoLuaMulti, Lua, MaybeSend, UserDataMethods};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A panic's message, where it has one.
fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panic")
}

/// The text of the Lua error a panic in `name` becomes; it is logged and counted too.
pub(crate) fn panicked(name: &str, payload: Box<dyn Any + Send>) -> String {
    let text = format!("{name}: internal error ({})", message(&*payload));
    // A payload's own destructor may panic: it is dropped where that is caught too.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    crate::stats::panicked();
    tracing::error!(target: "sluice::lua", "[lua] {text}");
    text
}

/// `lua.create_function(f)`, with `f`'s panics turned into Lua errors naming `name`
/// (`ngx.say`, `ngx.shared.DICT:set`).
pub(crate) fn function<F, A, R>(lua: &Lua, name: &'static str, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, A) -> mlua::Result<R> + MaybeSend + 'static,
    A: FromLuaMulti,
    R: IntoLuaMulti,
{
    lua.create_function(move |lua, args| {
        catch_unwind(AssertUnwindSafe(|| f(lua, args)))
            .unwrap_or_else(|p| Err(mlua::Error::runtime(panicked(name, p))))
    })
}

/// `lua.create_function_mut(f)`, guarded as [`function`].
pub(crate) fn function_mut<F, A, R>(
    lua: &Lua,
    name: &'static str,
    mut f: F,
) -> mlua::Result<Function>
where
    F: FnMut(&Lua, A) -> mlua::Result<R> + MaybeSend + 'static,
    A: FromLuaMulti,
    R: IntoLuaMulti,
{
    lua.create_function_mut(move |lua, args| {
        catch_unwind(AssertUnwindSafe(|| f(lua, args)))
            .unwrap_or_else(|p| Err(mlua::Error::runtime(panicked(name, p))))
    })
}

/// `methods.add_method(name, f)`, guarded as [`function`]; `owner` names the value in the
/// error (`ngx.shared.DICT`).
pub(crate) fn method<T, M, F, A, R>(methods: &mut M, owner: &'static str, name: &'static str, f: F)
where
    T: 'static,
    M: UserDataMethods<T>,
    F: Fn(&Lua, &T, A) -> mlua::Result<R> + MaybeSend + 'static,
    A: FromLuaMulti,
    R: IntoLuaMulti,
{
    methods.add_method(name, move |lua, this: &T, args| {
        catch_unwind(AssertUnwindSafe(|| f(lua, this, args))).unwrap_or_else(|p| {
            let text = panicked(&format!("{owner}:{name}"), p);
            Err(mlua::Error::runtime(text))
        })
    });
}

/// Runs `work`, the Rust part of the raw C function `name`, and turns its panic into a
/// Lua error naming `name` (raised from here: the function's frame unwinds with it).
///
/// # Safety
/// `l` is the state of the running C function `name`. `work` makes no Lua API call that
/// can raise an error (allocate, call, index with metamethods): such an error unwinding
/// through `catch_unwind` aborts the process. The caller holds no value with a destructor
/// that must run (LuaJIT may unwind without running it).
pub(crate) unsafe fn shielded<T>(
    l: *mut mlua::ffi::lua_State,
    name: &'static str,
    work: impl FnOnce() -> T,
) -> T {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(v) => v,
        // SAFETY: as the function's contract says.
        Err(p) => unsafe { raise(l, panicked(name, p)) },
    }
}

/// Raises `text` as a Lua error from the running C function.
///
/// # Safety
/// As [`shielded`]'s.
#[cold]
unsafe fn raise(l: *mut mlua::ffi::lua_State, text: String) -> ! {
    // SAFETY: a C function's frame always has a free slot (LUA_MINSTACK); the string is
    // copied by Lua and dropped before `lua_error`, which does not return.
    unsafe {
        crate::cfunc::push_bytes(l, text.as_bytes());
        drop(text);
        mlua::ffi::lua_error(l)
    }
}
