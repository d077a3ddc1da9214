//! LuaJIT's `ffi` module for the crate's own Lua code (the poll of the instruction budget,
//! `ngx.shared.DICT:incr` for compiled code), where no script reaches it: scripts get no
//! `ffi`, which can take the process down.

#![expect(unsafe_code, reason = "opening LuaJIT's ffi library through its C API")]

use mlua::{Lua, Table, ffi};

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
