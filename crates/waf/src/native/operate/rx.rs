//! `@rx`: PCRE2 as libmodsecurity 3.0.9 runs it (`Regex::searchOneMatch`), with the
//! patterns whose macros are expanded per transaction compiled on demand and kept in a
//! small cache.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

/// `PCRE2_ERROR_JIT_STACKLIMIT`: the JIT ran out of stack, and libmodsecurity runs the
/// interpreter instead.
const JIT_STACKLIMIT: i32 = -46;

/// Patterns from expanded macros kept compiled, most recent first.
const CACHED: usize = 16;

/// One compiled pattern, and the same without the JIT for the values that exhaust its stack.
#[derive(Debug)]
pub(super) struct Pattern {
    jit: pcre2::bytes::Regex,
    interpreted: OnceLock<Option<pcre2::bytes::Regex>>,
    /// Where the rule's values meet no prefilter ([`Pattern::screened`]): a whole DFA of
    /// its translation, asked first.
    screen: Option<Box<Screen>>,
}

/// A pattern's translation (`pattern/translate.rs`) as one whole DFA, which answers a
/// value before PCRE2 does: no where it finds no match (the translation matches wherever
/// the pattern does), and yes where the translation is exact. A multiMatch rule's `@rx`
/// has no prefilter (its values are each stage of its chain), and CRS 3.3's 930110 and
/// 934100 ran PCRE2 on each stage of each value, thirty-odd calls of about a thousand
/// instructions per benign GET; the DFA's walk of a short value costs a tenth of that.
#[derive(Debug)]
struct Screen {
    dfa: regex_automata::dfa::dense::DFA<Vec<u32>>,
    /// Whether a match is the pattern's (else PCRE2 confirms).
    exact: bool,
    /// Whether the translation has a `^`, which matches after a value's last newline
    /// where PCRE's does not (PCRE2 confirms a match on such a value).
    caret: bool,
}

/// The most memory a screen's DFA may take; a pattern whose DFA would be larger keeps
/// PCRE2 alone.
const SCREEN_LIMIT: usize = 2 << 20;

impl Screen {
    fn new(pattern: &str) -> Option<Screen> {
        use regex_automata::dfa::dense;
        use regex_automata::nfa::thompson;
        use regex_automata::util::syntax;
        let t = super::super::pattern::translate::translate(pattern)?;
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .dfa_size_limit(Some(SCREEN_LIMIT))
                    .determinize_size_limit(Some(2 * SCREEN_LIMIT)),
            )
            .syntax(
                syntax::Config::new()
                    .unicode(false)
                    .utf8(false)
                    .dot_matches_new_line(true)
                    .multi_line(true),
            )
            .thompson(thompson::Config::new().utf8(false))
            .build(&t.pattern)
            .ok()?;
        Some(Screen {
            dfa,
            exact: t.exact,
            caret: t.caret,
        })
    }

    /// No, yes, or `None` where PCRE2 must say (a match it cannot settle, or a search
    /// that failed).
    fn answer(&self, value: &[u8]) -> Option<bool> {
        use regex_automata::dfa::Automaton;
        let input = regex_automata::Input::new(value).earliest(true);
        if self.dfa.try_search_fwd(&input).ok()?.is_none() {
            return Some(false);
        }
        (self.exact && !(self.caret && value.last() == Some(&b'\n'))).then_some(true)
    }
}

impl Pattern {
    pub(super) fn new(pattern: &str) -> Result<Pattern, String> {
        Ok(Pattern {
            jit: super::super::pattern::pcre(pattern)?,
            interpreted: OnceLock::new(),
            screen: None,
        })
    }

    /// The pattern with a [`Screen`] where its translation makes one: for a rule whose
    /// values the plan's prefilters do not answer.
    pub(super) fn screened(mut self) -> Pattern {
        self.screen = Screen::new(self.jit.as_str()).map(Box::new);
        self
    }

