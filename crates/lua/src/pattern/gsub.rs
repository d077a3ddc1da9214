//! `string.gsub`: its loop, shared by the raw function (a string or number replacement,
//! `super::raw`) and the mlua one (functions, tables, errors), and the Lua wrapper that
//! raises a replacement function's error as it was.

use super::matcher::{Captured, Fault, Matcher, anchored};
use super::{check_str, fault, opt_int, poll, push_captures};
use crate::raise::{bad_argument, place};
use crate::values::{number_text, type_name};
use mlua::{Function, Lua, MultiValue, Table, Value};

/// `string.gsub` as scripts see it: the work is `core`'s; an error the replacement function
/// raised comes back from `core` as a value and is raised again here as it was (a table,
/// `ngx.exit`'s marker), which an error through Rust would turn into text.
pub(super) const WRAPPER: &str = r#"
local core, error = ...
return function(...)
    local out, count, failed, e = core(...)
    if failed then error(e, 0) end
    return out, count
end
"#;

/// The matcher `gsub` runs.
pub(super) type Polled<'a> = Matcher<'a, fn() -> bool>;

/// What adding one replacement asks of the loop.
pub(super) enum Step {
    Go,
    /// Stop here: the replacement function raised (its error is the caller's to keep).
    Stop,
}

/// `str_gsub`'s loop: at most `max` matches of `pat` in `src`, each replaced by what `add`
/// appends to `out`; the rest of `src` as it is. The count, or `None` where `add` stopped
/// it. Past `limit` bytes, [`Fault::TooLong`].
pub(super) fn substitute<'a>(
    src: &'a [u8],
    pat: &'a [u8],
    max: i32,
    limit: usize,
    out: &mut Vec<u8>,
    mut add: impl FnMut(&Polled<'a>, (usize, usize), &mut Vec<u8>) -> Result<Step, Fault>,
) -> Result<Option<i32>, Fault> {
    let (anchor, pat) = anchored(pat);
    let mut m: Polled<'a> = Matcher::new(src, pat, poll);
    let (mut at, mut n) = (0, 0);
    while n < max {
        let e = m.match_at(at)?;
        if let Some(e) = e {
            n += 1;
            if let Step::Stop = add(&m, (at, e), out)? {
                return Ok(None);
            }
        }
        match e {
            Some(e) if e > at => at = e,
            _ if at < src.len() => {
                out.push(src[at]);
                at += 1;
            }
            _ => break,
        }
        if out.len() > limit {
            return Err(Fault::TooLong);
        }
        if anchor {
            break;
        }
    }
    out.extend_from_slice(&src[at..]);
    if out.len() > limit {
        return Err(Fault::TooLong);
    }
    Ok(Some(n))
}

/// `add_s`: a replacement text, its `%d` the captures, `%0` the whole match and `%x` for any
/// other `x` that `x` (a `%` at the very end adds the NUL after the text, as C reads it).
pub(super) fn add_text(
    m: &Polled<'_>,
    news: &[u8],
    (s, e): (usize, usize),
    out: &mut Vec<u8>,
) -> Result<(), Fault> {
    let mut i = 0;
    while i < news.len() {
        if news[i] != b'%' {
            out.push(news[i]);
            i += 1;
            continue;
        }
        let c = news.get(i + 1).copied().unwrap_or(0);
        i += 2;
        if !c.is_ascii_digit() {
            out.push(c);
        } else if c == b'0' {
            out.extend_from_slice(&m.subject()[s..e]);
        } else {
            match m.capture(usize::from(c - b'1'), s, e)? {
                Captured::Text(t) => out.extend_from_slice(t),
                Captured::Position(p) => out.extend_from_slice(p.to_string().as_bytes()),
            }
        }
    }
    Ok(())
}

