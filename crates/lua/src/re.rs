//! `ngx.re`: `match`, `find`, `gmatch`, `sub`, `gsub` on PCRE (PCRE2 with its JIT), with
//! lua-nginx-module's options, captures (numbered, named, `false` for a group that did not
//! take part) and replacement templates (`$0`, `$1`, `${1}`, `$$`).

use mlua::{Function, Lua, LuaString, MultiValue, Table, Value};
use pcre2::bytes::{Regex, RegexBuilder};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// Compiled expressions of one state, by pattern and options (lua-nginx-module caches only
/// with `o`; caching every one is the same to a script, and cheaper).
#[derive(Default)]
pub(crate) struct RegexCache(RefCell<HashMap<(String, String), Arc<Regex>>>);

/// At most this many compiled expressions per state (`lua_regex_cache_max_entries`).
const CACHE_MAX: usize = 1024;

/// `pattern` compiled with `opts` for `subject`: under `u` a subject that is not UTF-8 is
/// an error, as PCRE's check makes it in NGINX (`U` skips the check there; PCRE2 matches
/// such a subject safely here, as not matching).
fn compile_for(lua: &Lua, pattern: &str, opts: &str, subject: &[u8]) -> Result<Arc<Regex>, String> {
    let re = compile(lua, pattern, opts)?;
    if opts.contains('u') && std::str::from_utf8(subject).is_err() {
        return Err("pcre_exec() failed: -10".to_owned());
    }
    Ok(re)
}

/// An unknown option letter is raised, as lua-resty-core raises it (a bad pattern is
/// returned as `nil, err` instead).
fn check_flags(opts: &str) -> mlua::Result<()> {
    match opts.chars().find(|c| !"imsxuUajoDdJ".contains(*c)) {
        Some(bad) => Err(mlua::Error::runtime(format!(
            "unknown flag \"{bad}\" (flags \"{opts}\")"
        ))),
        None => Ok(()),
    }
}

/// A compile error in the words of PCRE 1, which Debian's lua-nginx-module links (scripts
/// and their tests match them): PCRE2's message without its "error compiling pattern at
/// offset N" preamble, the commonest messages as PCRE 1 spelled them.
fn pcre1_words(e: &pcre2::Error) -> String {
    let text = e.to_string();
    let message = text.rsplit_once(": ").map_or(text.as_str(), |(_, m)| m);
    match message {
        "missing closing parenthesis" => "missing )",
        "quantifier does not follow a repeatable item" => "nothing to repeat",
        "unmatched closing parenthesis" => "unmatched parentheses",
        "missing terminating ] for character class" => "missing terminating ] for character class",
        other => other,
    }
    .to_owned()
}

/// `pattern` compiled with `opts` (lua-nginx-module's letters), from the state's cache.
fn compile(lua: &Lua, pattern: &str, opts: &str) -> Result<Arc<Regex>, String> {
    let key = (pattern.to_owned(), opts.to_owned());
    if let Some(cache) = lua.app_data_ref::<RegexCache>()
        && let Some(re) = cache.0.borrow().get(&key)
    {
        return Ok(re.clone());
    }
    let mut b = RegexBuilder::new();
    b.jit_if_available(true);
    let mut anchored = false;
    let mut dup_names = false;
    for c in opts.chars() {
        match c {
            'i' => drop(b.caseless(true)),
            'm' => drop(b.multi_line(true)),
            's' => drop(b.dotall(true)),
            'x' => drop(b.extended(true)),
            // UTF-8 without Unicode properties, as lua-nginx-module compiles it: `\w`,
            // `\d` and `[[:alpha:]]` stay ASCII. `u` checks the subject (`utf8_error`).
            'u' | 'U' => drop(b.utf(true)),
            'a' => anchored = true,
            // Compile once, JIT: what Sluice does anyway.
            'o' | 'j' => {}
            'D' => dup_names = true,
            'd' => return Err("the DFA matcher (option d) is not supported".to_owned()),
            'J' => return Err("JavaScript compatibility (option J) is not supported".to_owned()),
            other => return Err(format!("unknown flag \"{other}\" (flags \"{opts}\")")),
        }
    }
    let source = if anchored {
        format!("\\G(?:{pattern})")
    } else {
        pattern.to_owned()
    };
    // PCRE2_DUPNAMES has no builder switch: its inline form.
    let source = if dup_names {
        format!("(?J){source}")
    } else {
        source
    };
    let re = Arc::new(b.build(&source).map_err(|e| {
        format!(
            "pcre_compile() failed: {} in \"{pattern}\"",
            pcre1_words(&e)
        )
    })?);
    if let Some(cache) = lua.app_data_ref::<RegexCache>() {
        let mut cache = cache.0.borrow_mut();
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, re.clone());
    }
    Ok(re)
}

