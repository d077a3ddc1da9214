//! No script can stop the process (issue 86): each way a script could make the API panic
//! or hold unbounded output is now a Lua error (the request's 500) or a saturated value,
//! and the state serves the next call.

use super::*;

/// A runtime whose route `r` runs `checks` at `rewrite` (which must go on) and `access`
/// (with `[lua]` settings `lua`), and whose route `probe` checks that the state still
/// serves: dictionary `dict`, a header.
fn with_probe(lua: &str, dict: &str, checks: &str, access: &str) -> Arc<LuaRuntime> {
    runtime(&format!(
        r#"[lua]
shared_dicts = {{ {dict} = "1m" }}
{lua}
[[route]]
name = "r"
upstream = "u"
[route.lua]
rewrite = '''
{checks}
'''
access = '''
{access}
'''
[[route]]
name = "probe"
upstream = "u"
[route.lua]
access = '''
local d = ngx.shared.{dict}
assert(d:set("probe", "v", 10))
assert(d:get("probe") == "v")
assert(ngx.http_time(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
ngx.req.set_header("X-Probe", "1")
'''
"#
    ))
}

/// Runs route `r`'s checks (which must go on) and its access script (expecting `want`),
/// then the probe (which must go on), on the same thread, hence the same state.
fn fails_then_serves(rt: &Arc<LuaRuntime>, want: fn(&Outcome) -> bool) {
    let lua = rt.scripts("r").unwrap().request(facts());
    let outcome = run(&lua, LuaPhase::Rewrite, head(&mut get("/")));
    assert!(went_on(&outcome), "checks: {outcome:?}");
    let outcome = run(&lua, LuaPhase::Access, head(&mut get("/")));
    assert!(want(&outcome), "{outcome:?}");
    let lua = rt.scripts("probe").unwrap().request(facts());
    let mut req = get("/");
    let outcome = run(&lua, LuaPhase::Access, head(&mut req));
    assert!(matches!(outcome, Outcome::Continue), "probe: {outcome:?}");
    assert_eq!(req.headers()["x-probe"], "1");
}

fn failed(o: &Outcome) -> bool {
    matches!(o, Outcome::Failed)
}

fn went_on(o: &Outcome) -> bool {
    matches!(o, Outcome::Continue)
}

#[test]
fn an_infinite_or_huge_exptime_saturates_and_a_negative_one_is_an_error() {
    // On the old code the first line aborted the process ("Rust panics must be rethrown").
    let rt = with_probe(
        "",
        "robust_ttl",
        r#"local d = ngx.shared.robust_ttl
assert(d:set("inf", 1, math.huge))
assert(d:set("big", 1, 1e18))
assert(d:set("huge", 1, 1e300))
assert(d:set("nan", 1, 0/0))
assert(d:safe_set("inf2", 1, math.huge))
assert(d:expire("inf", math.huge))
assert(d:ttl("inf") == 0 and d:ttl("big") > 1e17 and d:get("nan") == 1)
assert(d:incr("n", 1, 0, math.huge) == 1)
assert(d:incr("m", 1, 0, 0/0) == 1)
local ok, err = pcall(d.set, d, "neg", 1, -1)
assert(not ok and tostring(err):find('bad "exptime" argument', 1, true), tostring(err))
ok, err = pcall(d.incr, d, "x", 1, 0, -1)
assert(not ok and tostring(err):find('bad "init_ttl" argument', 1, true), tostring(err))
ok, err = pcall(d.incr, d, "x", 1, nil, 1)
assert(not ok and tostring(err):find('must provide "init" when providing "init_ttl"', 1, true), tostring(err))
ok, err = pcall(d.expire, d, "inf")
assert(not ok and tostring(err):find('bad "exptime" argument', 1, true), tostring(err))
assert(not d:get("neg") and not d:get("x"))"#,
        r#"ngx.shared.robust_ttl:set("neg", 1, -math.huge)"#,
    );
    fails_then_serves(&rt, failed);
}

#[test]
fn headers_past_the_maps_bound_are_an_error() {
    let rt = with_probe(
        "",
        "robust_headers",
        r#"local ok, err = pcall(function()
    for i = 1, 40000 do ngx.req.set_header("X-H" .. i, "v") end
end)
assert(not ok and tostring(err):find("too many headers", 1, true), tostring(err))"#,
        r#"for i = 1, 40000 do ngx.header["X-R" .. i] = "v" end"#,
    );
    fails_then_serves(&rt, failed);
}

