//! The `ngx` table: the OpenResty API subset Sluice gives scripts, with lua-nginx-module's
//! names and semantics (docs/lua.md lists it, and what is left out and why).

pub(crate) mod compat;
pub(crate) mod outbound;
pub(crate) mod req;
pub(crate) mod resp;
pub(crate) mod spellings;
pub(crate) mod text;
pub(crate) mod var;

use crate::shared::SharedDict;
use mlua::{Function, Lua, MultiValue, RegistryKey, Table, Value};
use std::sync::Arc;

/// What runs a timer's callback (`ngx.timer.at`) when it is due: the state's, given its
/// registry key of `{ callback, n, args... }`.
pub(crate) type TimerRunner = Arc<dyn Fn(RegistryKey) + Send + Sync>;
use std::time::Duration;

/// What the Lua side of `ngx.exit`, `ngx.redirect` and the budget's guard around `pcall`
/// look like: `ngx.exit` records its status and ends the script with a value only these
/// wrappers know, which `pcall`, `xpcall` and `coroutine.resume` pass on rather than catch
/// (lua-nginx-module ends a script at `ngx.exit` however deep in `pcall` it is), as they
/// pass on the instruction budget's error (else a script could catch it and run on).
const PRELUDE: &str = r#"
local DONE_MARKER, EXITED = ...
local ngx, error, select, type = ngx, error, select, type
local record_exit, record_redirect = ngx._record_exit, ngx._record_redirect
local over_budget, error_text = ngx._over_budget, ngx._error_text
rawset(ngx, "_record_exit", nil)
rawset(ngx, "_record_redirect", nil)
rawset(ngx, "_over_budget", nil)
rawset(ngx, "_error_text", nil)
local EXIT = setmetatable({}, { __tostring = function() return "ngx.exit" end })
-- On a runner the call ends with the runner yielding EXITED, and the runner is dropped
-- rather than its stack unwound: LuaJIT raises errors through the system unwinder, whose
-- frame lookups were a tenth of the CPU of a request answered by `return ngx.exit(204)`.
-- Elsewhere (filters, `log`, a script's own coroutine, or where a C call in between
-- refuses the yield), the error only the wrappers below know.
local runners
local running, yield_exit, pcall_exit = coroutine.running, coroutine.yield, pcall
local function leave()
    local co = running()
    if co and runners[co] then pcall_exit(yield_exit, EXITED) end
    error(EXIT, 0)
end
rawset(ngx, "exit", function(status)
    record_exit(status)
    leave()
end)
rawset(ngx, "redirect", function(uri, status)
    record_redirect(uri, status)
    leave()
end)
-- An error a built-in function raised reaches the script as its message, a string, as
-- lua-nginx-module's C functions raise theirs (mlua carries it as a userdata).
local function plain(e)
    if type(e) == "userdata" then return error_text(e) end
    return e
end
local function pass(ok, ...)
    if not ok then
        local e = ...
        if e == EXIT or over_budget() then error(e, 0) end
        if type(e) == "userdata" then return ok, error_text(e) end
    end
    return ok, ...
end
local raw_pcall, raw_xpcall, raw_resume = pcall, xpcall, coroutine.resume
pcall = function(...) return pass(raw_pcall(...)) end
-- The message handler does not see `ngx.exit` nor the budget's stop: they go on past it.
xpcall = function(f, handler, ...)
    return pass(raw_xpcall(f, function(e)
        if e == EXIT or over_budget() then return e end
        return handler(plain(e))
    end, ...))
end
coroutine.resume = function(...) return pass(raw_resume(...)) end

-- The runners: coroutines that run calls of `rewrite` and `access` scripts, which may wait
-- (api/outbound.rs). Each loops: run the script given, leave its error (with its
-- traceback) in the view, yield DONE, take the next script. A runner is reused call after
-- call; `runners` says which coroutines are runners (where a script may wait). A runner
-- yields one marker: the error and what a call waits for (api/outbound.rs) go through the
-- view, which spares a list of values per call.
local DONE, traceback, failed = DONE_MARKER, ngx._traceback, ngx._failed
rawset(ngx, "_traceback", nil)
rawset(ngx, "_failed", nil)
local function on_error(e)
    if e == EXIT then return e end
    return traceback(tostring(e))
end
local create, yield = coroutine.create, coroutine.yield
runners = setmetatable({}, { __mode = "k" })
local function body(f)
    while true do
        local ok, err = raw_xpcall(f, on_error)
        if not ok then failed(err) end
        f = yield(DONE)
    end
end
return function()
    local co = create(body)
    runners[co] = true
    return co
end, runners
"#;