    /// Whether the pattern matches `value`; with `capture`, every group up to the last one
    /// that took part, as ModSecurity stores them in TX.0, TX.1, ... (a group that took no
    /// part, which ModSecurity leaves as it was, is given empty). A match that fails
    /// (PCRE2's match limit) is no match, as in libmodsecurity. The groups are asked for
    /// only after a plain match: most values match nothing, and a search for groups costs
    /// twice a plain one and an allocation (a multiMatch rule that captures asks each value
    /// at each of its stages: CRS 3.3's 930110 and 934100, thirty times a GET).
    pub(super) fn matches(&self, value: &[u8], capture: Option<&mut Vec<Vec<u8>>>) -> bool {
        let screened = self.screen.as_ref().and_then(|s| s.answer(value));
        if !screened.unwrap_or_else(|| self.run(|re| re.is_match(value))) {
            return false;
        }
        match capture {
            Some(out) => self.captures(value, out),
            None => true,
        }
    }

    /// [`Pattern::matches`] with `capture`, for a value a prefilter already found a match
    /// in: PCRE2 asked for the groups alone (the plain search before them would find the
    /// same). CRS 3.3's 920450 captures each header's name so, and 901318 the User-Agent.
    pub(super) fn captures(&self, value: &[u8], out: &mut Vec<Vec<u8>>) -> bool {
        let mut locs = self.jit.capture_locations();
        let found = self.run(|re| re.captures_read(&mut locs, value).map(|m| m.is_some()));
        if found {
            let last = (0..locs.len()).rev().find(|&i| locs.get(i).is_some());
            for i in 0..=last.unwrap_or(0) {
                out.push(
                    locs.get(i)
                        .map_or_else(Vec::new, |(s, e)| value[s..e].to_vec()),
                );
            }
        }
        found
    }

    /// `f` on the JIT-compiled pattern, and on the interpreted one where the JIT's stack
    /// ran out (`searchOneMatch`'s fallback).
    fn run(&self, mut f: impl FnMut(&pcre2::bytes::Regex) -> Result<bool, pcre2::Error>) -> bool {
        match f(&self.jit) {
            Ok(hit) => hit,
            Err(e) if e.code() == JIT_STACKLIMIT => {
                let interpreted = self.interpreted.get_or_init(|| {
                    pcre2::bytes::RegexBuilder::new()
                        .utf(false)
                        .dotall(true)
                        .multi_line(true)
                        .build(self.jit.as_str())
                        .ok()
                });
                interpreted
                    .as_ref()
                    .is_some_and(|re| f(re).unwrap_or(false))
            }
            Err(_) => false,
        }
    }
}

/// Patterns compiled from expanded macros: `None` for one that does not compile (no match,
/// as libmodsecurity's `hasError`).
#[derive(Debug, Default)]
pub(super) struct Cache(Mutex<Vec<Cached>>);

/// An expanded pattern and what it compiled to.
type Cached = (Vec<u8>, Option<Arc<Pattern>>);

impl Cache {
    /// The pattern `expanded` compiles to, as libmodsecurity compiles an expanded argument:
    /// up to its first NUL (`PCRE2_ZERO_TERMINATED`), `.*` if empty.
    pub(super) fn get(&self, expanded: &[u8]) -> Option<Arc<Pattern>> {
        let expanded = expanded.split(|&b| b == 0).next().unwrap_or_default();
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = cache.iter().position(|(k, _)| k == expanded) {
            let hit = cache.remove(at);
            let pattern = hit.1.clone();
            cache.insert(0, hit);
            return pattern;
        }
        drop(cache);
        let text = if expanded.is_empty() {
            Cow::Borrowed(".*")
        } else {
            pattern_text(expanded)
        };
        let pattern = Pattern::new(&text).ok().map(Arc::new);
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(0, (expanded.to_vec(), pattern.clone()));
        cache.truncate(CACHED);
        pattern
    }
}

/// `bytes` as pattern text for the `&str` the pcre2 crate takes: a byte above 0x7F that is
/// not UTF-8 becomes `\x{HH}` (the same byte to PCRE2 without UTF), and `\` before such a
/// byte (an escaped literal) is dropped. (Inside `\Q...\E` this would differ; expanded
/// patterns with raw non-UTF-8 bytes there are not worth the parser.)
fn pattern_text(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() * 2);
    let mut backslashes = 0;
    for &b in bytes {
        if b < 0x80 {
            out.push(char::from(b));
            backslashes = if b == b'\\' { backslashes + 1 } else { 0 };
            continue;
        }
        if backslashes % 2 == 1 {
            out.pop();
        }
        let _ = write!(out, "\\x{{{b:02x}}}");
        backslashes = 0;
    }
    Cow::Owned(out)
}
