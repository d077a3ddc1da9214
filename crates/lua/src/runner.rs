//! Resuming a runner, the coroutine that runs the calls of `rewrite` and `access` scripts
//! (`api/mod.rs`'s prelude: it runs the function it is given, yields [`DONE`], takes the
//! next), through LuaJIT's C API.
//!
//! mlua's `Thread::resume` pushes its arguments on the main stack, moves them to the
//! coroutine's, moves the results back and converts them into values: ~350 instructions per
//! call in `bench/lua --instructions`, more than the five-line script's own bytecode. Here a
//! call's function goes from the registry straight onto the runner's stack and the yielded
//! marker is read where it lies. A call that waited is resumed through mlua (its results are
//! values to convert anyway); what the runner yields then is read by [`of_value`].
//!
//! mlua's resume holds mlua's lock, which keeps other threads from changing the state
//! meanwhile (an mlua value dropped elsewhere frees its reference slot in the state). These
//! resumes run under the state's gate instead (`state.rs`), and what could change the state
//! from outside a call takes the gate too: a waiting call's runner dropped with its request
//! (`Run`'s `Drop`), the memory read for `/status`.

#![expect(unsafe_code, reason = "lua_resume of a runner on its own stack")]

use mlua::{Function, LightUserData, Lua, Thread, Value, ffi};
use std::ffi::c_int;

/// What a runner yields when its call is done, and when the call waits: addresses no Lua
/// code can forge (a light userdata is made only from Rust or `ffi`, which scripts lack).
/// Different values, so that the two can never be merged into one address.
static DONE: u8 = 0;
static PENDING: u8 = 1;
static EXITED: u8 = 2;

/// The markers as Lua values, for the prelude: (done, pending, exited).
pub(crate) fn markers() -> (Value, Value, Value) {
    let of = |m: &'static u8| {
        Value::LightUserData(LightUserData(std::ptr::from_ref(m).cast_mut().cast()))
    };
    (of(&DONE), of(&PENDING), of(&EXITED))
}

/// Where a runner stands after a resume.
#[derive(Debug, PartialEq)]
pub(crate) enum Yielded {
    /// Its call ended (how is in the view).
    Done,
    /// Its call waits for what it left in the view.
    Pending,
    /// Its call ended at `ngx.exit` (or `ngx.redirect`), the runner suspended inside it:
    /// the runner is dropped, never resumed.
    Exited,
    /// The script's own `coroutine.yield()`: it goes on at once.
    Other,
    /// The runner itself failed (out of memory): it is dropped.
    Failed(String),
}

fn of_pointer(p: *const std::ffi::c_void) -> Yielded {
    if std::ptr::eq(p.cast(), &DONE) {
        Yielded::Done
    } else if std::ptr::eq(p.cast(), &PENDING) {
        Yielded::Pending
    } else if std::ptr::eq(p.cast(), &EXITED) {
        Yielded::Exited
    } else {
        Yielded::Other
    }
}

/// What a runner resumed through mlua yielded.
pub(crate) fn of_value(result: mlua::Result<Value>) -> Yielded {
    match result {
        Ok(Value::LightUserData(p)) => of_pointer(p.0.cast_const()),
        Ok(_) => Yielded::Other,
        Err(e) => Yielded::Failed(e.to_string()),
    }
}

/// `f`'s reference in the registry, which every coroutine of the state reads.
pub(crate) fn reference(lua: &Lua, f: &Function) -> mlua::Result<c_int> {
    // SAFETY: `exec_raw` pushes `f` and protects the call; `luaL_ref` pops it into the
    // registry and the reference pushed is the one result.
    unsafe {
        lua.exec_raw::<c_int>(f.clone(), |l| {
            let r = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            ffi::lua_pushinteger(l, ffi::lua_Integer::from(r));
        })
    }
}

/// Starts the function at registry reference `f` on `runner`, a new runner or one whose
/// last call is done; what it yields first.
///
/// The caller holds the state's gate (one thread in the state at a time, and no mlua value
/// of it dropped meanwhile) and `f` is a reference from [`reference`] in the runner's
/// state.
pub(crate) fn start(runner: &Thread, f: c_int) -> Yielded {
    let co = runner.state();
    // SAFETY: `co` is a live coroutine of this state (the `Thread` anchors it) that no
    // other thread runs (the gate). A runner at rest is either new (its body function
    // alone on its stack, status 0) or yielded with nothing on its stack (`resume`
    // empties it), which is what `lua_resume` needs under the arguments. A new coroutine
    // has LuaJIT's initial stack (2 x LUA_MINSTACK slots); a yielded runner's stack kept
    // the slot its marker took: the reference's slot is there without growing it (which
    // could fail outside a protected call).
    unsafe {
        let fresh = ffi::lua_status(co) == 0;
        if (fresh && ffi::lua_gettop(co) != 1) || ffi::lua_checkstack(co, 1) == 0 {
            return Yielded::Failed("a runner not at rest".into());
        }
        ffi::lua_rawgeti(co, ffi::LUA_REGISTRYINDEX, ffi::lua_Integer::from(f));
        resume(co, 1)
    }
}

