//! The four functions beside LuaJIT's own, on generated patterns, subjects and arguments:
//! the same results, the same errors; and the budget's stop inside a match.

use super::*;
use crate::budget::Budget;

/// A state where `orig` holds LuaJIT's functions and `string` ours, with `text(e)` for an
/// error as a script reads it.
fn both() -> Lua {
    let lua = Lua::new();
    lua.load(
        "orig = { find = string.find, match = string.match, gmatch = string.gmatch, \
         gsub = string.gsub }",
    )
    .exec()
    .unwrap();
    install(&lua).unwrap();
    let text = lua
        .create_function(|_, e: Value| Ok(crate::api::error_text(&e)))
        .unwrap();
    lua.globals().set("text", text).unwrap();
    lua
}

/// Generates cases, runs each through both sets and lists where they differ.
const DIFFERENTIAL: &str = r##"
local cases = ...
local mine = { find = string.find, match = string.match, gmatch = string.gmatch, gsub = string.gsub }
-- LuaJIT's functions as its interpreter runs them: compiled, `string.find` converts an init
-- out of int32's range (NaN, 2^40) otherwise than its interpreter does, call by call.
jit.off()
-- LuaJIT's generator is the same sequence for the same seed on every machine.
math.randomseed(12345)
local rand = math.random
local function pick(t) return t[rand(#t)] end
local ATOMS = { "a", "b", "c", ".", "%a", "%d", "%s", "%w", "%p", "%x", "%u", "%l", "%c", "%g",
    "%z", "%A", "%D", "%S", "%W", "%Z", "%%", "%.", "%(", "[ab]", "[^a]", "[a-c]", "[%d%s]",
    "[]]", "[^]]", "[a-]", "[%a-z]", "[-a]", "1", " ", "\0", "\200", "^", "$", "%]", "]" }
local QUANT = { "", "", "", "*", "+", "-", "?" }
local SPECIAL = { "()", "%1", "%2", "%0", "%b()", "%bab", "%f[%w]", "%f[%W]", "%f[%z]",
    "%", "[a", "(", ")", "%f", "%fx", "%b", "%b(", "[^", "[%" }
local function seq(depth)
    local out = {}
    for _ = 1, rand(5) - 1 do
        local r = rand(10)
        if r <= 6 then
            out[#out + 1] = pick(ATOMS) .. pick(QUANT)
        elseif r <= 8 and depth < 3 then
            out[#out + 1] = "(" .. seq(depth + 1) .. ")" .. (rand(4) == 1 and pick(QUANT) or "")
        else
            out[#out + 1] = pick(SPECIAL)
        end
    end
    return table.concat(out)
end
local function pattern()
    local p = seq(0)
    if rand(5) == 1 then p = "^" .. p end
    if rand(6) == 1 then p = p .. "$" end
    return p
end
local CHARS = { "a", "b", "c", "1", " ", "(", ")", "%", ".", "\0", "\200", "A", "-", "]", "^", "\v", "\t", "_", "F" }
local function subject()
    local out = {}
    for _ = 1, rand(13) - 1 do out[#out + 1] = pick(CHARS) end
    return table.concat(out)
end
local INITS = { nil, 1, 0, -1, -3, 3, 100, -100, 2.7, "2", "x", 2^40, 0/0, -2^40, {} }
local PLAIN = { nil, true, false, 1 }
local MAXN = { nil, 0, 1, 2, -1, "1", 1.5, "y" }
local ERR = {}
local REPLS = { "x", "%0", "%1", "<%1%2>", "%%", "%", "%a", "", 3, 2.5, "%2%1",
    function(a, b) return a end,
    function() return false end,
    function(a) return #a end,
    function() return {} end,
    function() error("boom") end,
    function() error(ERR) end,
    { a = "A", b = false, ["1"] = 1 },
    setmetatable({}, { __index = function(_, k) return k .. k end }),
    true, nil }

local function pack(...) return { n = select("#", ...), ... } end
local function show(t)
    local out = {}
    for i = 1, t.n do
        local v = t[i]
        if type(v) == "string" then out[i] = string.format("%q", v)
        elseif type(v) == "userdata" then out[i] = "error:" .. text(v)
        else out[i] = tostring(v) end
    end
    return "(" .. table.concat(out, ", ") .. ")"
end
local function same(a, b)
    if a.n ~= b.n then return false end
    for i = 1, a.n do
        local x, y = a[i], b[i]
        if type(y) == "userdata" then y = text(y) end
        if x ~= y and not (x ~= x and y ~= y) then return false end
    end
    return true
end
local function all(gmatch, s, p)
    local out = {}
    local it = gmatch(s, p)
    for _ = 1, 40 do
        local r = pack(it())
        if r.n == 0 or r[1] == nil then break end
        out[#out + 1] = show(r)
    end
    return table.concat(out, " ")
end
local failures, checked = {}, 0
local function check(what, f, g, ...)
    checked = checked + 1
    local a, b = pack(pcall(f, ...)), pack(pcall(g, ...))
    if not same(a, b) and #failures < 20 then
        failures[#failures + 1] = what .. show(pack(...)) .. ": LuaJIT " .. show(a) .. ", Sluice " .. show(b)
    end
end
for _ = 1, cases do
    local s, p = subject(), pattern()
    check("find", orig.find, mine.find, s, p, INITS[rand(#INITS + 1)], PLAIN[rand(#PLAIN + 1)])
    check("match", orig.match, mine.match, s, p, INITS[rand(#INITS + 1)])
    check("gmatch", function(...) return all(orig.gmatch, ...) end,
        function(...) return all(mine.gmatch, ...) end, s, p)
    check("gsub", orig.gsub, mine.gsub, s, p, REPLS[rand(#REPLS + 1)], MAXN[rand(#MAXN + 1)])
end
-- Arguments of other types, and none.
for _, args in ipairs({ {}, { "a" }, { nil, "a" }, { 12, 2 }, { 1.5, "%." }, { {}, "a" }, { "a", {} } }) do
    for _, name in ipairs({ "find", "match", "gsub" }) do
        check(name, orig[name], mine[name], unpack(args, 1, 2))
    end
    check("gmatch", function(...) return all(orig.gmatch, ...) end,
        function(...) return all(mine.gmatch, ...) end, unpack(args, 1, 2))
end
check("gsub", orig.gsub, mine.gsub, "abc", "b")
check("find", orig.find, mine.find)
return checked, table.concat(failures, "\n")
"##;

#[test]
fn the_four_functions_answer_as_luajits_own() {
    let lua = both();
    let (checked, failures): (u32, LuaString) = lua.load(DIFFERENTIAL).call(20_000).unwrap();
    let failures = failures.to_string_lossy();
    assert!(checked > 80_000, "{checked}");
    assert!(failures.is_empty(), "{failures}");
}

/// Errors raised in a script's own lines, by LuaJIT's functions or by ours.
const ERRORS: &str = r#"
local out = {}
local function try(f) local ok, e = pcall(f); out[#out + 1] = text(e) end
try(function() local _ = ("x"):find("%") end)
try(function() local _ = string.match("x", "[a") end)
try(function() local _ = ("x"):gsub("x", true) end)
try(function() local _ = string.gsub() end)
try(function() local _ = ("x"):gsub("x", function() return {} end) end)
try(function() for _ in ("x"):gmatch("(") do end end)
try(function() local _ = string.find({}, "x") end)
try(function() local _ = ("x"):match("%f") end)
return out
"#;

#[test]
fn names_and_lines_in_errors_are_the_callers() {
    let run = |ours: bool| -> Vec<String> {
        let lua = Lua::new();
        if ours {
            install(&lua).unwrap();
        }
        let text = lua
            .create_function(|_, e: Value| Ok(crate::api::error_text(&e)))
            .unwrap();
        lua.globals().set("text", text).unwrap();
        lua.load(ERRORS).set_name("=t").call(()).unwrap()
    };
    let luajit = run(false);
    assert_eq!(run(true), luajit);
    assert_eq!(
        luajit,
        [
            "t:4: malformed pattern (ends with '%')",
            "t:5: malformed pattern (missing ']')",
            "t:6: bad argument #2 to 'gsub' (string/function/table expected)",
            "t:7: bad argument #1 to 'gsub' (string expected, got no value)",
            "t:8: invalid replacement value (a table)",
            "t:9: unfinished capture",
            "t:10: bad argument #1 to 'find' (string expected, got table)",
            "t:11: missing '[' after '%f' in pattern",
        ]
    );
}

#[test]
fn a_backtracking_match_meets_the_instruction_budget() {
    // Backtracking: 4.5·10¹⁰ steps.
    stopped_by_the_budget(".-b", 100_000);
    // A back-reference that compares long captures: 10¹⁰ bytes in 9·10⁵ steps, which a
    // budget of 2·10⁶ would let finish (seconds) if the bytes were not counted.
    stopped_by_the_budget("^(.*)%1b", 2_000_000);
}

fn stopped_by_the_budget(pattern: &str, max_instructions: u64) {
    let lua = Lua::new();
    install(&lua).unwrap();
    let main = lua.current_thread().state();
    let budget = Budget::new(max_instructions, main, false);
    let f: Function = lua
        .load(
            r#"
local s = string.rep("a", 300000)
local ok, e = pcall(string.find, s, ...)
return ok, text and text(e) or tostring(e)
"#,
        )
        .into_function()
        .unwrap();
    lua.globals()
        .set(
            "text",
            lua.create_function(|_, e: Value| Ok(crate::api::error_text(&e)))
                .unwrap(),
        )
        .unwrap();
    let running = budget.enter();
    let (ok, e): (bool, String) = f.call(pattern).unwrap();
    drop(running);
    assert!(!ok);
    assert!(e.contains("instruction budget"), "{pattern}: {e}");
    assert!(budget.over.load(std::sync::atomic::Ordering::Relaxed));
}

#[test]
fn a_plain_find_of_a_long_text_finds_what_a_naive_search_finds() {
    let naive = |s: &[u8], p: &[u8]| s.windows(p.len()).position(|w| w == p);
    let subject: Vec<u8> = (0..5000u32)
        .map(|i| b"ab"[usize::from(i % 97 == 0)])
        .collect();
    for len in [1, 2, 31, 32, 33, 97, 98, 200, 4999, 5000, 5001] {
        for start in [0, 1, 96, 97, 2000] {
            let needle: Vec<u8> = subject
                .iter()
                .cycle()
                .skip(start)
                .take(len)
                .copied()
                .collect();
            assert_eq!(
                find_plain(&subject, &needle),
                naive(&subject, &needle),
                "{len} {start}"
            );
        }
    }
    let mut absent = vec![b'a'; 40];
    absent.push(b'c');
    assert_eq!(find_plain(&subject, &absent), None);
}
