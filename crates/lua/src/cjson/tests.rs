//! The Rust module against lua-cjson's own tests: `testdata/test.lua` (openresty/lua-cjson
//! 5ce46a8, `tests/test.lua`, unchanged, with its `lua/cjson/util.lua`: 138 cases) and
//! `testdata/agentzh.t` (the fork's 24 OpenResty cases, read from the file), each run in a
//! bare LuaJIT state with only [`super::install`]; plus texts measured beside Debian's
//! NGINX 1.22 + lua-nginx-module 0.10.23 (which loads Debian's lua-cjson 2.1.0).
//!
//! What the harness stands in for (no case fails; `EXPECTED_FAILURES` is empty):
//! - `pcall` turns a Rust error into its message, as Sluice's prelude does (a C module's
//!   `luaL_error` is a string already).
//! - `io.open` serves the fixtures from memory (`util.file_load` reads them with it);
//!   `utf8.dat`, which `genutf8.pl` makes, is built here the same way.
//! - `os.setlocale` is a no-op: the locale is process-wide and the test runner's threads
//!   share it. The locale cases still run: the Rust module is locale-independent, which is
//!   what the C module's `fpconv` achieves by translating the decimal point.
//! - `os.exit` records its code; `print` is collected, and each "==> Test [N] name:
//!   PASS/FAIL" line is one case.
//! - The "Decode cycle" cases run on every JSON fixture (the C suite takes them from its
//!   command line).
//!
//! Differences left, by design:
//! - The fork, not Debian's 2.1.0, is followed where they differ: `T_INTEGER` in errors,
//!   `0X10` refused (the fork's `strtoll` path only goes on to `strtod` at a lower-case
//!   `x`), integers past 64 bits clamped to `LLONG_MAX` (`strtoll`), `-0` decoded as 0,
//!   "NaN or Infinity", precision up to 16, `NaN`/`Infinity` with
//!   `encode_invalid_numbers(true)`, `__len` arrays, `_VERSION` "2.1.0.11".
//! - An error a script's `__len` or `__index` raises inside `cjson.safe` is raised, not
//!   returned as `nil, err`: it may be `ngx.exit` or the instruction budget's stop, which
//!   Sluice lets no `pcall` catch. It keeps mlua's traceback in its text.
//! - A `__len` that is not a function (a callable table) is "attempt to call a table
//!   value"; the C module would call it.
//!
//! lua-cjson's tests are Copyright (c) 2010-2012 Mark Pulford, MIT license
//! (`testdata/LICENSE`).

use super::*;
use crate::values::{fmt_g, fmt_g14};

/// The message of an error, without mlua's wrapping: what Sluice's prelude gives `pcall`.
fn error_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => error_message(cause),
        mlua::Error::WithContext { cause, .. } => error_message(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        other => other.to_string(),
    }
}

/// The fixtures `test.lua` loads by name.
const FIXTURES: &[(&str, &[u8])] = &[
    (
        "octets-escaped.dat",
        include_bytes!("testdata/octets-escaped.dat"),
    ),
    ("example1.json", include_bytes!("testdata/example1.json")),
    ("example2.json", include_bytes!("testdata/example2.json")),
    ("example3.json", include_bytes!("testdata/example3.json")),
    ("example4.json", include_bytes!("testdata/example4.json")),
    ("example5.json", include_bytes!("testdata/example5.json")),
    ("numbers.json", include_bytes!("testdata/numbers.json")),
    (
        "rfc-example1.json",
        include_bytes!("testdata/rfc-example1.json"),
    ),
    (
        "rfc-example2.json",
        include_bytes!("testdata/rfc-example2.json"),
    ),
    ("types.json", include_bytes!("testdata/types.json")),
];

/// Cases allowed to fail, by name, each with why. Empty: every case passes.
const EXPECTED_FAILURES: &[(&str, &str)] = &[];

/// What `genutf8.pl` writes: every code point but the surrogates, in UTF-8.
fn utf8_dat() -> Vec<u8> {
    (0..=0x10FFFFu32)
        .filter_map(char::from_u32)
        .flat_map(|c| {
            let mut b = [0u8; 4];
            c.encode_utf8(&mut b).as_bytes().to_vec()
        })
        .collect()
}

