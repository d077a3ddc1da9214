//! One Lua state: LuaJIT with the sandboxed standard library, the `ngx` API, the
//! configuration's scripts compiled once, an instruction budget per call and a memory bound.

use crate::budget::Budget;
use crate::gate::{Gate, Stuck};
use crate::runner::{self, Yielded};
use crate::shared::SharedDict;
use crate::view::{Outside, View};
use crate::wait::{Pending, Resumed};
use crate::worker::WorkerId;
use mlua::{Function, Lua, LuaOptions, RegistryKey, StdLib, Thread};
use sluice_config::{LuaCode, LuaSettings};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Runners kept at rest per state: as many as calls that wait at once, up to this.
const MAX_IDLE_RUNNERS: usize = 64;

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

/// Where a call that may wait stands after a slice of it ran.
pub(crate) enum Step {
    /// It ended.
    Ended(Ended),
    /// It waits for this; resume it with the result ([`State::resume`]).
    Waiting(Run, Pending),
}

/// A call waiting on its runner: the coroutine and the instructions it has run so far
/// (the budget is the call's, across its waits).
pub(crate) struct Run {
    /// `None` once resumed.
    thread: Option<Thread>,
    ticks: u64,
    gate: Arc<Gate>,
}

/// A call dropped while it waits (its request went away) drops its runner under the gate:
/// dropping an mlua value changes the state (its reference slot), and runners are resumed
/// through LuaJIT's C API without mlua's own lock (`runner.rs`), so the gate is what keeps
/// that change from racing a call on another thread. Where a stuck call holds the state,
/// the runner is left to it (a reference slot, not a wait on this thread).
impl Drop for Run {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            match self.gate.enter() {
                Ok(_gate) => drop(thread),
                Err(Stuck) => std::mem::forget(thread),
            }
        }
    }
}

