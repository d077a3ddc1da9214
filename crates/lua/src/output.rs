//! The bound on what one call of a script produces outside the Lua state's allocator
//! (`ngx.say`/`ngx.print`, `ngx.arg[1]`, `ngx.re.sub`/`gsub` results, templates,
//! `cjson.encode`): the state's `[lua] max_memory`. A nested table repeats its strings, so
//! one call's arguments can make far more bytes than the state holds. A leaf: `api`, `re`
//! and `cjson` all read it.

use mlua::Lua;

/// The state's `[lua] max_memory`, kept as the state's app data where it is made.
pub(crate) struct OutputLimit(pub(crate) usize);

/// The state's output limit (none where the state sets none: tests' bare states).
pub(crate) fn output_limit(lua: &Lua) -> usize {
    lua.app_data_ref::<OutputLimit>()
        .map_or(usize::MAX, |l| l.0)
}
