//! `cjson.decode`: lua_cjson.c's decoder, function for function (`json_next_token`,
//! `json_next_string_token`, `json_next_number_token`, `json_process_value`, the object and
//! array contexts), so that what it accepts, what it makes of numbers (`strtoll`, then
//! `strtod`'s hex, `inf` and `nan` where `decode_invalid_numbers` allows them), and its
//! error texts and "at character N" positions are the C module's. The input is read as the
//! C string it is there: a NUL byte ends it.
//!
//! The C parser recurses on the Lua stack, bounded by `decode_max_depth` and by
//! `lua_checkstack` (LuaJIT's `LUAI_MAXCSTACK`, 8000 slots a C function). This one keeps its
//! open arrays and objects on a heap stack ([`Builder`]) and the Lua tables of all but the
//! innermost in a Lua table, so that neither the Rust stack nor mlua's reference stack grows
//! with the nesting; the slot count is kept to fail where the C module fails.
//!
//! Derived from lua-cjson, Copyright (c) 2010-2012 Mark Pulford, MIT license
//! (`testdata/LICENSE`).

use mlua::{Lua, Table, Value};

/// What a decode call was told (`decode_*` settings).
pub(super) struct Options {
    pub(super) invalid_numbers: bool,
    pub(super) max_depth: i32,
    pub(super) allow_comment: bool,
    /// `cjson.array_mt` when `decode_array_with_array_mt` is on.
    pub(super) array_mt: Option<Table>,
}

/// LuaJIT's `LUAI_MAXCSTACK`: the stack slots a C function may use (`lua_checkstack`).
pub(super) const MAX_C_STACK: usize = 8000;

/// `json_token_type_t`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    String,
    Number,
    Integer,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    Whitespace,
    Error,
    Unknown,
}

impl Kind {
    /// `json_token_type_name`: how an error names a token it did not expect.
    fn name(self) -> &'static str {
        match self {
            Kind::ObjBegin => "T_OBJ_BEGIN",
            Kind::ObjEnd => "T_OBJ_END",
            Kind::ArrBegin => "T_ARR_BEGIN",
            Kind::ArrEnd => "T_ARR_END",
            Kind::String => "T_STRING",
            Kind::Number => "T_NUMBER",
            Kind::Integer => "T_INTEGER",
            Kind::Boolean => "T_BOOLEAN",
            Kind::Null => "T_NULL",
            Kind::Colon => "T_COLON",
            Kind::Comma => "T_COMMA",
            Kind::End => "T_END",
            Kind::Whitespace => "T_WHITESPACE",
            Kind::Error => "T_ERROR",
            Kind::Unknown => "T_UNKNOWN",
        }
    }

    /// `ch2token`: what a byte starts.
    fn of(ch: u8) -> Kind {
        match ch {
            b'{' => Kind::ObjBegin,
            b'}' => Kind::ObjEnd,
            b'[' => Kind::ArrBegin,
            b']' => Kind::ArrEnd,
            b',' => Kind::Comma,
            b':' => Kind::Colon,
            0 => Kind::End,
            b' ' | b'\t' | b'\n' | b'\r' => Kind::Whitespace,
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'"' | b'+' | b'-' | b'0'..=b'9' => {
                Kind::Unknown
            }
            _ => Kind::Error,
        }
    }
}

/// `json_token_t`: a string token's text is the parser's `tmp`.
#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Kind,
    /// Where it starts (0-based), or for an error where it was found.
    index: usize,
    number: f64,
    boolean: bool,
    /// An error token's text ("invalid token").
    error: &'static str,
}

/// `escape2char`: what `\c` stands for; 0 is an invalid escape, `u` a Unicode one.
fn escape_char(c: u8) -> u8 {
    match c {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b't' => b'\t',
        b'n' => b'\n',
        b'f' => 0x0c,
        b'r' => b'\r',
        b'u' => b'u',
        _ => 0,
    }
}

