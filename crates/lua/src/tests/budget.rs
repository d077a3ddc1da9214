//! Under a budget with `[lua] jit = true` the JIT compiler is on and every chunk carries polls (`budget/rewrite.rs`):
//! compiled loops of every shape are stopped, chunks keep their meaning (lines, varargs,
//! environments, errors), and a chunk that cannot carry polls turns the compiler off.

use super::*;

/// A route named `name` whose access script is `script`.
fn route(name: &str, script: &str) -> String {
    format!(
        "[[route]]\nname = \"{name}\"\nupstream = \"u\"\n[route.lua]\naccess = '''\n{script}\n'''\n"
    )
}

/// Runs `name`'s access script; whether it was stopped at its budget.
fn stopped(rt: &LuaRuntime, name: &str) -> bool {
    let before = stats::for_script(name, LuaPhase::Access)
        .stopped
        .load(Ordering::Relaxed);
    let lua = rt.scripts(name).unwrap().request(facts());
    let outcome = run(&lua, LuaPhase::Access, head(&mut get("/")));
    let after = stats::for_script(name, LuaPhase::Access)
        .stopped
        .load(Ordering::Relaxed);
    matches!(outcome, Outcome::Failed) && after == before + 1
}

/// Runs `name`'s access script, which sets `X-Out`; its value.
fn output(rt: &LuaRuntime, name: &str) -> String {
    let lua = rt.scripts(name).unwrap().request(facts());
    let mut req = get("/");
    let outcome = run(&lua, LuaPhase::Access, head(&mut req));
    assert!(matches!(outcome, Outcome::Continue), "{name}: {outcome:?}");
    req.headers()["x-out"].to_str().unwrap().to_owned()
}

#[test]
fn compiled_loops_of_every_shape_meet_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spinner.lua"),
        "local name = ...\nreturn function() local n = 0; while true do n = n + #name end end",
    )
    .unwrap();
    let file = dir.path().join("spin.lua");
    std::fs::write(
        &file,
        "#!/usr/bin/env luajit\nlocal n = 0\nrepeat n = n + 1 until false",
    )
    .unwrap();
    let loops = [
        ("while_loop", "local n = 0; while true do n = n + 1 end".to_owned()),
        ("repeat_loop", "local n = 0; repeat n = n + 1 until n < 0".to_owned()),
        ("for_loop", "local n = 0; for i = 1, math.huge do n = n + i end".to_owned()),
        ("goto_loop", "local n = 0; ::top:: n = n + 1; goto top".to_owned()),
        (
            "tail_calls",
            "local function f(n) return f(n + 1) end; f(0)".to_owned(),
        ),
        (
            "mutual_tail_calls",
            "local o = {}; function o:a(n) return self:b(n + 1) end; function o:b(n) return self:a(n) end; o:a(0)"
                .to_owned(),
        ),
        (
            "caught_in_a_loop",
            "while true do pcall(function() local n = 0; while true do n = n + 1 end end) end".to_owned(),
        ),
        ("loaded", "load('local n = 0; while true do n = n + 1 end')()".to_owned()),
        ("loadstring", "loadstring('local n = 0; for i = 1, 1e300 do n = i end')()".to_owned()),
        (
            "read_by_a_reader",
            "local once = 'while true do end'; load(function() local s = once; once = nil; return s end)()"
                .to_owned(),
        ),
        ("endless_reader", "load(function() return ' ' end)".to_owned()),
        (
            "loaded_from_a_buffer",
            "local b = require('string.buffer').new(); b:put('while true do end'); load(b)()".to_owned(),
        ),
        (
            "loadstring_of_a_buffer",
            "local b = require('string.buffer').new(); b:put('while true do end'); loadstring(b)()".to_owned(),
        ),
        (
            "doubling_recursion",
            "local function f(n) if n == 0 then return 1 end return f(n - 1) + f(n - 1) end; f(60)".to_owned(),
        ),
        (
            "doubling_recursion_of_a_chunk",
            "g = load('local n = ... if n > 0 then g(n - 1) g(n - 1) end'); g(60)".to_owned(),
        ),
        ("required", "require('spinner')()".to_owned()),
        ("dofile", format!("dofile('{}')", file.display())),
    ];
    let mut toml = format!(
        "[lua]\nmax_instructions = 100000\njit = true\npackage_path = \"{}/?.lua;;\"\n",
        dir.path().display()
    );
    for (name, script) in &loops {
        toml.push_str(&route(name, script));
    }
    toml.push_str(&route(
        "probe",
        "ngx.req.set_header('X-Out', tostring(jit.status()))",
    ));
    let rt = runtime(&toml);
    assert_eq!(
        output(&rt, "probe"),
        "true",
        "the compiler is on under a budget"
    );
    for (name, _) in &loops {
        assert!(stopped(&rt, name), "{name} was not stopped");
        assert!(
            !rt.scripts(name)
                .unwrap()
                .request(facts())
                .state()
                .budget_armed()
        );
        assert_eq!(
            output(&rt, "probe"),
            "true",
            "the compiler is back on after {name}"
        );
    }
}