const HARNESS: &str = r##"
local error_text, files = ...
local raw_pcall = pcall
local function pass(ok, ...)
    if ok then return ok, ... end
    local e = ...
    if type(e) == "userdata" then e = error_text(e) end
    return ok, e
end
pcall = function(f, ...) return pass(raw_pcall(f, ...)) end
io.open = function(name)
    local data = files[name]
    if not data then return nil, name .. ": No such file or directory" end
    return { read = function() return data end, close = function() end }
end
local lines = {}
print = function(...)
    local t = {}
    for i = 1, select("#", ...) do t[i] = tostring((select(i, ...))) end
    lines[#lines + 1] = table.concat(t, "\t")
end
os.setlocale = function() return "C" end
os.exit = function(code) lines.exit = code end
return lines
"##;

/// A bare state with the module, lua-cjson's test helpers and the harness; returns the
/// table `print` fills.
fn suite_state(lua: &Lua) -> Table {
    install(lua).unwrap();
    let preload: Table = lua
        .globals()
        .get::<Table>("package")
        .unwrap()
        .get("preload")
        .unwrap();
    for (name, src) in [
        ("cjson.util", include_str!("testdata/util.lua")),
        ("tests.sort_json", include_str!("testdata/sort_json.lua")),
    ] {
        let f = lua
            .load(src)
            .set_name(format!("={name}"))
            .into_function()
            .unwrap();
        preload.set(name, f).unwrap();
    }
    let files = lua.create_table().unwrap();
    for (name, data) in FIXTURES {
        files.set(*name, lua.create_string(data).unwrap()).unwrap();
    }
    files
        .set("utf8.dat", lua.create_string(utf8_dat()).unwrap())
        .unwrap();
    let error_text = lua
        .create_function(|_, e: Value| {
            Ok(match e {
                Value::Error(e) => error_message(&e),
                other => other.to_string()?,
            })
        })
        .unwrap();
    lua.load(HARNESS).call((error_text, files)).unwrap()
}

/// The output `print` collected, one line each.
fn lines(out: &Table) -> Vec<String> {
    out.sequence_values::<mlua::LuaString>()
        .map(|l| l.unwrap().to_string_lossy())
        .collect()
}

#[test]
fn lua_cjson_test_suite() {
    let lua = Lua::new();
    let out = suite_state(&lua);
    let arg = lua.create_table().unwrap();
    for (i, (name, _)) in FIXTURES
        .iter()
        .filter(|(n, _)| n.ends_with(".json"))
        .enumerate()
    {
        arg.set(i + 1, *name).unwrap();
    }
    lua.globals().set("arg", arg).unwrap();
    lua.load(include_str!("testdata/test.lua"))
        .set_name("=test.lua")
        .exec()
        .unwrap();
    let lines = lines(&out);
    let (mut passed, mut failed) = (Vec::new(), Vec::new());
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("==> Test [") else {
            continue;
        };
        let (_, case) = rest.split_once("] ").unwrap();
        if let Some(name) = case.strip_suffix(": PASS") {
            passed.push(name.to_owned());
        } else if let Some(name) = case.strip_suffix(": FAIL") {
            let detail = lines[i + 1..].iter().take_while(|l| !l.is_empty());
            let detail: Vec<&str> = detail.map(String::as_str).collect();
            failed.push((name.to_owned(), detail.join("\n")));
        }
    }
    println!(
        "lua-cjson test.lua: {} passed, {} failed",
        passed.len(),
        failed.len()
    );
    for (name, detail) in &failed {
        println!("FAIL {name}\n{detail}");
    }
    let unexpected: Vec<&str> = failed
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !EXPECTED_FAILURES.iter().any(|(e, _)| e == n))
        .collect();
    assert!(unexpected.is_empty(), "failed: {unexpected:?}");
    // 129 cases in test.lua's table, and a decode cycle for each of the 9 JSON fixtures.
    assert_eq!(passed.len() + failed.len(), 138, "cases that ran");
}

/// The `=== TEST` blocks of a Test::Base file: name, `--- lua`, `--- out`.
fn blocks(t: &str) -> Vec<(String, String, String)> {
    t.split("\n=== ")
        .skip(1)
        .map(|block| {
            let (name, rest) = block.split_once('\n').unwrap();
            let (_, rest) = rest.split_once("--- lua\n").unwrap();
            let (lua, out) = rest.split_once("--- out\n").unwrap();
            let out = format!("{}\n", out.trim_matches('\n'));
            (name.to_owned(), lua.to_owned(), out)
        })
        .collect()
}

