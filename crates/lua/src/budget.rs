//! The instruction budget (`[lua] max_instructions`), armed only on a call that runs long.
//!
//! LuaJIT counts instructions for a count hook by sending every bytecode through its hook
//! dispatch while the hook is set, and a script's bytecode ran about twice as many machine
//! instructions with it (`bench/lua --instructions`: 640 of the five-line script's ~8,700 per
//! request). Nearly every call ends within microseconds; the budget is for the one that does
//! not. So no hook is set while calls run: a watchdog thread looks at each state every
//! [`TICK`], and a call it finds running at two looks in a row (running for one to two
//! ticks) gets a signal on its thread, whose handler sets the count hook there, as LuaJIT's
//! own `luajit` does from its SIGINT handler. From then on the call has `max_instructions`
//! left; its end takes the hook off.
//!
//! LuaJIT calls no hook from compiled code. With the JIT compiler on (the default; `[lua] jit =
//! false` turns it off), the handler also raises a flag that compiled
//! code polls: every chunk is compiled with a poll at each place where it can go round again
//! ([`rewrite`]), and a poll that finds the flag up turns the JIT compiler off and flushes
//! the compiled code ([`loaders`]), after which the hook counts. The call's end turns the
//! compiler back on. A state with a chunk that cannot carry polls runs with the JIT off.

#![expect(
    unsafe_code,
    reason = "a signal handler and a count hook over LuaJIT's C API"
)]

use mlua::ffi;
use std::cell::Cell;
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering, compiler_fence};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;

pub(crate) mod loaders;
pub(crate) mod rewrite;

unsafe extern "C" {
    /// LuaJIT's switch for its compiler (`luajit.h`), which mlua does not declare.
    fn luaJIT_setmode(l: *mut ffi::lua_State, idx: c_int, mode: c_int) -> c_int;
}
/// `LUAJIT_MODE_ENGINE | LUAJIT_MODE_ON`: the whole compiler on.
const JIT_ENGINE_ON: c_int = 0x0100;

/// How often the watchdog looks at the states' calls.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// Instructions between two looks at the budget, once armed.
pub(crate) const HOOK_EVERY: u32 = 1000;

/// What a stopped script's error says.
const STOPPED: &std::ffi::CStr =
    c"the script ran past its instruction budget ([lua] max_instructions) and was stopped";

/// One state's budget and what the watchdog sees of its calls.
#[derive(Debug)]
pub(crate) struct Budget {
    /// Ticks (of [`HOOK_EVERY`] instructions) a call may run once armed.
    limit: u64,
    /// Ticks of the call in progress.
    pub(crate) ticks: AtomicU64,
    /// Whether the call in progress ran past its budget.
    pub(crate) over: Arc<AtomicBool>,
    /// Odd while a call runs: one more at each call's start and end.
    calls: AtomicU64,
    /// `calls` as the watchdog saw it last.
    seen: AtomicU64,
    /// The kernel's id of the thread running the call.
    thread: AtomicI32,
    /// The state's main thread (the hook is the whole state's).
    main: usize,
    /// Whether the state's code may be compiled: every chunk carries polls (cleared for good
    /// when one cannot, [`loaders`]).
    pub(crate) jit: AtomicBool,
}

