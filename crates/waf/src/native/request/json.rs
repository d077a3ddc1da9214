//! A JSON body's arguments as libmodsecurity 3.0.9 makes them: YAJL 2.1.0 (Debian 12's)
//! parses the body and calls back for each value as it goes, so a body that turns out
//! malformed still gives the arguments before the error, and the error's text is YAJL's;
//! ModSecurity names each value by its path (`json.a.b`, `json.list.array_0`).
//!
//! The parser is YAJL's state machine and lexer with ModSecurity's settings: no comments,
//! strings checked for UTF-8, one top-level value and nothing after it, the whole body
//! parsed then finished (YAJL's `yajl_complete_parse`, which lexes one more space).

/// How deep containers may nest (libmodsecurity's default `SecRequestBodyJsonDepthLimit`).
const MAX_DEPTH: usize = 10_000;

/// Parses `body`, appending `(name, value)` for each scalar to `args`; the error YAJL
/// reports, as libmodsecurity writes it after "JSON parsing error: ", if any.
pub(super) fn parse(body: &[u8], args: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Option<String> {
    let mut text = body.to_vec();
    text.push(b' ');
    let mut p = Parser {
        text: &text,
        at: 0,
        stack: vec![State::Start],
        names: Names::default(),
        args,
    };
    p.run().err().map(|e| e.render())
}

/// What went wrong: YAJL's two kinds of error.
#[derive(Debug)]
enum Error {
    Lexical(&'static str),
    Parse(&'static str),
    /// ModSecurity's depth limit: its callback refused, and it appends why to YAJL's text.
    TooDeep,
}

impl Error {
    fn render(&self) -> String {
        match self {
            Error::Lexical(t) => format!("lexical error: {t}\n"),
            Error::Parse(t) => format!("parse error: {t}\n"),
            Error::TooDeep => "parse error: client cancelled parse via callback return value\n\
                 . Parsing depth limit exceeded"
                .to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    ParseComplete,
    MapStart,
    MapNeedKey,
    MapSep,
    MapNeedVal,
    MapGotVal,
    ArrayStart,
    ArrayNeedVal,
    ArrayGotVal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Eof,
    LeftBracket,
    RightBracket,
    LeftBrace,
    RightBrace,
    Comma,
    Colon,
    Bool(bool),
    Null,
    Str(Vec<u8>),
    Number(Vec<u8>),
}

/// ModSecurity's side (`JSON` in json.cc): the open containers, each with its name and,
/// for an array, how many elements it has had; and the key just read.
#[derive(Debug, Default)]
struct Names {
    containers: Vec<(Vec<u8>, Option<usize>)>,
    key: Vec<u8>,
}

impl Names {
    /// `getCurrentKey`.
    fn current_key(&mut self) -> Vec<u8> {
        if self.containers.is_empty() {
            return b"json".to_vec();
        }
        if self.key.is_empty() {
            let in_array = self.containers.last().is_some_and(|c| c.1.is_some());
            return if in_array {
                Vec::new()
            } else {
                b"empty-key".to_vec()
            };
        }
        std::mem::take(&mut self.key)
    }

    /// `addArgument`'s name for the next scalar.
    fn name(&mut self) -> Vec<u8> {
        let mut path = Vec::new();
        for (name, counter) in &self.containers {
            path.extend_from_slice(name);
            match counter {
                Some(n) => path.extend_from_slice(format!(".array_{n}").as_bytes()),
                None => path.push(b'.'),
            }
        }
        let data = match self.containers.last_mut() {
            Some((_, Some(n))) => {
                *n += 1;
                Vec::new()
            }
            _ => self.current_key(),
        };
        path.extend_from_slice(&data);
        path
    }

    /// `yajl_start_map` / `yajl_start_array`: false past the depth limit.
    fn open(&mut self, array: bool) -> bool {
        let name = self.current_key();
        self.containers.push((name, array.then_some(0)));
        self.containers.len() <= MAX_DEPTH
    }

    /// `yajl_end_map` / `yajl_end_array`.
    fn close(&mut self) {
        self.containers.pop();
        if let Some((_, Some(n))) = self.containers.last_mut() {
            *n += 1;
        }
    }
}

struct Parser<'t, 'a> {
    text: &'t [u8],
    at: usize,
    stack: Vec<State>,
    names: Names,
    args: &'a mut Vec<(Vec<u8>, Vec<u8>)>,
}

impl Parser<'_, '_> {
    fn top(&mut self) -> &mut State {
        self.stack
            .last_mut()
            .expect("the stack keeps its bottom state")
    }

    fn scalar(&mut self, value: Vec<u8>) {
        let name = self.names.name();
        self.args.push((name, value));
    }

    /// `yajl_do_parse` to the end of the text, then `yajl_do_finish`'s check.
    fn run(&mut self) -> Result<(), Error> {
        loop {
            let state = *self.top();
            let done = match state {
                // Anything after the value, even what does not lex, is garbage.
                State::ParseComplete => match self.lex() {
                    Ok(Tok::Eof) => true,
                    _ => return Err(Error::Parse("trailing garbage")),
                },
                State::Start | State::MapNeedVal | State::ArrayNeedVal | State::ArrayStart => {
                    self.value(state)?
                }
                State::MapStart | State::MapNeedKey => match self.lex()? {
                    Tok::Eof => true,
                    Tok::Str(k) => {
                        self.names.key = k;
                        *self.top() = State::MapSep;
                        false
                    }
                    Tok::RightBracket if state == State::MapStart => {
                        self.names.close();
                        self.stack.pop();
                        false
                    }
                    _ => return Err(Error::Parse("invalid object key (must be a string)")),
                },
                State::MapSep => match self.lex()? {
                    Tok::Colon => {
                        *self.top() = State::MapNeedVal;
                        false
                    }
                    Tok::Eof => true,
                    _ => {
                        return Err(Error::Parse(
                            "object key and value must be separated by a colon (':')",
                        ));
                    }
                },
                State::MapGotVal => match self.lex()? {
                    Tok::RightBracket => {
                        self.names.close();
                        self.stack.pop();
                        false
                    }
                    Tok::Comma => {
                        *self.top() = State::MapNeedKey;
                        false
                    }
                    Tok::Eof => true,
                    _ => {
                        return Err(Error::Parse(
                            "after key and value, inside map, I expect ',' or '}'",
                        ));
                    }
                },
                State::ArrayGotVal => match self.lex()? {
                    Tok::RightBrace => {
                        self.names.close();
                        self.stack.pop();
                        false
                    }
                    Tok::Comma => {
                        *self.top() = State::ArrayNeedVal;
                        false
                    }
                    Tok::Eof => true,
                    _ => return Err(Error::Parse("after array element, I expect ',' or ']'")),
                },
            };
            if done {
                return match *self.top() {
                    State::ParseComplete => Ok(()),
                    _ => Err(Error::Parse("premature EOF")),
                };
            }
        }
    }

    /// A state that wants a value: reads one. True at the end of the text.
    fn value(&mut self, state: State) -> Result<bool, Error> {
        let mut push = None;
        match self.lex()? {
            Tok::Eof => return Ok(true),
            Tok::Str(s) => self.scalar(s),
            Tok::Number(n) => self.scalar(n),
            Tok::Bool(b) => self.scalar(if b {
                b"true".to_vec()
            } else {
                b"false".to_vec()
            }),
            Tok::Null => self.scalar(Vec::new()),
            Tok::LeftBracket => {
                if !self.names.open(false) {
                    return Err(Error::TooDeep);
                }
                push = Some(State::MapStart);
            }
            Tok::LeftBrace => {
                if !self.names.open(true) {
                    return Err(Error::TooDeep);
                }
                push = Some(State::ArrayStart);
            }
            Tok::RightBrace if state == State::ArrayStart => {
                self.names.close();
                self.stack.pop();
                return Ok(false);
            }
            Tok::RightBrace | Tok::Colon | Tok::Comma | Tok::RightBracket => {
                return Err(Error::Parse("unallowed token at this point in JSON text"));
            }
        }
        *self.top() = match state {
            State::Start => State::ParseComplete,
            State::MapNeedVal => State::MapGotVal,
            _ => State::ArrayGotVal,
        };
        if let Some(s) = push {
            self.stack.push(s);
        }
        Ok(false)
    }

    /// `yajl_lex_lex`.
    fn lex(&mut self) -> Result<Tok, Error> {
        loop {
            let Some(&c) = self.text.get(self.at) else {
                return Ok(Tok::Eof);
            };
            self.at += 1;
            return Ok(match c {
                b'{' => Tok::LeftBracket,
                b'}' => Tok::RightBracket,
                b'[' => Tok::LeftBrace,
                b']' => Tok::RightBrace,
                b',' => Tok::Comma,
                b':' => Tok::Colon,
                b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' => continue,
                b't' => self.literal(b"rue", Tok::Bool(true))?,
                b'f' => self.literal(b"alse", Tok::Bool(false))?,
                b'n' => self.literal(b"ull", Tok::Null)?,
                b'"' => self.string()?,
                b'-' | b'0'..=b'9' => {
                    self.at -= 1;
                    self.number()?
                }
                b'/' => {
                    return Err(Error::Lexical(
                        "probable comment found in input text, comments are not enabled.",
                    ));
                }
                _ => return Err(Error::Lexical("invalid char in json text.")),
            });
        }
    }

    fn literal(&mut self, want: &[u8], tok: Tok) -> Result<Tok, Error> {
        for &w in want {
            match self.text.get(self.at) {
                None => return Ok(Tok::Eof),
                Some(&c) if c == w => self.at += 1,
                Some(_) => return Err(Error::Lexical("invalid string in json text.")),
            }
        }
        Ok(tok)
    }

    /// `yajl_lex_number`: the number's text as written.
    fn number(&mut self) -> Result<Tok, Error> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let n = p.text[p.at..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            p.at += n;
            n
        };
        if self.text.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.text.get(self.at) {
            None => return Ok(Tok::Eof),
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            Some(_) => {
                return Err(Error::Lexical(
                    "malformed number, a digit is required after the minus sign.",
                ));
            }
        }
        if self.text.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(
                    self.eof_or("malformed number, a digit is required after the decimal point.")
                );
            }
        }
        if matches!(self.text.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.text.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(
                    self.eof_or("malformed number, a digit is required after the exponent.")
                );
            }
        }
        if self.at >= self.text.len() {
            return Ok(Tok::Eof);
        }
        Ok(Tok::Number(self.text[start..self.at].to_vec()))
    }

    /// A number cut by the end of the text is YAJL's "need more" (then premature EOF).
    fn eof_or(&self, msg: &'static str) -> Error {
        if self.at >= self.text.len() {
            Error::Parse("premature EOF")
        } else {
            Error::Lexical(msg)
        }
    }

    /// `yajl_lex_string` then, for a string with escapes, `yajl_string_decode`.
    fn string(&mut self) -> Result<Tok, Error> {
        let start = self.at;
        let mut escapes = false;
        loop {
            let Some(&c) = self.text.get(self.at) else {
                return Ok(Tok::Eof);
            };
            self.at += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    escapes = true;
                    let Some(&e) = self.text.get(self.at) else {
                        return Ok(Tok::Eof);
                    };
                    self.at += 1;
                    if e == b'u' {
                        for _ in 0..4 {
                            let Some(&h) = self.text.get(self.at) else {
                                return Ok(Tok::Eof);
                            };
                            if !h.is_ascii_hexdigit() {
                                return Err(Error::Lexical(
                                    "invalid (non-hex) character occurs after '\\u' inside string.",
                                ));
                            }
                            self.at += 1;
                        }
                    } else if !matches!(e, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') {
                        return Err(Error::Lexical(
                            "inside a string, '\\' occurs before a character which it may not.",
                        ));
                    }
                }
                0..=0x1f => return Err(Error::Lexical("invalid character inside string.")),
                0x80..=0xff => {
                    let more = match c {
                        0xc0..=0xdf => 1,
                        0xe0..=0xef => 2,
                        0xf0..=0xf7 => 3,
                        _ => return Err(Error::Lexical("invalid bytes in UTF8 string.")),
                    };
                    for _ in 0..more {
                        let Some(&n) = self.text.get(self.at) else {
                            return Ok(Tok::Eof);
                        };
                        self.at += 1;
                        if n >> 6 != 2 {
                            return Err(Error::Lexical("invalid bytes in UTF8 string."));
                        }
                    }
                }
                _ => {}
            }
        }
        let raw = &self.text[start..self.at - 1];
        Ok(Tok::Str(if escapes { decode(raw) } else { raw.to_vec() }))
    }
}