#[test]
fn lua_cjson_openresty_cases() {
    let blocks = blocks(include_str!("testdata/agentzh.t"));
    assert_eq!(blocks.len(), 24);
    let mut failed = Vec::new();
    for (name, code, expected) in &blocks {
        let lua = Lua::new();
        let out = suite_state(&lua);
        let got = match lua.load(code.as_str()).set_name("=test_case.lua").exec() {
            Ok(()) => lines(&out).iter().map(|l| format!("{l}\n")).collect(),
            Err(e) => format!("error: {e}"),
        };
        if &got != expected {
            failed.push(format!("{name}\nexpected:\n{expected}got:\n{got}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn numbers_as_percent_g() {
    assert_eq!(fmt_g14(1.0), "1");
    assert_eq!(fmt_g14(-3.0), "-3");
    assert_eq!(fmt_g14(0.1), "0.1");
    assert_eq!(fmt_g14(1.0 / 3.0), "0.33333333333333");
    assert_eq!(fmt_g14(1e20), "1e+20");
    assert_eq!(fmt_g14(123456789012345.0), "1.2345678901234e+14");
    assert_eq!(fmt_g14(0.00001), "1e-05");
    assert_eq!(fmt_g14(12345678901234.0), "12345678901234");
    assert_eq!(fmt_g(1.0 / 3.0, 3), "0.333");
    assert_eq!(fmt_g(9_007_199_254_740_992.0, 16), "9007199254740992");
    assert_eq!(fmt_g(999_999.0, 2), "1e+06");
    assert_eq!(fmt_g(0.000_123_4, 1), "0.0001");
    assert_eq!(fmt_g(2.5, 1), "2");
}

/// Runs `code` in a bare state with the module; returns what it returns, as strings.
fn eval(code: &str) -> Vec<String> {
    let lua = Lua::new();
    suite_state(&lua);
    let r: MultiValue = lua.load(code).set_name("=test").eval().unwrap();
    let tostring: Function = lua.globals().get("tostring").unwrap();
    r.into_iter().map(|v| tostring.call(v).unwrap()).collect()
}

/// The texts Debian's lua-cjson 2.1.0 gives under NGINX 1.22 + lua-nginx-module 0.10.23.
#[test]
fn errors_as_lua_cjson() {
    let cases = [
        (
            "{bad",
            "Expected object key string but found invalid token at character 2",
        ),
        ("[1,", "Expected value but found T_END at character 4"),
        (
            r#""\u12""#,
            "Expected value but found invalid unicode escape code at character 2",
        ),
        (
            "nul",
            "Expected value but found invalid token at character 1",
        ),
        // Debian's 2.1.0 says T_NUMBER: the fork reads integers as T_INTEGER.
        (
            "[1 2]",
            "Expected comma or array end but found T_INTEGER at character 4",
        ),
    ];
    for (json, text) in cases {
        let code = format!("return pcall(require('cjson').decode, {json:?})");
        assert_eq!(eval(&code), ["false", text], "{json}");
        let code = format!("return require('cjson.safe').decode({json:?})");
        assert_eq!(eval(&code), ["nil", text], "{json}");
    }
    assert_eq!(
        eval("return pcall(require('cjson').encode, {[1] = 1, [100] = 2})"),
        ["false", "Cannot serialise table: excessively sparse array"]
    );
    assert_eq!(
        eval("return pcall(require('cjson').encode, print)"),
        ["false", "Cannot serialise function: type not supported"]
    );
}

#[test]
fn decode_depth_defaults_to_1000() {
    let ok = "local s = string.rep('[', 1000) .. string.rep(']', 1000)
        return type(require('cjson').decode(s))";
    assert_eq!(eval(ok), ["table"]);
    let deep = "local s = string.rep('[', 1001) .. string.rep(']', 1001)
        return require('cjson.safe').decode(s)";
    assert_eq!(
        eval(deep),
        [
            "nil",
            "Found too many nested data structures (1001) at character 1001"
        ]
    );
}

/// Raised limits end where LuaJIT's `lua_checkstack` ends the C module (8000 slots), and
/// nothing grows the Rust stack.
#[test]
fn raised_limits_stop_at_the_c_stack() {
    let decode = "local cjson = require('cjson.safe')
        cjson.decode_max_depth(100000)
        local a = cjson.decode(string.rep('[', 7998) .. string.rep(']', 7998))
        local _, e1 = cjson.decode(string.rep('[', 7999) .. string.rep(']', 7999))
        local _, e2 = cjson.decode(string.rep('{\"a\":', 5000) .. '1' .. string.rep('}', 5000))
        return type(a), e1, e2";
    assert_eq!(
        eval(decode),
        [
            "table",
            "Found too many nested data structures (7999) at character 7999",
            "Found too many nested data structures (4000) at character 19996",
        ]
    );
    let encode = "local cjson = require('cjson.safe')
        cjson.encode_max_depth(100000)
        local function nest(n, obj)
            local t = {}
            for _ = 1, n do t = obj and {a = t} or {t} end
            return t
        end
        local s = cjson.encode(nest(7996))
        local _, e1 = cjson.encode(nest(7997))
        local _, e2 = cjson.encode(nest(5000, true))
        return #s, e1, e2";
    assert_eq!(
        eval(encode),
        [
            "15994",
            "Cannot serialise, excessive nesting (7998)",
            "Cannot serialise, excessive nesting (4000)",
        ]
    );
}

#[test]
fn settings_are_getters_and_per_instance() {
    let code = "local cjson = require('cjson')
        local a = {cjson.encode_sparse_array()}
        cjson.encode_max_depth(7)
        local fresh = cjson.new()
        return a[1], a[2], a[3], cjson.encode_max_depth(), fresh.encode_max_depth(),
            cjson.decode_max_depth(), cjson.encode_number_precision(),
            cjson.encode_keep_buffer(), cjson.encode_invalid_numbers(),
            cjson.decode_invalid_numbers(), cjson.encode_empty_table_as_object(),
            cjson.encode_escape_forward_slash(), cjson.encode_indent(),
            require('cjson.safe').encode_max_depth()";
    assert_eq!(
        eval(code),
        [
            "false", "2", "10", "7", "1000", "1000", "14", "true", "false", "true", "true", "true",
            "", "1000"
        ]
    );
}

#[test]
fn argument_errors_name_the_function_and_line() {
    let code = "local cjson = require('cjson')
        local ok, e = pcall(function() cjson.encode_number_precision(0) end)
        local ok2, e2 = pcall(function() local v = cjson.decode() return v end)
        local ok3, e3 = pcall(cjson.decode_max_depth, {})
        return e, e2, e3";
    assert_eq!(
        eval(code),
        [
            "test:2: bad argument #1 to 'encode_number_precision' (expected integer between 1 and 16)",
            "test:3: bad argument #1 to 'decode' (expected 1 argument)",
            "bad argument #1 to '?' (number expected, got table)",
        ]
    );
}

#[test]
fn numbers_decode_as_openresty() {
    let code = "local cjson = require('cjson')
        local t = cjson.decode('[-0, 1e2, 0.5, 12345678901234567890, 1E400]')
        return 1 / t[1], t[2], t[3], t[4], t[5]";
    assert_eq!(
        eval(code),
        ["inf", "100", "0.5", "9.2233720368548e+18", "inf"]
    );
}

/// `luaL_error` names the calling Lua line, as measured under lua-nginx-module: none from
/// `pcall` itself, a tail call, or `cjson.safe`.
#[test]
fn errors_name_the_calling_line() {
    let code = "local cjson, safe = require('cjson'), require('cjson.safe')
        local _, a = pcall(function() local x = cjson.decode('{bad') return x end)
        local _, b = pcall(function() return cjson.decode('{bad') end)
        local _, c = pcall(function() local x = cjson.encode({[1] = 1, [100] = 2}) return x end)
        local _, d = safe.decode('{bad')
        local _, e = pcall(function() local x = cjson:decode() return x end)
        return a, b, c, d, e";
    let found = "Expected object key string but found invalid token at character 2";
    assert_eq!(
        eval(code),
        [
            format!("test:2: {found}"),
            found.to_owned(),
            "test:4: Cannot serialise table: excessively sparse array".to_owned(),
            found.to_owned(),
            "test:6: calling 'decode' on bad self (string expected, got table)".to_owned(),
        ]
    );
}
