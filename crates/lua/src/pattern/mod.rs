//! `string.find`, `string.match`, `string.gmatch` and `string.gsub` on a matcher that the
//! instruction budget stops ([`matcher`]), in place of LuaJIT's.
//!
//! LuaJIT matches a pattern in one C call: a backtracking pattern over a long subject
//! (`body:match("a.-b")` over 64 KiB of `a`s, 2·10⁹ steps) held its worker thread for good,
//! out of reach of the count hook and the compiled polls. These functions give the same
//! results and errors as LuaJIT's (checked against them, `tests`), and their matcher counts
//! its steps: once the running call's budget is armed, every [`matcher::POLL_EVERY`] steps
//! are one tick of it (a thousand instructions), and past the budget the call stops with the
//! budget's error. `string.find` with a plain text is the same search, no longer compiled
//! by the JIT (LuaJIT compiles it, and no other of the four).

mod gsub;
mod matcher;
mod raw;
#[cfg(test)]
mod tests;

use crate::raise::{bad_argument, place};
use crate::values::{number_text, type_name};
use matcher::{Captured, Fault, Matcher, anchored, c_pattern, has_specials};
use mlua::{Function, Lua, LuaString, MultiValue, Table, Value};

/// Puts the four functions in `string` (which is also what `("s"):find()` reaches).
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let string: Table = lua.globals().get("string")?;
    let find = crate::guard::function(lua, "string.find", |lua, args: MultiValue| {
        find_aux(lua, &args, true)
    })?;
    let find = crate::cfunc::closure(lua, raw::find_or_match::<true>, find, None)?;
    let matches = crate::guard::function(lua, "string.match", |lua, args: MultiValue| {
        find_aux(lua, &args, false)
    })?;
    let matches = crate::cfunc::closure(lua, raw::find_or_match::<false>, matches, None)?;
    let gmatch = crate::guard::function(lua, "string.gmatch", gmatch)?;
    // LuaJIT's own pcall, taken before the API wraps it: it hands back any error as it is.
    let pcall: Function = lua.globals().get("pcall")?;
    let core = crate::guard::function(lua, "string.gsub", move |lua, args: MultiValue| {
        gsub::core(lua, &args, &pcall)
    })?;
    let limit = crate::output::output_limit(lua);
    // The output limit travels as the closure's light userdata: a number, not an address.
    let core = crate::cfunc::closure(
        lua,
        raw::gsub,
        core,
        Some(std::ptr::without_provenance_mut(limit)),
    )?;
    let error: Function = lua.globals().get("error")?;
    let gsub: Function = lua
        .load(gsub::WRAPPER)
        .set_name("=sluice")
        .call((core, error))?;
    string.raw_set("find", find)?;
    string.raw_set("match", matches)?;
    string.raw_set("gmatch", gmatch)?;
    string.raw_set("gsub", gsub)
}

/// The matcher's poll: the running call's budget, counted once it is armed.
fn poll() -> bool {
    crate::budget::charge_tick()
}

/// A [`Fault`] as the error LuaJIT raises, for the function `level` frames up.
fn fault(lua: &Lua, f: Fault, level: usize) -> mlua::Error {
    match f {
        Fault::Pattern(msg) => mlua::Error::runtime(format!("{}{msg}", place(lua, level + 1))),
        Fault::Stopped => mlua::Error::runtime(crate::budget::stopped_text()),
        // As LuaJIT's allocator refuses a buffer past `[lua] max_memory`.
        Fault::TooLong => mlua::Error::runtime("not enough memory"),
    }
}

/// `lj_lib_checkstr`: argument `narg`, a string or a number as its text.
fn check_str(lua: &Lua, args: &MultiValue, narg: usize, level: usize) -> mlua::Result<LuaString> {
    match args.get(narg - 1) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => lua.create_string(number_text(v)),
        other => {
            let got = other.map_or("no value", type_name);
            let msg = format!("string expected, got {got}");
            Err(mlua::Error::runtime(bad_argument(lua, level, narg, &msg)))
        }
    }
}