/// The captures of one match at or after `from`: their byte ranges (group 0 first).
type Groups = Vec<Option<(usize, usize)>>;

fn match_at(re: &Regex, subject: &[u8], from: usize) -> Result<Option<Groups>, String> {
    if from > subject.len() {
        return Ok(None);
    }
    let mut locs = re.capture_locations();
    match re.captures_read_at(&mut locs, subject, from) {
        Ok(Some(_)) => Ok(Some((0..locs.len()).map(|i| locs.get(i)).collect())),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("pcre2_match() failed: {e}")),
    }
}

/// The captures table of a match: `[0]`, `[1]`…, names; `false` for a group that did not
/// take part.
fn captures_table(lua: &Lua, re: &Regex, subject: &[u8], groups: &Groups) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let value = |g: &Option<(usize, usize)>| -> mlua::Result<Value> {
        Ok(match g {
            Some((s, e)) => Value::String(lua.create_string(&subject[*s..*e])?),
            None => Value::Boolean(false),
        })
    };
    for (i, g) in groups.iter().enumerate() {
        t.raw_set(i, value(g)?)?;
    }
    for (i, name) in re.capture_names().iter().enumerate() {
        if let (Some(name), Some(g)) = (name, groups.get(i)) {
            t.raw_set(name.as_str(), value(g)?)?;
        }
    }
    Ok(t)
}

/// Where the next search starts after a match ending at `end` (one character on after an
/// empty match, so a loop always advances).
fn next_from(subject: &[u8], start: usize, end: usize, utf: bool) -> usize {
    if end > start {
        return end;
    }
    let mut next = end + 1;
    if utf {
        while next < subject.len() && (subject[next] & 0xC0) == 0x80 {
            next += 1;
        }
    }
    next
}

/// The 0-based start `ctx.pos` asks for (1-based in Lua).
fn ctx_start(ctx: &Option<Table>) -> mlua::Result<usize> {
    Ok(match ctx {
        Some(c) => c
            .get::<Option<i64>>("pos")?
            .map_or(0, |p| (p.max(1) - 1) as usize),
        None => 0,
    })
}

/// What [`expand`] says when the result would pass its bound; `sub`/`gsub` raise it.
const PAST_LIMIT: &str = "result past [lua] max_memory";

/// Expands a replacement template for one match, `out` kept within `limit` bytes (a
/// template of many `$0` repeats the subject as often).
fn expand(
    template: &[u8],
    subject: &[u8],
    groups: &Groups,
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), String> {
    let group = |i: usize| {
        groups
            .get(i)
            .copied()
            .flatten()
            .map(|(s, e)| &subject[s..e])
    };
    let past = |out: &Vec<u8>, more: usize| more > limit.saturating_sub(out.len());
    let mut i = 0;
    while i < template.len() {
        if past(out, 1) {
            return Err(PAST_LIMIT.to_owned());
        }
        let c = template[i];
        if c != b'$' {
            out.push(c);
            i += 1;
            continue;
        }
        match template.get(i + 1) {
            Some(b'$') => {
                out.push(b'$');
                i += 2;
            }
            Some(d) if d.is_ascii_digit() => {
                let mut j = i + 1;
                while j < template.len() && template[j].is_ascii_digit() {
                    j += 1;
                }
                let n: usize = std::str::from_utf8(&template[i + 1..j])
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(usize::MAX);
                let g = group(n).unwrap_or_default();
                if past(out, g.len()) {
                    return Err(PAST_LIMIT.to_owned());
                }
                out.extend_from_slice(g);
                i = j;
            }
            Some(b'{') => {
                let close = template[i + 2..]
                    .iter()
                    .position(|&b| b == b'}')
                    .ok_or("failed to compile the replacement template")?;
                let name = std::str::from_utf8(&template[i + 2..i + 2 + close]).unwrap_or("");
                // lua-nginx-module 0.10.23 takes `${1}` but not `${name}` ("named captures
                // not supported yet"): the same error, so a script behaves the same.
                let n: usize = name
                    .parse()
                    .map_err(|_| "failed to compile the replacement template")?;
                let g = group(n).unwrap_or_default();
                if past(out, g.len()) {
                    return Err(PAST_LIMIT.to_owned());
                }
                out.extend_from_slice(g);
                i += close + 3;
            }
            _ => return Err("failed to compile the replacement template".to_owned()),
        }
    }
    Ok(())
}

