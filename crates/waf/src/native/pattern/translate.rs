//! PCRE syntax, as ModSecurity rules write it, in the dialect of Rust's `regex-syntax`
//! (bytes, no Unicode), for the multi-pattern automaton.
//!
//! The translation keeps the meaning of everything it writes: escapes whose meaning differs
//! (`\v`, `\h`, `\<`, an escaped punctuation character), literal characters that are
//! operators in Rust classes (`[`, `&&`, `--`, `~~`), a `{` that is no quantifier, and
//! non-ASCII characters (PCRE without UTF mode sees their bytes) are written as bytes.
//! What the automaton cannot express is made wider instead, and the result says so
//! ([`Translation::exact`] false): lookaround dropped, a back-reference as `(?s:.*)`,
//! atomic groups and possessive quantifiers as ordinary ones. A wider pattern matches at
//! least wherever the original does, so a value it does not match is settled; one it
//! matches is confirmed by PCRE2. What neither can take (conditionals, `\Q`, `\G`,
//! `(?x)`, ...) is no translation at all: that pattern always runs on PCRE2.

use std::fmt::Write as _;

/// A pattern in `regex-syntax`'s dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Translation {
    pub(crate) pattern: String,
    /// Whether it matches exactly where the original does (else: a superset).
    pub(crate) exact: bool,
    /// Whether it has a `^`: in `MULTILINE`, PCRE's matches nowhere after a newline that
    /// ends the value, Rust's matches there too (an empty last line), so a value ending in
    /// a newline needs PCRE2's confirmation.
    pub(crate) caret: bool,
}

/// `pcre` for the automaton, or `None` where it has no equivalent or superset.
pub(crate) fn translate(pcre: &str) -> Option<Translation> {
    let mut t = Translator {
        p: pcre.as_bytes(),
        i: 0,
        out: String::with_capacity(pcre.len() * 2),
        exact: true,
        caret: false,
        quantifiable: false,
    };
    t.run()?;
    Some(Translation {
        pattern: t.out,
        exact: t.exact,
        caret: t.caret,
    })
}

struct Translator<'a> {
    p: &'a [u8],
    i: usize,
    out: String,
    exact: bool,
    caret: bool,
    /// Whether the last thing written can take a quantifier.
    quantifiable: bool,
}