/// `decode_hex4`: four hex digits (a NUL among them is an error, as any non-digit).
fn hex4(b: [u8; 4]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, &c| {
        char::from(c).to_digit(16).map(|d| (acc << 4) | d)
    })
}

/// The tokenizer: `json_parse_t` less the Lua side.
struct Parser<'a> {
    data: &'a [u8],
    ptr: usize,
    /// The text of the last string token.
    tmp: Vec<u8>,
    invalid_numbers: bool,
    allow_comment: bool,
}

impl Parser<'_> {
    /// The byte at `i`, 0 past the end: the C string's terminator.
    fn at(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn token(&self, kind: Kind, index: usize) -> Token {
        Token {
            kind,
            index,
            number: 0.0,
            boolean: false,
            error: "",
        }
    }

    /// `json_set_token_error`: an error token where the parser stands.
    fn error(&self, error: &'static str) -> Token {
        Token {
            error,
            ..self.token(Kind::Error, self.ptr)
        }
    }

    /// Skips whitespace, and comments where `decode_allow_comment` is on; an unclosed
    /// `/*` is the error token.
    fn skip_blank(&mut self) -> Result<Kind, Token> {
        loop {
            let mut kind = Kind::of(self.at(self.ptr));
            while kind == Kind::Whitespace {
                self.ptr += 1;
                kind = Kind::of(self.at(self.ptr));
            }
            let next = self.at(self.ptr + 1);
            if !self.allow_comment || self.at(self.ptr) != b'/' || (next != b'/' && next != b'*') {
                return Ok(kind);
            }
            self.ptr += 2;
            if next == b'/' {
                while !matches!(self.at(self.ptr), 0 | b'\n') {
                    self.ptr += 1;
                }
                continue;
            }
            loop {
                if self.at(self.ptr) == 0 {
                    return Err(self.error("unclosed multi-line comment"));
                }
                if self.at(self.ptr) == b'*' && self.at(self.ptr + 1) == b'/' {
                    self.ptr += 2;
                    break;
                }
                self.ptr += 1;
            }
        }
    }

    /// `json_next_token`.
    fn next_token(&mut self) -> Token {
        let kind = match self.skip_blank() {
            Ok(kind) => kind,
            Err(t) => return t,
        };
        let index = self.ptr;
        match kind {
            Kind::Error => return self.error("invalid token"),
            Kind::End => return self.token(Kind::End, index),
            Kind::Unknown => {}
            single => {
                self.ptr += 1;
                return self.token(single, index);
            }
        }
        let ch = self.at(self.ptr);
        let rest = &self.data[self.ptr.min(self.data.len())..];
        if ch == b'"' {
            self.string_token()
        } else if ch == b'-' || ch.is_ascii_digit() {
            if !self.invalid_numbers && self.is_invalid_number() {
                return self.error("invalid number");
            }
            self.number_token()
        } else if rest.starts_with(b"true") || rest.starts_with(b"false") {
            let value = rest.starts_with(b"true");
            self.ptr += if value { 4 } else { 5 };
            Token {
                boolean: value,
                ..self.token(Kind::Boolean, index)
            }
        } else if rest.starts_with(b"null") {
            self.ptr += 4;
            self.token(Kind::Null, index)
        } else if self.invalid_numbers && self.is_invalid_number() {
            // Only what is known not to be JSON (Inf, NaN, hex): anything else is an
            // "invalid token", not an "invalid number".
            self.number_token()
        } else {
            self.error("invalid token")
        }
    }

    /// `json_next_string_token`: the text goes to `tmp`.
    fn string_token(&mut self) -> Token {
        let index = self.ptr;
        self.ptr += 1;
        self.tmp.clear();
        loop {
            let mut ch = self.at(self.ptr);
            match ch {
                b'"' => break,
                0 => return self.error("unexpected end of string"),
                b'\\' => {
                    ch = escape_char(self.at(self.ptr + 1));
                    if ch == b'u' {
                        if self.unicode_escape() {
                            continue;
                        }
                        return self.error("invalid unicode escape code");
                    }
                    if ch == 0 {
                        return self.error("invalid escape code");
                    }
                    self.ptr += 1;
                }
                _ => {}
            }
            self.tmp.push(ch);
            self.ptr += 1;
        }
        self.ptr += 1;
        self.token(Kind::String, index)
    }

    fn hex4_at(&self, i: usize) -> Option<u32> {
        hex4([self.at(i), self.at(i + 1), self.at(i + 2), self.at(i + 3)])
    }

    /// `json_append_unicode_escape`: `\uXXXX`, or a high and a low surrogate escaped in a
    /// row, to UTF-8; false (the parser where it was) for anything else.
    fn unicode_escape(&mut self) -> bool {
        let Some(mut cp) = self.hex4_at(self.ptr + 2) else {
            return false;
        };
        let mut len = 6;
        if cp & 0xF800 == 0xD800 {
            if cp & 0x400 != 0 || self.at(self.ptr + 6) != b'\\' || self.at(self.ptr + 7) != b'u' {
                return false;
            }
            let Some(low) = self.hex4_at(self.ptr + 8) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        let mut buf = [0u8; 4];
        let n = utf8(cp, &mut buf);
        self.tmp.extend_from_slice(&buf[..n]);
        self.ptr += len;
        true
    }

    /// `json_is_invalid_number`: what `strtod` takes but JSON does not (a leading `+` or
    /// zero, hex, Inf, NaN).
    fn is_invalid_number(&self) -> bool {
        let mut p = self.ptr;
        match self.at(p) {
            b'+' => return true,
            b'-' => p += 1,
            _ => {}
        }
        let ch = self.at(p);
        if ch == b'0' {
            let ch2 = self.at(p + 1);
            return ch2 | 0x20 == b'x' || ch2.is_ascii_digit();
        }
        if ch <= b'9' {
            return false;
        }
        let word = [self.at(p), self.at(p + 1), self.at(p + 2)].to_ascii_lowercase();
        &word == b"inf" || &word == b"nan"
    }

    /// `json_next_number_token`: `strtoll`, or `strtod` where the number goes on as a
    /// float (`.`, `e`, `E`, `x`) or is no integer at all.
    fn number_token(&mut self) -> Token {
        let start = self.ptr;
        let (integer, end) = super::numbers::strtoll(self.data, start);
        let after = self.at(end);
        if end == start || matches!(after, b'.' | b'e' | b'E' | b'x') {
            let (number, end) = super::numbers::strtod(self.data, start);
            if end == start {
                return self.error("invalid number");
            }
            self.ptr = end;
            return Token {
                number,
                ..self.token(Kind::Number, start)
            };
        }
        self.ptr = end;
        // lua_pushinteger: LuaJIT's numbers are doubles.
        Token {
            number: integer as f64,
            ..self.token(Kind::Integer, start)
        }
    }

    /// `json_throw_parse_error`.
    fn parse_error(&self, expected: &str, t: &Token) -> mlua::Error {
        let found = if t.kind == Kind::Error {
            t.error
        } else {
            t.kind.name()
        };
        super::error::raise(format!(
            "Expected {expected} but found {found} at character {}",
            t.index + 1
        ))
    }
}

/// `codepoint_to_utf8`.
fn utf8(cp: u32, out: &mut [u8; 4]) -> usize {
    // The casts keep the low bits on purpose, as the C code's char stores do.
    let b = |v: u32| (v & 0xFF) as u8;
    if cp <= 0x7F {
        out[0] = b(cp);
        1
    } else if cp <= 0x7FF {
        out[0] = b((cp >> 6) | 0xC0);
        out[1] = b((cp & 0x3F) | 0x80);
        2
    } else if cp <= 0xFFFF {
        out[0] = b((cp >> 12) | 0xE0);
        out[1] = b(((cp >> 6) & 0x3F) | 0x80);
        out[2] = b((cp & 0x3F) | 0x80);
        3
    } else {
        out[0] = b((cp >> 18) | 0xF0);
        out[1] = b(((cp >> 12) & 0x3F) | 0x80);
        out[2] = b(((cp >> 6) & 0x3F) | 0x80);
        out[3] = b((cp & 0x3F) | 0x80);
        4
    }
}

/// An open array (the next index) or object (the key whose value comes next).
enum Frame {
    Array(i64),
    Object(Vec<u8>),
}

impl Frame {
    /// The Lua stack slots the C parser holds for it: the table, and an object's key.
    fn slots(&self) -> usize {
        match self {
            Frame::Array(_) => 1,
            Frame::Object(_) => 2,
        }
    }
}

/// The tables being filled: the innermost held here, the ones around it in `park`.
struct Builder<'a> {
    lua: &'a Lua,
    frames: Vec<Frame>,
    current: Option<Table>,
    park: Option<Table>,
    /// Slots the C parser would be using: its argument and each frame's.
    slots: usize,
    max_depth: i32,
    array_mt: Option<Table>,
}