/// `sub` (`all` false) and `gsub`: the new string and the count.
fn substitute(
    lua: &Lua,
    subject: &[u8],
    pattern: &str,
    replace: &Value,
    opts: &str,
    all: bool,
) -> mlua::Result<Result<(Vec<u8>, usize), String>> {
    check_flags(opts)?;
    let re = match compile_for(lua, pattern, opts, subject) {
        Ok(re) => re,
        Err(e) => return Ok(Err(e)),
    };
    let utf = opts.contains(['u', 'U']);
    let limit = crate::output::output_limit(lua);
    let past_limit = || mlua::Error::runtime(format!("{PAST_LIMIT} ({limit} bytes)"));
    let (mut out, mut from, mut last, mut n) = (Vec::with_capacity(subject.len()), 0, 0, 0);
    loop {
        let groups = match match_at(&re, subject, from) {
            Ok(Some(g)) => g,
            Ok(None) => break,
            Err(e) => return Ok(Err(e)),
        };
        let Some((s, e)) = groups[0] else { break };
        out.extend_from_slice(&subject[last..s]);
        match replace {
            // A number is its text, as lua-resty-core's `tostring` makes it.
            Value::String(_) | Value::Integer(_) | Value::Number(_) => {
                let t = crate::values::scalar_bytes(replace)?;
                match expand(&t, subject, &groups, &mut out, limit) {
                    Err(e) if e == PAST_LIMIT => return Err(past_limit()),
                    Err(e) => return Ok(Err(e)),
                    Ok(()) => {}
                }
            }
            Value::Function(f) => {
                let m = captures_table(lua, &re, subject, &groups)?;
                let r: Value = f.call(m)?;
                out.extend_from_slice(&crate::values::scalar_bytes(&r)?);
            }
            other => {
                return Err(mlua::Error::runtime(format!(
                    "bad argument #3 (string or function expected, got {})",
                    other.type_name()
                )));
            }
        }
        if out.len() > limit {
            return Err(past_limit());
        }
        n += 1;
        last = e;
        if !all {
            break;
        }
        if e == s {
            // An empty match: the character after it is copied as it is.
            let next = next_from(subject, s, e, utf);
            out.extend_from_slice(&subject[e..next.min(subject.len())]);
            last = next.min(subject.len());
            from = next;
            if next > subject.len() {
                break;
            }
        } else {
            from = e;
        }
    }
    out.extend_from_slice(&subject[last.min(subject.len())..]);
    Ok(Ok((out, n)))
}

/// `ngx.re.match(subject, regex, options?, ctx?, res_table?)`: the captures table, or
/// `nil, err`.
fn re_match(
    lua: &Lua,
    (subject, pattern, opts, ctx, res): (
        LuaString,
        String,
        Option<String>,
        Option<Table>,
        Option<Table>,
    ),
) -> mlua::Result<(Value, Option<String>)> {
    let opts = opts.unwrap_or_default();
    let subject = subject.as_bytes();
    check_flags(&opts)?;
    let compiled = match compile_for(lua, &pattern, &opts, &subject) {
        Ok(r) => r,
        Err(e) => return Ok((Value::Nil, Some(e))),
    };
    match match_at(&compiled, &subject, ctx_start(&ctx)?) {
        Ok(Some(g)) => {
            if let (Some(c), Some((_, e))) = (&ctx, g[0]) {
                c.set("pos", e + 1)?;
            }
            let m = captures_table(lua, &compiled, &subject, &g)?;
            // A table given as the 5th argument is filled and returned instead (what it
            // held before stays where this match sets nothing).
            let m = match res {
                Some(res) => {
                    for pair in m.pairs::<Value, Value>() {
                        let (k, v) = pair?;
                        res.raw_set(k, v)?;
                    }
                    res
                }
                None => m,
            };
            Ok((Value::Table(m), None))
        }
        Ok(None) => Ok((Value::Nil, None)),
        Err(e) => Ok((Value::Nil, Some(e))),
    }
}

