//! Every `@pm` phrase list of a rule set in one automaton, asked once per value's bytes.
//!
//! CRS's `@pm` rules each read the request's arguments through a chain of their own
//! (`lfi-os-files.data` through `t:utf8toUnicode,t:urlDecodeUni,t:normalizePathWin,
//! t:lowercase`, `unix-shell.data` through `t:urlDecodeUni,t:cmdLine,t:normalizePath,
//! t:lowercase`, ...), and each list's first look was a pass over the value: eight passes
//! over a 10 KiB comment. Most steps leave most values as they are, so those chains end at
//! the same bytes (the memo knows which), and one pass of an automaton over every list's
//! phrases says which lists have a phrase there. A list with none does not match; one with
//! some runs its own matcher (`pm.rs`), which reproduces libmodsecurity's answer.

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use std::collections::HashMap;

/// Past this much memory the automaton is the crate's NFA rather than a DFA (CRS 3.3.4's
/// lists together take a few MiB as a DFA).
const DFA_MEMORY: usize = 32 << 20;

/// The phrases of every `@pm` list of a rule set.
#[derive(Debug)]
pub(crate) struct Phrasebook {
    ac: AhoCorasick,
    /// By phrase of the automaton: the lists it is in.
    lists_of: Vec<Vec<u32>>,
    lists: usize,
}

impl Phrasebook {
    /// The automaton over `lists` (none where they hold no phrase), matching without
    /// regard to ASCII case as `@pm` does.
    pub(crate) fn new(lists: &[&[String]]) -> Option<Phrasebook> {
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut phrases: Vec<Vec<u8>> = Vec::new();
        let mut lists_of: Vec<Vec<u32>> = Vec::new();
        for (l, list) in lists.iter().enumerate() {
            for phrase in list.iter() {
                let folded = phrase.as_bytes().to_ascii_lowercase();
                let at = *index.entry(folded.clone()).or_insert_with(|| {
                    phrases.push(folded);
                    lists_of.push(Vec::new());
                    phrases.len() - 1
                });
                if lists_of[at].last() != Some(&(l as u32)) {
                    lists_of[at].push(l as u32);
                }
            }
        }
        if phrases.is_empty() {
            return None;
        }
        let build = |kind| {
            AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .kind(kind)
                .build(&phrases)
                .ok()
        };
        let ac = match build(Some(AhoCorasickKind::DFA)) {
            Some(dfa) if dfa.memory_usage() <= DFA_MEMORY => dfa,
            _ => build(None)?,
        };
        Some(Phrasebook {
            ac,
            lists_of,
            lists: lists.len(),
        })
    }

    /// Sets in `out` (a bit per list, cleared first) the lists with a phrase in `value`.
    pub(crate) fn lists_in(&self, value: &[u8], out: &mut Vec<u64>) {
        out.clear();
        out.resize(self.lists.div_ceil(64), 0);
        for m in self.ac.find_overlapping_iter(value) {
            for &l in &self.lists_of[m.pattern().as_usize()] {
                out[l as usize / 64] |= 1 << (l % 64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Phrasebook;

    #[test]
    fn each_list_with_a_phrase_in_a_value_is_named_whatever_the_case() {
        let lists: Vec<Vec<String>> = [
            &["etc/passwd", "boot.ini"][..],
            &["PassWd", "cmd.exe"],
            &["nothing-here"],
            &["abcx", "cd"],
        ]
        .iter()
        .map(|l| l.iter().map(|p| p.to_string()).collect())
        .collect();
        let refs: Vec<&[String]> = lists.iter().map(Vec::as_slice).collect();
        let book = Phrasebook::new(&refs).expect("phrases");
        let mut bits = Vec::new();
        let mut named = |value: &[u8]| {
            book.lists_in(value, &mut bits);
            (0..4)
                .filter(|l| bits[l / 64] & (1 << (l % 64)) != 0)
                .collect::<Vec<_>>()
        };
        assert_eq!(named(b"GET /ETC/PASSWD"), [0, 1]);
        assert_eq!(named(b"x cmd.EXE y"), [1]);
        // Overlapping: `cd` inside `abcd` is seen beside `abcx`'s start (the list's own
        // matcher then decides what libmodsecurity says).
        assert_eq!(named(b"abcd"), [3]);
        assert_eq!(named(b"an ordinary comment"), Vec::<usize>::new());
    }
}