thread_local! {
    /// The state of the call running on this thread and its budget, or null: what the
    /// signal handler and the hook read (constant-initialised cells without destructors, so
    /// a plain read of thread-local storage, which a signal handler may do).
    static RUNNING: Cell<(*mut ffi::lua_State, *const Budget)> =
        const { Cell::new((ptr::null_mut(), ptr::null())) };
    /// This thread's kernel id, once asked (0 until then).
    static TID: Cell<i32> = const { Cell::new(0) };
    /// Raised by the signal handler, taken down by the poll that sees it (or the call's end).
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

/// The poll compiled code calls through the FFI (a trace keeps a call; it would hoist a load
/// out of the loop): 1 once, when the budget of the call on this thread has been armed.
pub(crate) extern "C" fn poll() -> c_int {
    // No panic may unwind into the trace. `try_with` answers an error (here: not armed)
    // where `with` would panic, on a thread whose locals are being destroyed; catch_unwind
    // is the guard for anything else (it costs nothing until a panic).
    let armed = std::panic::catch_unwind(|| ARMED.try_with(|a| a.replace(false)));
    c_int::from(matches!(armed, Ok(Ok(true))))
}

impl Budget {
    /// A budget of `max_instructions` for the state whose main thread is `main`, watched.
    /// `jit`: whether the state's chunks carry polls and its compiler runs.
    pub(crate) fn new(max_instructions: u64, main: *mut ffi::lua_State, jit: bool) -> Arc<Budget> {
        let budget = Arc::new(Budget {
            limit: max_instructions.div_ceil(u64::from(HOOK_EVERY)).max(1),
            ticks: AtomicU64::new(0),
            over: Arc::new(AtomicBool::new(false)),
            calls: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            thread: AtomicI32::new(0),
            main: main as usize,
            jit: AtomicBool::new(jit),
        });
        watch(Arc::downgrade(&budget));
        budget
    }

    /// Marks a call (or a slice of one, between its waits) as running on this thread until
    /// the guard drops.
    pub(crate) fn enter(&self) -> Running<'_> {
        let tid = TID.with(|t| {
            if t.get() == 0 {
                // SAFETY: gettid has no preconditions.
                t.set(unsafe { libc::gettid() });
            }
            t.get()
        });
        let main = self.main as *mut ffi::lua_State;
        let previous = RUNNING.with(|r| r.replace((main, ptr::from_ref(self))));
        self.thread.store(tid, Ordering::Relaxed);
        bump(&self.calls);
        Running {
            budget: self,
            previous,
        }
    }

    /// One more tick of the running call; true once past the budget (then `over` is set).
    fn tick(&self) -> bool {
        let past = self.ticks.fetch_add(1, Ordering::Relaxed) + 1 > self.limit;
        if past {
            self.over.store(true, Ordering::Relaxed);
        }
        past
    }

    /// Whether the count hook is set on the state now.
    #[cfg(test)]
    pub(crate) fn armed(&self) -> bool {
        // SAFETY: reading the hook mask of a live state (the budget lives in its `State`).
        unsafe { ffi::lua_gethookmask(self.main as *mut ffi::lua_State) != 0 }
    }
}

/// One more on a call counter that only the thread holding the state's gate writes (calls
/// start and end under it): a load and a store, where a read-modify-write would lock the
/// cache line for nothing.
fn bump(calls: &AtomicU64) {
    calls.store(
        calls.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Release,
    );
}

/// A call running; dropped when it ends or waits, which takes the hook off.
pub(crate) struct Running<'a> {
    budget: &'a Budget,
    previous: (*mut ffi::lua_State, *const Budget),
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(self.previous));
        // The handler arms only while the slot names a state: once it is cleared, the check
        // below sees any arming that came before.
        compiler_fence(Ordering::SeqCst);
        ARMED.with(|a| a.set(false));
        bump(&self.budget.calls);
        let main = self.budget.main as *mut ffi::lua_State;
        // SAFETY: the state is alive (the budget lives in it) and no Lua code runs on it now
        // (the call just ended or yielded on this thread, which holds the state's gate). A
        // call that was armed may have turned the compiler off at a poll: on again.
        unsafe {
            if ffi::lua_gethookmask(main) != 0 {
                ffi::lua_sethook(main, None, 0, 0);
                if self.budget.jit.load(Ordering::Relaxed) {
                    luaJIT_setmode(main, 0, JIT_ENGINE_ON);
                }
            }
        }
    }
}