#[test]
fn time_functions_take_any_number() {
    let rt = with_probe(
        "",
        "robust_time",
        r#"local last = "Fri, 31 Dec 9999 23:59:59 GMT"
assert(ngx.http_time(math.huge) == last)
assert(ngx.http_time(1e300) == last)
assert(ngx.http_time(-math.huge) == "Thu, 01 Jan 1970 00:00:00 GMT")
assert(ngx.http_time(0/0) == "Thu, 01 Jan 1970 00:00:00 GMT")
assert(ngx.cookie_time(math.huge) == "Fri, 31-Dec-99 23:59:59 GMT")
assert(ngx.cookie_time(0/0) == "Thu, 01-Jan-70 00:00:00 GMT")
assert(ngx.cookie_time(2114380800) == "Thu, 01-Jan-2037 00:00:00 GMT")
assert(#ngx.utctime() == 19 and #ngx.today() == 10)"#,
        "",
    );
    fails_then_serves(&rt, went_on);
}

#[test]
fn output_past_max_memory_is_an_error() {
    let bound = "max_memory = \"4m\"\nmax_instructions = 0";
    for access in [
        // 8 MiB of output in one call.
        r#"local s = string.rep("x", 1048576)
ngx.say({ s, s, s, s, s, s, s, s })"#,
        // 2^30 copies of a string through nested tables.
        r#"local t = { "xxxxxxxx" }
for _ = 1, 30 do t = { t, t } end
ngx.print(t)"#,
        // Many calls that each fit.
        r#"local s = string.rep("x", 1048576)
for _ = 1, 8 do ngx.print(s) end"#,
        // 100,000 matches, each replaced by 1,000 copies of itself.
        r#"ngx.re.gsub(string.rep("a", 100000), "a", string.rep("$0", 1000))"#,
        r#"local t = { "x" }
for _ = 1, 40 do t = { t, t } end
require("cjson").encode(t)"#,
    ] {
        let rt = with_probe(bound, "robust_output", "", access);
        fails_then_serves(&rt, failed);
    }
    // A caught error leaves none of its call's output.
    let rt = with_probe(
        bound,
        "robust_output",
        "",
        r#"ngx.print("a")
local s = string.rep("x", 1500000)
local ok, err = pcall(ngx.say, s, s, s)
assert(not ok and tostring(err):find("max_memory", 1, true), tostring(err))
ngx.print("b")
return ngx.exit(200)"#,
    );
    let lua = rt.scripts("r").unwrap().request(facts());
    match run(&lua, LuaPhase::Access, head(&mut get("/"))) {
        Outcome::Respond(s, _, b) => {
            assert_eq!(s, 200);
            assert_eq!(&b[..], b"ab");
        }
        other => panic!("{other:?}"),
    }
}

/// A panic in an mlua callback or a raw C function (a bug this test plants) is a Lua error
/// naming the function, and the state goes on.
#[test]
#[expect(unsafe_code, reason = "a raw lua_CFunction that panics")]
fn a_panic_in_a_callback_or_a_raw_function_is_a_lua_error() {
    unsafe extern "C-unwind" fn raw_boom(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
        // SAFETY: the work calls no Lua API.
        unsafe { crate::guard::shielded(l, "raw_boom", || panic!("planted")) }
    }
    let lua = mlua::Lua::new();
    let boom = crate::guard::function(&lua, "boom", |_, n: i64| -> mlua::Result<i64> {
        assert!(n < 0, "planted");
        Ok(n)
    })
    .unwrap();
    let slow = lua.create_function(|_, ()| Ok(())).unwrap();
    let raw = crate::cfunc::closure(&lua, raw_boom, slow, None).unwrap();
    lua.globals().set("boom", boom).unwrap();
    lua.globals().set("raw_boom", raw).unwrap();
    let before = stats::panic_count();
    let (a, b): (String, String) = lua
        .load(
            r#"local ok, a = pcall(boom, 1)
assert(not ok and boom(-1) == -1)
local ok2, b = pcall(raw_boom)
assert(not ok2)
return tostring(a), tostring(b)"#,
        )
        .eval()
        .unwrap();
    assert!(a.contains("boom: internal error (planted)"), "{a}");
    assert!(b.contains("raw_boom: internal error (planted)"), "{b}");
    // Unprotected, the error reaches Rust as an error, not as a panic resumed.
    let e = lua.load("raw_boom()").exec().unwrap_err();
    assert!(e.to_string().contains("raw_boom"), "{e}");
    assert!(stats::panic_count() >= before + 3);
    assert_eq!(lua.load("return 1 + 1").eval::<i64>().unwrap(), 2);
}

/// A script cannot load bytecode (LuaJIT verifies none, and a crafted chunk reaches the
/// process's memory): `load`, `loadstring`, `loadfile` and `dofile` refuse a binary chunk
/// with LuaJIT's own error ("wrong mode") and still load source text.
#[test]
fn a_script_cannot_load_a_binary_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("chunk.luac");
    let text = dir.path().join("chunk.lua");
    std::fs::write(&text, "return 40 + 2").unwrap();
    let checks = format!(
        r#"local bin = string.dump(function() return 1 end)
assert(bin:byte(1) == 27)
local f, err = load(bin)
assert(f == nil and err:find("wrong mode"), tostring(err))
f, err = load(bin, "=x", "b")
assert(f == nil and err:find("wrong mode"), tostring(err))
local i = 0
f, err = load(function() i = i + 1; if i == 1 then return bin end end)
assert(f == nil and err:find("wrong mode"), tostring(err))
f, err = loadstring(bin)
assert(f == nil and err:find("wrong mode"), tostring(err))
assert(loadstring("return 1 + 1")() == 2)
assert(load("return x", "=t", "t", {{ x = 7 }})() == 7)
f, err = loadfile("{bin}")
assert(f == nil and err:find("wrong mode"), tostring(err))
assert(loadfile("{text}")() == 42 and dofile("{text}") == 42)
local ok, e = pcall(dofile, "{bin}")
assert(not ok and tostring(e):find("wrong mode"), tostring(e))"#,
        bin = file.display(),
        text = text.display()
    );
    // The binary chunk on disk, written by LuaJIT itself.
    let lua = mlua::Lua::new();
    let bytes: mlua::LuaString = lua
        .load("return string.dump(function() return 1 end)")
        .eval()
        .unwrap();
    std::fs::write(&file, bytes.as_bytes()).unwrap();
    let rt = with_probe("", "t", &checks, "error('planted')");
    fails_then_serves(&rt, failed);
}
