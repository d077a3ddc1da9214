//! One Lua state: LuaJIT with the sandboxed standard library, the `ngx` API, the
//! configuration's scripts compiled once, an instruction budget per call and a memory bound.

use crate::shared::SharedDict;
use crate::view::{Current, View};
use crate::worker::WorkerId;
use mlua::{Function, HookTriggers, Lua, LuaOptions, RegistryKey, StdLib, VmState};
use sluice_config::{LuaCode, LuaSettings};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Instructions between two looks at the budget.
const HOOK_EVERY: u32 = 1000;

/// How a call ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The script returned.
    Returned,
    /// `ngx.exit`/`ngx.redirect` with this status.
    Exit(i64),
    /// A runtime error (its message and traceback).
    Failed(String),
    /// Stopped at its instruction budget.
    Stopped,
}

/// A Lua state and what it needs to run calls: one thread in it at a time (`gate`).
pub(crate) struct State {
    lua: Lua,
    gate: Mutex<()>,
    /// The configuration's scripts, compiled in this state, by script number.
    functions: Vec<Function>,
    /// Hook ticks of the call in progress, and whether it passed its budget.
    ticks: Arc<AtomicU64>,
    over: Arc<AtomicBool>,
    budgeted: bool,
    max_memory: usize,
    /// Whether the allocator enforces `max_memory` (else it is checked after calls).
    limited: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("scripts", &self.functions.len())
            .finish()
    }
}

/// The standard library a script gets: no `io` (it blocks), no `ffi` or `debug` (they can
/// take the process down). LuaJIT's base library holds `coroutine` (Lua 5.1's layout).
fn libs() -> StdLib {
    StdLib::TABLE
        | StdLib::STRING
        | StdLib::BIT
        | StdLib::MATH
        | StdLib::PACKAGE
        | StdLib::OS
        | StdLib::JIT
}

/// With an instruction budget the JIT compiler is off: LuaJIT calls no hook from compiled
/// code, so a compiled loop would never meet its budget. `jit` stays for the scripts that
/// read its version, with switches that do nothing.
const JIT_OFF: &str = r#"
jit.off()
jit.flush()
local version, version_num, os_name, arch = jit.version, jit.version_num, jit.os, jit.arch
local function nothing() end
jit = { version = version, version_num = version_num, os = os_name, arch = arch,
        on = nothing, off = nothing, flush = nothing,
        status = function() return false end }
package.loaded.jit = jit
"#;

/// The functions of `os` that touch the process or the file system go.
const OS_REMOVED: &str = r#"
for _, name in ipairs({ "execute", "exit", "remove", "rename", "tmpname", "setlocale", "getenv" }) do
    os[name] = nil
end
"#;