/// A Lua state and what it needs to run calls: one thread in it at a time (`gate`, which
/// holds the runners at rest). What touches the state from outside a call (a waiting
/// call's runner dropped, the memory read) takes the gate too: runners run without mlua's
/// lock.
pub(crate) struct State {
    lua: Lua,
    gate: Arc<Gate>,
    /// Bytes the state held when last read (what `/metrics` shows while a call holds it).
    memory: AtomicUsize,
    /// Makes a runner: a coroutine that runs calls which may wait.
    new_runner: Option<Function>,
    /// The configuration's scripts, compiled in this state, by script number: the
    /// functions, and their registry references (what a runner starts, `runner.rs`).
    functions: Vec<Function>,
    references: Vec<std::ffi::c_int>,
    /// The instruction budget (`budget.rs`), where `max_instructions` sets one.
    budget: Option<Arc<Budget>>,
    /// Whether the call in progress passed its budget (the budget's flag, or one that
    /// stays false).
    over: Arc<AtomicBool>,
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

/// Runners dropped at `ngx.exit`, for the tests to tell that path ran.
#[cfg(test)]
pub(crate) static EXITED_RUNNERS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// The `jit` table a budgeted state's scripts see, or one whose compiler is off: version and
/// status as they are, and switches that do nothing (a script that turned the compiler back on
/// would outrun the budget: LuaJIT calls no hook from compiled code, `budget.rs`). Called with
/// `true`, it turns the compiler off first.
const JIT_SWITCHES: &str = r#"
local off = ...
if off then jit.off() jit.flush() end
local real, nothing = jit, function() end
jit = { version = real.version, version_num = real.version_num, os = real.os, arch = real.arch,
        on = nothing, off = nothing, flush = nothing, status = real.status }
package.loaded.jit = jit
"#;

/// What scripts do not get: the functions of `os` that touch the process or the file system;
/// `newproxy`, whose `__gc` finalizers run where neither the count hook nor an error can stop
/// them (LuaJIT runs finalizers with hooks off, and a `pcall` there catches the budget's
/// error); `jit.profile`, whose callback raising an error exits the process, and `jit.util`,
/// which reads any function's bytecode and constants.
const REMOVED: &str = r#"
for _, name in ipairs({ "execute", "exit", "remove", "rename", "tmpname", "setlocale", "getenv" }) do
    os[name] = nil
end
newproxy = nil
for _, name in ipairs({ "jit.profile", "jit.util" }) do
    package.loaded[name] = nil
    package.preload[name] = nil
end
"#;

/// `load`, `loadstring`, `loadfile` and `dofile` take source text only: LuaJIT checks no
/// bytecode it loads, and a crafted binary chunk can read and write the process's memory.
/// lua-nginx-module loads bytecode; the configuration's scripts and `require`d modules are
/// the operator's and still may (they do not go through these functions).
const TEXT_ONLY: &str = r#"
local load_, loadfile_, error = load, loadfile, error
load = function(chunk, name, _, env) return load_(chunk, name, "t", env) end
loadstring = function(s, name) return load_(s, name, "t") end
loadfile = function(file, _, env)
    if file == nil then return nil, "loadfile: no standard input for scripts; give a file name" end
    return loadfile_(file, "t", env)
end
dofile = function(file)
    local f, err = loadfile_(file, "t")
    if not f then error(err, 2) end
    return f()
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
        // With a budget, the JIT compiler runs only with polls in every chunk.
        let polled = budgeted && settings.jit;
        let lua = Lua::new_with(libs(), LuaOptions::new()).map_err(|e| e.to_string())?;
        let max_memory = usize::try_from(settings.max_memory).unwrap_or(usize::MAX);
        let limited = lua.set_memory_limit(max_memory).is_ok();
        lua.set_app_data(Outside(std::cell::Cell::new("init")));
        lua.set_app_data(WorkerId(worker));
        lua.set_app_data(crate::output::OutputLimit(max_memory));
        let budget = budgeted.then(|| {
            Budget::new(
                settings.max_instructions,
                lua.current_thread().state(),
                polled,
            )
        });
        let over = budget
            .as_ref()
            .map_or_else(|| Arc::new(AtomicBool::new(false)), |b| b.over.clone());
        let setup = |lua: &Lua, state: std::sync::Weak<State>| -> mlua::Result<Function> {
            lua.load(REMOVED).set_name("=sluice").exec()?;
            crate::pattern::install(lua)?;
            match &budget {
                Some(budget) if polled => crate::budget::loaders::install(lua, budget)?,
                _ => lua.load(TEXT_ONLY).set_name("=sluice").exec()?,
            }
            if budgeted || !settings.jit {
                let off = !settings.jit;
                lua.load(JIT_SWITCHES).set_name("=sluice").call::<()>(off)?;
            }
            if settings.jit {
                lua.set_app_data(crate::ffi_lib::JitOn);
            }
            if let Some(path) = &settings.package_path {
                let package: mlua::Table = lua.globals().get("package")?;
                let default: String = package.get("path")?;
                package.set("path", path.replace(";;", &format!(";{default};")))?;
            }
            let flag = over.clone();
            let over_budget = crate::guard::function(lua, "ngx._over_budget", move |_, ()| {
                Ok(flag.load(Ordering::Relaxed))
            })?;
            // Timers hold the state weakly: a strong handle in its own functions would keep
            // it alive for ever.
            let run_timer: crate::api::TimerRunner = Arc::new(move |key| {
                if let Some(state) = state.upgrade() {
                    state.run_timer(key);
                }
            });
            crate::api::install(lua, dicts, over_budget, run_timer, runner::markers())
        };
        // Built in place so that timers can hold the state weakly (a strong handle in the
        // state's own functions would keep it alive for ever); a failure is noted here.
        let mut failure = None;
        let state = Arc::new_cyclic(|weak: &std::sync::Weak<State>| {
            let mut new_runner = None;
            let functions: Vec<Function> = setup(&lua, weak.clone())
                .map_err(|e| e.to_string())
                .and_then(|runner| {
                    new_runner = Some(runner);
                    scripts
                        .iter()
                        .map(|code| compile(&lua, code, polled))
                        .collect()
                })
                .unwrap_or_else(|e| {
                    failure = Some(e);
                    Vec::new()
                });
            let references = functions
                .iter()
                .map(|f| runner::reference(&lua, f))
                .collect::<mlua::Result<Vec<_>>>()
                .unwrap_or_else(|e| {
                    failure.get_or_insert(e.to_string());
                    Vec::new()
                });
            State {
                lua,
                gate: Arc::new(Gate::default()),
                memory: AtomicUsize::new(0),
                new_runner,
                functions,
                references,
                budget: budget.clone(),
                over: over.clone(),
                max_memory,
                limited,
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        if let Some(init) = &settings.init {
            let f = compile(&state.lua, init, polled)?;
            let _gate = state.gate.enter().map_err(|e| e.to_string())?;
            state.start_call();
            let _running = state.budget.as_deref().map(Budget::enter);
            f.call::<()>(()).map_err(|e| format!("[lua] init: {e}"))?;
        }
        if let Some(o) = state.lua.app_data_ref::<Outside>() {
            o.0.set("timer");
        }
        Ok(state)
    }

    fn start_call(&self) {
        if let Some(b) = &self.budget {
            b.ticks.store(0, Ordering::Relaxed);
        }
        self.over.store(false, Ordering::Relaxed);
    }

    /// Runs script `script` on `view` (moved in for the call and back out after it), to its
    /// end: the phases that may not wait.
    pub(crate) fn call(&self, script: usize, view: &mut View) -> Ended {
        let Some(f) = self.functions.get(script) else {
            return Ended::Failed(format!("no script {script} in this state"));
        };
        let _gate = match self.gate.enter() {
            Ok(gate) => gate,
            Err(stuck) => return Ended::Failed(stuck.to_string()),
        };
        self.start_call();
        let result = crate::current::lend(view, || {
            let _running = self.budget.as_deref().map(Budget::enter);
            f.call::<()>(())
        });
        self.keep_within_memory();
        self.ended(view, result.map_err(|e| e.to_string()))
    }

    /// Starts script `script` on `view` on a runner (phases `rewrite` and `access`, which
    /// may wait): its end, or what it waits for.
    pub(crate) fn start(&self, script: usize, view: &mut View) -> Step {
        let (Some(&f), Some(new_runner)) = (self.references.get(script), &self.new_runner) else {
            return Step::Ended(Ended::Failed(format!("no script {script} in this state")));
        };
        let mut idle = match self.gate.enter() {
            Ok(gate) => gate,
            Err(stuck) => return Step::Ended(Ended::Failed(stuck.to_string())),
        };
        let thread = match idle.pop() {
            Some(t) => t,
            None => match new_runner.call::<Thread>(()) {
                Ok(t) => t,
                Err(e) => return Step::Ended(Ended::Failed(e.to_string())),
            },
        };
        self.start_call();
        let yielded = self.slice(&thread, view, || runner::start(&thread, f));
        self.after_slice(&mut idle, thread, yielded, view)
    }

    /// Resumes a call that waited, with what it waited for.
    pub(crate) fn resume(&self, mut run: Run, result: Resumed, view: &mut View) -> Step {
        let mut idle = match self.gate.enter() {
            Ok(gate) => gate,
            Err(stuck) => return Step::Ended(Ended::Failed(stuck.to_string())),
        };
        // Taken under the gate, declared after it: dropped first, with the gate held.
        let Some(thread) = run.thread.take() else {
            return Step::Ended(Ended::Failed("a call resumed twice".into()));
        };
        if let Some(b) = &self.budget {
            b.ticks.store(run.ticks, Ordering::Relaxed);
        }
        self.over.store(false, Ordering::Relaxed);
        let values = match crate::api::outbound::resumed(&self.lua, result) {
            Ok(values) => values,
            Err(e) => return Step::Ended(Ended::Failed(e.to_string())),
        };
        let yielded = self.slice(&thread, view, || runner::of_value(thread.resume(values)));
        self.after_slice(&mut idle, thread, yielded, view)
    }

    /// Runs `thread` from `first` until its call ends or waits, with `view` lent and the
    /// budget running. A bare `coroutine.yield()` of the script's own goes on at once
    /// (OpenResty's too: it yields to the event loop and back).
    fn slice(&self, thread: &Thread, view: &mut View, first: impl FnOnce() -> Yielded) -> Yielded {
        let yielded = crate::current::lend(view, || {
            let _running = self.budget.as_deref().map(Budget::enter);
            let mut yielded = first();
            while yielded == Yielded::Other {
                yielded = runner::go_on(thread);
            }
            yielded
        });
        self.keep_within_memory();
        yielded
    }

    /// The step a slice came to: the runner back at rest when its call ended, or kept
    /// with the call while it waits.
    fn after_slice(
        &self,
        idle: &mut Vec<Thread>,
        thread: Thread,
        yielded: Yielded,
        view: &mut View,
    ) -> Step {
        match yielded {
            // The runner itself failed (out of memory): it is dropped.
            Yielded::Failed(e) => Step::Ended(self.ended(view, Err(e))),
            Yielded::Pending => {
                let Some(mut pending) = view.pending.take() else {
                    return Step::Ended(Ended::Failed("a runner waited for nothing".into()));
                };
                if let Pending::Http(call) = &mut pending {
                    call.max_body = self.max_memory;
                }
                let ticks = self
                    .budget
                    .as_ref()
                    .map_or(0, |b| b.ticks.load(Ordering::Relaxed));
                let gate = self.gate.clone();
                Step::Waiting(
                    Run {
                        thread: Some(thread),
                        ticks,
                        gate,
                    },
                    pending,
                )
            }
            ended @ (Yielded::Done | Yielded::Other | Yielded::Exited) => {
                let result = view.failure.take().map_or(Ok(()), Err);
                // One suspended inside `ngx.exit` is dropped (the collector takes it).
                if ended == Yielded::Exited {
                    #[cfg(test)]
                    EXITED_RUNNERS.fetch_add(1, Ordering::Relaxed);
                } else if idle.len() < MAX_IDLE_RUNNERS {
                    idle.push(thread);
                }
                Step::Ended(self.ended(view, result))
            }
        }
    }

    /// How a call ended, from its result and what it recorded.
    fn ended(&self, view: &View, result: Result<(), String>) -> Ended {
        if let Some(status) = view.exit {
            return Ended::Exit(status);
        }
        match result {
            Ok(()) => Ended::Returned,
            Err(_) if self.over.load(Ordering::Relaxed) => Ended::Stopped,
            Err(e) => Ended::Failed(e),
        }
    }

    /// A timer's callback (`ngx.timer.at`), with no request.
    pub(crate) fn run_timer(&self, key: RegistryKey) {
        let _gate = match self.gate.enter() {
            Ok(gate) => gate,
            Err(stuck) => {
                tracing::error!(target: "sluice::lua", "[lua] timer: {stuck}");
                crate::stats::timer_failed();
                return;
            }
        };
        self.start_call();
        let _running = self.budget.as_deref().map(Budget::enter);
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

    /// Whether the budget's count hook is set now.
    #[cfg(test)]
    pub(crate) fn budget_armed(&self) -> bool {
        self.budget.as_deref().is_some_and(Budget::armed)
    }

    /// Whether a call has held the state for so long that waiters give up on it.
    pub(crate) fn is_stuck(&self) -> bool {
        self.gate.is_stuck()
    }

    /// The state itself, for tests that add functions to it.
    #[cfg(test)]
    pub(crate) fn lua(&self) -> &Lua {
        &self.lua
    }

    /// Whether no call holds the state now.
    #[cfg(test)]
    pub(crate) fn is_free(&self) -> bool {
        self.gate.is_free()
    }

    /// Bytes the state holds now, or when last read where a call holds it now (a reader
    /// does not wait for a call).
    pub(crate) fn used_memory(&self) -> usize {
        if let Some(_gate) = self.gate.enter_if_free() {
            self.memory.store(self.lua.used_memory(), Ordering::Relaxed);
        }
        self.memory.load(Ordering::Relaxed)
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

/// `code` compiled as it is: a syntax error names its file and line (`file:line: message`).
fn compile_plain(lua: &Lua, code: &LuaCode) -> Result<Function, String> {
    lua.load(&*code.source)
        .set_name(code.chunk.as_str())
        .into_function()
        .map_err(|e| match e {
            mlua::Error::SyntaxError { message, .. } => message,
            other => other.to_string(),
        })
}

/// `code` compiled, with the budget's polls where it is `polled`: a syntax error names its
/// file and line (`file:line: message`), as the chunk reads without polls.
fn compile(lua: &Lua, code: &LuaCode, polled: bool) -> Result<Function, String> {
    let plain = compile_plain(lua, code)?;
    if polled {
        drop(plain);
        return crate::budget::loaders::compile(lua, &code.source, &code.chunk)
            .map_err(|e| e.to_string());
    }
    // A plain function where the chunk allows, so that LuaJIT may start a trace at its entry
    // (budget/rewrite.rs); the chunk as it compiled where the wrapper does not (a limit).
    let wrapped = crate::budget::rewrite::wrap(code.source.as_bytes()).and_then(|text| {
        lua.load(text)
            .set_name(code.chunk.as_str())
            .set_mode(mlua::chunk::ChunkMode::Text)
            .call::<Function>(())
            .ok()
    });
    Ok(wrapped.unwrap_or(plain))
}
