//! Many `@rx` patterns asked about one value in one pass: the multi-pattern prefilter of
//! DESIGN.md's WAF engine.
//!
//! Most request values match none of a rule set's patterns; running each pattern on each
//! value (what libmodsecurity does) costs one regex execution per rule per value. A
//! [`PatternSet`] holds a few automata (regex-automata's lazy DFA, each over up to
//! [`CHUNK`] of the patterns it can express, [`translate`]) that report in one pass each
//! which of their patterns match. Patterns it can
//! express only as a wider pattern (lookaround, back-references) are confirmed by PCRE2 when
//! the wider one matches; the few it cannot express at all run on PCRE2 every time. Matching
//! is as ModSecurity v3 compiles its patterns: PCRE without UTF mode, with `DOTALL` and
//! `MULTILINE`.
//!
//! The automaton is a lazy DFA (regex-automata's hybrid DFA) with a bounded cache of states
//! per thread, kept from value to value. A value that makes it build states faster than it
//! reuses them (attack payloads can) makes it give up; that value then runs on PCRE2
//! pattern by pattern, as libmodsecurity would run it, so no value costs much more than it
//! does there. [`Scratch::fallbacks`] counts those values.

pub(crate) mod translate;
pub(crate) mod whole;

use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::prefilter::Prefilter;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind};

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
    /// Automata over consecutive chunks of `members`: (automaton, index of its first member).
    automata: Vec<(DFA, usize)>,
    /// The automaton's pattern `i` is the set's pattern `members[i]`.
    members: Vec<usize>,
    modes: Vec<Mode>,
    pcre: Vec<pcre2::bytes::Regex>,
    /// The automaton's pattern `i` in its own dialect (for [`whole::WholeSet`]).
    translated: Vec<String>,
}

/// What one thread needs to ask a [`PatternSet`]; reused from value to value.
#[derive(Debug)]
pub struct Scratch {
    caches: Vec<Cache>,
    hits: regex_automata::PatternSet,
    /// Values on which the automaton gave up (each then ran on PCRE2 pattern by pattern).
    pub fallbacks: u64,
}

