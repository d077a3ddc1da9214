//! A script's source with budget polls in it, so that compiled code can be stopped.
//!
//! LuaJIT calls no hook from compiled code, so a budget that stops a script through the count
//! hook alone needs the JIT compiler off (`bench/lua_jit_poll.c` measured what that costs, and
//! what stops a compiled loop). Code runs long only by going round a loop or by calling
//! functions (a recursion 60 deep that calls itself twice makes 2^61 calls, and LuaJIT
//! compiles recursion into traces that link to each other), so a poll goes wherever control
//! can come back to run again: at the start of every `do` block (the body of each `while` and
//! `for`) and every `repeat` body, before every `goto`, and at the start of every function's
//! body, the chunk's own included. A poll is an FFI call (`if __sluice_poll() ~= 0 then
//! __sluice_stop() end`): the trace compiler keeps a call in the loop, where it hoists a
//! plain load of a flag out of it.
//!
//! The chunk is wrapped in a function that takes the two as its upvalues: `local
//! __sluice_poll, __sluice_stop = ... return function() <poll> <chunk> end`, all on the
//! chunk's first line, so every line keeps its number and errors their `file:line`. The
//! function takes `...` only where the chunk names `...` (a module's `local name = ...`):
//! LuaJIT starts no trace at the entry of a vararg function, so a script without a loop
//! (most of them) is compiled only where its chunk is a plain function, as
//! lua-nginx-module's closure factory (`return function() <chunk> end`) made its chunks. A chunk
//! that names either itself (it could replace the poll) is not rewritten, and its state runs
//! with the JIT off, as does any chunk whose rewrite does not compile (LuaJIT's limits on
//! upvalues).
//!
//! A lexer, not a parser: Lua's lexical grammar (LuaJIT's, long brackets and all) is enough
//! to find the keywords, and a function's body starts after the bracket that closes its
//! parameters.

use std::ops::Range;

/// The upvalue the poll is called through.
const POLL: &str = "__sluice_poll";
/// The upvalue called when the poll says the budget is armed.
const STOP: &str = "__sluice_stop";

/// What each poll adds (a statement; a leading and trailing space keep it off its neighbours),
/// as a macro so that [`PREFIX`] can hold it too.
macro_rules! poll_statement {
    () => {
        " if __sluice_poll() ~= 0 then __sluice_stop() end "
    };
}
const POLL_STATEMENT: &str = poll_statement!();

/// What goes before the chunk, on its first line: the wrapper, and the chunk's own poll.
const PREFIX: &str = concat!(
    "local __sluice_poll, __sluice_stop = ... return function()",
    poll_statement!()
);

/// [`PREFIX`] for a chunk that names `...`: a function that takes them.
const PREFIX_VARARG: &str = concat!(
    "local __sluice_poll, __sluice_stop = ... return function(...)",
    poll_statement!()
);

/// What goes after the chunk (on a line of its own: the chunk may end in a comment).
const SUFFIX: &str = "\nend";

/// One token: a name or keyword, a punctuation mark, or a literal (string or number).
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Name,
    Punct,
    Literal,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    span: Range<usize>,
}

/// `source` (a chunk's text) with polls and the wrapper, or `None` where it cannot be
/// rewritten: a binary chunk, a chunk that does not lex (it will not compile either), or one
/// that names [`POLL`] or [`STOP`].
pub(crate) fn instrument(source: &[u8]) -> Option<Vec<u8>> {
    let (header, body) = split_header(source)?;
    let tokens = lex(body)?;
    let text = |t: &Token| &body[t.span.clone()];
    if tokens
        .iter()
        .any(|t| t.kind == Kind::Name && (text(t) == POLL.as_bytes() || text(t) == STOP.as_bytes()))
    {
        return None;
    }
    let closing = matching(&tokens, body)?;
    let prefix = if names_varargs(&tokens, body) {
        PREFIX_VARARG
    } else {
        PREFIX
    };
    let mut out = Vec::with_capacity(source.len() + prefix.len() + SUFFIX.len() + 256);
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(&header);
    let mut copied = 0;
    for (i, t) in tokens.iter().enumerate() {
        if t.kind != Kind::Name {
            continue;
        }
        let at = match text(t) {
            b"do" | b"repeat" => t.span.end,
            b"goto" => t.span.start,
            b"function" => tokens[body_start(&tokens, &closing, body, i)?].span.end,
            _ => continue,
        };
        // In order, as every insert follows the tokens before it; text where one would not
        // (a parameter list holding more than names) does not compile anyway.
        out.extend_from_slice(body.get(copied..at)?);
        out.extend_from_slice(POLL_STATEMENT.as_bytes());
        copied = at;
    }
    out.extend_from_slice(&body[copied..]);
    out.extend_from_slice(SUFFIX.as_bytes());
    Some(out)
}