/// `yajl_string_decode` as Debian 12's YAJL has it: a high surrogate not followed by `\u`
/// becomes `?`; `\u0000` is a NUL.
fn decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let at = |i: usize| s.get(i).copied().unwrap_or(b'"');
    let (mut beg, mut end) = (0, 0);
    while end < s.len() {
        if s[end] != b'\\' {
            end += 1;
            continue;
        }
        out.extend_from_slice(&s[beg..end]);
        end += 1;
        let mut utf8 = Vec::new();
        match at(end) {
            b'r' => utf8.push(b'\r'),
            b'n' => utf8.push(b'\n'),
            b'\\' => utf8.push(b'\\'),
            b'/' => utf8.push(b'/'),
            b'"' => utf8.push(b'"'),
            b'f' => utf8.push(0x0c),
            b'b' => utf8.push(0x08),
            b't' => utf8.push(b'\t'),
            _ => {
                // `u`: the lexer checked four hex digits.
                end += 1;
                let mut cp = hex4(&s[end..end + 4]);
                end += 3;
                if cp & 0xfc00 == 0xd800 {
                    end += 1;
                    if at(end) == b'\\' && at(end + 1) == b'u' {
                        let sur = hex4(&s[end + 2..end + 6]);
                        cp = ((cp & 0x3f) << 10) | ((((cp >> 6) & 0xf) + 1) << 16) | (sur & 0x3ff);
                        end += 5;
                        utf8 = utf32_to_utf8(cp);
                    } else {
                        // Debian's YAJL goes on at the byte after the escape (upstream
                        // 2.1.0 would skip it).
                        utf8.push(b'?');
                        end -= 1;
                    }
                } else {
                    utf8 = utf32_to_utf8(cp);
                }
            }
        }
        out.extend_from_slice(&utf8);
        end += 1;
        beg = end;
    }
    if beg < s.len() {
        out.extend_from_slice(&s[beg..]);
    }
    out
}

fn hex4(h: &[u8]) -> u32 {
    h.iter()
        .fold(0, |v, &c| (v << 4) | (c as char).to_digit(16).unwrap_or(0))
}

/// `Utf32toUtf8` (a code point of 0 gives its one NUL byte).
fn utf32_to_utf8(cp: u32) -> Vec<u8> {
    match cp {
        0..=0x7f => vec![cp as u8],
        0x80..=0x7ff => vec![(cp >> 6) as u8 | 0xc0, (cp & 0x3f) as u8 | 0x80],
        0x800..=0xffff => vec![
            (cp >> 12) as u8 | 0xe0,
            ((cp >> 6) & 0x3f) as u8 | 0x80,
            (cp & 0x3f) as u8 | 0x80,
        ],
        0x10000..=0x1fffff => vec![
            (cp >> 18) as u8 | 0xf0,
            ((cp >> 12) & 0x3f) as u8 | 0x80,
            ((cp >> 6) & 0x3f) as u8 | 0x80,
            (cp & 0x3f) as u8 | 0x80,
        ],
        _ => vec![b'?'],
    }
}