impl Scratch {
    /// Bytes held by the lazy DFAs' caches of states.
    pub fn memory_usage(&self) -> usize {
        self.caches.iter().map(Cache::memory_usage).sum()
    }
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
        PatternSet::grouped(patterns, &vec![0; patterns.len()])
    }

    /// [`PatternSet::new`] with no automaton holding patterns of two `groups` (by pattern:
    /// the plan's paranoia level and targets read, so that each of its units is of one
    /// level and asked of the same values).
    pub(crate) fn grouped(
        patterns: &[&str],
        groups: &[u32],
    ) -> Result<PatternSet, (usize, String)> {
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
            let t =
                translate::translate(p).filter(|t| build(&[&t.pattern], CACHE_CAPACITY).is_ok());
            if let Some(t) = t {
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
        let mut automata = Vec::new();
        let mut first = 0;
        while first < refs.len() {
            let group = groups.get(members[first]);
            let end = (first + 1..refs.len())
                .find(|&i| i - first == CHUNK || groups.get(members[i]) != group)
                .unwrap_or(refs.len());
            let dfa = build(&refs[first..end], CACHE_CAPACITY).map_err(|e| (members[first], e))?;
            automata.push((dfa, first));
            first = end;
        }
        Ok(PatternSet {
            automata,
            members,
            modes,
            pcre,
            translated,
        })
    }

    /// A scratch space for [`PatternSet::matches`].
    pub fn scratch(&self) -> Scratch {
        let len = self.members.len();
        Scratch {
            caches: self
                .automata
                .iter()
                .map(|(d, _)| d.create_cache())
                .collect(),
            hits: regex_automata::PatternSet::new(len),
            fallbacks: 0,
        }
    }

    /// How many automata the set has.
    pub fn automata(&self) -> usize {
        self.automata.len()
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
        for unit in 0..self.automata.len() {
            self.scan_automaton(unit, value, scratch, out);
        }
        for i in (0..self.modes.len()).filter(|&i| self.modes[i] == Mode::Pcre) {
            if self.is_match_pcre(i, value) {
                out.push(i);
            }
        }
        out[start..].sort_unstable();
    }

    /// The unit that decides pattern `i`: the automaton holding it, or (for a pattern on
    /// PCRE2 alone) a unit of its own. [`PatternSet::scan`] answers a unit's patterns
    /// together, so a caller asking only some patterns runs only their units.
    pub fn unit(&self, i: usize) -> usize {
        match self.modes[i] {
            Mode::Pcre => self.automata.len() + i,
            _ => {
                let at = self.members.partition_point(|&m| m < i);
                self.automata.partition_point(|(_, first)| *first <= at) - 1
            }
        }
    }

    /// Pushes to `out` the index of each pattern of `unit` ([`PatternSet::unit`]) that
    /// matches `value`, in no particular order.
    pub fn scan(&self, unit: usize, value: &[u8], scratch: &mut Scratch, out: &mut Vec<usize>) {
        match unit.checked_sub(self.automata.len()) {
            None => self.scan_automaton(unit, value, scratch, out),
            Some(i) => {
                if self.is_match_pcre(i, value) {
                    out.push(i);
                }
            }
        }
    }

    /// [`PatternSet::scan`] of automaton `k`.
    fn scan_automaton(&self, k: usize, value: &[u8], scratch: &mut Scratch, out: &mut Vec<usize>) {
        let (dfa, first) = &self.automata[k];
        let cache = &mut scratch.caches[k];
        let newline = value.last() == Some(&b'\n');
        if value.len() < SHORT || dfa.get_config().get_prefilter().is_none() {
            match walk(dfa, cache, value) {
                Ok(0) => return,
                Ok(mut found) => {
                    while found != 0 {
                        let i = self.members[first + found.trailing_zeros() as usize];
                        found &= found - 1;
                        if self.confirms(i, value, newline) {
                            out.push(i);
                        }
                    }
                    return;
                }
                // (The library's search gives up too, and PCRE2 answers.)
                Err(()) => {}
            }
        }
        clear(&mut scratch.hits);
        let input = Input::new(value);
        if dfa
            .try_which_overlapping_matches(cache, &input, &mut scratch.hits)
            .is_err()
        {
            scratch.fallbacks += 1;
            clear(&mut scratch.hits);
            for &i in &self.members[*first..*first + dfa.pattern_len()] {
                if self.is_match_pcre(i, value) {
                    out.push(i);
                }
            }
        }
        // Iterating (and clearing) a set walks a flag per pattern of the whole set, not of
        // this automaton: most scans find nothing, and skip both.
        if scratch.hits.is_empty() {
            return;
        }
        for hit in scratch.hits.iter() {
            let i = self.members[first + hit.as_usize()];
            if self.confirms(i, value, newline) {
                out.push(i);
            }
        }
    }

    /// Whether pattern `i`, which its automaton says `value` may match, does: the
    /// automaton's word, or PCRE2's where the pattern needs it. `newline`: whether `value`
    /// ends in one.
    fn confirms(&self, i: usize, value: &[u8], newline: bool) -> bool {
        let settled = match self.modes[i] {
            Mode::Exact => true,
            Mode::ExactUnlessNewline => !newline,
            Mode::Confirm | Mode::Pcre => false,
        };
        settled || self.is_match_pcre(i, value)
    }

    /// Whether pattern `i` matches `value`, by PCRE2 alone (a PCRE2 error, such as its
    /// match limit, is no match, as in libmodsecurity).
    pub fn is_match_pcre(&self, i: usize, value: &[u8]) -> bool {
        self.pcre[i].is_match(value).unwrap_or(false)
    }
}

/// Values shorter than this are scanned by [`walk`], not the library's search (longer
/// ones too where the automaton has no prefilter: the search would walk them the same
/// way, after its setup). Over a longer value the search's prefilter skips ahead faster
/// than the walk goes (24 was the best cut for CRS 3.3.4's benign GET: 12 and 40 cost
/// more).
const SHORT: usize = 24;