/// `source` as a plain function's body, for a chunk compiled without polls: `return
/// function() <chunk> end` on its lines, or `None` where it names `...` (it stays a vararg
/// chunk), is binary, or does not lex (see [`PREFIX`] for why).
pub(crate) fn wrap(source: &[u8]) -> Option<Vec<u8>> {
    const OPEN: &str = "return function() ";
    let (header, body) = split_header(source)?;
    if names_varargs(&lex(body)?, body) {
        return None;
    }
    let mut out = Vec::with_capacity(source.len() + OPEN.len() + SUFFIX.len());
    out.extend_from_slice(OPEN.as_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(body);
    out.extend_from_slice(SUFFIX.as_bytes());
    Some(out)
}

/// Whether the chunk names `...` anywhere (its own or a nested function's: either way the
/// chunk keeps a vararg function, the cautious answer).
fn names_varargs(tokens: &[Token], body: &[u8]) -> bool {
    tokens
        .iter()
        .any(|t| t.kind == Kind::Punct && &body[t.span.clone()] == b"...")
}

/// The chunk's first line where LuaJIT skips it (a byte-order mark, a `#!` line), made a
/// comment so that it may follow the prefix, and the rest; `None` for a binary chunk.
fn split_header(source: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let source = source.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(source);
    if source.first() == Some(&0x1b) {
        return None;
    }
    if source.first() != Some(&b'#') {
        return Some((Vec::new(), source));
    }
    let end = source
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .unwrap_or(source.len());
    // `-- ` and not `--`: a line `#[[` must not open a long comment.
    let mut header = b"-- ".to_vec();
    header.extend_from_slice(&source[1..end]);
    Some((header, &source[end..]))
}

/// The token after which the body of the function whose `function` keyword is token `i`
/// starts: the `)` closing its parameters (names and `...` only), after its name (`a.b:c`)
/// if it has one.
fn body_start(tokens: &[Token], closing: &[usize], body: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let t = tokens.get(j)?;
        match (&t.kind, &body[t.span.clone()]) {
            (Kind::Punct, b"(") => {
                let parameters = &tokens[j + 1..closing[j]];
                let plain = parameters
                    .iter()
                    .all(|p| match (&p.kind, &body[p.span.clone()]) {
                        (Kind::Name, name) => !is_keyword(name),
                        (Kind::Punct, mark) => mark == b"," || mark == b"...",
                        _ => false,
                    });
                return plain.then_some(closing[j]);
            }
            (Kind::Punct, b"." | b":") => j += 1,
            (Kind::Name, name) if !is_keyword(name) => j += 1,
            _ => return None,
        }
    }
}

/// Lua's reserved words (LuaJIT's, `goto` included).
fn is_keyword(name: &[u8]) -> bool {
    matches!(
        name,
        b"and"
            | b"break"
            | b"do"
            | b"else"
            | b"elseif"
            | b"end"
            | b"false"
            | b"for"
            | b"function"
            | b"goto"
            | b"if"
            | b"in"
            | b"local"
            | b"nil"
            | b"not"
            | b"or"
            | b"repeat"
            | b"return"
            | b"then"
            | b"true"
            | b"until"
            | b"while"
    )
}

/// For each opening bracket token, the index of its closing one (0 elsewhere); `None` when
/// they do not balance.
fn matching(tokens: &[Token], body: &[u8]) -> Option<Vec<usize>> {
    let mut closing = vec![0; tokens.len()];
    let mut open: Vec<(usize, u8)> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.kind != Kind::Punct {
            continue;
        }
        match body[t.span.start] {
            c @ (b'(' | b'[' | b'{') => open.push((i, c)),
            c @ (b')' | b']' | b'}') => {
                let (at, o) = open.pop()?;
                if !matches!((o, c), (b'(', b')') | (b'[', b']') | (b'{', b'}')) {
                    return None;
                }
                closing[at] = i;
            }
            _ => {}
        }
    }
    open.is_empty().then_some(closing)
}

