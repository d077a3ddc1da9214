//! Every way code enters a budgeted state compiles it with polls ([`super::rewrite`]), through
//! one Lua function: the configuration's scripts ([`compile`]), `load`, `loadstring`,
//! `loadfile`, `dofile` and `require`'s Lua searcher ([`install`]). What cannot carry polls (a chunk the rewrite
//! refuses or whose rewrite does not compile, a precompiled module) still loads, and turns
//! the state's JIT compiler off for good ([`Budget::jit`]): the count hook stops it then.
//!
//! `load` and the others take source text only, as in unbudgeted states (`state.rs`, which
//! also makes `jit.on`, `jit.off` and `jit.flush` do nothing: a script that turned the
//! compiler back on after a poll turned it off would run past its budget).

use super::{Budget, rewrite};
use crate::guard;
use mlua::{Function, LightUserData, Lua, Value};
use std::ffi::c_void;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Where the prelude's `compile` is kept, for [`compile`].
const COMPILE_KEY: &str = "sluice.budget.compile";

/// The Lua side: the poll (an FFI function pointer), the stop function and the loaders (the
/// `jit` table scripts see is `state.rs`'s). The reader loop of `load` polls by hand: a reader
/// that never ends it would otherwise spin in compiled code.
const PRELUDE: &str = r#"
local ffi, entry, instrument, read, no_jit = ...
local load_, loadfile_ = load, loadfile
local type, error, setfenv, concat, format = type, error, setfenv, table.concat, string.format
local searchpath, package = package.searchpath, package
local jit_off, jit_flush = jit.off, jit.flush

local poll = ffi.cast("int (*)(void)", entry)
local function stop() jit_off() jit_flush() end

local function fall_back(name)
    stop()
    no_jit(name)
end

-- `text` compiled as load_ would (name, env), with polls: the function, or nil and the error.
local function compile(text, name, env)
    local rewritten = instrument(text)
    if rewritten then
        local factory = load_(rewritten, name, "t")
        if factory then
            if env ~= nil then setfenv(factory, env) end
            return factory(poll, stop)
        end
    end
    local f, err = load_(text, name, "t", env)
    if f then fall_back(name) end
    return f, err
end

-- What load_ takes besides strings and readers (a string.buffer, a number) is text too: load_
-- says whether it compiles, and its text is compiled again with polls.
local function compile_other(chunk, name, env)
    local f, err = load_(chunk, name, "t", env)
    if not f then return f, err end
    return compile(tostring(chunk), name or "=(load)", env)
end

load = function(chunk, name, _, env)
    if type(chunk) == "string" then return compile(chunk, name or chunk, env) end
    if type(chunk) ~= "function" then return compile_other(chunk, name, env) end
    local parts, n = {}, 0
    while true do
        if poll() ~= 0 then stop() end
        local piece = chunk()
        if piece == nil or piece == "" then break end
        if type(piece) ~= "string" then return nil, "reader function must return a string" end
        n = n + 1
        parts[n] = piece
    end
    return compile(concat(parts, "", 1, n), name or "=(load)", env)
end
loadstring = function(s, name)
    if type(s) ~= "string" then return compile_other(s, name) end
    return compile(s, name or s)
end
-- No standard input and nothing but regular files: a worker must not wait on a terminal or
-- read /dev/zero.
loadfile = function(file, _, env)
    if file == nil then return nil, "loadfile: no standard input for scripts; give a file name" end
    local text, why = read(file)
    if why then return nil, why end
    if not text then return loadfile_(file, "t", env) end
    return compile(text, "@" .. file, env)
end
dofile = function(file)
    local f, err = loadfile(file)
    if not f then error(err, 2) end
    return f()
end

-- require's Lua searcher (LuaJIT's messages); a precompiled module loads without polls.
package.loaders[2] = function(name)
    local path, err = searchpath(name, package.path)
    if not path then return err end
    local text, why = read(path)
    local f
    if text and text:byte(1) ~= 27 then
        f, err = compile(text, "@" .. path)
    elseif why then
        err = why
    else
        f, err = loadfile_(path)
        if f then fall_back(path) end
    end
    if not f then
        error(format("error loading module '%s' from file '%s':\n\t%s", name, path, err), 0)
    end
    return f
end
return compile
"#;

/// Sets up `lua`, a state with `budget`, to compile everything with polls.
pub(crate) fn install(lua: &Lua, budget: &Arc<Budget>) -> mlua::Result<()> {
    let instrument = guard::function(lua, "load", |lua, text: mlua::LuaString| {
        rewrite::instrument(&text.as_bytes())
            .map(|t| lua.create_string(t))
            .transpose()
    })?;
    let read = guard::function(lua, "loadfile", |lua, path: mlua::LuaString| {
        read(lua, &path)
    })?;
    let flag = Arc::downgrade(budget);
    let no_jit = guard::function(lua, "load", move |_, name: Value| {
        if let Some(budget) = flag.upgrade()
            && budget.jit.swap(false, Ordering::Relaxed)
        {
            tracing::warn!(target: "sluice::lua", "[lua] {} cannot carry the instruction budget's polls (it names __sluice_poll or __sluice_stop, has too many upvalues, or is precompiled): this worker's scripts run with the JIT compiler off", name.to_string().unwrap_or_default());
        }
        Ok(())
    })?;
    let entry = LightUserData(super::poll as *mut c_void);
    let compile: Function = lua.load(PRELUDE).set_name("=sluice").call((
        crate::ffi_lib::module(lua)?,
        entry,
        instrument,
        read,
        no_jit,
    ))?;
    lua.set_named_registry_value(COMPILE_KEY, compile)
}

/// A file's text; or nil and why it is not read (not a regular file, larger than the state
/// may hold); or nil alone where it cannot be opened, for LuaJIT's own loadfile to say why.
fn read(
    lua: &Lua,
    path: &mlua::LuaString,
) -> mlua::Result<(Option<mlua::LuaString>, Option<String>)> {
    let bytes = path.as_bytes();
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&bytes));
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok((None, None));
    };
    let name = path.display();
    if !meta.is_file() {
        return Ok((
            None,
            Some(format!("cannot read {name}: not a regular file")),
        ));
    }
    let bound = lua
        .app_data_ref::<crate::output::OutputLimit>()
        .map_or(usize::MAX, |l| l.0);
    if meta.len() > bound as u64 {
        return Ok((
            None,
            Some(format!("cannot read {name}: larger than [lua] max_memory")),
        ));
    }
    match std::fs::read(path) {
        Ok(text) => Ok((Some(lua.create_string(text)?), None)),
        Err(_) => Ok((None, None)),
    }
}

/// `source` (a configuration script or `init`, already compiled once as it is, for its
/// errors) compiled under `chunk`, its name, as `load` compiles it: with polls, or where it
/// cannot carry them as it is, the state's compiler then off for good.
pub(crate) fn compile(lua: &Lua, source: &str, chunk: &str) -> mlua::Result<Function> {
    let compile: Function = lua.named_registry_value(COMPILE_KEY)?;
    let (f, err): (Option<Function>, Option<String>) = compile.call((source, chunk))?;
    f.ok_or_else(|| mlua::Error::runtime(err.unwrap_or_default()))
}