/// The patterns of `dfa` (at most 64: [`CHUNK`]) that match somewhere in `value`, a bit
/// each: the lazy DFA walked byte by byte, every match state's patterns taken (the
/// library's overlapping search, without its per-search setup and its prefilter: over
/// the short values most of a request's are, the setup cost more than the walk, and a
/// GET's 270 scans were a seventh of its instructions). An error where the automaton
/// gives up on the value (its cache of states exhausted).
fn walk(dfa: &DFA, cache: &mut Cache, value: &[u8]) -> Result<u64, ()> {
    let take = |cache: &Cache, sid: LazyStateID, found: &mut u64| {
        for n in 0..dfa.match_len(cache, sid) {
            *found |= 1u64 << dfa.match_pattern(cache, sid, n).as_usize();
        }
    };
    let start = regex_automata::util::start::Config::new().anchored(regex_automata::Anchored::No);
    let mut sid = dfa.start_state(cache, &start).map_err(drop)?;
    let mut found = 0u64;
    cache.search_start(0);
    for (at, &b) in value.iter().enumerate() {
        // An untagged state's transition is a table read; a tagged one's (or one not
        // built yet) goes through `next_state`, which may build a state and so needs the
        // search's progress (the cache's give-up rule counts bytes per state built).
        let known = if sid.is_tagged() {
            None
        } else {
            Some(dfa.next_state_untagged(cache, sid, b)).filter(|n| !n.is_unknown())
        };
        sid = match known {
            Some(next) => next,
            None => {
                cache.search_update(at);
                dfa.next_state(cache, sid, b).map_err(drop)?
            }
        };
        if sid.is_tagged() {
            if sid.is_match() {
                take(cache, sid, &mut found);
            } else if sid.is_dead() {
                cache.search_finish(at);
                return Ok(found);
            } else if sid.is_quit() {
                return Err(());
            }
        }
    }
    sid = dfa.next_eoi_state(cache, sid).map_err(drop)?;
    if sid.is_match() {
        take(cache, sid, &mut found);
    }
    cache.search_finish(value.len());
    Ok(found)
}

/// Empties `hits` where it holds any (clearing walks a flag per pattern, hit or not).
fn clear(hits: &mut regex_automata::PatternSet) {
    if !hits.is_empty() {
        hits.clear();
    }
}

/// Patterns per automaton. One lazy DFA over all of CRS 4.22's 285 patterns is 17x faster
/// than PCRE2 pattern by pattern on ordinary request values but gives up on 44% of CRS's
/// attack payloads (its states carry every pattern's progress, and attacks visit many);
/// in automata of 32 patterns with [`CACHE_CAPACITY`] none gives up: attack payloads run
/// 3.6x faster than PCRE2, ordinary values 19x (the `patterns` example; bench/README.md).
const CHUNK: usize = 32;

/// The lazy DFA gives up on a value (for PCRE2) once it has cleared its cache this many
/// times and builds a new state for fewer than [`MIN_BYTES_PER_STATE`] bytes of input.
const MIN_CACHE_CLEARS: usize = 3;
const MIN_BYTES_PER_STATE: usize = 10;

/// The most memory the automaton's NFA may take (a whole rule set's patterns; CRS 4.22's
/// take a few MiB).
const NFA_LIMIT: usize = 256 << 20;

/// The most memory one thread's cache of one automaton's lazy DFA states may grow to (it
/// grows only as states are built; [`Scratch::memory_usage`]). On CRS's attack payloads
/// 16 MiB per automaton of [`CHUNK`] patterns gives up on none, 8 MiB on 44%.
const CACHE_CAPACITY: usize = 16 << 20;

/// The automaton over `patterns` (`regex-syntax` dialect): bytes, no Unicode, `.` matching
/// a newline and `^`/`$` at line ends, every pattern's matches reported.
///
/// Where every pattern starts with one of a few literals, a prefilter (memchr, Teddy) skips
/// to where one of them occurs while the automaton is in its start state: most automata
/// hold one pattern (a target and chain that one rule asks about), and about half of those
/// have such a start. It took the CRS 3.3.4 POST's native time from 1,515 µs to 1,410
/// (`examples/engines`).
fn build(patterns: &[&str], cache_capacity: usize) -> Result<DFA, String> {
    let syntax = syntax::Config::new()
        .unicode(false)
        .utf8(false)
        .dot_matches_new_line(true)
        .multi_line(true);
    let hirs = syntax::parse_many_with(patterns, &syntax).map_err(|e| e.to_string())?;
    let prefilter = Prefilter::from_hirs_prefix(MatchKind::All, &hirs);
    // The NFA from the patterns parsed once, for the prefilter and the automaton alike.
    // Bytes, not text: a match may end inside a UTF-8 sequence. (With the default, an
    // automaton holding a pattern that can match empty drops other patterns' matches on
    // values with non-ASCII bytes; the CRS test found it.)
    let nfa = thompson::Compiler::new()
        .configure(
            thompson::Config::new()
                .utf8(false)
                .nfa_size_limit(Some(NFA_LIMIT)),
        )
        .build_many_from_hir(&hirs)
        .map_err(|e| e.to_string())?;
    DFA::builder()
        .configure(
            DFA::config()
                .prefilter(prefilter)
                .match_kind(MatchKind::All)
                .cache_capacity(cache_capacity)
                .skip_cache_capacity_check(true)
                .minimum_cache_clear_count(Some(MIN_CACHE_CLEARS))
                .minimum_bytes_per_state(Some(MIN_BYTES_PER_STATE)),
        )
        .build_from_nfa(nfa)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