impl Translator<'_> {
    fn peek(&self, at: usize) -> Option<u8> {
        self.p.get(self.i + at).copied()
    }

    fn byte(&mut self, b: u8) {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b' ' {
            self.out.push(char::from(b));
        } else {
            let _ = write!(self.out, "\\x{b:02x}");
        }
    }

    fn run(&mut self) -> Option<()> {
        while let Some(c) = self.peek(0) {
            match c {
                b'\\' => self.escape()?,
                b'[' => self.class()?,
                b'(' => self.group()?,
                b'{' => self.brace(),
                b'}' => {
                    self.byte(b'}');
                    self.i += 1;
                    self.quantifiable = true;
                }
                b'*' | b'+' | b'?' => self.quantifier(),
                b')' | b'|' | b'.' | b'^' | b'$' => {
                    self.caret |= c == b'^';
                    self.out.push(char::from(c));
                    self.i += 1;
                    self.quantifiable = matches!(c, b')' | b'.');
                }
                _ => {
                    self.byte(c);
                    self.i += 1;
                    self.quantifiable = true;
                }
            }
        }
        Some(())
    }

    /// `*`, `+`, `?` and what follows one: `?` (lazy) kept, `+` (possessive) dropped.
    fn quantifier(&mut self) {
        let c = self.p[self.i];
        self.out.push(char::from(c));
        self.i += 1;
        self.after_quantifier();
    }

    fn after_quantifier(&mut self) {
        match self.peek(0) {
            Some(b'?') => {
                self.out.push('?');
                self.i += 1;
            }
            Some(b'+') => {
                self.exact = false;
                self.i += 1;
            }
            _ => {}
        }
        self.quantifiable = false;
    }

    /// `{n}`, `{n,}`, `{n,m}` and `{,m}` (PCRE2 10.42 reads it as `{0,m}`) after something
    /// quantifiable; any other `{` is a literal.
    fn brace(&mut self) {
        let rest = &self.p[self.i..];
        let end = rest.iter().position(|&b| b == b'}');
        let body = end.map(|e| &rest[1..e]);
        let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
        let valid = body.is_some_and(|b| match b.iter().position(|&c| c == b',') {
            Some(k) => digits(&b[..k]) && digits(&b[k + 1..]) && (k > 0 || b.len() > 1),
            None => !b.is_empty() && digits(b),
        });
        if valid && self.quantifiable {
            let e = end.unwrap_or_default();
            let text = std::str::from_utf8(&rest[1..=e]).unwrap_or_default();
            self.out.push('{');
            if text.starts_with(',') {
                self.out.push('0');
            }
            self.out.push_str(text);
            self.i += e + 1;
            self.after_quantifier();
        } else {
            self.byte(b'{');
            self.i += 1;
            self.quantifiable = true;
        }
    }

    /// An escape outside a class.
    fn escape(&mut self) -> Option<()> {
        let c = self.peek(1)?;
        self.i += 2;
        self.quantifiable = true;
        match c {
            b'x' => self.hex()?,
            b'1'..=b'9' => {
                // A back-reference: whatever it repeats.
                self.exact = false;
                self.out.push_str("(?s:.*)");
            }
            b'0' => self.out.push_str("\\x00"),
            b'v' => self.out.push_str("[\\x0a-\\x0d\\x85]"),
            b'h' => self.out.push_str("[\\x09\\x20\\xa0]"),
            b'e' => self.out.push_str("\\x1b"),
            b'a' => self.out.push_str("\\x07"),
            b'Z' => {
                self.out.push_str("(?:\\x0a?\\z)");
                self.quantifiable = false;
            }
            b'K' => self.quantifiable = false,
            b'd' | b'D' | b'w' | b'W' | b's' | b'S' | b'n' | b'r' | b't' | b'f' => {
                self.out.push('\\');
                self.out.push(char::from(c));
            }
            b'b' | b'B' | b'A' | b'z' => {
                self.out.push('\\');
                self.out.push(char::from(c));
                self.quantifiable = false;
            }
            // \Q..\E, \G, \R, \X, \p{..}, \c, octal and the like: not translated.
            c if c.is_ascii_alphanumeric() => return None,
            c => self.byte(c),
        }
        Some(())
    }

    /// `\xHH`, `\xH` or `\x{HH}` (after the `\x`), as a byte.
    fn hex(&mut self) -> Option<()> {
        let value = if self.peek(0) == Some(b'{') {
            let end = self.p[self.i..].iter().position(|&b| b == b'}')?;
            let digits = std::str::from_utf8(&self.p[self.i + 1..self.i + end]).ok()?;
            self.i += end + 1;
            u32::from_str_radix(digits, 16).ok()?
        } else {
            let n = self.p[self.i..]
                .iter()
                .take(2)
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
            let digits = std::str::from_utf8(&self.p[self.i..self.i + n]).ok()?;
            self.i += n;
            if n == 0 {
                0
            } else {
                u32::from_str_radix(digits, 16).ok()?
            }
        };
        // Without UTF mode, a code above 0xff is an error in PCRE.
        let b = u8::try_from(value).ok()?;
        let _ = write!(self.out, "\\x{b:02x}");
        Some(())
    }

    /// `(`: groups, inline flags, comments, lookaround (dropped), atomic groups.
    fn group(&mut self) -> Option<()> {
        let rest = &self.p[self.i..];
        let starts = |s: &[u8]| rest.starts_with(s);
        if starts(b"(?=") || starts(b"(?!") || starts(b"(?<=") || starts(b"(?<!") {
            self.i += group_len(rest)?;
            self.exact = false;
            // A quantifier on the dropped group goes with it.
            if matches!(self.peek(0), Some(b'*' | b'+' | b'?')) {
                self.i += 1;
            }
            return Some(());
        }
        if starts(b"(?#") {
            self.i += rest.iter().position(|&b| b == b')')? + 1;
            return Some(());
        }
        self.quantifiable = false;
        if starts(b"(?>") {
            self.exact = false;
            self.out.push_str("(?:");
            self.i += 3;
        } else if starts(b"(?|") {
            self.out.push_str("(?:");
            self.i += 3;
        } else if starts(b"(?:") || starts(b"(?<") || starts(b"(?P<") {
            let n = if starts(b"(?:") {
                3
            } else {
                rest.iter().position(|&b| b == b'>')? + 1
            };
            self.out.push_str(std::str::from_utf8(&rest[..n]).ok()?);
            self.i += n;
        } else if starts(b"(?") {
            self.flags()?;
        } else {
            self.out.push('(');
            self.i += 1;
        }
        Some(())
    }

    /// `(?i)`, `(?-i:`, ...: the flags Rust has the same meaning for (i, m, s, U).
    fn flags(&mut self) -> Option<()> {
        let rest = &self.p[self.i + 2..];
        let end = rest.iter().position(|&b| b == b')' || b == b':')?;
        let flags = &rest[..end];
        if !flags.iter().all(|b| b"imsU-".contains(b)) {
            return None;
        }
        self.out.push_str("(?");
        self.out.push_str(std::str::from_utf8(&rest[..=end]).ok()?);
        self.i += 2 + end + 1;
        Some(())
    }

    /// A `[...]` class, each literal as a byte.
    fn class(&mut self) -> Option<()> {
        self.i += 1;
        self.out.push('[');
        if self.peek(0) == Some(b'^') {
            self.out.push('^');
            self.i += 1;
        }
        let mut first = true;
        // Whether the last item was one character that a `-` may make a range from.
        let mut single = false;
        loop {
            let c = self.peek(0)?;
            match c {
                b']' if !first => break,
                b'[' if self.peek(1) == Some(b':') => {
                    let end = self.p[self.i..].windows(2).position(|w| w == b":]")?;
                    let name = std::str::from_utf8(&self.p[self.i..self.i + end + 2]).ok()?;
                    self.out.push_str(name);
                    self.i += end + 2;
                    single = false;
                }
                b'\\' => single = self.class_escape()?,
                b'-' if single && self.peek(1) != Some(b']') => {
                    self.out.push('-');
                    self.i += 1;
                    // The range's end; a `-` after it is a literal again.
                    if self.peek(0)? == b'\\' {
                        self.class_escape()?;
                    } else {
                        self.byte(self.p[self.i]);
                        self.i += 1;
                    }
                    single = false;
                }
                _ => {
                    self.byte(c);
                    self.i += 1;
                    single = true;
                }
            }
            first = false;
        }
        self.i += 1;
        self.out.push(']');
        self.quantifiable = true;
        Some(())
    }

    /// An escape inside a class; whether it is one character.
    fn class_escape(&mut self) -> Option<bool> {
        let c = self.peek(1)?;
        self.i += 2;
        match c {
            b'x' => self.hex()?,
            b'd' | b'D' | b'w' | b'W' | b's' | b'S' => {
                self.out.push('\\');
                self.out.push(char::from(c));
                return Some(false);
            }
            b'n' | b'r' | b't' | b'f' => {
                self.out.push('\\');
                self.out.push(char::from(c));
            }
            b'v' => {
                self.out.push_str("\\x0a-\\x0d\\x85");
                return Some(false);
            }
            b'h' => {
                self.out.push_str("\\x09\\x20\\xa0");
                return Some(false);
            }
            b'b' => self.out.push_str("\\x08"),
            b'e' => self.out.push_str("\\x1b"),
            b'a' => self.out.push_str("\\x07"),
            b'0' => self.out.push_str("\\x00"),
            c if c.is_ascii_alphanumeric() => return None,
            c => self.byte(c),
        }
        Some(true)
    }
}

/// The length of the group that starts `s` (at its `(`), classes and escapes skipped.
fn group_len(s: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 1,
            b'[' => {
                i += 1;
                if s.get(i) == Some(&b'^') {
                    i += 1;
                }
                if s.get(i) == Some(&b']') {
                    i += 1;
                }
                while *s.get(i)? != b']' {
                    if s[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}
