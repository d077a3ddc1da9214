//! With the budget off (`[lua] max_instructions = 0`) the JIT compiler is on and `incr`
//! runs through the FFI (`shared/jit.rs`): the same answers as the C function gives, and no
//! `ffi` for scripts.

use super::*;

#[test]
fn incr_through_the_ffi_answers_as_the_c_function_does() {
    let rt = runtime(
        r##"[lua]
max_instructions = 0
shared_dicts = { jit_incr = "1m", jit_small = "8k" }
[[route]]
name = "r"
upstream = "u"
[route.lua]
access = '''
local d = ngx.shared.jit_incr
local n
for i = 1, 1000 do n = d:incr("hot", 1, 0) end
assert(n == 1000, n)
local v, err, forcible = d:incr("fresh", 2, 10)
assert(v == 12 and err == nil and forcible == false, tostring(v))
assert(select("#", d:incr("fresh", 1)) == 1 and d:get("fresh") == 13)
v, err = d:incr("absent", 1)
assert(v == nil and err == "not found", tostring(err))
assert(d:set("s", "x"))
v, err = d:incr("s", 1)
assert(v == nil and err == "not a number", tostring(err))
assert(d:incr(7, 1, 0) == 1 and d:get("7") == 1)
assert(d:incr("t", 1, 0, 100) == 1 and d:ttl("t") > 99)
local ok, e = pcall(d.incr, d, "x", 1, nil, 1)
assert(not ok and tostring(e):find('must provide "init"', 1, true), tostring(e))
v = d:incr("nan", 0 / 0, 0)
assert(v ~= v and d:get("nan") ~= d:get("nan"), "NaN by")
assert(d:incr("inf", math.huge, 0) == math.huge)
v = d:incr("inf", -math.huge)
assert(v ~= v, "inf - inf")
local small = ngx.shared.jit_small
local evicted = false
for i = 1, 200 do
    local v, err, forcible = small:incr("k" .. i, 1, 0)
    assert(v == 1 and err == nil, tostring(err))
    evicted = evicted or forcible
end
assert(evicted, "a full dictionary evicts and says so (forcible)")
assert(small:incr("k200", 1) == 2)
assert(not pcall(require, "ffi"), "a script may not load the FFI")
assert(package.loaded.ffi == nil and ffi == nil)
ngx.req.set_header("X-Done", "1")
'''
"##,
    );
    let before = crate::shared::jit::CALLS.load(Ordering::Relaxed);
    let lua = rt.scripts("r").unwrap().request(facts());
    let mut req = get("/");
    let outcome = run(&lua, LuaPhase::Access, head(&mut req));
    assert!(matches!(outcome, Outcome::Continue), "{outcome:?}");
    assert_eq!(req.headers()["x-done"], "1");
    // The loop, `fresh` twice, `absent` and `s`: through the FFI function.
    let calls = crate::shared::jit::CALLS.load(Ordering::Relaxed) - before;
    assert!(calls >= 1004, "{calls} calls through the FFI");
}

/// `ngx.exit` on a runner ends the call by dropping the runner instead of unwinding
/// (`api/mod.rs`): however deep in `pcall`, `xpcall` or function calls, and, where a C call
/// in between refuses the yield or the script runs its own coroutine, by the error as
/// before. The state serves call after call, each exit on a new runner.
#[test]
fn ngx_exit_ends_the_call_from_any_depth() {
    let rt = runtime(
        r#"[[route]]
name = "r"
upstream = "u"
[route.lua]
access = '''
local how = ngx.var.arg_how
local function deep(n) if n == 0 then return ngx.exit(403) end return deep(n - 1) end
if how == "plain" then return ngx.exit(403) end
if how == "deep" then pcall(function() xpcall(function() deep(50) end, function() error("handler ran") end) end) end
if how == "gsub" then string.gsub("a", "a", function() ngx.exit(403) end) end
if how == "coroutine" then coroutine.wrap(function() ngx.exit(403) end)() end
if how == "sort" then table.sort({ 3, 2, 1 }, function(a, b) ngx.exit(403) end) end
error("not reached: " .. tostring(how))
'''
"#,
    );
    let scripts = rt.scripts("r").unwrap();
    let before = crate::state::EXITED_RUNNERS.load(Ordering::Relaxed);
    for round in 0..50 {
        for how in ["plain", "deep", "gsub", "coroutine", "sort"] {
            let lua = scripts.request(facts());
            let outcome = run(
                &lua,
                LuaPhase::Access,
                head(&mut get(&format!("/?how={how}"))),
            );
            assert!(
                matches!(&outcome, Outcome::Respond(s, _, _) if s.as_u16() == 403),
                "{how} (round {round}): {outcome:?}"
            );
        }
    }
    // "plain" and "deep" left by the yield, 50 times each; the others by the error.
    let exited = crate::state::EXITED_RUNNERS.load(Ordering::Relaxed) - before;
    assert!(exited >= 100, "{exited} runners left at ngx.exit");
}
