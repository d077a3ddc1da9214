//! `@pm` and `@pmFromFile`: libmodsecurity's own Aho-Corasick automaton (`acmp.cc`),
//! reproduced with its quirks, behind an exact automaton that answers first.
//!
//! libmodsecurity's automaton is not a textbook one, and its answers differ from one:
//! - A node's failure link is looked for only among the children of its parent's failure
//!   node, never further down the chain; so with the phrases `abcx` and `cd` the value
//!   `abcd` does not match (the textbook automaton finds `cd`).
//! - A phrase is matched without regard to ASCII case. Its bytes are read as signed `char`s
//!   and folded by glibc's `tolower`, which gives the bytes 0x80-0xFE back as themselves but
//!   0xFF as `EOF` (-1), which no value's byte equals: a phrase with 0xFF never matches
//!   (phrases come from UTF-8 text, which never has it).
//! - What `capture` puts in TX.0 is the text of the node reached, as the first phrase
//!   through that node spells it, which is not always the phrase found: where a shorter
//!   phrase ends inside a longer one's path, TX.0 is the longer one's prefix.
//!
//! Every match it reports is a real occurrence of a phrase, so the `aho-corasick` crate's
//! automaton (SIMD prefilters, one pass) first says whether any phrase occurs at all: most
//! values have none, and only the values with one run through the reproduction. That first
//! look is a DFA (not the crate's default NFA for sets this size: 2.5x faster over a 10 KiB
//! value for CRS's large phrase files), and for a value without an ASCII capital (CRS's
//! `@pm` chains end in `t:lowercase`) one over the phrases lowercased, matched as they are,
//! whose prefilter can skip on bytes a case-insensitive one cannot (`lfi-os-files.data`
//! over a 10 KiB comment: 0.4 µs against 22).

use aho_corasick::{AhoCorasick, AhoCorasickKind};

/// One node of the trie: what libmodsecurity's `acmp_node_t` holds and the search reads.
#[derive(Debug, Clone)]
struct Node {
    /// The byte that leads here, folded as [`letter`] folds it.
    letter: i16,
    /// Children, by letter, sorted.
    children: Vec<(i16, u32)>,
    fail: u32,
    /// The first node down the failure chain that ends a phrase (`o_match`).
    other: Option<u32>,
    /// Ends a phrase (`is_last`).
    last: bool,
    /// The phrase that made this node, up to here (`text`).
    text: Box<[u8]>,
}

/// The phrases of one `@pm`, ready to search.
#[derive(Debug)]
pub(super) struct Phrases {
    nodes: Vec<Node>,
    /// Whether any phrase occurs at all, without regard to ASCII case.
    any: Option<AhoCorasick>,
    /// The same for a value without an ASCII capital: the phrases lowercased, with case.
    any_lower: Option<AhoCorasick>,
}

/// Phrase sets up to this size get DFAs for their first look; a larger one (an operator's
/// own file of many thousands) the crate's default, whose memory grows slower.
const DFA_PHRASES: usize = 4096;

/// The first look's automaton over `phrases`.
fn first_look<P: AsRef<[u8]>>(
    phrases: impl IntoIterator<Item = P>,
    count: usize,
    case_insensitive: bool,
) -> Result<AhoCorasick, String> {
    AhoCorasick::builder()
        .ascii_case_insensitive(case_insensitive)
        .kind((count <= DFA_PHRASES).then_some(AhoCorasickKind::DFA))
        .build(phrases)
        .map_err(|e| format!("@pm: {e}"))
}

const ROOT: u32 = 0;

impl Phrases {
    pub(super) fn new(phrases: &[String]) -> Result<Phrases, String> {
        let mut nodes = vec![Node {
            letter: 0,
            children: Vec::new(),
            fail: ROOT,
            other: None,
            last: false,
            text: Box::default(),
        }];
        let mut parents = vec![ROOT];
        for phrase in phrases {
            add(&mut nodes, &mut parents, phrase.as_bytes());
        }
        connect_failures(&mut nodes, &parents);
        let (any, any_lower) = if phrases.is_empty() {
            (None, None)
        } else {
            let n = phrases.len();
            let lower = phrases.iter().map(|p| p.to_ascii_lowercase());
            (
                Some(first_look(phrases, n, true)?),
                Some(first_look(lower, n, false)?),
            )
        };
        Ok(Phrases {
            nodes,
            any,
            any_lower,
        })
    }