/// `lj_lib_optint`: argument `narg` as C's `(int32_t)` of its number (a numeric string
/// counts), `default` where it is absent or nil.
fn opt_int(
    lua: &Lua,
    args: &MultiValue,
    narg: usize,
    default: i32,
    level: usize,
) -> mlua::Result<i32> {
    let v = match args.get(narg - 1) {
        None | Some(Value::Nil) => return Ok(default),
        Some(v) => v.clone(),
    };
    let got = type_name(&v);
    match lua.coerce_number(v)? {
        Some(n) => Ok(c_int32(n)),
        None => {
            let msg = format!("number expected, got {got}");
            Err(mlua::Error::runtime(bad_argument(lua, level, narg, &msg)))
        }
    }
}

/// C's `(int32_t)n` on x86-64: truncation; NaN and what is out of range are `INT32_MIN`.
pub(crate) fn c_int32(n: f64) -> i32 {
    if n.is_nan() || n >= 2_147_483_648.0 || n <= -2_147_483_649.0 {
        i32::MIN
    } else {
        n as i32
    }
}

/// Captures `0..count` of the match `s..e` as values (`push_onecapture`).
fn push_captures<P: FnMut() -> bool>(
    lua: &Lua,
    m: &Matcher<'_, P>,
    count: usize,
    (s, e): (usize, usize),
    level: usize,
    out: &mut Vec<Value>,
) -> mlua::Result<()> {
    for i in 0..count {
        out.push(captured(
            lua,
            m.capture(i, s, e).map_err(|f| fault(lua, f, level))?,
        )?);
    }
    Ok(())
}

/// `push_captures` of a match of `s..e`: the whole match where the pattern has no capture.
fn all_captures<P: FnMut() -> bool>(
    lua: &Lua,
    m: &Matcher<'_, P>,
    span: (usize, usize),
    level: usize,
) -> mlua::Result<Vec<Value>> {
    let mut out = Vec::new();
    push_captures(lua, m, m.levels().max(1), span, level, &mut out)?;
    Ok(out)
}

/// What `string.find` or `string.match` answers: values made of slices of the subject and
/// numbers only, so that the raw function ([`raw`]) holds nothing with a destructor while
/// it pushes them (a push may raise).
pub(crate) struct Found<'a> {
    /// `string.find`'s start and end (1-based, inclusive).
    span: Option<(usize, usize)>,
    /// The captures (`string.match`: the whole match where the pattern has none).
    values: [Captured<'a>; matcher::MAX_CAPTURES],
    count: usize,
}

/// `str_find_aux` on bytes: `string.find` (`find`) or `string.match` of `pat` in `src` from
/// `init` (already `lj_lib_optint`'s), `plain` as `find`'s fourth argument's truth.
pub(crate) fn search<'a>(
    src: &'a [u8],
    pat: &'a [u8],
    init: i32,
    plain: bool,
    find: bool,
) -> Result<Option<Found<'a>>, Fault> {
    let len = i32::try_from(src.len()).unwrap_or(i32::MAX);
    let start = if init < 0 {
        init.wrapping_add(len)
    } else {
        init - 1
    };
    // Past the end, the search starts at the end (LuaJIT without its Lua 5.2 extensions).
    let st = usize::try_from(start).unwrap_or(0).min(src.len());
    let mut found = Found {
        span: None,
        values: [Captured::Position(0); matcher::MAX_CAPTURES],
        count: 0,
    };
    if find && (plain || !has_specials(pat)) {
        return Ok(find_plain(&src[st..], pat).map(|q| {
            found.span = Some((st + q + 1, st + q + pat.len()));
            found
        }));
    }
    let (anchor, pat) = anchored(pat);
    let mut m = Matcher::new(src, pat, poll);
    for at in st..=src.len() {
        if let Some(q) = m.match_at(at)? {
            found.count = if find { m.levels() } else { m.levels().max(1) };
            for i in 0..found.count {
                found.values[i] = m.capture(i, at, q)?;
            }
            found.span = find.then_some((at + 1, q));
            return Ok(Some(found));
        }
        if anchor {
            break;
        }
    }
    Ok(None)
}

