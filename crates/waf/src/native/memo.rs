//! What the rules of a phase learn about the request's values and keep for the next rule:
//! each value through each transformation chain, which prefilter patterns it matches, and
//! which patterns any value of a target matches.

use super::transform::{Held, Transform};

/// The memo's map, keyed by a request value's (address, length) and a chain: a row of
/// chains per value, so that a value's hundred-odd (value, chain) entries cost one hash
/// lookup per rule, not one per entry and step (the map was a tenth of a GET's time). The
/// value's key is hashed with rustc-hash's FxHash: the keys are the process's own
/// pointers, not an attacker's strings. Rows and their lists are kept when cleared, for
/// the next request.
#[derive(Debug, Default)]
pub(crate) struct MemoMap {
    /// By value: its row.
    rows: rustc_hash::FxHashMap<(usize, usize), u32>,
    /// By row, by chain: 1 + the memo's index in `memos`, or 0.
    chains: Vec<Vec<u32>>,
    /// By row: the bytes its value holds, once asked (long values only).
    held: Vec<Option<Held>>,
    /// The rows in use (`chains` beyond are kept lists, asked of by no one: a row from
    /// before a clear finds nothing).
    used: usize,
    /// The last value asked and its row: a rule's values are asked of in runs (each unit
    /// of a union group, then the rule's own look), and the map's lookup was a fifth of
    /// the memo's cost.
    last: Option<((usize, usize), u32)>,
    memos: Vec<Memo>,
}

impl MemoMap {
    /// The row of the request value at `addr` with `len` bytes, made if it has none: asked
    /// once per value and rule, and the row then indexed by chain.
    pub(crate) fn row(&mut self, addr: usize, len: usize) -> u32 {
        if let Some((key, row)) = self.last
            && key == (addr, len)
        {
            return row;
        }
        let row = self.new_row(addr, len);
        self.last = Some(((addr, len), row));
        row
    }

    /// [`MemoMap::row`] by the map.
    fn new_row(&mut self, addr: usize, len: usize) -> u32 {
        let used = self.used;
        let row = *self
            .rows
            .entry((addr, len))
            .or_insert_with(|| u32::try_from(used).expect("fewer than 4 billion values"));
        if row as usize == self.used {
            self.used += 1;
            match self.chains.get_mut(used) {
                Some(list) => list.clear(),
                None => self.chains.push(Vec::new()),
            }
            match self.held.get_mut(used) {
                Some(held) => *held = None,
                None => self.held.push(None),
            }
        }
        row
    }

    /// The index of the memo of `row` and `chain`, once made: [`MemoMap::at`] reads it
    /// without the row's lookup again (a rule's ask read one memo four times).
    pub(crate) fn index(&self, row: u32, chain: u32) -> Option<u32> {
        let at = *self.chains[..self.used]
            .get(row as usize)?
            .get(chain as usize)?;
        at.checked_sub(1)
    }

    /// The memo at `index` ([`MemoMap::index`], [`MemoMap::insert`]).
    pub(crate) fn at(&self, index: u32) -> &Memo {
        &self.memos[index as usize]
    }

    /// The memo at `index`, to change.
    pub(crate) fn at_mut(&mut self, index: u32) -> &mut Memo {
        &mut self.memos[index as usize]
    }

    pub(crate) fn get(&self, row: u32, chain: u32) -> Option<&Memo> {
        let at = *self.chains[..self.used]
            .get(row as usize)?
            .get(chain as usize)?;
        at.checked_sub(1).map(|i| &self.memos[i as usize])
    }

    /// The bytes held by `value`, the value of `row` ([`MemoMap::row`]): summarized at the
    /// first ask, so that each step asked of it reads 32 bytes, not the value.
    pub(crate) fn held(&mut self, row: u32, value: &[u8]) -> Held {
        match self.held[..self.used].get_mut(row as usize) {
            Some(Some(held)) => *held,
            Some(slot) => *slot.insert(Held::of(value)),
            None => Held::of(value),
        }
    }

    /// Sets the memo of `row` ([`MemoMap::row`]) and `chain` (replacing any); its index,
    /// `None` for a row not made.
    pub(crate) fn insert(&mut self, row: u32, chain: u32, memo: Memo) -> Option<u32> {
        let list = self.chains[..self.used].get_mut(row as usize)?;
        let c = chain as usize;
        if list.len() <= c {
            list.resize(c + 1, 0);
        }
        match list[c].checked_sub(1) {
            Some(i) => {
                self.memos[i as usize] = memo;
                Some(i)
            }
            None => {
                self.memos.push(memo);
                list[c] = u32::try_from(self.memos.len()).expect("fewer than 4 billion memos");
                Some(list[c] - 1)
            }
        }
    }

