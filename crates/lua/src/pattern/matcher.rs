//! Lua 5.1's pattern matcher as LuaJIT 2.1 (OpenResty's branch, `lib_string.c`) runs it,
//! step for step, with one difference: it counts its steps and asks, every [`POLL_EVERY`],
//! whether to stop. The patterns backtrack (`("a"):rep(1e5):find(".-b")` takes 5·10⁹
//! steps), all inside one C call that neither the count hook nor a compiled poll reaches.
//!
//! The pattern is read as C reads it, up to its first NUL, and the subject's byte past its
//! end as the NUL that ends every Lua string (`%f` and `%b` look at it).

/// Bytes a back-reference compares per step counted.
const BYTES_PER_STEP: usize = 32;
/// `LUA_MAXCAPTURES`.
pub(crate) const MAX_CAPTURES: usize = 32;
/// `LJ_MAX_XLEVEL`: nested matches before "pattern too complex".
const MAX_DEPTH: u32 = 200;
/// Steps between two questions to the caller's poll.
pub(crate) const POLL_EVERY: u32 = 1000;

/// A capture's length while it is open.
const UNFINISHED: isize = -1;
/// A position capture's "length": `()`.
const POSITION: isize = -2;

/// Why a match did not end with an answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The pattern is malformed or too complex: LuaJIT's message.
    Pattern(&'static str),
    /// The poll said stop.
    Stopped,
    /// `gsub`'s result would pass the output limit.
    TooLong,
}

/// One capture: where it starts and its length ([`UNFINISHED`], [`POSITION`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Capture {
    pub(crate) start: usize,
    len: isize,
}

/// What a capture holds once the match succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Captured<'a> {
    Text(&'a [u8]),
    Position(usize),
}

/// `MatchState`, with its step counter and poll.
pub(crate) struct Matcher<'a, P: FnMut() -> bool> {
    src: &'a [u8],
    pat: &'a [u8],
    level: usize,
    depth: u32,
    captures: [Capture; MAX_CAPTURES],
    steps: u32,
    poll: P,
}

/// A pattern as LuaJIT reads it: up to its first NUL.
pub(crate) fn c_pattern(p: &[u8]) -> &[u8] {
    p.iter().position(|&b| b == 0).map_or(p, |n| &p[..n])
}

/// A pattern as `find`, `match` and `gsub` read it: cut at its first NUL, and whether it
/// starts with `^` (then the rest; `gmatch` has no anchor).
pub(crate) fn anchored(p: &[u8]) -> (bool, &[u8]) {
    match c_pattern(p) {
        [b'^', rest @ ..] => (true, rest),
        whole => (false, whole),
    }
}

/// `lj_str_haspattern`: whether `p` has a character that makes it a pattern rather than a
/// plain text to find (anywhere in it: a pattern that has one only past a NUL is matched
/// as a pattern, which ends at that NUL).
pub(crate) fn has_specials(p: &[u8]) -> bool {
    p.iter().any(|b| b"^$*+?.([%-".contains(b))
}

impl<'a, P: FnMut() -> bool> Matcher<'a, P> {
    /// A matcher of `pat` (already cut at its NUL and past any anchor) over `src`; `poll`
    /// answers true to stop.
    pub(crate) fn new(src: &'a [u8], pat: &'a [u8], poll: P) -> Self {
        Matcher {
            src,
            pat,
            level: 0,
            depth: 0,
            captures: [Capture::default(); MAX_CAPTURES],
            steps: 0,
            poll,
        }
    }

    /// The match of the whole pattern at `s`: where it ends, or `None`.
    pub(crate) fn match_at(&mut self, s: usize) -> Result<Option<usize>, Fault> {
        self.level = 0;
        self.depth = 0;
        self.matches(s, 0)
    }