/// `ngx.re.find(subject, regex, options?, ctx?, nth?)`: where the match (or its `nth`
/// capture) starts and ends, or `nil, nil, err`.
fn re_find(
    lua: &Lua,
    (subject, pattern, opts, ctx, nth): (
        LuaString,
        String,
        Option<String>,
        Option<Table>,
        Option<usize>,
    ),
) -> mlua::Result<(Option<usize>, Option<usize>, Option<String>)> {
    let opts = opts.unwrap_or_default();
    let subject = subject.as_bytes();
    check_flags(&opts)?;
    let compiled = match compile_for(lua, &pattern, &opts, &subject) {
        Ok(r) => r,
        Err(e) => return Ok((None, None, Some(e))),
    };
    match match_at(&compiled, &subject, ctx_start(&ctx)?) {
        Ok(Some(g)) => {
            if let (Some(c), Some((_, e))) = (&ctx, g[0]) {
                c.set("pos", e + 1)?;
            }
            let nth = nth.unwrap_or(0);
            if nth >= g.len() {
                return Ok((None, None, Some("nth out of bound".to_owned())));
            }
            match g[nth] {
                Some((s, e)) => Ok((Some(s + 1), Some(e), None)),
                None => Ok((None, None, None)),
            }
        }
        Ok(None) => Ok((None, None, None)),
        Err(e) => Ok((None, None, Some(e))),
    }
}

/// Installs `ngx.re`.
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    lua.set_app_data(RegexCache::default());
    let re = lua.create_table()?;
    re.set(
        "match",
        crate::guard::function(lua, "ngx.re.match", re_match)?,
    )?;
    re.set("find", crate::guard::function(lua, "ngx.re.find", re_find)?)?;
    for (name, all) in [("sub", false), ("gsub", true)] {
        re.set(
            name,
            crate::guard::function(
                lua,
                if all { "ngx.re.gsub" } else { "ngx.re.sub" },
                move |lua,
                      (subject, pattern, replace, opts): (
                    LuaString,
                    String,
                    Value,
                    Option<String>,
                )| {
                    let opts = opts.unwrap_or_default();
                    match substitute(lua, &subject.as_bytes(), &pattern, &replace, &opts, all)? {
                        Ok((out, n)) => Ok((Value::String(lua.create_string(out)?), Some(n), None)),
                        Err(e) => Ok((Value::Nil, None, Some(e))),
                    }
                },
            )?,
        )?;
    }
    re.set("gmatch", gmatch(lua)?)?;
    ngx.set("re", re)
}

