//! Many `@rx` patterns asked about one value in one pass: the multi-pattern prefilter of
//! DESIGN.md's WAF engine.
//!
//! Most request values match none of a rule set's patterns; running each pattern on each
//! value (what libmodsecurity does) costs one regex execution per rule per value. A
//! [`PatternSet`] holds one automaton (regex-automata's meta engine over every pattern it can
//! express, [`translate`]) that reports in one pass which of them match. Patterns it can
//! express only as a wider pattern (lookaround, back-references) are confirmed by PCRE2 when
//! the wider one matches; the few it cannot express at all run on PCRE2 every time. Matching
//! is as ModSecurity v3 compiles its patterns: PCRE without UTF mode, with `DOTALL` and
//! `MULTILINE`.
//!
//! The automaton is a lazy DFA with a bounded cache: a hostile value that keeps it building
//! states makes it fall back to a linear-time NFA simulation, never to backtracking.

mod translate;

use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind, meta};

/// How one pattern is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The automaton alone.
    Exact,
    /// The automaton alone, except on a value that ends in a newline (see
    /// `Translation::caret`), where PCRE2 confirms.
    ExactUnlessNewline,
    /// The automaton says whether it may match; PCRE2 confirms.
    Confirm,
    /// PCRE2 alone.
    Pcre,
}

/// A set of patterns, each as ModSecurity would match it.
#[derive(Debug)]
pub struct PatternSet {
    /// Over the patterns in `members`, in that order (none when no pattern translates).
    automaton: Option<meta::Regex>,
    /// The automaton's pattern `i` is the set's pattern `members[i]`.
    members: Vec<usize>,
    modes: Vec<Mode>,
    pcre: Vec<pcre2::bytes::Regex>,
}

/// What one thread needs to ask a [`PatternSet`]; reused from value to value.
#[derive(Debug)]
pub struct Scratch {
    cache: Option<meta::Cache>,
    hits: regex_automata::PatternSet,
}

/// PCRE2 as libmodsecurity compiles a rule's pattern.
pub(crate) fn pcre(pattern: &str) -> Result<pcre2::bytes::Regex, String> {
    pcre2::bytes::RegexBuilder::new()
        .utf(false)
        .dotall(true)
        .multi_line(true)
        .jit_if_available(true)
        .build(pattern)
        .map_err(|e| format!("the regular expression does not compile: {e}"))
}

impl PatternSet {
    /// The set of `patterns` (PCRE syntax); an error names the first that PCRE2 refuses.
    pub fn new(patterns: &[&str]) -> Result<PatternSet, (usize, String)> {
        let pcre = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| pcre(p).map_err(|e| (i, e)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut modes = vec![Mode::Pcre; patterns.len()];
        let mut members = Vec::new();
        let mut translated = Vec::new();
        for (i, p) in patterns.iter().enumerate() {
            // A translation the automaton refuses (a construct the translator let through
            // that regex-syntax reads otherwise) leaves the pattern on PCRE2.
            if let Some(t) = translate::translate(p).filter(|t| build(&[&t.pattern]).is_ok()) {
                modes[i] = match (t.exact, t.caret) {
                    (false, _) => Mode::Confirm,
                    (true, true) => Mode::ExactUnlessNewline,
                    (true, false) => Mode::Exact,
                };
                members.push(i);
                translated.push(t.pattern);
            }
        }
        let refs: Vec<&str> = translated.iter().map(String::as_str).collect();
        let automaton = if refs.is_empty() {
            None
        } else {
            Some(build(&refs).map_err(|e| (members[0], e))?)
        };
        Ok(PatternSet {
            automaton,
            members,
            modes,
            pcre,
        })
    }

    /// A scratch space for [`PatternSet::matches`].
    pub fn scratch(&self) -> Scratch {
        let len = self.members.len();
        Scratch {
            cache: self.automaton.as_ref().map(meta::Regex::create_cache),
            hits: regex_automata::PatternSet::new(len),
        }
    }

    /// How many patterns the automaton decides alone, with PCRE2's confirmation, and by
    /// PCRE2 alone.
    pub fn coverage(&self) -> (usize, usize, usize) {
        let count = |m: &[Mode]| self.modes.iter().filter(|x| m.contains(x)).count();
        let exact = count(&[Mode::Exact, Mode::ExactUnlessNewline]);
        (exact, count(&[Mode::Confirm]), count(&[Mode::Pcre]))
    }

    /// Pushes to `out` the index of each pattern that matches `value`, in increasing order.
    pub fn matches(&self, value: &[u8], scratch: &mut Scratch, out: &mut Vec<usize>) {
        let start = out.len();
        let newline = value.last() == Some(&b'\n');
        if let (Some(re), Some(cache)) = (&self.automaton, scratch.cache.as_mut()) {
            scratch.hits.clear();
            re.which_overlapping_matches_with(cache, &Input::new(value), &mut scratch.hits);
            for hit in scratch.hits.iter() {
                let i = self.members[hit.as_usize()];
                let settled = match self.modes[i] {
                    Mode::Exact => true,
                    Mode::ExactUnlessNewline => !newline,
                    Mode::Confirm | Mode::Pcre => false,
                };
                if settled || self.is_match_pcre(i, value) {
                    out.push(i);
                }
            }
        }
        for i in (0..self.modes.len()).filter(|&i| self.modes[i] == Mode::Pcre) {
            if self.is_match_pcre(i, value) {
                out.push(i);
            }
        }
        out[start..].sort_unstable();
    }

    /// Whether pattern `i` matches `value`, by PCRE2 alone (a PCRE2 error, such as its
    /// match limit, is no match, as in libmodsecurity).
    pub fn is_match_pcre(&self, i: usize, value: &[u8]) -> bool {
        self.pcre[i].is_match(value).unwrap_or(false)
    }
}

/// The automaton over `patterns` (`regex-syntax` dialect): bytes, no Unicode, `.` matching
/// a newline and `^`/`$` at line ends, every pattern's matches reported.
fn build(patterns: &[&str]) -> Result<meta::Regex, String> {
    meta::Builder::new()
        .configure(
            meta::Config::new()
                .match_kind(MatchKind::All)
                .utf8_empty(false),
        )
        .syntax(
            syntax::Config::new()
                .unicode(false)
                .utf8(false)
                .dot_matches_new_line(true)
                .multi_line(true),
        )
        .build_many(patterns)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
