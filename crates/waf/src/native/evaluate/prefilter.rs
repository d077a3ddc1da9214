//! What a rule asks of the plan's prefilters and of the transaction's memos: a value
//! through a chain (transformed once per transaction), which of the chain's `@rx` patterns
//! it matches (each automaton of the chain's prefilter scanned once, and only once a rule
//! asks one of its patterns), and whether any value of a target can match a rule's pattern
//! at all (so that a rule whose pattern none of them matches skips the target without
//! listing its values: most rules, on most requests).

use super::{Link, NativeRules};
use crate::native::memo::{Memo, Memos, Whole};
use crate::native::pattern::whole::WholeSet;
use crate::native::transaction::{Transaction, Value};
use crate::native::transform::Transform;
use crate::native::variable::Target;

impl NativeRules {
    /// Whether the link's literal `@rx` matches `v` through its chain, by the chain's
    /// prefilter (each of its units asked once per value); for a `@pm`, false where none
    /// of its phrases occurs there (by the phrasebook, once per value's bytes); `None`
    /// where not known so.
    pub(super) fn prefilter(
        &self,
        t: &Transaction,
        link: &Link<'_>,
        v: &Value<'_>,
    ) -> Option<bool> {
        if let Some(list) = link.plan.pm {
            let occurs = self.phrases_occur(t, link.plan.chain, list, v)?;
            return (!occurs).then_some(false);
        }
        let rx = link.plan.rx?;
        let p = rx.pattern as usize;
        self.hits(t, link.plan.chain, rx.unit, v, |hits| hits.contains(&p))
    }

    /// Whether some value of `target` (the link's `k`th) may match the link's literal
    /// `@rx` (or have a phrase of its `@pm` list) through its chain: false only where none
    /// does, by the chain's prefilter (the phrasebook). The answer for every pattern
    /// (list) of the link's union group (`plan::UnionGroup`) is kept, so the next rule
    /// reading the same target through the same chain (at the same paranoia level) asks
    /// one bit. `None` where the link has no such pattern or the target no summary (its
    /// values change).
    pub(super) fn may_match(
        &self,
        t: &Transaction,
        link: &Link<'_>,
        k: usize,
        target: &Target,
    ) -> Option<bool> {
        let group = (*link.plan.unions.get(k)?)?;
        let p = match (link.plan.pm, link.plan.rx) {
            (Some(list), _) => list as usize,
            (None, Some(rx)) => rx.pattern as usize,
            (None, None) => return None,
        };
        let has = |bits: &[u64]| bits.get(p / 64).is_some_and(|w| w & (1 << (p % 64)) != 0);
        if let Some(bits) = t.memo.borrow().unions.get(group) {
            return Some(has(bits));
        }
        let g = &self.plan.union_groups[group as usize];
        let mut bits = t.memo.borrow_mut().unions.take(group);
        let mut scanned = Some(());
        t.each_value(target, |v| {
            if g.phrases {
                let found = self.phrase_bits(t, g.chain, &v, |found| or_into(&mut bits, found));
                scanned = scanned.and(found);
                return;
            }
            for &unit in &g.units {
                scanned = scanned.and(self.hits(t, g.chain, unit, &v, |hits| {
                    for &h in hits {
                        if bits.len() <= h / 64 {
                            bits.resize(h / 64 + 1, 0);
                        }
                        bits[h / 64] |= 1 << (h % 64);
                    }
                }));
            }
        });
        scanned?;
        let answer = has(&bits);
        t.memo.borrow_mut().unions.set(group, bits);
        Some(answer)
    }