/// Builds `ngx`, `cjson` and `resty.http` in `lua`. `over_budget` says whether the call in
/// progress has run past its instruction budget; `run_timer` runs a timer's callback on the
/// state; `markers` are what a runner yields when a call is done, when it waits and when
/// it ended at `ngx.exit` (the runner then dropped). Returns
/// the function that makes a runner.
pub(crate) fn install(
    lua: &Lua,
    dicts: &[Arc<SharedDict>],
    over_budget: Function,
    run_timer: TimerRunner,
    markers: (Value, Value, Value),
) -> mlua::Result<Function> {
    let ngx = lua.create_table()?;
    lua.globals().set("ngx", ngx.clone())?;
    var::install(lua, &ngx)?;
    req::install(lua, &ngx)?;
    text::install(lua, &ngx)?;
    crate::re::install(lua, &ngx)?;
    let shared = lua.create_table()?;
    for d in dicts {
        shared.set(d.name.as_str(), crate::shared::raw::handle(lua, d)?)?;
    }
    ngx.set("shared", shared)?;
    install_process(lua, &ngx)?;
    install_timer(lua, &ngx, run_timer)?;
    // It sets `ngx`'s metatable (`ngx.status`, `ngx.ctx`).
    resp::install(lua, &ngx)?;
    // Last: it stubs what is absent in the tables made above.
    compat::install(lua, &ngx)?;
    ngx.raw_set("_over_budget", over_budget)?;
    ngx.raw_set(
        "_error_text",
        crate::guard::function(lua, "ngx._error_text", |_, e: Value| Ok(error_text(&e)))?,
    )?;
    ngx.raw_set(
        "_failed",
        crate::guard::function(lua, "ngx._failed", |_, e: Value| {
            let message = e.to_string().unwrap_or_else(|_| e.type_name().to_owned());
            crate::current::with_view(|v| {
                v.failure = Some(message);
                Ok(())
            })
        })?,
    )?;
    ngx.raw_set(
        "_traceback",
        crate::guard::function(lua, "ngx._traceback", |lua, message: String| {
            lua.traceback(Some(&message), 1)
        })?,
    )?;
    outbound::install(lua, &ngx)?;
    crate::cjson::install(lua)?;
    let (done, pending, exited) = markers;
    let (new_runner, runners): (Function, Table) =
        lua.load(PRELUDE).set_name("=sluice").call((done, exited))?;
    lua.load(outbound::LUA)
        .set_name("=sluice")
        .call::<()>((pending, runners))?;
    Ok(new_runner)
}

/// The message of an error a Rust function raised, without mlua's wrapping (its
/// traceback, "runtime error: "): what lua-nginx-module's C function would have raised.
pub(crate) fn error_text(e: &Value) -> String {
    fn innermost(e: &mlua::Error) -> String {
        match e {
            mlua::Error::CallbackError { cause, .. } => innermost(cause),
            mlua::Error::RuntimeError(m) => m.clone(),
            mlua::Error::WithContext { cause, .. } => innermost(cause),
            other => other.to_string(),
        }
    }
    match e {
        Value::Error(e) => innermost(e),
        other => other
            .to_string()
            .unwrap_or_else(|_| other.type_name().to_owned()),
    }
}

/// `ngx.config`, `ngx.worker`, `ngx.get_phase`.
fn install_process(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let config = lua.create_table()?;
    config.set("subsystem", "http")?;
    config.set("ngx_lua_version", 10023)?;
    config.set("nginx_version", 1022001)?;
    config.set("debug", false)?;
    config.set("is_console", false)?;
    config.set(
        "prefix",
        // NGINX's prefix is its working directory's: Sluice's, with the trailing `/`.
        crate::guard::function(lua, "ngx.config.prefix", |_, ()| {
            let dir = std::env::current_dir().unwrap_or_default();
            Ok(format!(
                "{}/",
                dir.display().to_string().trim_end_matches('/')
            ))
        })?,
    )?;
    config.set(
        "nginx_configure",
        crate::guard::function(lua, "ngx.config.nginx_configure", |_, ()| Ok(String::new()))?,
    )?;
    ngx.set("config", config)?;
    let worker = lua.create_table()?;
    worker.set(
        "pid",
        crate::guard::function(lua, "ngx.worker.pid", |_, ()| Ok(std::process::id()))?,
    )?;
    let id = lua
        .app_data_ref::<crate::worker::WorkerId>()
        .map_or(0, |w| w.0);
    worker.set(
        "id",
        crate::guard::function(lua, "ngx.worker.id", move |_, ()| Ok(id))?,
    )?;
    let count = crate::worker::worker_count();
    worker.set(
        "count",
        crate::guard::function(lua, "ngx.worker.count", move |_, ()| Ok(count))?,
    )?;
    worker.set(
        "exiting",
        crate::guard::function(lua, "ngx.worker.exiting", |_, ()| Ok(false))?,
    )?;
    ngx.set("worker", worker)?;
    ngx.set(
        "get_phase",
        crate::guard::function(lua, "ngx.get_phase", |lua, ()| {
            Ok(crate::current::phase_name(lua))
        })?,
    )?;
    Ok(())
}

/// `ngx.timer.at(delay, callback, ...)`: `callback(premature, ...)` runs later on the same
/// state, with no request (`ngx.var` and the rest of the request API raise an error there).
fn install_timer(lua: &Lua, ngx: &Table, run_timer: TimerRunner) -> mlua::Result<()> {
    let timer = lua.create_table()?;
    timer.set(
        "at",
        crate::guard::function(
            lua,
            "ngx.timer.at",
            move |lua, (delay, callback, args): (f64, Function, MultiValue)| {
                let Ok(handle) = tokio::runtime::Handle::try_current() else {
                    return Ok((None, Some("no event loop to run timers on (init code)")));
                };
                if !(0.0..=86_400.0 * 365.0).contains(&delay) {
                    return Ok((None, Some("bad delay")));
                }
                let t = lua.create_table()?;
                t.raw_set(1, callback)?;
                t.raw_set(2, args.len())?;
                for (i, a) in args.into_iter().enumerate() {
                    t.raw_set(i + 3, a)?;
                }
                let key: RegistryKey = lua.create_registry_value(t)?;
                let run = run_timer.clone();
                handle.spawn(async move {
                    tokio::time::sleep(Duration::from_secs_f64(delay)).await;
                    run(key);
                });
                Ok((Some(1), None))
            },
        )?,
    )?;
    timer.set(
        "running_count",
        crate::guard::function(lua, "ngx.timer.running_count", |_, ()| Ok(0))?,
    )?;
    timer.set(
        "pending_count",
        crate::guard::function(lua, "ngx.timer.pending_count", |_, ()| Ok(0))?,
    )?;
    ngx.set("timer", timer)
}