/// `ngx.re.gmatch(subject, regex, options)`: an iterator of captures tables.
fn gmatch(lua: &Lua) -> mlua::Result<Function> {
    crate::guard::function(
        lua,
        "ngx.re.gmatch",
        |lua, (subject, pattern, opts): (LuaString, String, Option<String>)| {
            let opts = opts.unwrap_or_default();
            let subject = subject.as_bytes().to_vec();
            check_flags(&opts)?;
            let compiled = match compile_for(lua, &pattern, &opts, &subject) {
                Ok(r) => r,
                Err(e) => return Ok((Value::Nil, Some(e))),
            };
            let utf = opts.contains(['u', 'U']);
            let from = std::cell::Cell::new(Some(0usize));
            let iter =
                crate::guard::function_mut(lua, "ngx.re.gmatch iterator", move |lua, ()| {
                    // A finished iterator returns one nil, as lua-nginx-module's.
                    let Some(at) = from.get() else {
                        return Ok(MultiValue::from_vec(vec![Value::Nil]));
                    };
                    match match_at(&compiled, &subject, at) {
                        Ok(Some(g)) => {
                            let (s, e) = g[0].unwrap_or((at, at));
                            let next = next_from(&subject, s, e, utf);
                            from.set((next <= subject.len()).then_some(next));
                            let m = captures_table(lua, &compiled, &subject, &g)?;
                            Ok(MultiValue::from_vec(vec![Value::Table(m)]))
                        }
                        Ok(None) => {
                            from.set(None);
                            Ok(MultiValue::from_vec(vec![Value::Nil]))
                        }
                        Err(e) => {
                            from.set(None);
                            let e = Value::String(lua.create_string(e)?);
                            Ok(MultiValue::from_vec(vec![Value::Nil, e]))
                        }
                    }
                })?;
            Ok((Value::Function(iter), None))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        let ngx = lua.create_table().unwrap();
        install(&lua, &ngx).unwrap();
        lua.globals().set("ngx", ngx).unwrap();
        lua
    }

    #[test]
    fn match_find_and_captures() {
        let lua = lua();
        let r: (String, String, bool, String) = lua
            .load(
                r#"local m = ngx.re.match("hello 1234 world", "(?<word>[a-z]+) ([0-9]+)(x)?", "jo")
                return m[0], m.word, m[3], m[2]"#,
            )
            .eval()
            .unwrap();
        assert_eq!(
            r,
            ("hello 1234".into(), "hello".into(), false, "1234".into())
        );
        let f: (i64, i64) = lua
            .load(r#"return ngx.re.find("hello, 1234", "[0-9]+", "jo")"#)
            .eval()
            .unwrap();
        assert_eq!(f, (8, 11));
        let none: Value = lua
            .load(r#"return ngx.re.match("abc", "^b")"#)
            .eval()
            .unwrap();
        assert!(none.is_nil());
        let anchored: Value = lua
            .load(r#"return ngx.re.match("abc", "b", "a")"#)
            .eval()
            .unwrap();
        assert!(anchored.is_nil());
        let ci: String = lua
            .load(r#"return ngx.re.match("ABC", "b", "i")[0]"#)
            .eval()
            .unwrap();
        assert_eq!(ci, "B");
    }

    #[test]
    fn substitutions_as_openresty_makes_them() {
        let lua = lua();
        let (s, n): (String, i64) = lua
            .load(r#"return ngx.re.gsub("a1b22c333", "([0-9]+)", "<$1>")"#)
            .eval()
            .unwrap();
        assert_eq!((s.as_str(), n), ("a<1>b<22>c<333>", 3));
        let (s, n): (String, i64) = lua
            .load(r#"return ngx.re.sub("hello world", "(?<w>o)", "[${1}$$]")"#)
            .eval()
            .unwrap();
        assert_eq!((s.as_str(), n), ("hell[o$] world", 1));
        let named: (Value, Value, String) = lua
            .load(r#"return ngx.re.sub("hello", "(?<w>o)", "${w}")"#)
            .eval()
            .unwrap();
        assert_eq!(named.2, "failed to compile the replacement template");
        let (s, n): (String, i64) = lua
            .load(r#"return ngx.re.gsub("abc", "", "-")"#)
            .eval()
            .unwrap();
        assert_eq!((s.as_str(), n), ("-a-b-c-", 4));
        let s: String = lua
            .load(r#"return (ngx.re.gsub("a b", "\\w", function(m) return m[0]:upper() end))"#)
            .eval()
            .unwrap();
        assert_eq!(s, "A B");
        let words: String = lua
            .load(r#"local t = {} for m in ngx.re.gmatch("one two three", "\\w+") do t[#t+1] = m[0] end return table.concat(t, ",")"#)
            .eval()
            .unwrap();
        assert_eq!(words, "one,two,three");
        let err: (Value, Value, String) = lua
            .load(r#"return ngx.re.gsub("x", "(", "y")"#)
            .eval()
            .unwrap();
        // PCRE 1's words, as Debian's lua-nginx-module says it.
        assert_eq!(err.2, "pcre_compile() failed: missing ) in \"(\"");
        let raised = lua
            .load(r#"return ngx.re.match("x", "x", "Hm")"#)
            .eval::<Value>()
            .unwrap_err();
        assert!(
            raised
                .to_string()
                .contains(r#"unknown flag "H" (flags "Hm")"#)
        );
    }
}