    /// The subject.
    pub(crate) fn subject(&self) -> &'a [u8] {
        self.src
    }

    /// Captures made by the last match (`ms->level`).
    pub(crate) fn levels(&self) -> usize {
        self.level
    }

    /// `push_onecapture`: capture `i` of the match `s..e` (the whole match where the
    /// pattern has no capture and `i` is 0).
    pub(crate) fn capture(&self, i: usize, s: usize, e: usize) -> Result<Captured<'a>, Fault> {
        if i >= self.level {
            return if i == 0 {
                Ok(Captured::Text(&self.src[s..e]))
            } else {
                Err(Fault::Pattern("invalid capture index"))
            };
        }
        let c = self.captures[i];
        match c.len {
            UNFINISHED => Err(Fault::Pattern("unfinished capture")),
            POSITION => Ok(Captured::Position(c.start + 1)),
            len => Ok(Captured::Text(
                &self.src[c.start..c.start + len.unsigned_abs()],
            )),
        }
    }

    /// Counts a step; every [`POLL_EVERY`] asks the poll.
    fn step(&mut self) -> Result<(), Fault> {
        self.steps_of(1)
    }

    /// Counts `n` steps (a comparison of many bytes is a step per [`BYTES_PER_STEP`]).
    fn steps_of(&mut self, n: u32) -> Result<(), Fault> {
        self.steps = self.steps.saturating_add(n);
        if self.steps >= POLL_EVERY {
            self.steps = 0;
            if (self.poll)() {
                return Err(Fault::Stopped);
            }
        }
        Ok(())
    }

    /// The pattern's byte at `p`, NUL past its end.
    fn pc(&self, p: usize) -> u8 {
        self.pat.get(p).copied().unwrap_or(0)
    }

    /// The subject's byte at `s`, NUL at (and past) its end.
    fn sc(&self, s: usize) -> u8 {
        self.src.get(s).copied().unwrap_or(0)
    }

    /// `classend`: where the single-character class at `p` ends.
    fn class_end(&self, mut p: usize) -> Result<usize, Fault> {
        let c = self.pc(p);
        p += 1;
        match c {
            b'%' if self.pc(p) == 0 => Err(Fault::Pattern("malformed pattern (ends with '%')")),
            b'%' => Ok(p + 1),
            b'[' => {
                if self.pc(p) == b'^' {
                    p += 1;
                }
                loop {
                    if self.pc(p) == 0 {
                        return Err(Fault::Pattern("malformed pattern (missing ']')"));
                    }
                    let c = self.pc(p);
                    p += 1;
                    if c == b'%' && self.pc(p) != 0 {
                        p += 1;
                    }
                    if self.pc(p) == b']' {
                        return Ok(p + 1);
                    }
                }
            }
            _ => Ok(p),
        }
    }

    /// `matchbracketclass`: whether `c` is in the set `[...]` from `p` (its `[`) to `ec`
    /// (its `]`).
    fn bracket(&self, c: u8, mut p: usize, ec: usize) -> bool {
        let mut sig = true;
        if self.pc(p + 1) == b'^' {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= ec {
                return !sig;
            }
            if self.pc(p) == b'%' {
                p += 1;
                if class(c, self.pc(p)) {
                    return sig;
                }
            } else if self.pc(p + 1) == b'-' && p + 2 < ec {
                p += 2;
                if self.pc(p - 2) <= c && c <= self.pc(p) {
                    return sig;
                }
            } else if self.pc(p) == c {
                return sig;
            }
        }
    }

    /// `singlematch`: whether `c` matches the class from `p` to `ep`.
    fn single(&self, c: u8, p: usize, ep: usize) -> bool {
        match self.pc(p) {
            b'.' => true,
            b'%' => class(c, self.pc(p + 1)),
            b'[' => self.bracket(c, p, ep - 1),
            other => other == c,
        }
    }

    /// `match`: the pattern from `p` at `s`, with LuaJIT's bound on nesting.
    fn matches(&mut self, s: usize, p: usize) -> Result<Option<usize>, Fault> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Fault::Pattern("pattern too complex"));
        }
        let r = self.match_items(s, p);
        self.depth -= 1;
        r
    }

    /// `match`'s body; C's `goto init` is the loop.
    fn match_items(&mut self, mut s: usize, mut p: usize) -> Result<Option<usize>, Fault> {
        loop {
            self.step()?;
            match self.pc(p) {
                b'(' if self.pc(p + 1) == b')' => return self.start_capture(s, p + 2, POSITION),
                b'(' => return self.start_capture(s, p + 1, UNFINISHED),
                b')' => return self.end_capture(s, p + 1),
                b'%' if self.pc(p + 1) == b'b' => match self.balance(s, p + 2)? {
                    Some(e) => (s, p) = (e, p + 4),
                    None => return Ok(None),
                },
                b'%' if self.pc(p + 1) == b'f' => {
                    p += 2;
                    if self.pc(p) != b'[' {
                        return Err(Fault::Pattern("missing '[' after '%f' in pattern"));
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.src[s - 1] };
                    if self.bracket(previous, p, ep - 1) || !self.bracket(self.sc(s), p, ep - 1) {
                        return Ok(None);
                    }
                    p = ep;
                }
                b'%' if self.pc(p + 1).is_ascii_digit() => {
                    match self.match_capture(s, self.pc(p + 1))? {
                        Some(e) => (s, p) = (e, p + 2),
                        None => return Ok(None),
                    }
                }
                0 => return Ok(Some(s)),
                b'$' if self.pc(p + 1) == 0 => return Ok((s == self.src.len()).then_some(s)),
                _ => match self.item(s, p)? {
                    Item::Done(r) => return Ok(r),
                    Item::Next(s2, p2) => (s, p) = (s2, p2),
                },
            }
        }
    }

    /// The default case of `match`: one class with its repetition, if any.
    fn item(&mut self, s: usize, p: usize) -> Result<Item, Fault> {
        let ep = self.class_end(p)?;
        let m = s < self.src.len() && self.single(self.src[s], p, ep);
        Ok(match self.pc(ep) {
            b'?' => {
                if m && let Some(r) = self.matches(s + 1, ep + 1)? {
                    return Ok(Item::Done(Some(r)));
                }
                Item::Next(s, ep + 1)
            }
            b'*' => Item::Done(self.max_expand(s, p, ep)?),
            b'+' if m => Item::Done(self.max_expand(s + 1, p, ep)?),
            b'+' => Item::Done(None),
            b'-' => Item::Done(self.min_expand(s, p, ep)?),
            _ if m => Item::Next(s + 1, ep),
            _ => Item::Done(None),
        })
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Result<Option<usize>, Fault> {
        let mut i = 0;
        while s + i < self.src.len() && self.single(self.src[s + i], p, ep) {
            self.step()?;
            i += 1;
        }
        loop {
            if let Some(r) = self.matches(s + i, ep + 1)? {
                return Ok(Some(r));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Result<Option<usize>, Fault> {
        loop {
            if let Some(r) = self.matches(s, ep + 1)? {
                return Ok(Some(r));
            }
            if s < self.src.len() && self.single(self.src[s], p, ep) {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> Result<Option<usize>, Fault> {
        let level = self.level;
        if level >= MAX_CAPTURES {
            return Err(Fault::Pattern("too many captures"));
        }
        self.captures[level] = Capture {
            start: s,
            len: what,
        };
        self.level = level + 1;
        let r = self.matches(s, p)?;
        if r.is_none() {
            self.level -= 1;
        }
        Ok(r)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Result<Option<usize>, Fault> {
        let l = (0..self.level)
            .rev()
            .find(|&l| self.captures[l].len == UNFINISHED)
            .ok_or(Fault::Pattern("invalid pattern capture"))?;
        self.captures[l].len = isize::try_from(s - self.captures[l].start).unwrap_or(isize::MAX);
        let r = self.matches(s, p)?;
        if r.is_none() {
            self.captures[l].len = UNFINISHED;
        }
        Ok(r)
    }

    /// `%1`..`%9` (and `%0`, which no capture is): the text of capture `digit` again.
    fn match_capture(&mut self, s: usize, digit: u8) -> Result<Option<usize>, Fault> {
        let l = usize::from(digit)
            .checked_sub(usize::from(b'1'))
            .filter(|&l| l < self.level && self.captures[l].len != UNFINISHED)
            .ok_or(Fault::Pattern("invalid capture index"))?;
        let c = self.captures[l];
        // A position capture's length is negative, which C compares as a huge size_t.
        let Ok(len) = usize::try_from(c.len) else {
            return Ok(None);
        };
        // A back-reference compares its capture's length at once: counted by its bytes, so
        // that `(.-)%1` over a long subject cannot do quadratic work in few steps.
        self.steps_of(u32::try_from(len / BYTES_PER_STEP).unwrap_or(u32::MAX))?;
        let rest = &self.src[s..];
        Ok(
            (rest.len() >= len && rest[..len] == self.src[c.start..c.start + len])
                .then_some(s + len),
        )
    }

    /// `%bxy`: a balanced run of `x` … `y` at `s`.
    fn balance(&mut self, mut s: usize, p: usize) -> Result<Option<usize>, Fault> {
        if self.pc(p) == 0 || self.pc(p + 1) == 0 {
            return Err(Fault::Pattern("unbalanced pattern"));
        }
        let (b, e) = (self.pc(p), self.pc(p + 1));
        if self.sc(s) != b {
            return Ok(None);
        }
        let mut open = 1;
        loop {
            s += 1;
            if s >= self.src.len() {
                return Ok(None);
            }
            self.step()?;
            if self.src[s] == e {
                open -= 1;
                if open == 0 {
                    return Ok(Some(s + 1));
                }
            } else if self.src[s] == b {
                open += 1;
            }
        }
    }
}

/// What one pattern item did: ended the match (with its answer) or moved on.
enum Item {
    Done(Option<usize>),
    Next(usize, usize),
}

/// `match_class`: whether `c` is in the class `%cl` (LuaJIT's own ASCII classes, whatever
/// the locale; bytes past 127 are in none).
fn class(c: u8, cl: u8) -> bool {
    let is = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        // C's isspace: \v is one, which Rust's is_ascii_whitespace leaves out.
        b's' => matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' if cl == b'z' => return c == 0,
        b'z' => return c != 0,
        _ => return cl == c,
    };
    if cl.is_ascii_lowercase() { is } else { !is }
}