/// Bytes LuaJIT takes in a name: ASCII letters, digits, `_`, and every byte from 0x80.
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// The tokens of `s`, comments and white space left out; `None` for text LuaJIT's lexer
/// refuses (an unfinished string or long bracket).
fn lex(s: &[u8]) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let start = i;
        let kind = match c {
            b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c => {
                i += 1;
                continue;
            }
            b'-' if s.get(i + 1) == Some(&b'-') => {
                i = match long_bracket(s, i + 2) {
                    Some(level) => close_long_bracket(s, i + 2, level)?,
                    None => s[i..]
                        .iter()
                        .position(|&b| b == b'\n' || b == b'\r')
                        .map_or(s.len(), |p| i + p),
                };
                continue;
            }
            b'[' if long_bracket(s, i).is_some() => {
                let level = long_bracket(s, i)?;
                i = close_long_bracket(s, i, level)?;
                Kind::Literal
            }
            b'"' | b'\'' => {
                i = close_quote(s, i)?;
                Kind::Literal
            }
            b'0'..=b'9' => {
                i = number_end(s, i);
                Kind::Literal
            }
            b'.' if s.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i = number_end(s, i);
                Kind::Literal
            }
            c if is_ident(c) => {
                i += s[i..].iter().take_while(|&&b| is_ident(b)).count();
                Kind::Name
            }
            _ => {
                i += punct_len(&s[i..]);
                Kind::Punct
            }
        };
        tokens.push(Token {
            kind,
            span: start..i,
        });
    }
    Some(tokens)
}

/// The level of a long bracket opening at `i` (`[[` is 0, `[==[` is 2), if one does.
fn long_bracket(s: &[u8], i: usize) -> Option<usize> {
    if s.get(i) != Some(&b'[') {
        return None;
    }
    let level = s[i + 1..].iter().take_while(|&&b| b == b'=').count();
    (s.get(i + 1 + level) == Some(&b'[')).then_some(level)
}

/// Where the long bracket of `level` opened at `i` ends (just past its `]=*]`).
fn close_long_bracket(s: &[u8], i: usize, level: usize) -> Option<usize> {
    let mut j = i + level + 2;
    loop {
        let at = j + s.get(j..)?.iter().position(|&b| b == b']')?;
        let eq = s[at + 1..].iter().take_while(|&&b| b == b'=').count();
        if eq == level && s.get(at + 1 + eq) == Some(&b']') {
            return Some(at + eq + 2);
        }
        j = at + 1;
    }
}

/// Where the quoted string opened at `i` ends (past its closing quote); an escape takes the
/// byte after it whatever it is (`\"`, `\\`, an escaped line break, `\z`'s letter).
fn close_quote(s: &[u8], i: usize) -> Option<usize> {
    let quote = s[i];
    let mut j = i + 1;
    loop {
        match *s.get(j)? {
            b'\\' => j += 2,
            b'\n' | b'\r' => return None,
            c if c == quote => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// Where the number starting at `i` ends, as LuaJIT's lexer reads one: name characters and
/// dots, and a sign right after the exponent letter (`e`, or `p` in a hexadecimal number).
fn number_end(s: &[u8], i: usize) -> usize {
    let exponent = if s[i] == b'0' && matches!(s.get(i + 1), Some(b'x' | b'X')) {
        b'p'
    } else {
        b'e'
    };
    let mut j = i;
    let mut previous = 0u8;
    while let Some(&c) = s.get(j) {
        let sign = (c == b'+' || c == b'-') && (previous | 0x20) == exponent;
        if !(is_ident(c) || c == b'.' || sign) {
            break;
        }
        previous = c;
        j += 1;
    }
    j
}

/// The length of the punctuation mark at the start of `s`.
fn punct_len(s: &[u8]) -> usize {
    const MARKS: [&[u8]; 7] = [b"...", b"..", b"==", b"~=", b"<=", b">=", b"::"];
    MARKS
        .iter()
        .find(|m| s.starts_with(m))
        .map_or(1, |m| m.len())
}

#[cfg(test)]
mod tests;
