//! The operators, evaluated as libmodsecurity 3.0.9 evaluates them (`src/operators/*.cc`),
//! quirks included: the numbers `@eq` reads with `std::stoi` and the others with `atoll`,
//! `@within` with an empty value, `@containsWord`'s notion of a word, `@pm`'s automaton
//! (`pm.rs`), `inet_pton`'s addresses (`ip.rs`), libinjection's own copy
//! (`libinjection.rs`). `operate/tests.rs` runs every operator on the same cases through
//! libmodsecurity and through [`Matcher`] and compares the answers and the captures.

mod ip;
mod libinjection;
mod phrasebook;
mod pm;
mod rx;
#[cfg(all(test, feature = "modsecurity"))]
mod tests;
mod validate;

pub(crate) use phrasebook::Phrasebook;

use super::expand::Expansion;
use super::operator::Op;

/// An operator ready to run (compiled once at load: regexes, Aho-Corasick automata, IP
/// networks).
#[derive(Debug)]
pub(crate) struct Matcher(Kind);

// The rule set's matchers are shared by the threads that evaluate it.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Matcher>();
};

#[derive(Debug)]
enum Kind {
    /// A pattern without macros (`None`: empty, which matches everything and captures
    /// nothing), or one compiled per expansion.
    Rx(Option<rx::Pattern>),
    RxExpanded(rx::Cache),
    Pm(pm::Phrases),
    /// `@eq`, and its literal argument as `stoi` reads it (read once, at load: CRS asks
    /// `TX:EXECUTING_PARANOIA_LEVEL "@lt 2"` some sixty times per request).
    Eq(i64),
    /// `@ge`, `@gt`, `@le`, `@lt`: whether `(value, argument)` passes, and the literal
    /// argument as `atoll` reads it.
    Order(fn(i64, i64) -> bool, i64),
    Text(TextOp, Vec<u8>),
    ByteRange(validate::ByteTable),
    UrlEncoding,
    Utf8Encoding,
    Ip(Vec<ipnet::IpNet>),
    Sqli,
    Xss,
    Always,
    Never,
}

/// The operators that compare the value with their (expanded) argument as strings.
#[derive(Debug, Clone, Copy)]
enum TextOp {
    StrEq,
    Contains,
    BeginsWith,
    EndsWith,
    Within,
    ContainsWord,
}

impl Matcher {
    /// Compiles `op`'s argument: a pattern that PCRE2 refuses (the loader checks literal
    /// ones first) or a phrase list the automaton cannot hold is an error.
    pub(crate) fn new(op: &Op) -> Result<Matcher, String> {
        let literal = |e: &Expansion| e.literal().unwrap_or_default().as_bytes().to_vec();
        let text = |t: TextOp, e: &Expansion| Kind::Text(t, literal(e));
        let order = |f: fn(i64, i64) -> bool, e: &Expansion| Kind::Order(f, atoll(&literal(e)));
        Ok(Matcher(match op {
            Op::Rx(e) => match e.literal() {
                Some("") => Kind::Rx(None),
                Some(p) => Kind::Rx(Some(rx::Pattern::new(p)?)),
                None => Kind::RxExpanded(rx::Cache::default()),
            },
            Op::Pm(phrases) => Kind::Pm(pm::Phrases::new(phrases)?),
            Op::Eq(e) => Kind::Eq(stoi(&literal(e))),
            Op::Ge(e) => order(|v, a| v >= a, e),
            Op::Gt(e) => order(|v, a| v > a, e),
            Op::Le(e) => order(|v, a| v <= a, e),
            Op::Lt(e) => order(|v, a| v < a, e),
            Op::StrEq(e) => text(TextOp::StrEq, e),
            Op::Contains(e) => text(TextOp::Contains, e),
            Op::BeginsWith(e) => text(TextOp::BeginsWith, e),
            Op::EndsWith(e) => text(TextOp::EndsWith, e),
            Op::Within(e) => text(TextOp::Within, e),
            Op::ContainsWord(e) => text(TextOp::ContainsWord, e),
            Op::ValidateByteRange(ranges) => Kind::ByteRange(validate::ByteTable::new(ranges)),
            Op::ValidateUrlEncoding => Kind::UrlEncoding,
            Op::ValidateUtf8Encoding => Kind::Utf8Encoding,
            Op::IpMatch(networks) => Kind::Ip(networks.clone()),
            Op::DetectSqli => Kind::Sqli,
            Op::DetectXss => Kind::Xss,
            Op::UnconditionalMatch => Kind::Always,
            // Without a geolocation database libmodsecurity's lookup fails: no match.
            Op::NoMatch | Op::GeoLookup | Op::HttpBlWithoutKey => Kind::Never,
        }))
    }

