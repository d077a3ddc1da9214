//! LuaJIT's `ffi` module for the crate's own Lua code (the poll of the instruction budget,
//! the API's entries for compiled code), where no script reaches it: scripts get no `ffi`,
//! which can take the process down.
//!
//! Compiled code calls an FFI function as a plain machine call, while a `lua_CFunction` is
//! something a trace cannot hold: the trace stops before it, the interpreter makes the call,
//! and an FFI call the interpreter makes costs more than the C function would. So in a
//! state whose compiler is on ([`JitOn`]), the calls scripts make most (`ngx.var` reads,
//! `ngx.req.set_header`, `ngx.shared.DICT:incr`) go through the FFI ([`front`]), and a
//! script made of them compiles whole, as lua-resty-core makes lua-nginx-module's API FFI
//! calls for the same reason; every call the FFI entry does not make goes on to the C
//! function, which answers (or raises) as before.

#![expect(unsafe_code, reason = "opening LuaJIT's ffi library through its C API")]

use mlua::{Function, Lua, Table, ffi};
use std::ffi::c_void;

/// The mark (app data) of a state whose code is compiled (`[lua] jit`, the default): the
/// API installs its FFI entries ([`front`]).
pub(crate) struct JitOn;

/// `slow` (a C function of the API) behind the FFI entry `entry`, in a state whose compiler
/// is on: `wrapper` is Lua source that takes this state's `ffi`, `entry` (a light userdata),
/// `slow` and `data` (a light userdata, or nil: what the entry works on), and returns the
/// function scripts call. Elsewhere, `slow` itself.
pub(crate) fn front(
    lua: &Lua,
    wrapper: &str,
    entry: *mut c_void,
    slow: Function,
    data: Option<*mut c_void>,
) -> mlua::Result<Function> {
    if lua.app_data_ref::<JitOn>().is_none() {
        return Ok(slow);
    }
    lua.load(wrapper).set_name("=sluice").call((
        module(lua)?,
        mlua::LightUserData(entry),
        slow,
        data.map(mlua::LightUserData),
    ))
}

/// LuaJIT's `ffi` module, where no script reaches it: opened once per state (a second
/// `luaopen_ffi` would replace the state's C type table under the cdata made with the
/// first, which `lua_close` then frees wrongly), kept in the registry.
pub(crate) fn module(lua: &Lua) -> mlua::Result<Table> {
    const KEY: &str = "sluice.ffi";
    if let Some(module) = lua.named_registry_value::<Option<Table>>(KEY)? {
        return Ok(module);
    }
    // SAFETY: `exec_raw` protects the call; `luaopen_ffi` pushes the module, the one result
    // (LuaJIT creates no global for it; it does enter it in `package.loaded`, undone below).
    let module: Table = unsafe {
        lua.exec_raw((), |state| {
            ffi::lua_pushcfunction(state, ffi::luaopen_ffi);
            ffi::lua_call(state, 0, 1);
        })?
    };
    let package: Table = lua.globals().raw_get("package")?;
    let loaded: Table = package.raw_get("loaded")?;
    loaded.raw_set("ffi", mlua::Value::Nil)?;
    lua.set_named_registry_value(KEY, &module)?;
    Ok(module)
}
