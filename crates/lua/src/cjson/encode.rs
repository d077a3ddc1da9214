//! `cjson.encode`: lua_cjson.c's encoder (`json_append_data` and the array, object,
//! number and string writers it calls), with the instance's settings: what is an array
//! (`array_mt`, a `__len` metamethod, `lua_array_length`'s positive integer keys and
//! `encode_sparse_array`, `encode_empty_table_as_object`, `empty_array_mt`), number
//! precision and invalid numbers, `/` escaping, skipped unsupported values, indenting, and
//! the depth limit with its C texts.
//!
//! Like the decoder, it keeps the tables it is inside on a heap stack, the outer ones (and
//! where each object's walk stands) parked in a Lua table, so that neither the Rust stack
//! nor mlua's reference stack grows with the nesting; objects are walked with the base
//! library's `next`, the same raw order as the C module's `lua_next`. What it builds counts
//! against the call's output bound (`crate::output::output_limit`).
//!
//! Derived from lua-cjson, Copyright (c) 2010-2012 Mark Pulford, MIT license
//! (`testdata/LICENSE`).

use super::config::Config;
use super::decode::MAX_C_STACK;
use super::{Shared, empty_array};
use crate::values::fmt_g;
use crate::values::type_name;
use mlua::{Lua, Table, Value};

/// An open array or object.
struct Frame {
    /// For an array: the next index, the length, and whether elements are read raw
    /// (`lua_rawgeti`) or through metamethods (`lua_gettable`). `None` for an object.
    array: Option<(i64, i64, bool)>,
    /// Its nesting depth (1 for the outermost table).
    depth: i32,
    /// The C writer's `comma` counter: items begun, less a first one that was skipped.
    comma: u32,
    has_items: bool,
    /// Where the current item began, to take it back when its value is skipped.
    pos: usize,
}

impl Frame {
    /// The Lua stack slots the C encoder holds for it: the element, or an object's key
    /// and value.
    fn slots(&self) -> usize {
        if self.array.is_some() { 1 } else { 2 }
    }
}

/// What writing a value came to: written (or opened), or skipped
/// (`encode_skip_unsupported_value_types`).
enum Step {
    Written,
    Skipped,
}

struct Encoder<'a> {
    lua: &'a Lua,
    cfg: &'a Config,
    shared: &'a Shared,
    out: Vec<u8>,
    limit: usize,
    frames: Vec<Frame>,
    /// The innermost open table, and for an object the key its walk stands at.
    table: Option<Table>,
    key: Value,
    /// The tables (and keys) around the innermost: `2n - 1` and `2n` for frame `n`.
    park: Option<Table>,
    /// Slots the C encoder would be using: its argument and each frame's.
    slots: usize,
}

fn runtime(msg: String) -> mlua::Error {
    super::error::raise(msg)
}

/// C's `(int)d` on x86-64: truncation, out of range (and NaN) as `INT_MIN`.
fn double_to_int(d: f64) -> i32 {
    if d.is_nan() || d >= 2_147_483_648.0 || d <= -2_147_483_649.0 {
        i32::MIN
    } else {
        d as i32
    }
}

fn number_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => Some(*n),
        Value::Integer(n) => Some(*n as f64),
        _ => None,
    }
}

