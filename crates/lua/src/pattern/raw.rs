//! Raw `lua_CFunction`s in front of `string.find`, `string.match` and `string.gsub`'s core
//! (`crate::cfunc`): an mlua callback cost ~700 ns a call, ten times LuaJIT's own find of
//! an anchored pattern. They take string subjects, patterns and replacements, a number or
//! nothing for `init` and `n`, and hand every other call, and every call that ends in an
//! error (a malformed pattern, the budget's stop, a result past the output limit), to the
//! mlua function they stand in front of, which raises it with LuaJIT's words.

#![expect(unsafe_code, reason = "raw lua_CFunctions over LuaJIT's C API")]

use super::gsub::{Step, add_text, substitute};
use super::{Found, c_int32, search};
use crate::cfunc::{delegate, optional_number_at, push_bytes, str_at};
use crate::guard;
use mlua::ffi;
use std::ffi::c_int;

/// `string.find` (`FIND`) or `string.match`: one function, so that the Rust work each
/// does runs under `guard::shielded` in the function LuaJIT calls.
pub(super) unsafe extern "C-unwind" fn find_or_match<const FIND: bool>(
    l: *mut ffi::lua_State,
) -> c_int {
    let name = if FIND { "string.find" } else { "string.match" };
    // SAFETY: called by LuaJIT as the closure `cfunc::closure` made, with the mlua function
    // as its slow path. The subject and pattern are read while on the stack, which nothing
    // here pops; `search` calls no Lua API that raises (its poll reads the hook mask only);
    // the values pushed are slices of the subject and numbers, nothing with a destructor.
    unsafe {
        let (Some(src), Some(pat), Some(init)) =
            (str_at(l, 1), str_at(l, 2), optional_number_at(l, 3))
        else {
            return delegate(l);
        };
        let plain = FIND && ffi::lua_toboolean(l, 4) != 0;
        let init = init.map_or(1, c_int32);
        match guard::shielded(l, name, || search(src, pat, init, plain, FIND)) {
            Ok(Some(found)) => push(l, &found),
            Ok(None) => {
                ffi::lua_pushnil(l);
                1
            }
            Err(_) => delegate(l),
        }
    }
}

/// Pushes what was found: `find`'s span, then the captures.
///
/// # Safety
/// `l` is the state of a running C function; `found` borrows from values on its stack.
unsafe fn push(l: *mut ffi::lua_State, found: &Found<'_>) -> c_int {
    // SAFETY: room is made for every value first (32 captures and a span at most).
    unsafe {
        let n = found.count + if found.span.is_some() { 2 } else { 0 };
        let n = c_int::try_from(n).unwrap_or(c_int::MAX);
        if ffi::lua_checkstack(l, n) == 0 {
            return delegate(l);
        }
        if let Some((start, end)) = found.span {
            ffi::lua_pushinteger(l, integer(start));
            ffi::lua_pushinteger(l, integer(end));
        }
        for v in &found.values[..found.count] {
            match *v {
                super::Captured::Text(t) => push_bytes(l, t),
                super::Captured::Position(p) => ffi::lua_pushinteger(l, integer(p)),
            }
        }
        n
    }
}

/// A position as `lua_Integer`.
fn integer(p: usize) -> ffi::lua_Integer {
    ffi::lua_Integer::try_from(p).unwrap_or(ffi::lua_Integer::MAX)
}

/// `string.gsub`'s core with a string replacement: the result and the count. The closure's
/// light userdata is the output limit (a number, not an address).
pub(super) unsafe extern "C-unwind" fn gsub(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `find_aux`. `out` is alive while the result is pushed: should the push
    // raise (out of memory), LuaJIT's unwinding at worst leaks it.
    unsafe {
        let (Some(src), Some(pat), Some(news), Some(max)) = (
            str_at(l, 1),
            str_at(l, 2),
            str_at(l, 3),
            optional_number_at(l, 4),
        ) else {
            return delegate(l);
        };
        let limit = ffi::lua_touserdata(l, ffi::lua_upvalueindex(2)).addr();
        let max = max.map_or(i32::try_from(src.len() + 1).unwrap_or(i32::MAX), c_int32);
        let mut out = Vec::new();
        let counted = guard::shielded(l, "string.gsub", || {
            substitute(src, pat, max, limit, &mut out, |m, span, out| {
                add_text(m, news, span, out).map(|()| Step::Go)
            })
        });
        let Ok(Some(n)) = counted else {
            return delegate(l);
        };
        push_bytes(l, &out);
        ffi::lua_pushinteger(l, ffi::lua_Integer::from(n));
        2
    }
}