    /// Whether any phrase occurs in `value` without regard to ASCII case (what the
    /// reproduction then finds is one of these occurrences).
    fn occurs(&self, value: &[u8]) -> bool {
        let capitals = crate::native::transform::any_byte(value, |b| b.is_ascii_uppercase());
        let look = if capitals { &self.any } else { &self.any_lower };
        look.as_ref().is_some_and(|ac| ac.is_match(value))
    }

    /// The text libmodsecurity reports for the first match (see the module's notes), or
    /// `None`.
    pub(super) fn find(&self, value: &[u8]) -> Option<&[u8]> {
        if !self.occurs(value) {
            return None;
        }
        let mut node = ROOT;
        for &b in value {
            let letter = i16::from(b.to_ascii_lowercase());
            let mut next = None;
            loop {
                if let Some(to) = self.child(node, letter) {
                    if self.nodes[to as usize].last {
                        return Some(&self.nodes[to as usize].text);
                    }
                    next = Some(to);
                    break;
                }
                if node == ROOT {
                    break;
                }
                node = self.nodes[node as usize].fail;
            }
            if let Some(to) = next {
                node = to;
            }
            if self.nodes[node as usize].other.is_some() {
                return Some(&self.nodes[node as usize].text);
            }
        }
        None
    }

    fn child(&self, node: u32, letter: i16) -> Option<u32> {
        let children = &self.nodes[node as usize].children;
        children
            .binary_search_by_key(&letter, |c| c.0)
            .ok()
            .map(|i| children[i].1)
    }
}

/// A phrase's byte as `acmp_add_pattern` folds it: `tolower((char) b)`, which in glibc's C
/// locale lowercases ASCII letters, gives the signed `char`s -128..-2 back as 0x80..0xFE,
/// and -1 (0xFF) back as `EOF`.
fn letter(b: u8) -> i16 {
    if b == 0xFF {
        -1
    } else {
        i16::from(b.to_ascii_lowercase())
    }
}

/// `acmp_add_pattern`.
fn add(nodes: &mut Vec<Node>, parents: &mut Vec<u32>, phrase: &[u8]) {
    let mut parent = ROOT;
    for (i, &b) in phrase.iter().enumerate() {
        let letter = letter(b);
        let children = &nodes[parent as usize].children;
        let child = match children.binary_search_by_key(&letter, |c| c.0) {
            Ok(at) => children[at].1,
            Err(at) => {
                let id = u32::try_from(nodes.len()).expect("fewer than 2^32 nodes");
                nodes[parent as usize].children.insert(at, (letter, id));
                nodes.push(Node {
                    letter,
                    children: Vec::new(),
                    fail: ROOT,
                    other: None,
                    last: false,
                    text: phrase[..=i].into(),
                });
                parents.push(parent);
                id
            }
        };
        if i == phrase.len() - 1 {
            nodes[child as usize].last = true;
        }
        parent = child;
    }
}

/// `acmp_connect_fail_branches` and `acmp_connect_other_matches`: level by level, a node
/// fails to its parent's failure node's child with the same letter, else to the root.
fn connect_failures(nodes: &mut [Node], parents: &[u32]) {
    let mut level: Vec<u32> = nodes[ROOT as usize].children.iter().map(|c| c.1).collect();
    while !level.is_empty() {
        let mut next = Vec::new();
        for &n in &level {
            let parent = parents[n as usize];
            let fail = if parent == ROOT {
                ROOT
            } else {
                let pf = nodes[parent as usize].fail as usize;
                let letter = nodes[n as usize].letter;
                let children = &nodes[pf].children;
                children
                    .binary_search_by_key(&letter, |c| c.0)
                    .map_or(ROOT, |i| children[i].1)
            };
            nodes[n as usize].fail = fail;
            next.extend(nodes[n as usize].children.iter().map(|c| c.1));
        }
        level = next;
    }
    for n in 1..nodes.len() {
        let mut om = nodes[n].fail;
        while om != ROOT {
            if nodes[om as usize].last {
                nodes[n].other = Some(om);
                break;
            }
            om = nodes[om as usize].fail;
        }
    }
}