/// Needles up to this long are looked for as LuaJIT does, by their first byte and then the
/// rest: at most this many comparisons per byte of the subject.
const SHORT_NEEDLE: usize = 32;

/// `lj_str_find`: where `p` first is in `s`. A short `p` by its first byte (`memchr`) and
/// then the rest, as LuaJIT does (a searcher that prepares the needle costs more than the
/// search for the short texts scripts look for); a longer one by `memchr::memmem`, linear
/// in the subject: LuaJIT's way compares up to `p.len()` bytes at every position, which a
/// needle and a subject from the request (`body:find(arg, 1, true)`) made seconds of one
/// call, out of the budget's reach.
fn find_plain(s: &[u8], p: &[u8]) -> Option<usize> {
    if p.len() > SHORT_NEEDLE {
        return memchr::memmem::find(s, p);
    }
    let Some((&first, rest)) = p.split_first() else {
        return Some(0);
    };
    let last = s.len().checked_sub(p.len())?;
    let mut from = 0;
    while from <= last {
        let at = from + memchr::memchr(first, &s[from..=last])?;
        if &s[at + 1..at + p.len()] == rest {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `string.find` or `string.match` as an mlua function: the calls the raw function hands
/// on (arguments of other types, errors). The raw function called it, so the name and line
/// in its errors are one frame up.
fn find_aux(lua: &Lua, args: &MultiValue, find: bool) -> mlua::Result<MultiValue> {
    let s = check_str(lua, args, 1, 1)?;
    let p = check_str(lua, args, 2, 1)?;
    let init = opt_int(lua, args, 3, 1, 1)?;
    let plain = matches!(args.get(3), Some(v) if !matches!(v, Value::Nil | Value::Boolean(false)));
    let (src, pat) = (s.as_bytes(), p.as_bytes());
    let Some(found) = search(&src, &pat, init, plain, find).map_err(|f| fault(lua, f, 1))? else {
        return Ok(MultiValue::from_vec(vec![Value::Nil]));
    };
    let mut out = Vec::with_capacity(found.count + 2);
    if let Some((start, end)) = found.span {
        out.extend([position(start), position(end)]);
    }
    for v in &found.values[..found.count] {
        out.push(captured(lua, *v)?);
    }
    Ok(MultiValue::from_vec(out))
}

/// A capture as a Lua value.
fn captured(lua: &Lua, c: Captured<'_>) -> mlua::Result<Value> {
    Ok(match c {
        Captured::Text(t) => Value::String(lua.create_string(t)?),
        Captured::Position(p) => position(p),
    })
}

/// A 1-based position as Lua's integer.
fn position(p: usize) -> Value {
    Value::Integer(i64::try_from(p).unwrap_or(i64::MAX))
}

/// `string.gmatch`: an iterator over the matches of the pattern (no anchor: a `^` is a
/// character here, as in Lua 5.1).
fn gmatch(lua: &Lua, args: MultiValue) -> mlua::Result<Function> {
    let s = check_str(lua, &args, 1, 0)?;
    let p = check_str(lua, &args, 2, 0)?;
    let pat = c_pattern(&p.as_bytes()).to_vec();
    let mut pos = 0;
    crate::guard::function_mut(lua, "string.gmatch", move |lua, ()| {
        let src = s.as_bytes();
        let mut m = Matcher::new(&src, &pat, poll);
        let mut at = pos;
        while at <= src.len() {
            if let Some(e) = m.match_at(at).map_err(|f| fault(lua, f, 0))? {
                // An empty match moves on by one, so that the next call makes progress.
                pos = if e == at { e + 1 } else { e };
                return Ok(MultiValue::from_vec(all_captures(lua, &m, (at, e), 0)?));
            }
            at += 1;
        }
        Ok(MultiValue::new())
    })
}