#[test]
fn chunks_keep_their_meaning_with_polls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mod_args.lua"),
        "-- a comment on the first line\nlocal name, extra = ...\nreturn { name = name, extra = extra }",
    )
    .unwrap();
    let script = r##"
local out = {}
-- Errors keep their lines, in loaded chunks and in this one.
local ok, e = pcall(load("local a\n\nerror('boom')", "=chunk"))
out[#out + 1] = e
ok, e = pcall(function() local t = nil; return t.x end)
out[#out + 1] = e:match(":(%d+):")
-- Syntax errors read as LuaJIT's.
local f, err = load("if x then", "=syntax")
out[#out + 1] = err
f, err = loadstring("x = = 1")
out[#out + 1] = err
-- Varargs, returns, environments.
out[#out + 1] = select("#", load("return ...")(1, nil, 3))
out[#out + 1] = load("return x", "=env", "t", { x = "env" })()
local m = require("mod_args")
out[#out + 1] = m.name .. "," .. tostring(m.extra)
-- A loop that ends runs as before, compiled.
local n = 0
for i = 1, 1000 do n = n + i end
local s = 0
repeat s = s + 1 until s == 500
out[#out + 1] = n + s
-- A tail call still is one (no stack growth over a million calls).
local function down(k) if k == 0 then return "bottom" end return down(k - 1) end
out[#out + 1] = down(1000000)
ngx.req.set_header("X-Out", table.concat(out, "|"))
"##;
    let config = |max_instructions: u64| {
        format!(
            "[lua]\nmax_instructions = {max_instructions}\njit = true\npackage_path = \"{}/?.lua;;\"\n{}",
            dir.path().display(),
            route("r", script)
        )
    };
    let polled = output(&runtime(&config(100_000_000)), "r");
    // The same script without a budget compiles without polls: what it reads is the truth.
    assert_eq!(polled, output(&runtime(&config(0)), "r"));
    let line = polled.split('|').nth(1).unwrap();
    assert_eq!(
        polled.replacen(line, "N", 1),
        "chunk:3: boom|N|syntax:1: 'end' expected near '<eof>'|[string \"x = = 1\"]:1: unexpected symbol near '='|3|env|mod_args,nil|501000|bottom"
    );
}

#[test]
fn a_chunk_that_cannot_carry_polls_runs_with_the_compiler_off_and_is_still_stopped() {
    let toml = format!(
        "[lua]\nmax_instructions = 100000\njit = true\n{}{}",
        route(
            "named",
            "local __sluice_poll = 1; local n = 0; while true do n = n + 1 end"
        ),
        route(
            "probe",
            "ngx.req.set_header('X-Out', tostring(jit.status()))"
        )
    );
    let rt = runtime(&toml);
    assert_eq!(output(&rt, "probe"), "false");
    assert!(stopped(&rt, "named"));
    assert_eq!(output(&rt, "probe"), "false", "the compiler stays off");
    // A script cannot turn it back on, nor off in a state that has it on.
    let toml = format!(
        "[lua]\nmax_instructions = 100000\njit = true\n{}",
        route(
            "probe",
            "jit.off(); jit.flush(); ngx.req.set_header('X-Out', tostring(jit.status()))"
        )
    );
    assert_eq!(output(&runtime(&toml), "probe"), "true");
    // The default under a budget is the compiler on, with polls; `jit = false` runs the
    // interpreter alone.
    let probe = route(
        "probe",
        "ngx.req.set_header('X-Out', tostring(jit.status()))",
    );
    let toml = format!("[lua]\nmax_instructions = 100000\n{probe}");
    assert_eq!(output(&runtime(&toml), "probe"), "true");
    let toml = format!("[lua]\nmax_instructions = 100000\njit = false\n{probe}");
    assert_eq!(output(&runtime(&toml), "probe"), "false");
}

/// What could run where no budget reaches is not there: finalizers (`newproxy`), the
/// profiler (its callback's error exits the process), `jit.util`, and files that are not
/// regular (standard input, `/dev/zero`).
#[test]
fn what_no_budget_can_stop_is_out_of_reach() {
    let script = r#"
local out = {}
out[#out + 1] = tostring(newproxy)
out[#out + 1] = tostring(pcall(require, "jit.profile"))
out[#out + 1] = tostring(pcall(require, "jit.util"))
local f, err = loadfile()
out[#out + 1] = tostring(f) .. ":" .. err
f, err = loadfile("/dev/zero")
out[#out + 1] = tostring(f) .. ":" .. err
package.path = "/dev/zero"
local ok, e = pcall(require, "zero")
out[#out + 1] = tostring(ok) .. ":" .. tostring(e):gsub("\n.*", "")
ngx.req.set_header("X-Out", table.concat(out, "|"))
"#;
    let toml = format!(
        "[lua]\nmax_instructions = 100000\njit = true\n{}",
        route("r", script)
    );
    assert_eq!(
        output(&runtime(&toml), "r"),
        "nil|false|false|nil:loadfile: no standard input for scripts; give a file name|\
         nil:cannot read /dev/zero: not a regular file|\
         false:error loading module 'zero' from file '/dev/zero':"
    );
}