impl Builder<'_> {
    /// `json_decode_descend` and the table the context opens; `ptr` is where the parser
    /// stands (just past the bracket), as the depth error says.
    fn open(&mut self, frame: Frame, ptr: usize) -> mlua::Result<()> {
        let depth = self.frames.len() + 1;
        let need = if matches!(frame, Frame::Array(_)) {
            2
        } else {
            3
        };
        if i64::try_from(depth).unwrap_or(i64::MAX) > i64::from(self.max_depth)
            || self.slots + need > MAX_C_STACK
        {
            return Err(super::error::raise(format!(
                "Found too many nested data structures ({depth}) at character {ptr}"
            )));
        }
        let t = self.lua.create_table()?;
        if let (Frame::Array(_), Some(mt)) = (&frame, &self.array_mt) {
            t.set_metatable(Some(mt.clone()))?;
        }
        if let Some(outer) = self.current.replace(t) {
            let park = match &self.park {
                Some(p) => p.clone(),
                None => self.park.insert(self.lua.create_table()?).clone(),
            };
            park.raw_set(self.frames.len(), outer)?;
        }
        self.slots += frame.slots();
        self.frames.push(frame);
        Ok(())
    }

    /// The innermost table, done: the one around it becomes the innermost again.
    fn close(&mut self) -> mlua::Result<Value> {
        if let Some(f) = self.frames.pop() {
            self.slots -= f.slots();
        }
        let done = self.current.take().map_or(Value::Nil, Value::Table);
        if let (false, Some(park)) = (self.frames.is_empty(), &self.park) {
            self.current = Some(park.raw_get(self.frames.len())?);
        }
        Ok(done)
    }

    /// Sets `v` in the innermost table (`arr[i] = v`, `obj[key] = v`).
    fn attach(&mut self, v: Value) -> mlua::Result<()> {
        let (Some(t), Some(frame)) = (&self.current, self.frames.last_mut()) else {
            return Ok(());
        };
        match frame {
            Frame::Array(i) => {
                t.raw_set(*i, v)?;
                *i += 1;
            }
            Frame::Object(key) => t.raw_set(self.lua.create_string(&*key)?, v)?,
        }
        Ok(())
    }
}

