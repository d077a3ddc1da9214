//! Errors raised as LuaJIT's own C functions raise them: `luaL_argerror`'s "bad argument #N
//! to 'NAME' (MSG)" and `lj_err_caller`'s message after the calling Lua line. Scripts match
//! on these texts (and tests compare them with LuaJIT's), so `cjson` and the Lua patterns
//! (`pattern`) word theirs the same way. A leaf: it reads the Lua stack only.

use mlua::Lua;

/// `luaL_where(L, level)`: "chunk:line: " of the function `level` frames up from the running
/// one, "" when that is a C function (`pcall`, a wrapper in C) or the call was a tail call.
/// Level 1 is what called the running C function.
pub(crate) fn place(lua: &Lua, level: usize) -> String {
    lua.inspect_stack(level, |d| {
        let s = d.source();
        let line = d.current_line().filter(|&l| l > 0)?;
        matches!(s.what, "Lua" | "main")
            .then(|| format!("{}:{line}: ", s.short_src.unwrap_or_default()))
    })
    .flatten()
    .unwrap_or_default()
}

/// LuaJIT's `luaL_argerror` for the function `level` frames up from the running one (0: the
/// running one itself): "bad argument #N to 'NAME' (MSG)", NAME as its caller wrote it ('?'
/// when `pcall` or C called it), "calling 'NAME' on bad self (MSG)" for a method's self,
/// after the place of the Lua line that called it.
pub(crate) fn bad_argument(lua: &Lua, level: usize, narg: usize, msg: &str) -> String {
    let (name, method) = lua
        .inspect_stack(level, |d| {
            let n = d.names();
            let name = n.name.map_or_else(|| "?".to_owned(), |s| s.into_owned());
            (name, n.name_what == Some("method"))
        })
        .unwrap_or_else(|| ("?".to_owned(), false));
    let text = if method && narg == 1 {
        format!("calling '{name}' on bad self ({msg})")
    } else {
        let narg = if method { narg - 1 } else { narg };
        format!("bad argument #{narg} to '{name}' ({msg})")
    };
    format!("{}{text}", place(lua, level + 1))
}