    /// Calls `f` with the patterns of `chain`'s prefilter that `v` matches through the
    /// chain: every pattern of `unit` that does, and any others found before; memoized for
    /// a value of the request's data (each unit scanned once). `None` where the chain has
    /// no prefilter.
    fn hits<R>(
        &self,
        t: &Transaction,
        chain: u32,
        unit: u32,
        v: &Value<'_>,
        f: impl FnOnce(&[usize]) -> R,
    ) -> Option<R> {
        let set = self.plan.prefilters[chain as usize].as_ref()?;
        let mut scratch = t.scratch.borrow_mut();
        let scratch = scratch.get_mut(chain as usize)?.as_mut()?;
        let Some((addr, len)) = v.origin else {
            let mut out = Vec::new();
            set.scan(
                unit as usize,
                &self.apply_chain(chain, &v.bytes),
                scratch,
                &mut out,
            );
            return Some(f(&out));
        };
        let mut memo = t.memo.borrow_mut();
        let row = memo.values.row(addr, len);
        let at = self.memoize(&mut memo, row, chain, &v.bytes)?;
        let asked = memo.values.at(at).units.contains(unit);
        // (The whole set answers long values only: asked here, not in a call per scan.)
        let whole = !asked
            && v.bytes.len() >= SUMMARIZED
            && self.whole_answers(t, &mut memo, (row, at), chain, unit, &v.bytes);
        if !asked && !whole {
            let from = holder_of(memo.values.at(at), chain);
            let mut hits = std::mem::take(&mut memo.values.at_mut(at).hits);
            set.scan(
                unit as usize,
                bytes_of(&memo, row, from, &v.bytes),
                scratch,
                &mut hits,
            );
            let entry = memo.values.at_mut(at);
            entry.hits = hits;
            entry.units.insert(unit);
        }
        Some(f(&memo.values.at(at).hits))
    }

    /// Whether a phrase of `@pm` list `list` occurs in `v` through `chain`, by the
    /// phrasebook ([`NativeRules::phrase_bits`]); `None` for a value not of the request's
    /// data.
    fn phrases_occur(&self, t: &Transaction, chain: u32, list: u32, v: &Value<'_>) -> Option<bool> {
        let l = list as usize;
        self.phrase_bits(t, chain, v, |bits| {
            bits.get(l / 64).is_some_and(|w| w & (1 << (l % 64)) != 0)
        })
    }

    /// Calls `f` with the `@pm` lists with a phrase in `v` through `chain` (a bit each), by
    /// one pass of the phrasebook over the bytes that value is (shared by every chain
    /// that leaves it those bytes); `None` for a value not of the request's data. Short
    /// values too: the pass over a header's bytes answers CRS 3.3.4's seven lists read of
    /// it, where each list's own first look cost about as much as the pass (4% of a GET's
    /// instructions).
    fn phrase_bits<R>(
        &self,
        t: &Transaction,
        chain: u32,
        v: &Value<'_>,
        f: impl FnOnce(&[u64]) -> R,
    ) -> Option<R> {
        let book = self.plan.phrasebook.as_ref()?;
        let (addr, len) = v.origin?;
        let mut memo = t.memo.borrow_mut();
        let memo = &mut *memo;
        let row = memo.values.row(addr, len);
        let at = self.memoize(memo, row, chain, &v.bytes)?;
        let from = holder_of(memo.values.at(at), chain);
        let key = bytes_key(row, from);
        if !memo.phrases.contains_key(&key) {
            let mut bits = Vec::new();
            book.lists_in(bytes_of(memo, row, from, &v.bytes), &mut bits);
            memo.phrases.insert(key, bits);
        }
        memo.phrases.get(&key).map(|bits| f(bits))
    }