    /// How many (value, chain) memos it holds.
    pub(crate) fn len(&self) -> usize {
        self.memos.len()
    }

    pub(crate) fn clear(&mut self) {
        self.rows.clear();
        self.last = None;
        self.used = 0;
        self.memos.clear();
    }
}

/// What the rules of a phase learn about the request's values and keep for the next rule:
/// cleared together whenever the request's data change.
#[derive(Debug, Default)]
pub(crate) struct Memos {
    /// Each value through each chain (and its prefilter hits).
    pub(crate) values: MemoMap,
    /// For a target's values through a chain, by the plan's union group
    /// (`plan::UnionGroup`): the chain's prefilter patterns that any of them matches, a
    /// bit each, once known. A rule whose pattern is not among them skips the target
    /// without looking at its values.
    pub(crate) unions: Unions,
    /// The whole-set automaton's part in a value's bytes through some chain, keyed by the
    /// value's row and the chain whose memo holds those bytes (0 for the value's own, else
    /// 1 + the chain).
    pub(crate) wholes: rustc_hash::FxHashMap<(u32, u32), Whole>,
    /// For a long value's bytes (keyed as `wholes`) and a step: the chain whose memo holds
    /// what the step made of them (0 for the value's own bytes, else 1 + the chain, as
    /// `Memo::same` names it), so that chains reaching the same bytes by different
    /// prefixes run their common next step once.
    pub(crate) steps: rustc_hash::FxHashMap<(u32, u32, Transform), Option<u32>>,
    /// The `@pm` lists with a phrase in a value's bytes through some chain (a bit each,
    /// `operate/phrasebook.rs`), keyed as `wholes`.
    pub(crate) phrases: rustc_hash::FxHashMap<(u32, u32), Vec<u64>>,
    /// Where a step writes before the memo knows whether it changed the value.
    pub(crate) buf: Vec<u8>,
    /// multiMatch's stages of a value (`NativeRules::stages`): the latest and the next.
    pub(crate) stages: (Vec<u8>, Vec<u8>),
}

/// The most bytes a memo's working buffers keep for the next request: one large value
/// should not hold its memory for the process's life.
const KEPT_BUFFER: usize = 64 << 10;

impl Memos {
    pub(crate) fn clear(&mut self) {
        for b in [&mut self.buf, &mut self.stages.0, &mut self.stages.1] {
            if b.capacity() > KEPT_BUFFER {
                *b = Vec::new();
            }
        }
        self.values.clear();
        self.unions.known.fill(false);
        self.wholes.clear();
        self.phrases.clear();
        self.steps.clear();
    }
}

/// The union groups' bits ([`Memos::unions`]), by group; the lists are kept when
/// cleared, for the next request.
#[derive(Debug, Default)]
pub(crate) struct Unions {
    known: Vec<bool>,
    bits: Vec<Vec<u64>>,
}

impl Unions {
    /// Group `g`'s bits, once known.
    pub(crate) fn get(&self, g: u32) -> Option<&[u64]> {
        let g = g as usize;
        (*self.known.get(g)?).then(|| &self.bits[g][..])
    }

    /// An empty list for group `g`'s bits (to fill and [`Unions::set`]).
    pub(crate) fn take(&mut self, g: u32) -> Vec<u64> {
        let mut bits = self
            .bits
            .get_mut(g as usize)
            .map(std::mem::take)
            .unwrap_or_default();
        bits.clear();
        bits
    }

    /// Sets group `g`'s bits, now known.
    pub(crate) fn set(&mut self, g: u32, bits: Vec<u64>) {
        let g = g as usize;
        if self.known.len() <= g {
            self.known.resize(g + 1, false);
            self.bits.resize_with(g + 1, Vec::new);
        }
        self.known[g] = true;
        self.bits[g] = bits;
    }
}

/// The whole-set automaton's part in one value's bytes (`pattern/whole.rs`).
#[derive(Debug)]
pub(crate) enum Whole {
    /// Not scanned yet: this many of the units it covers were asked of these bytes, and
    /// their own automata answered.
    Asked(u32),
    /// What it found: the (chain, pattern) pairs its patterns stand for, ordered, or
    /// `None` where it gave up on the bytes.
    Scanned(Option<Vec<(u32, u32)>>),
}