/// Resumes `runner` after a bare `coroutine.yield()` of its script, with no values.
pub(crate) fn go_on(runner: &Thread) -> Yielded {
    // SAFETY: as in `start`: a yielded runner with an empty stack, run by this thread only.
    unsafe { resume(runner.state(), 0) }
}

/// Resumes `co` with the `nargs` values on top of its stack, reads what it yielded and
/// empties its stack.
///
/// # Safety
/// `co` is a resumable coroutine no other thread runs, with `nargs` values on its stack
/// (and its body function under them, when new).
unsafe fn resume(co: *mut ffi::lua_State, nargs: c_int) -> Yielded {
    // SAFETY: as the function's contract says; `lua_resume` runs the coroutine under its
    // own error handling and leaves the yielded values, or the error, on its stack.
    unsafe {
        let status = ffi::lua_resume_(co, nargs);
        let out = match status {
            ffi::LUA_YIELD if ffi::lua_gettop(co) == 1 => match ffi::lua_type(co, 1) {
                ffi::LUA_TLIGHTUSERDATA => of_pointer(ffi::lua_touserdata(co, 1).cast_const()),
                _ => Yielded::Other,
            },
            ffi::LUA_YIELD => Yielded::Other,
            ffi::LUA_OK => Yielded::Failed("a runner returned".into()),
            _ => Yielded::Failed(error_at_top(co)),
        };
        ffi::lua_settop(co, 0);
        out
    }
}

/// The message of the error on top of `co`'s stack.
///
/// # Safety
/// `co` is a coroutine whose resume failed, its error on top of its stack.
unsafe fn error_at_top(co: *mut ffi::lua_State) -> String {
    // SAFETY: reading a string in place; it is copied before the stack is emptied.
    unsafe {
        let mut len = 0usize;
        let p = match ffi::lua_type(co, -1) {
            ffi::LUA_TSTRING => ffi::lua_tolstring(co, -1, &mut len),
            _ => std::ptr::null(),
        };
        if p.is_null() {
            return "a runner failed (error object is not a string)".into();
        }
        String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"
        local DONE = ...
        return function()
            return coroutine.create(function(f)
                while true do
                    f()
                    f = coroutine.yield(DONE)
                end
            end)
        end
    "#;

    fn runner(lua: &Lua) -> Thread {
        let (done, _, _) = markers();
        let make: Function = lua.load(BODY).call(done).unwrap();
        make.call(()).unwrap()
    }

    #[test]
    fn a_runner_runs_call_after_call_and_its_stack_stays_empty() {
        let lua = Lua::new();
        let co = runner(&lua);
        let f = lua
            .load("n = (n or 0) + 1; local s = {} for i = 1, 40 do s[i] = i end")
            .into_function()
            .unwrap();
        let r = reference(&lua, &f).unwrap();
        for i in 1..=100 {
            assert_eq!(start(&co, r), Yielded::Done);
            // SAFETY: reading the top of a coroutine this thread holds.
            assert_eq!(unsafe { ffi::lua_gettop(co.state()) }, 0, "call {i}");
        }
        assert_eq!(lua.globals().get::<i64>("n").unwrap(), 100);
    }

    #[test]
    fn a_bare_yield_and_a_wait_are_told_apart_and_resumed() {
        let lua = Lua::new();
        let co = runner(&lua);
        let (_, pending, _) = markers();
        lua.globals().set("PENDING", pending).unwrap();
        let f = lua
            .load("coroutine.yield() ; coroutine.yield(PENDING) ; coroutine.yield(1, 2) ; done = true")
            .into_function()
            .unwrap();
        let r = reference(&lua, &f).unwrap();
        assert_eq!(start(&co, r), Yielded::Other);
        assert_eq!(go_on(&co), Yielded::Pending);
        assert_eq!(of_value(co.resume::<Value>("waited")), Yielded::Other);
        assert_eq!(go_on(&co), Yielded::Done);
        assert!(lua.globals().get::<bool>("done").unwrap());
        assert_eq!(
            start(&co, r),
            Yielded::Other,
            "the runner takes the next call"
        );
    }

    #[test]
    fn a_runner_that_fails_says_why_and_a_dead_one_is_refused() {
        let lua = Lua::new();
        let co = lua
            .load("return coroutine.create(function(f) f() error('runner broke') end)")
            .eval::<Thread>()
            .unwrap();
        let f = lua.load("local x = 1").into_function().unwrap();
        let r = reference(&lua, &f).unwrap();
        match start(&co, r) {
            Yielded::Failed(m) => assert!(m.contains("runner broke"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(start(&co, r), Yielded::Failed(_)), "dead runner");
    }
}
