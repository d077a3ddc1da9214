//! One automaton over the paranoia-level-1 patterns of every chain's prefilter, asked once
//! per value's bytes instead of once per chain and unit.
//!
//! A chain's prefilter answers its patterns over the value through the chain, so a value
//! read by fifteen chains is scanned by at least fifteen automata. But most steps leave
//! most values as they are (a lowercase comment lower-cased, a value with no `%`
//! URL-decoded, no `&` HTML-decoded): the memo knows which chains end at the same bytes
//! (`memo.rs`, `same`), and one scan of those bytes by an automaton over every chain's
//! patterns answers all of them. CRS 3.3.4's 10 KiB form POST: fifteen passes over its
//! comment became one (`examples/engines`).
//!
//! Only level-1 patterns are in it (a site at level 1 never asks the others; each chain's
//! patterns are ordered by level, so its level-1 units are its first ones), and only the
//! units all of whose patterns are. The automaton holds every pattern's progress in its
//! states, which attack payloads multiply: it has a smaller cache than a chain's automata
//! and gives up sooner; the chains' own automata then answer for those bytes, as before.

use super::{PatternSet, Scratch, build};
use regex_automata::Input;
use regex_automata::hybrid::dfa::DFA;
use std::collections::HashMap;

/// What the whole-set automaton's cache of states may grow to per thread: enough for
/// ordinary values' few states, small enough that a value which makes it build state
/// after state gives up (for the chains' automata) after little work.
const CACHE_CAPACITY: usize = 2 << 20;

/// The automaton over the level-1 patterns of every chain's prefilter.
#[derive(Debug)]
pub(crate) struct WholeSet {
    dfa: DFA,
    /// By automaton pattern: the (chain, pattern) pairs it stands for (a pattern several
    /// chains use is in it once).
    owners: Vec<Vec<(u32, u32)>>,
    /// By chain: the units it answers (those whose every pattern it holds), a bit each.
    covered: Vec<u64>,
}

impl WholeSet {
    /// The automaton over `sets` (each chain's prefilter), of each set's units whose
    /// patterns are all among its first `level1[chain]` (those of paranoia level 1).
    /// `None` where no unit qualifies, or the patterns together make too large an
    /// automaton: the chains' automata answer alone then, as they can.
    pub(crate) fn new(sets: &[Option<PatternSet>], level1: &[usize]) -> Option<WholeSet> {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut patterns: Vec<&str> = Vec::new();
        let mut owners: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut covered = vec![0u64; sets.len()];
        for (chain, set) in sets.iter().enumerate() {
            let Some(set) = set else { continue };
            for (unit, (dfa, first)) in set.automata.iter().enumerate().take(64) {
                let members = &set.members[*first..*first + dfa.pattern_len()];
                if members.iter().any(|&i| i >= level1[chain]) {
                    continue;
                }
                covered[chain] |= 1 << unit;
                for (j, &i) in members.iter().enumerate() {
                    let text = set.translated[first + j].as_str();
                    let at = *index.entry(text).or_insert_with(|| {
                        patterns.push(text);
                        owners.push(Vec::new());
                        patterns.len() - 1
                    });
                    owners[at].push((chain as u32, i as u32));
                }
            }
        }
        if patterns.is_empty() {
            return None;
        }
        let dfa = build(&patterns, CACHE_CAPACITY).ok()?;
        Some(WholeSet {
            dfa,
            owners,
            covered,
        })
    }

    /// A scratch space for [`WholeSet::scan`].
    pub(crate) fn scratch(&self) -> Scratch {
        Scratch {
            caches: vec![self.dfa.create_cache()],
            hits: regex_automata::PatternSet::new(self.dfa.pattern_len()),
            fallbacks: 0,
        }
    }

    /// The units of `chain`'s prefilter it answers, a bit each.
    pub(crate) fn covered(&self, chain: u32) -> u64 {
        self.covered.get(chain as usize).copied().unwrap_or(0)
    }

    /// Pushes to `found` the (chain, pattern) pairs that `value` may match, ordered
    /// (for [`WholeSet::answer`]); false (and nothing pushed) where the automaton gave up
    /// on it.
    pub(crate) fn scan(
        &self,
        value: &[u8],
        scratch: &mut Scratch,
        found: &mut Vec<(u32, u32)>,
    ) -> bool {
        super::clear(&mut scratch.hits);
        let input = Input::new(value);
        let cache = &mut scratch.caches[0];
        if self
            .dfa
            .try_which_overlapping_matches(cache, &input, &mut scratch.hits)
            .is_err()
        {
            scratch.fallbacks += 1;
            return false;
        }
        if scratch.hits.is_empty() {
            return true;
        }
        let start = found.len();
        for p in scratch.hits.iter() {
            found.extend_from_slice(&self.owners[p.as_usize()]);
        }
        found[start..].sort_unstable();
        true
    }

    /// Pushes to `out` each pattern of `chain`'s prefilter `set` in a unit of `units`
    /// that `value` matches, given what [`WholeSet::scan`] found in it: what the chain's
    /// own automata of those units would have pushed (PCRE2 confirming where the pattern
    /// needs it).
    pub(crate) fn answer(
        set: &PatternSet,
        chain: u32,
        units: u64,
        found: &[(u32, u32)],
        value: &[u8],
        out: &mut Vec<usize>,
    ) {
        let newline = value.last() == Some(&b'\n');
        let from = found.partition_point(|&(c, _)| c < chain);
        for &(_, i) in found[from..].iter().take_while(|&&(c, _)| c == chain) {
            let i = i as usize;
            if units & (1 << set.unit(i)) != 0 && set.confirms(i, value, newline) {
                out.push(i);
            }
        }
    }
}
