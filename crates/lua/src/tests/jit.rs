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

/// With the compiler on, `ngx.var` reads and `ngx.req.set_header` go through their FFI
/// entries (`api/var.rs`, `api/req.rs`) and answer as the C functions do with it off: the
/// same script, run often enough to be compiled, leaves the same headers either way, values
/// the view holds and values computed at the read alike, and every call the FFI entry leaves
/// (a number, a table, an empty value, a name with `_`, a bad name) still takes the C path.
#[test]
fn var_reads_and_set_header_through_the_ffi_answer_as_the_c_functions_do() {
    const SCRIPT: &str = r#"
local t = ngx.var.http_x_token
local seen = table.concat({ t or "none", tostring(ngx.var.http_x_absent), tostring(ngx.var.no_such_variable),
    ngx.var.remote_addr, ngx.var.uri, ngx.var.arg_a, tostring(#ngx.var.binary_remote_addr), ngx.var.args }, "|")
ngx.req.set_header("X-Seen", seen)
ngx.req.set_header("X-Gateway", "lua")
ngx.req.set_header("X_Under", "kept")
ngx.req.set_header("X-Gone", "")
ngx.req.set_header("X-Num", 42)
ngx.req.set_header("X-List", { "a", "b" })
local ok, err = pcall(ngx.req.set_header, "Bad\nName", "v")
ngx.req.set_header("X-Bad", tostring(ok) .. ":" .. tostring(err))
ok, err = pcall(ngx.req.set_header, "X-Bad-Value", "a\0b")
ngx.req.set_header("X-Bad-Value-Said", tostring(ok) .. ":" .. tostring(err))
"#;
    let answers = |jit: bool| {
        let rt = runtime(&format!(
            "[lua]\njit = {jit}\n[[route]]\nname = \"r\"\nupstream = \"u\"\n[route.lua]\naccess = '''{SCRIPT}'''\n"
        ));
        let scripts = rt.scripts("r").unwrap();
        let mut last = None;
        for _ in 0..300 {
            let lua = scripts.request(facts());
            let mut req = get("/a/../b%20c?a=1&z=2");
            req.headers_mut().insert("x-token", "t0k".parse().unwrap());
            req.headers_mut().insert("x-gone", "here".parse().unwrap());
            let outcome = run(&lua, LuaPhase::Access, head(&mut req));
            assert!(
                matches!(outcome, Outcome::Continue),
                "jit {jit}: {outcome:?}"
            );
            let mut headers: Vec<(String, String)> = req
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            headers.sort();
            if let Some(previous) = &last {
                assert_eq!(previous, &headers, "jit {jit}: every call answers alike");
            }
            last = Some(headers);
        }
        last.unwrap()
    };
    let reads = crate::api::var::FFI_READS.load(Ordering::Relaxed);
    let sets = crate::api::req::FFI_SETS.load(Ordering::Relaxed);
    let compiled = answers(true);
    let reads = crate::api::var::FFI_READS.load(Ordering::Relaxed) - reads;
    let sets = crate::api::req::FFI_SETS.load(Ordering::Relaxed) - sets;
    let interpreted = answers(false);
    assert_eq!(compiled, interpreted);
    let get = |name: &str| {
        compiled
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(
        get("x-seen"),
        Some("t0k|nil|nil|192.0.2.7|/b c|1|4|a=1&z=2")
    );
    assert_eq!(get("x-gateway"), Some("lua"));
    assert_eq!(get("x_under"), Some("kept"));
    assert_eq!(get("x-gone"), None);
    assert_eq!(get("x-num"), Some("42"));
    // lua-nginx-module escapes what may not be in a header, as the C function does.
    assert_eq!(get("bad%0aname"), Some("v"));
    assert_eq!(get("x-bad-value"), Some("a%00b"));
    // Eight reads answered (the two nils are answers too but not counted) and two sets, a
    // request: through the FFI.
    assert!(reads >= 300 * 6, "{reads} reads through the FFI");
    assert!(sets >= 300 * 2, "{sets} sets through the FFI");
}

/// A phase script that names `...` keeps a vararg chunk (it gets none, as under
/// lua-nginx-module), with the budget's polls and without.
#[test]
fn a_script_that_names_varargs_still_runs() {
    for lua in ["", "max_instructions = 0\n", "jit = false\n"] {
        let rt = runtime(&format!(
            "[lua]\n{lua}[[route]]\nname = \"r\"\nupstream = \"u\"\n[route.lua]\naccess = '''\nlocal n = select('#', ...)\nngx.req.set_header(\"X-N\", tostring(n))\n'''\n"
        ));
        let scripts = rt.scripts("r").unwrap();
        let mut req = get("/");
        let outcome = run(&scripts.request(facts()), LuaPhase::Access, head(&mut req));
        assert!(matches!(outcome, Outcome::Continue), "{lua}: {outcome:?}");
        assert_eq!(req.headers()["x-n"], "0", "{lua}");
    }
}