/// A request value through one transformation chain.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    /// The value through the chain; empty where `same` says where it is.
    pub(crate) value: Vec<u8>,
    /// Where the chain's last step changed nothing: the memo of a chain it extends holds
    /// the value (`Some(Some(chain))`, the nearest whose last step changed it), or it is
    /// the request's own (`Some(None)`; also for the chain of no step). Also where another
    /// chain's memo holds the same bytes, made by the same step from the same input
    /// (`Memos::steps`). Most steps change
    /// most values in nothing (a lower-cased header lower-cased again, a value with no `%`
    /// URL-decoded), and a copy of each was an allocation per value and chain.
    pub(crate) same: Option<Option<u32>>,
    /// The prefilter units (`PatternSet::unit`) `value` was scanned by.
    pub(crate) units: Units,
    /// The chain's prefilter patterns of those units that match `value`.
    pub(crate) hits: Vec<usize>,
}

/// A set of prefilter units: a bit each for the first 64 (a chain's automata; a value
/// is asked a few of them, and a list was an allocation per value and chain), listed
/// beyond (the units of patterns on PCRE2 alone).
#[derive(Debug, Default)]
pub(crate) struct Units {
    low: u64,
    high: Vec<u32>,
}

impl Units {
    pub(crate) fn contains(&self, unit: u32) -> bool {
        match 1u64.checked_shl(unit) {
            Some(bit) => self.low & bit != 0,
            None => self.high.contains(&unit),
        }
    }

    pub(crate) fn insert(&mut self, unit: u32) {
        match 1u64.checked_shl(unit) {
            Some(bit) => self.low |= bit,
            None => self.high.push(unit),
        }
    }

    /// The first 64 units, a bit each.
    pub(crate) fn low(&self) -> u64 {
        self.low
    }

    /// Adds the units of `bits` (the first 64, a bit each).
    pub(crate) fn insert_low(&mut self, bits: u64) {
        self.low |= bits;
    }
}

#[cfg(test)]
mod tests {
    use super::{Memo, MemoMap, Units};

    #[test]
    fn units_hold_low_and_high_numbers_apart() {
        let mut u = Units::default();
        for n in [0, 5, 63, 64, 1000] {
            assert!(!u.contains(n), "{n} before");
            u.insert(n);
            assert!(u.contains(n), "{n} after");
        }
        for n in [1, 62, 65, 999, u32::MAX] {
            assert!(!u.contains(n), "{n} never inserted");
        }
    }

    fn memo(bytes: &[u8]) -> Memo {
        Memo {
            value: bytes.to_vec(),
            ..Memo::default()
        }
    }

    #[test]
    fn the_memo_map_keeps_each_value_and_chain_apart_across_clears() {
        let mut m = MemoMap::default();
        for round in 0..3u8 {
            let mut rows = Vec::new();
            for (addr, len, chain) in [(10, 2, 0), (10, 2, 7), (10, 3, 7), (99, 2, 1)] {
                let row = m.row(addr, len);
                rows.push(row);
                assert!(m.get(row, chain).is_none(), "round {round}: before");
                let bytes = [round, addr as u8, len as u8, chain as u8];
                m.insert(row, chain, memo(&bytes));
                assert_eq!(m.get(row, chain).map(|e| &e.value[..]), Some(&bytes[..]));
            }
            assert_eq!(rows[0], rows[1], "one value, one row");
            assert!(rows[1] != rows[2] && rows[2] != rows[3], "{rows:?}");
            assert!(m.get(rows[0], 1).is_none());
            assert!(m.get(rows[0], 700).is_none());
            assert!(m.get(99, 0).is_none(), "a row never made");
            m.insert(rows[1], 7, memo(b"again"));
            assert_eq!(m.get(rows[1], 7).map(|e| &e.value[..]), Some(&b"again"[..]));
            assert_eq!(m.get(rows[2], 7).map(|e| e.value[0]), Some(round));
            let at = m.index(rows[3], 1).expect("inserted");
            assert_eq!(&m.at(at).value[..], &[round, 99, 2, 1]);
            assert_eq!(
                m.insert(rows[3], 1, memo(b"four")),
                Some(at),
                "the same slot"
            );
            m.at_mut(at).value.push(b'!');
            assert_eq!(m.get(rows[3], 1).map(|e| &e.value[..]), Some(&b"four!"[..]));
            assert_eq!(m.index(rows[3], 2), None);
            assert_eq!(m.len(), 4);
            m.clear();
            assert_eq!(m.len(), 0);
            assert!(m.get(rows[2], 7).is_none(), "cleared");
        }
    }
}