/// For work that runs inside one C call, where the count hook cannot see it (a Lua
/// pattern's matcher, `crate::pattern`): one tick of [`HOOK_EVERY`] steps, counted once the
/// running call's budget is armed. True when the call is past its budget: its error
/// ([`stopped_text`]) is then due, and `pcall` passes it on as it does the hook's.
pub(crate) fn charge_tick() -> bool {
    let Ok((main, budget)) = RUNNING.try_with(Cell::get) else {
        return false;
    };
    // SAFETY: the slot names the state and budget of the call running on this thread (set by
    // `enter`, cleared when its guard drops), which the state keeps alive; reading the hook
    // mask of the state that runs on this thread.
    unsafe {
        let Some(budget) = budget.as_ref() else {
            return false;
        };
        if ffi::lua_gethookmask(main) == 0 {
            return false;
        }
        budget.tick()
    }
}

/// What a stopped call's error says.
pub(crate) fn stopped_text() -> &'static str {
    STOPPED.to_str().unwrap_or("stopped")
}

/// The count hook: one tick per [`HOOK_EVERY`] instructions; past the budget an error,
/// raised again at each tick should the script catch it.
unsafe extern "C-unwind" fn count_hook(l: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
    let (_, budget) = RUNNING.with(Cell::get);
    // SAFETY: the slot names the budget of the call running on this thread (set by
    // `enter`, cleared when its guard drops), which its state keeps alive; raising the
    // error from a hook unwinds this frame, which holds nothing to drop.
    unsafe {
        let Some(budget) = budget.as_ref() else {
            return;
        };
        if budget.tick() {
            ffi::lua_pushstring(l, STOPPED.as_ptr());
            ffi::lua_error(l);
        }
    }
}

/// The watchdog's signal: sets the count hook on the state whose call runs on this thread,
/// and the flag its compiled code polls.
extern "C" fn on_signal(_: c_int) {
    // No panic may unwind out of the handler: `try_with` where `with` would panic (a
    // signal on a thread whose locals are being destroyed finds no call to stop), inside
    // catch_unwind for anything else.
    let _ = std::panic::catch_unwind(arm);
}

/// [`on_signal`]'s work.
fn arm() {
    let Ok((l, _)) = RUNNING.try_with(Cell::get) else {
        return;
    };
    if !l.is_null() {
        let _ = ARMED.try_with(|a| a.set(true));
        // SAFETY: `lua_sethook` only writes the state's hook fields and dispatch table, which
        // LuaJIT allows from a signal handler interrupting that state (its `luajit` does so
        // on SIGINT); `l` is the state of the call this handler interrupted.
        unsafe {
            ffi::lua_sethook(l, Some(count_hook), ffi::LUA_MASKCOUNT, HOOK_EVERY as c_int);
        }
    }
}

/// The signal the watchdog sends: a real-time one nothing else in the process uses.
fn signal_number() -> c_int {
    libc::SIGRTMIN() + 6
}

/// Adds `budget` to what the watchdog looks at; the first one starts it.
fn watch(budget: Weak<Budget>) {
    static WATCHED: Mutex<Vec<Weak<Budget>>> = Mutex::new(Vec::new());
    static START: Once = Once::new();
    WATCHED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(budget);
    START.call_once(|| {
        // SAFETY: a handler that only reads and writes thread-local cells and calls
        // `lua_sethook`;
        // SA_RESTART so that a signal landing after the call ended restarts the system call
        // it interrupts.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal_number(), &action, ptr::null_mut());
        }
        let spawned = std::thread::Builder::new()
            .name("sluice-lua-watchdog".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TICK);
                    let mut watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
                    watched.retain(|b| b.strong_count() > 0);
                    for budget in watched.iter().filter_map(Weak::upgrade) {
                        look(&budget);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(target: "sluice::lua", "[lua] no watchdog thread ({e}): the instruction budget cannot stop a script");
        }
    });
}

/// One look at a state: a call running at this look and the last is signalled.
fn look(budget: &Budget) {
    let calls = budget.calls.load(Ordering::Acquire);
    let before = budget.seen.swap(calls, Ordering::Relaxed);
    if calls % 2 == 1 && calls == before {
        let tid = budget.thread.load(Ordering::Relaxed);
        // SAFETY: tgkill to a thread of this process (by its kernel id); a thread that has
        // ended since is ESRCH, one that has moved on runs the handler with nothing to arm.
        unsafe {
            libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, signal_number());
        }
    }
}