impl Encoder<'_> {
    /// `json_append_string`, with this instance's `/` escaping.
    fn string(&mut self, s: &[u8]) {
        let slash = self.cfg.encode_escape_forward_slash;
        self.out.reserve(s.len() + 2);
        self.out.push(b'"');
        for &b in s {
            match b {
                b'"' => self.out.extend_from_slice(b"\\\""),
                b'\\' => self.out.extend_from_slice(b"\\\\"),
                b'/' if slash => self.out.extend_from_slice(b"\\/"),
                b'\n' => self.out.extend_from_slice(b"\\n"),
                b'\r' => self.out.extend_from_slice(b"\\r"),
                b'\t' => self.out.extend_from_slice(b"\\t"),
                0x08 => self.out.extend_from_slice(b"\\b"),
                0x0c => self.out.extend_from_slice(b"\\f"),
                b if b < 0x20 || b == 0x7f => {
                    self.out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
                }
                b => self.out.push(b),
            }
        }
        self.out.push(b'"');
    }

    /// `json_append_number`: `%.{precision}g`, NaN and Infinity as
    /// `encode_invalid_numbers` says.
    fn number(&mut self, n: f64) -> mlua::Result<()> {
        if !n.is_finite() {
            let text: &[u8] = match self.cfg.encode_invalid_numbers {
                0 => {
                    return Err(runtime(
                        "Cannot serialise number: must not be NaN or Infinity".into(),
                    ));
                }
                1 if n.is_nan() => b"NaN",
                1 if n < 0.0 => b"-Infinity",
                1 => b"Infinity",
                _ => b"null",
            };
            self.out.extend_from_slice(text);
            return Ok(());
        }
        let precision = usize::try_from(self.cfg.encode_number_precision).unwrap_or(14);
        self.out.extend_from_slice(fmt_g(n, precision).as_bytes());
        Ok(())
    }

    fn newline_and_indent(&mut self, depth: i32) {
        if let Some(indent) = &self.cfg.encode_indent {
            self.out.push(b'\n');
            for _ in 0..depth {
                self.out.extend_from_slice(indent);
            }
        }
    }

    /// `json_append_data` for one value at container depth `depth` (0 at the top); a
    /// table is opened, its items written by [`Encoder::run`].
    fn value(&mut self, v: Value, depth: i32) -> mlua::Result<Step> {
        // A table repeated at every level doubles the text per level: the result is bounded
        // as a call's output is (checked per value, so it passes the bound by one string
        // at most).
        if self.out.len() > self.limit {
            return Err(runtime(format!(
                "Cannot serialise: result past [lua] max_memory ({} bytes)",
                self.limit
            )));
        }
        match v {
            Value::String(s) => self.string(&s.as_bytes()),
            Value::Integer(_) | Value::Number(_) => self.number(number_of(&v).unwrap_or(0.0))?,
            Value::Boolean(b) => self
                .out
                .extend_from_slice(if b { b"true" } else { b"false" }),
            Value::Table(t) => self.table(t, depth + 1)?,
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::LightUserData(p) if p.0.is_null() => self.out.extend_from_slice(b"null"),
            // `cjson.empty_array`; any other light userdata writes nothing, as in C.
            v @ Value::LightUserData(_) if v == empty_array() => self.out.extend_from_slice(b"[]"),
            Value::LightUserData(_) => {}
            other if self.cfg.encode_skip_unsupported_value_types => {
                let _ = other;
                return Ok(Step::Skipped);
            }
            other => {
                return Err(runtime(format!(
                    "Cannot serialise {}: type not supported",
                    type_name(&other)
                )));
            }
        }
        Ok(Step::Written)
    }

    /// A table at `depth`: an array or an object, as lua-cjson decides.
    fn table(&mut self, t: Table, depth: i32) -> mlua::Result<()> {
        if depth > self.cfg.encode_max_depth || self.slots + 3 > MAX_C_STACK {
            return Err(runtime(format!(
                "Cannot serialise, excessive nesting ({depth})"
            )));
        }
        let mt = t.metatable();
        let mut raw = true;
        if let Some(mt) = &mt {
            if *mt == self.shared.array_mt {
                let len = i64::try_from(t.raw_len()).unwrap_or(i64::MAX);
                return self.open(t, depth, Some((len, true)));
            }
            raw = false;
            let len_fn = mt.raw_get::<Value>("__len")?;
            if !len_fn.is_nil() {
                let len = self.call_len(len_fn, &t)?;
                return self.open(t, depth, Some((len, false)));
            }
        }
        let len = self.array_length(&t)?;
        if len > 0 || (len == 0 && !self.cfg.encode_empty_table_as_object) {
            return self.open(t, depth, Some((i64::from(len), raw)));
        }
        if mt.is_some_and(|mt| mt == self.shared.empty_array_mt) {
            let len = i64::try_from(t.raw_len()).unwrap_or(i64::MAX);
            return self.open(t, depth, Some((len, true)));
        }
        self.open(t, depth, None)
    }

    /// A `__len` metamethod's answer, as C's `(int)lua_tonumber`.
    fn call_len(&self, f: Value, t: &Table) -> mlua::Result<i64> {
        let Value::Function(f) = f else {
            return Err(runtime(format!(
                "attempt to call a {} value",
                type_name(&f)
            )));
        };
        let n: Value = f.call(t.clone())?;
        let n = self.lua.coerce_number(n)?.unwrap_or(0.0);
        Ok(i64::from(double_to_int(n)))
    }

    /// `lua_array_length`: the largest key when every key is a positive integer (as C's
    /// `int`: one past `INT_MAX` reads as `INT_MIN`, an object), -1 otherwise; an
    /// excessively sparse one is an error, or an object under `encode_sparse_array(true)`.
    fn array_length(&self, t: &Table) -> mlua::Result<i32> {
        let (mut max, mut items) = (0i32, 0i32);
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            match number_of(&k) {
                Some(k) if k != 0.0 && k.floor() == k && k >= 1.0 => {
                    if k > f64::from(max) {
                        max = double_to_int(k);
                    }
                    items = items.wrapping_add(1);
                }
                _ => return Ok(-1),
            }
        }
        let c = self.cfg;
        if c.encode_sparse_ratio > 0
            && max > items.wrapping_mul(c.encode_sparse_ratio)
            && max > c.encode_sparse_safe
        {
            if !c.encode_sparse_convert {
                return Err(runtime(
                    "Cannot serialise table: excessively sparse array".into(),
                ));
            }
            return Ok(-1);
        }
        Ok(max)
    }

    /// Opens `t` as an array (`Some((len, raw))`) or object, parking the table around it.
    fn open(&mut self, t: Table, depth: i32, array: Option<(i64, bool)>) -> mlua::Result<()> {
        self.out.push(if array.is_some() { b'[' } else { b'{' });
        if let Some(outer) = self.table.replace(t) {
            let park = match &self.park {
                Some(p) => p.clone(),
                None => self.park.insert(self.lua.create_table()?).clone(),
            };
            let n = self.frames.len();
            park.raw_set(2 * n - 1, outer)?;
            park.raw_set(2 * n, std::mem::replace(&mut self.key, Value::Nil))?;
        }
        let frame = Frame {
            array: array.map(|(len, raw)| (1, len, raw)),
            depth,
            comma: 0,
            has_items: false,
            pos: 0,
        };
        self.slots += frame.slots();
        self.frames.push(frame);
        Ok(())
    }

    /// Closes the innermost table: its end, and the table around it is innermost again.
    fn close(&mut self) -> mlua::Result<()> {
        let Some(f) = self.frames.pop() else {
            return Ok(());
        };
        self.slots -= f.slots();
        if f.has_items {
            self.newline_and_indent(f.depth - 1);
        }
        self.out.push(if f.array.is_some() { b']' } else { b'}' });
        self.table = None;
        self.key = Value::Nil;
        let n = self.frames.len();
        if let (true, Some(park)) = (n > 0, &self.park) {
            self.table = Some(park.raw_get(2 * n - 1)?);
            self.key = park.raw_get(2 * n)?;
        }
        Ok(())
    }

    /// An item's start in the innermost table: its comma and indent.
    fn item_start(&mut self) {
        let Some(f) = self.frames.last_mut() else {
            return;
        };
        f.has_items = true;
        f.pos = self.out.len();
        if f.comma > 0 {
            self.out.push(b',');
        }
        f.comma += 1;
        let depth = f.depth;
        self.newline_and_indent(depth);
    }

    /// An object's key: a string, or a number written as one.
    fn object_key(&mut self, k: &Value) -> mlua::Result<()> {
        match k {
            Value::String(s) => {
                self.string(&s.as_bytes());
                self.out.push(b':');
            }
            Value::Integer(_) | Value::Number(_) => {
                self.out.push(b'"');
                self.number(number_of(k).unwrap_or(0.0))?;
                self.out.extend_from_slice(b"\":");
            }
            other => {
                return Err(runtime(format!(
                    "Cannot serialise {}: table key must be a number or string",
                    type_name(other)
                )));
            }
        }
        if self.cfg.encode_indent.is_some() {
            self.out.push(b' ');
        }
        Ok(())
    }

    /// The innermost table's next item, its comma, indent and key written; `None` when it
    /// has no more.
    fn next_item(&mut self) -> mlua::Result<Option<Value>> {
        let (Some(t), Some(f)) = (self.table.clone(), self.frames.last_mut()) else {
            return Ok(None);
        };
        if let Some((i, len, raw)) = &mut f.array {
            if *i > *len {
                return Ok(None);
            }
            let (index, raw) = (*i, *raw);
            *i += 1;
            self.item_start();
            return if raw { t.raw_get(index) } else { t.get(index) }.map(Some);
        }
        let (k, v): (Value, Value) = self.shared.next.call((t, self.key.clone()))?;
        if k.is_nil() {
            return Ok(None);
        }
        self.key = k.clone();
        self.item_start();
        self.object_key(&k)?;
        Ok(Some(v))
    }

    /// Writes the open tables' items until all are closed.
    fn run(&mut self) -> mlua::Result<()> {
        while let Some(depth) = self.frames.last().map(|f| f.depth) {
            let Some(v) = self.next_item()? else {
                self.close()?;
                continue;
            };
            if let Step::Skipped = self.value(v, depth)? {
                // A skipped value takes back its comma, indent and key.
                let Some(f) = self.frames.last_mut() else {
                    continue;
                };
                self.out.truncate(f.pos);
                if f.comma == 1 {
                    f.comma = 0;
                }
            }
        }
        Ok(())
    }
}

/// `json_encode`: `v` as JSON text.
pub(super) fn encode(lua: &Lua, v: &Value, cfg: &Config, shared: &Shared) -> mlua::Result<Vec<u8>> {
    let mut e = Encoder {
        lua,
        cfg,
        shared,
        out: Vec::new(),
        limit: crate::output::output_limit(lua),
        frames: Vec::new(),
        table: None,
        key: Value::Nil,
        park: None,
        slots: 1,
    };
    e.value(v.clone(), 0)?;
    e.run()?;
    Ok(e.out)
}