    /// Answers every unit of `chain`'s prefilter that the whole-set automaton covers
    /// (`unit` among them) for the value of `row` (its own bytes `raw`) through the chain,
    /// from one scan of the bytes that value is, shared by every chain whose steps leave
    /// it those bytes. False where the automaton does not cover `unit` or gave up on the
    /// bytes: the chain's own automaton answers then.
    fn whole_answers(
        &self,
        t: &Transaction,
        memo: &mut Memos,
        (row, at): (u32, u32),
        chain: u32,
        unit: u32,
        raw: &[u8],
    ) -> bool {
        if raw.len() < SUMMARIZED || unit >= 64 {
            return false;
        }
        let (Some(whole), Some(set)) = (&self.plan.whole, &self.plan.prefilters[chain as usize])
        else {
            return false;
        };
        let covered = whole.covered(chain);
        if covered & (1 << unit) == 0 {
            return false;
        }
        let from = holder_of(memo.values.at(at), chain);
        let key = bytes_key(row, from);
        let asked = memo.wholes.entry(key).or_insert(Whole::Asked(0));
        if let Whole::Asked(n) = asked {
            if *n < WHOLE_AFTER {
                *n += 1;
                return false;
            }
            let mut found = Vec::new();
            let scanned = match t.whole.borrow_mut().as_mut() {
                Some(scratch) => whole.scan(bytes_of(memo, row, from, raw), scratch, &mut found),
                None => false,
            };
            memo.wholes
                .insert(key, Whole::Scanned(scanned.then_some(found)));
        }
        let Some(Whole::Scanned(Some(found))) = memo.wholes.get(&key) else {
            return false;
        };
        // The units answered one by one before the whole set scanned keep their answers.
        let units = covered & !memo.values.at(at).units.low();
        let mut hits = Vec::new();
        WholeSet::answer(
            set,
            chain,
            units,
            found,
            bytes_of(memo, row, from, raw),
            &mut hits,
        );
        let entry = memo.values.at_mut(at);
        entry.hits.extend(hits);
        entry.units.insert_low(units);
        true
    }

    /// Calls `f` with `v` through the link's chain, from the memo where another rule of the
    /// chain already transformed it (borrowed there, not copied: most values match nothing).
    pub(super) fn with_transformed(
        &self,
        t: &Transaction,
        link: &Link<'_>,
        v: &Value<'_>,
        f: impl FnOnce(&[u8]),
    ) {
        let chain = link.plan.chain;
        if self.plan.chains[chain as usize].is_empty() {
            return f(&v.bytes);
        }
        let Some((addr, len)) = v.origin else {
            return f(&self.apply_chain(chain, &v.bytes));
        };
        let mut memo = t.memo.borrow_mut();
        let row = memo.values.row(addr, len);
        // (No memo only for a row never made, which `row` just made: the value's bytes.)
        let from = self
            .memoize(&mut memo, row, chain, &v.bytes)
            .map_or(Some(chain), |at| holder_of(memo.values.at(at), chain));
        f(bytes_of(&memo, row, from, &v.bytes));
    }

    /// Puts in `memo` the request's value `raw` (its `row` in the memo) through `chain`,
    /// from its parent's result where the chain has one (memoized first, in turn): each
    /// step runs once per value, whichever chains share it. A step that changes nothing is
    /// recorded as such, without a copy.
    fn memoize(&self, memo: &mut Memos, row: u32, chain: u32, raw: &[u8]) -> Option<u32> {
        if let Some(at) = memo.values.index(row, chain) {
            return Some(at);
        }
        let steps = &self.plan.chains[chain as usize];
        let parent = self.plan.parents[chain as usize];
        let (value, same) = match steps.last() {
            None => (Vec::new(), Some(None)),
            // The plan interns every chain's prefixes: a longer chain always has a parent.
            Some(_) if parent.is_none() && steps.len() > 1 => (self.apply_chain(chain, raw), None),
            Some(last) => {
                if let Some(p) = parent {
                    let _ = self.memoize(memo, row, p, raw);
                }
                // The chain whose memo holds the step's input (none: the value's own bytes).
                let from = parent.and_then(|p| holder(memo, row, p));
                self.step(memo, row, chain, from, *last, raw)
            }
        };
        memo.values.insert(
            row,
            chain,
            Memo {
                value,
                same,
                ..Memo::default()
            },
        )
    }