/// What starting a value came to: the value, or a container opened whose first value
/// starts at the token.
enum Begun {
    Value(Value),
    Next(Token),
}

/// What the value after a value is: the whole text's, or the next one to start.
enum After {
    Finished(Value),
    Next(Token),
}

impl Parser<'_> {
    /// `json_process_value`'s start: a scalar, or the opening of an array or object.
    fn begin(&mut self, b: &mut Builder<'_>, t: Token) -> mlua::Result<Begun> {
        let lua = b.lua;
        let v = match t.kind {
            Kind::String => Value::String(lua.create_string(&self.tmp)?),
            Kind::Number | Kind::Integer => Value::Number(t.number),
            Kind::Boolean => Value::Boolean(t.boolean),
            Kind::Null => super::null(),
            Kind::ArrBegin => {
                b.open(Frame::Array(1), self.ptr)?;
                let t = self.next_token();
                if t.kind == Kind::ArrEnd {
                    return Ok(Begun::Value(b.close()?));
                }
                return Ok(Begun::Next(t));
            }
            Kind::ObjBegin => {
                b.open(Frame::Object(Vec::new()), self.ptr)?;
                let t = self.next_token();
                if t.kind == Kind::ObjEnd {
                    return Ok(Begun::Value(b.close()?));
                }
                return Ok(Begun::Next(self.object_key(b, t)?));
            }
            _ => return Err(self.parse_error("value", &t)),
        };
        Ok(Begun::Value(v))
    }

    /// An object's `"key":`, starting at `t`; returns the token its value starts at.
    fn object_key(&mut self, b: &mut Builder<'_>, t: Token) -> mlua::Result<Token> {
        if t.kind != Kind::String {
            return Err(self.parse_error("object key string", &t));
        }
        if let Some(Frame::Object(key)) = b.frames.last_mut() {
            key.clone_from(&self.tmp);
        }
        let t = self.next_token();
        if t.kind != Kind::Colon {
            return Err(self.parse_error("colon", &t));
        }
        Ok(self.next_token())
    }

    /// After value `v`: sets it in its container, then closes containers while their end
    /// follows; a comma leads to the next value.
    fn after(&mut self, b: &mut Builder<'_>, mut v: Value) -> mlua::Result<After> {
        loop {
            let Some(frame) = b.frames.last() else {
                return Ok(After::Finished(v));
            };
            let array = matches!(frame, Frame::Array(_));
            b.attach(v)?;
            let t = self.next_token();
            let (end, expected) = if array {
                (Kind::ArrEnd, "comma or array end")
            } else {
                (Kind::ObjEnd, "comma or object end")
            };
            if t.kind == end {
                v = b.close()?;
                continue;
            }
            if t.kind != Kind::Comma {
                return Err(self.parse_error(expected, &t));
            }
            let t = self.next_token();
            return Ok(After::Next(if array { t } else { self.object_key(b, t)? }));
        }
    }

    /// `json_process_value` for a whole value, nested ones in a loop.
    fn value(&mut self, b: &mut Builder<'_>, mut t: Token) -> mlua::Result<Value> {
        loop {
            let v = match self.begin(b, t)? {
                Begun::Value(v) => v,
                Begun::Next(next) => {
                    t = next;
                    continue;
                }
            };
            match self.after(b, v)? {
                After::Finished(v) => return Ok(v),
                After::Next(next) => t = next,
            }
        }
    }
}

/// `json_decode`: one value, then nothing but whitespace (or a NUL).
pub(super) fn decode(lua: &Lua, data: &[u8], opts: &Options) -> mlua::Result<Value> {
    // RFC 4627: only the first two bytes tell the encoding, and JSON's is UTF-8.
    if data.len() >= 2 && (data[0] == 0 || data[1] == 0) {
        return Err(super::error::raise(
            "JSON parser does not support UTF-16 or UTF-32",
        ));
    }
    let mut p = Parser {
        data,
        ptr: 0,
        tmp: Vec::new(),
        invalid_numbers: opts.invalid_numbers,
        allow_comment: opts.allow_comment,
    };
    let mut b = Builder {
        lua,
        frames: Vec::new(),
        current: None,
        park: None,
        slots: 1,
        max_depth: opts.max_depth,
        array_mt: opts.array_mt.clone(),
    };
    let t = p.next_token();
    let v = p.value(&mut b, t)?;
    let t = p.next_token();
    if t.kind != Kind::End {
        return Err(p.parse_error("the end", &t));
    }
    Ok(v)
}