    /// The matcher with a whole DFA before PCRE2 for a literal `@rx` (`rx::Pattern::screened`):
    /// for a rule whose values no prefilter answers (multiMatch).
    pub(crate) fn screened(self) -> Matcher {
        match self.0 {
            Kind::Rx(Some(p)) => Matcher(Kind::Rx(Some(p.screened()))),
            kind => Matcher(kind),
        }
    }

    /// [`Matcher::matches`] with `capture`, where a prefilter found the operator's match
    /// in `value` already: a literal `@rx` asks PCRE2 for the groups alone.
    pub(crate) fn captures(
        &self,
        value: &[u8],
        arg: Option<&[u8]>,
        out: &mut Vec<Vec<u8>>,
    ) -> bool {
        match &self.0 {
            Kind::Rx(Some(p)) => {
                out.clear();
                p.captures(value, out)
            }
            _ => self.matches(value, arg, Some(out)),
        }
    }

    /// Whether the operator (not negated: the caller applies `!`) matches `value`.
    /// `arg`: the operator's argument with its macros already expanded by the caller, for
    /// the operators whose argument is an `Expansion` (None: use the literal argument; the
    /// caller passes Some only when the Expansion has macros).
    /// `capture`: Some when the rule has `capture`: filled with what ModSecurity puts in
    /// TX.0, TX.1, ... for this operator, cleared first: `@rx` every group up to the last
    /// that took part (ModSecurity stores past TX.9 too; a group that took no part, which
    /// it leaves as it was, is given empty), `@pm` the phrase's text (see `pm.rs`),
    /// `@detectSQLi` the fingerprint, `@detectXSS` the whole value; the others store none.
    /// ModSecurity stores these whether or not a negated rule then matches.
    pub(crate) fn matches(
        &self,
        value: &[u8],
        arg: Option<&[u8]>,
        mut capture: Option<&mut Vec<Vec<u8>>>,
    ) -> bool {
        if let Some(c) = capture.as_deref_mut() {
            c.clear();
        }
        match &self.0 {
            Kind::Rx(None) => true,
            Kind::Rx(Some(p)) => p.matches(value, capture),
            Kind::RxExpanded(cache) => cache
                .get(arg.unwrap_or_default())
                .is_some_and(|p| p.matches(value, capture)),
            Kind::Pm(phrases) => match phrases.find(value) {
                Some(text) => {
                    store(capture, text);
                    true
                }
                None => false,
            },
            Kind::Eq(literal) => arg.map_or(*literal, stoi) == stoi(value),
            Kind::Order(pass, literal) => pass(atoll(value), arg.map_or(*literal, atoll)),
            Kind::Text(op, literal) => text(*op, value, arg.unwrap_or(literal)),
            Kind::ByteRange(table) => table.any_outside(value),
            Kind::UrlEncoding => validate::bad_url_encoding(value),
            Kind::Utf8Encoding => validate::bad_utf8(value),
            Kind::Ip(networks) => ip::matches(networks, value),
            Kind::Sqli => match libinjection::sqli(value) {
                Some(fingerprint) => {
                    store(capture, &fingerprint);
                    true
                }
                None => false,
            },
            Kind::Xss => {
                let hit = libinjection::xss(value);
                if hit {
                    store(capture, value);
                }
                hit
            }
            Kind::Always => true,
            Kind::Never => false,
        }
    }
}