/// `string.gsub`'s work as an mlua function, called by the raw function (which the
/// [`WRAPPER`] calls, so the name and line in its errors are the wrapper's frame's): the
/// result and the count, or `nil, nil, true, err` when the replacement function raised
/// `err`.
pub(super) fn core(lua: &Lua, args: &MultiValue, pcall: &Function) -> mlua::Result<MultiValue> {
    let s = check_str(lua, args, 1, LEVEL)?;
    let p = check_str(lua, args, 2, LEVEL)?;
    let repl = args.get(2).cloned().unwrap_or(Value::Nil);
    let src = s.as_bytes();
    let default = i32::try_from(src.len() + 1).unwrap_or(i32::MAX);
    let max = opt_int(lua, args, 4, default, LEVEL)?;
    let repl = match repl {
        Value::Function(f) => Replacement::Function(f),
        Value::Table(t) => Replacement::Table(t),
        Value::String(s) => Replacement::Text(s.as_bytes().to_vec()),
        v @ (Value::Integer(_) | Value::Number(_)) => {
            Replacement::Text(number_text(&v).into_bytes())
        }
        _ => {
            let msg = "string/function/table expected";
            return Err(mlua::Error::runtime(bad_argument(lua, LEVEL, 3, msg)));
        }
    };
    let limit = crate::output::output_limit(lua);
    let mut out = Vec::new();
    // What ended the loop early: an mlua error, or the value the replacement function raised.
    let mut failure: Option<Result<Value, mlua::Error>> = None;
    let counted = substitute(
        &src,
        &p.as_bytes(),
        max,
        limit,
        &mut out,
        |m, span, out| match repl.add(lua, m, span, pcall, out) {
            Ok(Ok(())) => Ok(Step::Go),
            Ok(Err(Added::Fault(f))) => Err(f),
            Ok(Err(Added::Raised(v))) => {
                failure = Some(Ok(v));
                Ok(Step::Stop)
            }
            Err(e) => {
                failure = Some(Err(e));
                Ok(Step::Stop)
            }
        },
    )
    .map_err(|f| fault(lua, f, LEVEL))?;
    match (counted, failure) {
        (Some(n), _) => Ok(MultiValue::from_vec(vec![
            Value::String(lua.create_string(&out)?),
            Value::Integer(i64::from(n)),
        ])),
        (None, Some(Ok(raised))) => Ok(MultiValue::from_vec(vec![
            Value::Nil,
            Value::Nil,
            Value::Boolean(true),
            raised,
        ])),
        (None, Some(Err(e))) => Err(e),
        (None, None) => Err(mlua::Error::runtime("string.gsub: stopped without a cause")),
    }
}

/// `gsub`'s third argument.
enum Replacement {
    /// A string (a number as its text), with `%0`..`%9` and `%%`.
    Text(Vec<u8>),
    Function(Function),
    Table(Table),
}

/// Why a replacement was not added.
enum Added {
    /// The matcher's (a bad capture index).
    Fault(Fault),
    /// What the replacement function raised.
    Raised(Value),
}

impl Replacement {
    /// `add_value`: what replaces the match `s..e`, added to `out`.
    fn add(
        &self,
        lua: &Lua,
        m: &Polled<'_>,
        (s, e): (usize, usize),
        pcall: &Function,
        out: &mut Vec<u8>,
    ) -> mlua::Result<Result<(), Added>> {
        let got = match self {
            Replacement::Text(news) => {
                return Ok(add_text(m, news, (s, e), out).map_err(Added::Fault));
            }
            Replacement::Function(f) => {
                let mut call = vec![Value::Function(f.clone())];
                push_captures(lua, m, m.levels().max(1), (s, e), LEVEL, &mut call)?;
                let mut r = pcall
                    .call::<MultiValue>(MultiValue::from_vec(call))?
                    .into_iter();
                let ok = matches!(r.next(), Some(Value::Boolean(true)));
                let first = r.next().unwrap_or(Value::Nil);
                if !ok {
                    return Ok(Err(Added::Raised(first)));
                }
                first
            }
            Replacement::Table(t) => {
                let mut key = Vec::with_capacity(1);
                push_captures(lua, m, 1, (s, e), LEVEL, &mut key)?;
                t.get::<Value>(key.swap_remove(0))?
            }
        };
        match got {
            Value::Nil | Value::Boolean(false) => out.extend_from_slice(&m.subject()[s..e]),
            Value::String(t) => out.extend_from_slice(&t.as_bytes()),
            v @ (Value::Integer(_) | Value::Number(_)) => {
                out.extend_from_slice(number_text(&v).as_bytes());
            }
            other => {
                let msg = format!("invalid replacement value (a {})", type_name(&other));
                return Err(mlua::Error::runtime(format!(
                    "{}{msg}",
                    place(lua, LEVEL + 1)
                )));
            }
        }
        Ok(Ok(()))
    }
}

/// The wrapper's frame, seen from [`core`]: the wrapper calls the raw function, which hands
/// [`core`] the calls it does not take. Errors name the wrapper as the script called it.
const LEVEL: usize = 2;
