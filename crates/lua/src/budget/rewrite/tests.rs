use super::{POLL_STATEMENT, PREFIX, PREFIX_VARARG, SUFFIX, instrument};

/// The body of `source`'s rewrite (prefix and suffix checked and taken off), with each poll
/// shown as `@`.
fn polled(source: &str) -> String {
    let out = String::from_utf8(instrument(source.as_bytes()).expect("rewritten")).unwrap();
    let prefix = if source.contains("...") {
        PREFIX_VARARG
    } else {
        PREFIX
    };
    let body = out
        .strip_prefix(prefix)
        .and_then(|b| b.strip_suffix(SUFFIX))
        .expect("the wrapper");
    body.replace(POLL_STATEMENT, "@")
}

#[test]
fn loops_and_gotos_poll_and_nothing_else_changes() {
    assert_eq!(
        polled("while true do x = x + 1 end"),
        "while true do@ x = x + 1 end"
    );
    assert_eq!(polled("for i = 1, 3 do end"), "for i = 1, 3 do@ end");
    assert_eq!(
        polled("for k, v in pairs(t) do f(k) end"),
        "for k, v in pairs(t) do@ f(k) end"
    );
    assert_eq!(
        polled("repeat n = n - 1 until n == 0"),
        "repeat@ n = n - 1 until n == 0"
    );
    assert_eq!(polled("::top:: goto top"), "::top:: @goto top");
    assert_eq!(polled("local undo, redo = 1, 2"), "local undo, redo = 1, 2");
}

#[test]
fn keywords_in_strings_and_comments_are_not_polled() {
    let source = "local s = \"do\" .. 'repeat \\' do' -- do\n--[[ do\n]] local l = [==[ do ]] ]==] --[=[\nrepeat ]=] x = 1";
    assert_eq!(polled(source), source);
    assert_eq!(
        polled("x = 1e+5 .. 0x1p-4 -- do"),
        "x = 1e+5 .. 0x1p-4 -- do"
    );
}

#[test]
fn every_function_body_polls_first() {
    assert_eq!(
        polled("local function f(n) return f(n) end"),
        "local function f(n)@ return f(n) end"
    );
    assert_eq!(
        polled("function a.b.c:d(x, ...) end"),
        "function a.b.c:d(x, ...)@ end"
    );
    assert_eq!(
        polled("g(function() end, function(a) end)"),
        "g(function()@ end, function(a)@ end)"
    );
    assert_eq!(
        polled("local t = { f = function(...) return ... end }"),
        "local t = { f = function(...)@ return ... end }"
    );
    // The chunk's own body polls first too (in the prefix).
    assert!(PREFIX.ends_with(POLL_STATEMENT));
}

#[test]
fn line_numbers_are_kept() {
    let source =
        "-- one\nlocal function f(n)\n  while n > 0 do n = n - 1 end\n  return g(n)\nend\nreturn f";
    let out = instrument(source.as_bytes()).unwrap();
    let lines = |b: &[u8]| b.iter().filter(|&&c| c == b'\n').count();
    // The suffix's own line comes after the last of the chunk's.
    assert_eq!(lines(&out), lines(source.as_bytes()) + 1);
    let out = String::from_utf8(out).unwrap();
    for (line, text) in out.lines().zip(source.lines()) {
        let kept = line.replace(PREFIX, "").replace(POLL_STATEMENT, "");
        assert_eq!(kept, text);
    }
}

#[test]
fn first_lines_luajit_skips_become_comments() {
    let out = instrument(b"#!/usr/bin/env luajit\nreturn 1").unwrap();
    assert!(out.starts_with(format!("{PREFIX}-- !/usr/bin/env luajit\nreturn 1").as_bytes()));
    // `#[[` must not open a long comment that swallows the chunk.
    let out = instrument(b"#[[\nreturn 1").unwrap();
    assert!(out.starts_with(format!("{PREFIX}-- [[\nreturn 1").as_bytes()));
    let out = instrument(b"\xEF\xBB\xBFreturn 1").unwrap();
    assert!(out.starts_with(format!("{PREFIX}return 1").as_bytes()));
}

#[test]
fn what_cannot_be_rewritten_is_refused() {
    // A binary chunk, the poll's own names (a script could replace the poll), and text that
    // does not lex or balance (it will not compile either).
    for source in [
        &b"\x1bLJ\x02"[..],
        b"__sluice_poll = function() return 0 end",
        b"local __sluice_stop",
        b"x = 'unfinished",
        b"x = [==[ unfinished ]]",
        b"f(x]",
        b"f((x)",
    ] {
        assert!(
            instrument(source).is_none(),
            "{}",
            String::from_utf8_lossy(source)
        );
    }
}

/// The `rewrite` fuzz target's saved inputs (every script of lua-nginx-module's tests that
/// bench/luat ports, and edge cases of the lexical grammar) keep their lines and compile.
#[test]
fn the_fuzz_targets_inputs_rewrite_and_compile() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/rewrite");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        crate::fuzzing::check_rewrite(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n > 1000, "{n} inputs");
}

/// A parameter list that holds more than names (the fuzzer's first find: a `function` or
/// `do` inside it put a poll before text already copied) is not rewritten.
#[test]
fn a_parameter_list_of_more_than_names_is_refused() {
    for source in [
        "local function f(a, b = g(function() end)) end",
        "function f(x do) end",
        "function f(1) end",
    ] {
        assert!(instrument(source.as_bytes()).is_none(), "{source}");
    }
    assert!(instrument(b"function f(a, b, ...) end").is_some());
}

/// A chunk that names `...` is wrapped in a vararg function, any other in a plain one (where
/// LuaJIT can start a trace), with polls or without.
#[test]
fn only_a_chunk_that_names_varargs_gets_a_vararg_function() {
    let plain = instrument(b"local n = 1 return n").unwrap();
    assert!(plain.starts_with(PREFIX.as_bytes()));
    assert!(PREFIX.contains("function()"));
    for source in [
        "local name = ...",
        "local function f(...) return ... end",
        "print(select('#', ...))",
    ] {
        let out = instrument(source.as_bytes()).unwrap();
        assert!(out.starts_with(PREFIX_VARARG.as_bytes()), "{source}");
        assert!(super::wrap(source.as_bytes()).is_none(), "{source}");
    }
    // `...` in a string or a comment is not the chunk's.
    let out = instrument(b"local s = '...' -- ...").unwrap();
    assert!(out.starts_with(PREFIX.as_bytes()));
    assert_eq!(
        super::wrap(b"#!/bin/lua\nreturn '...'").unwrap(),
        b"return function() -- !/bin/lua\nreturn '...'\nend"
    );
}