/// TX.0 for the operators that capture one string.
fn store(capture: Option<&mut Vec<Vec<u8>>>, text: &[u8]) {
    if let Some(c) = capture {
        c.push(text.to_vec());
    }
}

/// The string operators, as their `.cc` files compare (`std::string::find` and `compare`,
/// byte for byte, NULs included).
fn text(op: TextOp, value: &[u8], arg: &[u8]) -> bool {
    match op {
        TextOp::StrEq => value == arg,
        // `input.find("")` is 0: an empty argument is in every value.
        TextOp::Contains => find(value, arg, 0).is_some(),
        TextOp::BeginsWith => value.starts_with(arg),
        TextOp::EndsWith => value.ends_with(arg),
        // An empty value is within anything; else it must be a substring of the argument,
        // not one of its words (`@within GET` matches `E`).
        TextOp::Within => value.is_empty() || find(arg, value, 0).is_some(),
        TextOp::ContainsWord => contains_word(value, arg),
    }
}

/// `haystack.find(needle, from)`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() {
        return (from <= haystack.len()).then_some(from);
    }
    // (memchr's search, not a comparison at each position: `@within`'s long lists.)
    memchr::memmem::find(haystack.get(from..)?, needle).map(|p| p + from)
}

/// `ContainsWord::evaluate`: `word` somewhere in `value` with no ASCII letter on either side
/// (digits and `_` do not make a word longer); an empty `word` is in every value, and no
/// non-empty word is in an empty value.
fn contains_word(value: &[u8], word: &[u8]) -> bool {
    if word.is_empty() {
        return true;
    }
    if value.is_empty() {
        return false;
    }
    if value == word {
        return true;
    }
    // `acceptableChar`: a position inside the value that is not an ASCII letter.
    let boundary = |pos: Option<usize>| {
        pos.and_then(|p| value.get(p))
            .is_some_and(|b| !b.is_ascii_alphabetic())
    };
    let mut at = find(value, word, 0);
    while let Some(pos) = at {
        let end = pos + word.len();
        if pos == 0 && boundary(Some(word.len())) {
            return true;
        }
        if end == value.len() && boundary(pos.checked_sub(1)) {
            return true;
        }
        if boundary(pos.checked_sub(1)) && boundary(Some(end)) {
            return true;
        }
        at = find(value, word, pos + 1);
    }
    false
}

/// The decimal number at the start of `s` as `strtol` reads it: up to the first NUL
/// (`c_str()`), after `isspace` blanks, with an optional sign; `None` without digits.
fn leading_number(s: &[u8]) -> Option<i128> {
    // Most are a few digits alone (CRS's levels and scores, compared about 60 times a
    // request): read at once.
    if (1..=18).contains(&s.len()) && s.iter().all(u8::is_ascii_digit) {
        let n = s.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        return Some(i128::from(n));
    }
    let s = s.split(|&b| b == 0).next().unwrap_or_default();
    let start = s
        .iter()
        .position(|&b| !matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))?;
    let s = &s[start..];
    let (negative, s) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    // Past 2^64 only the sign and "too large" matter: saturate.
    let magnitude = s[..digits]
        .iter()
        .try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .map_or(i128::from(u64::MAX) + 1, i128::from);
    Some(if negative { -magnitude } else { magnitude })
}

/// `std::stoi` inside `try { } catch (...) { 0 }` (`@eq`, and `setvar`'s `=+`/`=-`): no
/// digits, or a number outside `int` (strtol's range error included), is 0.
pub(crate) fn stoi(s: &[u8]) -> i64 {
    leading_number(s)
        .and_then(|n| i32::try_from(n).ok())
        .map_or(0, i64::from)
}

/// `atoll` (`@ge`, `@gt`, `@le`, `@lt`): no digits is 0, a number outside `long long` is
/// its nearest end (glibc's `strtoll`).
fn atoll(s: &[u8]) -> i64 {
    leading_number(s).map_or(0, |n| {
        i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX })
    })
}