    /// `chain`'s memo of `row` (a value whose own bytes are `raw`), its last step `last`
    /// run on the bytes `from` holds: (its bytes, or empty where `same` names the chain
    /// whose memo holds them). A step that changes nothing is recorded as such, without a
    /// copy; over a long value, a step another chain already ran on the same bytes (its
    /// own prefix leaving them as this one's does) is not run again.
    fn step(
        &self,
        memo: &mut Memos,
        row: u32,
        chain: u32,
        from: Option<u32>,
        last: Transform,
        raw: &[u8],
    ) -> (Vec<u8>, Option<Option<u32>>) {
        // A long value of the request's own is asked by the summary of its bytes.
        let known = (from.is_none() && raw.len() >= SUMMARIZED)
            .then(|| last.leaves_held(memo.values.held(row, raw)));
        let input = bytes_of(memo, row, from, raw);
        if known.unwrap_or_else(|| last.leaves(input)) {
            return (Vec::new(), Some(from));
        }
        let long = input.len() >= SUMMARIZED;
        let (row_key, from_key) = bytes_key(row, from);
        let key = (row_key, from_key, last);
        if long && let Some(&at) = memo.steps.get(&key) {
            return (Vec::new(), Some(at));
        }
        let mut buf = std::mem::take(&mut memo.buf);
        let input = bytes_of(memo, row, from, raw);
        last.apply(input, &mut buf);
        let (value, same) = if buf == input {
            memo.buf = buf;
            (Vec::new(), Some(from))
        } else {
            (buf, None)
        };
        if long {
            memo.steps.insert(key, same.unwrap_or(Some(chain)));
        }
        (value, same)
    }

    pub(super) fn apply_chain(&self, chain: u32, value: &[u8]) -> Vec<u8> {
        let mut current = value.to_vec();
        let mut next = Vec::new();
        for tr in &self.plan.chains[chain as usize] {
            tr.apply(&current, &mut next);
            std::mem::swap(&mut current, &mut next);
        }
        current
    }
}

/// ORs `found` into `bits` (grown to hold it).
fn or_into(bits: &mut Vec<u64>, found: &[u64]) {
    if bits.len() < found.len() {
        bits.resize(found.len(), 0);
    }
    for (b, f) in bits.iter_mut().zip(found) {
        *b |= f;
    }
}

/// The whole-set automaton scans a value's bytes once this many of the units it covers
/// were asked of them one by one: its one pass costs several of theirs on some values (a
/// raw urlencoded body: 205 µs against 25 for a unit's automaton over 10 KiB), so it pays
/// where many chains ask the same bytes (a form field read by most of CRS's rules: 15
/// passes became 3), not where two or three do. Only values of [`SUMMARIZED`] bytes or
/// more: over a short one a pass costs little more than its start, and the whole set's
/// bookkeeping cost a GET more than it saved (4% of its instructions, CRS 3.3.4).
const WHOLE_AFTER: u32 = 2;

/// Values at least this long are asked whether a step changes them by the summary of the
/// bytes they hold ([`crate::native::memo::MemoMap::held`]), made once.
const SUMMARIZED: usize = 256;

/// The chain whose memo holds the bytes of `row` through `chain` (itself, or the one its
/// memo's `same` names: always a memo that holds its bytes), or none for the value's own.
fn holder(memo: &Memos, row: u32, chain: u32) -> Option<u32> {
    match memo.values.get(row, chain) {
        Some(m) => holder_of(m, chain),
        None => Some(chain),
    }
}

/// [`holder`] of `chain`'s memo `m`, already found.
fn holder_of(m: &Memo, chain: u32) -> Option<u32> {
    match m.same {
        Some(h) => h,
        None => Some(chain),
    }
}

/// The key of the bytes `from` holds for `row` (0 for the value's own, else 1 + the
/// chain), under which what is learnt of those bytes is kept for every chain reaching them.
fn bytes_key(row: u32, from: Option<u32>) -> (u32, u32) {
    (row, from.map_or(0, |c| c + 1))
}

/// The bytes held by `chain`'s memo of `row` ([`holder`]'s answer), or `raw`.
fn bytes_of<'m>(memo: &'m Memos, row: u32, chain: Option<u32>, raw: &'m [u8]) -> &'m [u8] {
    chain
        .and_then(|c| memo.values.get(row, c))
        .map_or(raw, |m| &m.value[..])
}

#[cfg(all(test, feature = "modsecurity"))]
mod tests;