impl State {
    /// A state for `settings` with `scripts` compiled in it (script number = index); the
    /// first compile error, with its file and line, when one does not compile.
    pub(crate) fn new(
        settings: &LuaSettings,
        dicts: &[Arc<SharedDict>],
        scripts: &[LuaCode],
        worker: usize,
    ) -> Result<Arc<State>, String> {
        let budgeted = settings.max_instructions > 0;
        let lua = Lua::new_with(libs(), LuaOptions::new()).map_err(|e| e.to_string())?;
        let max_memory = usize::try_from(settings.max_memory).unwrap_or(usize::MAX);
        let limited = lua.set_memory_limit(max_memory).is_ok();
        lua.set_app_data(Current::default());
        lua.set_app_data(WorkerId(worker));
        let ticks = Arc::new(AtomicU64::new(0));
        let over = Arc::new(AtomicBool::new(false));
        let setup = |lua: &Lua, state: std::sync::Weak<State>| -> mlua::Result<()> {
            lua.load(OS_REMOVED).set_name("=sluice").exec()?;
            if budgeted {
                lua.load(JIT_OFF).set_name("=sluice").exec()?;
            }
            if let Some(path) = &settings.package_path {
                let package: mlua::Table = lua.globals().get("package")?;
                let default: String = package.get("path")?;
                package.set("path", path.replace(";;", &format!(";{default};")))?;
            }
            let flag = over.clone();
            let over_budget = lua.create_function(move |_, ()| Ok(flag.load(Ordering::Relaxed)))?;
            // Timers hold the state weakly: a strong handle in its own functions would keep
            // it alive for ever.
            let run_timer: crate::api::TimerRunner = Arc::new(move |key| {
                if let Some(state) = state.upgrade() {
                    state.run_timer(key);
                }
            });
            crate::api::install(lua, dicts, over_budget, run_timer)
        };
        // Built in place so that timers can hold the state weakly (a strong handle in the
        // state's own functions would keep it alive for ever); a failure is noted here.
        let mut failure = None;
        let state = Arc::new_cyclic(|weak: &std::sync::Weak<State>| {
            let functions = setup(&lua, weak.clone())
                .map_err(|e| e.to_string())
                .and_then(|()| scripts.iter().map(|code| compile(&lua, code)).collect())
                .unwrap_or_else(|e| {
                    failure = Some(e);
                    Vec::new()
                });
            State {
                lua,
                gate: Mutex::new(()),
                functions,
                ticks: ticks.clone(),
                over: over.clone(),
                budgeted,
                max_memory,
                limited,
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        state.arm_budget(settings.max_instructions);
        if let Some(init) = &settings.init {
            let f = compile(&state.lua, init)?;
            let _gate = state.lock();
            state.start_call();
            f.call::<()>(()).map_err(|e| format!("[lua] init: {e}"))?;
        }
        Ok(state)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The instruction hook: every [`HOOK_EVERY`] instructions one tick; past the budget the
    /// call gets an error (and again at each tick, should it catch one).
    fn arm_budget(&self, max_instructions: u64) {
        if !self.budgeted {
            return;
        }
        let limit = max_instructions.div_ceil(u64::from(HOOK_EVERY)).max(1);
        let (ticks, over) = (self.ticks.clone(), self.over.clone());
        // Refused only on Luau.
        let _ = self.lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                if ticks.fetch_add(1, Ordering::Relaxed) + 1 > limit {
                    over.store(true, Ordering::Relaxed);
                    return Err(mlua::Error::runtime(
                        "the script ran past its instruction budget ([lua] max_instructions) and was stopped",
                    ));
                }
                Ok(VmState::Continue)
            },
        );
    }

    fn start_call(&self) {
        self.ticks.store(0, Ordering::Relaxed);
        self.over.store(false, Ordering::Relaxed);
    }

    /// Runs script `script` on `view` (moved in for the call and back out after it).
    pub(crate) fn call(&self, script: usize, view: &mut View) -> Ended {
        let Some(f) = self.functions.get(script) else {
            return Ended::Failed(format!("no script {script} in this state"));
        };
        let _gate = self.lock();
        let placeholder = View::new(view.phase, view.facts.clone());
        if let Some(c) = self.lua.app_data_ref::<Current>() {
            *c.0.borrow_mut() = Some(std::mem::replace(view, placeholder));
        }
        self.start_call();
        let result = f.call::<()>(());
        if let Some(c) = self.lua.app_data_ref::<Current>()
            && let Some(v) = c.0.borrow_mut().take()
        {
            *view = v;
        }
        self.keep_within_memory();
        if let Some(status) = view.exit {
            return Ended::Exit(status);
        }
        match result {
            Ok(()) => Ended::Returned,
            Err(_) if self.over.load(Ordering::Relaxed) => Ended::Stopped,
            Err(e) => Ended::Failed(e.to_string()),
        }
    }

    /// A timer's callback (`ngx.timer.at`), with no request.
    pub(crate) fn run_timer(&self, key: RegistryKey) {
        let _gate = self.lock();
        self.start_call();
        let called = self.lua.registry_value::<mlua::Table>(&key).and_then(|t| {
            // { callback, n, args... }: the callback gets `premature` (false) first.
            let f: Function = t.raw_get(1)?;
            let n: usize = t.raw_get(2)?;
            let mut all = mlua::MultiValue::new();
            all.push_back(mlua::Value::Boolean(false));
            for i in 0..n {
                all.push_back(t.raw_get(i + 3)?);
            }
            f.call::<()>(all)
        });
        if let Err(e) = called {
            tracing::error!(target: "sluice::lua", "[lua] timer: {e}");
            crate::stats::timer_failed();
        }
        drop(self.lua.remove_registry_value(key));
        self.keep_within_memory();
    }

    /// Bytes the state holds now.
    pub(crate) fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }

    /// Where the allocator cannot enforce the bound: a full collection when over it
    /// (counted when even that leaves it over; the next allocation-heavy call may fail).
    fn keep_within_memory(&self) {
        if !self.limited && self.lua.used_memory() > self.max_memory {
            let _ = self.lua.gc_collect();
            if self.lua.used_memory() > self.max_memory {
                crate::stats::over_memory();
            }
        }
    }
}

/// `code` compiled: a syntax error names its file and line (`file:line: message`).
fn compile(lua: &Lua, code: &LuaCode) -> Result<Function, String> {
    lua.load(&*code.source)
        .set_name(code.chunk.as_str())
        .into_function()
        .map_err(|e| match e {
            mlua::Error::SyntaxError { message, .. } => message,
            other => other.to_string(),
        })
}
