//! TX, the transaction's own collection: keys lower-cased, looked up by hash, walked in key
//! order.
//!
//! CRS asks for one TX key in most of its rules (`TX:DETECTION_PARANOIA_LEVEL`, the
//! scores, `%{tx.…}` in operator arguments and `setvar`s): a GET asks about 160 times.
//! A `BTreeMap` with CRS's hundred keys compared six strings a lookup (4% of a GET's
//! instructions with the `memcmp`s); a hash lookup compares one. A rule that reads the
//! whole collection (`TX`, `TX:/regex/`: CRS 3.3's 920450, once a request) walks it in key
//! order, as the ordered map did, so that its values and matches come in the same order.

//!
//! A new transaction's TX is a recycled one (a few kept per thread): CRS's initialization
//! sets the same sixty-odd keys on every request, and each was an allocation of its key, of
//! its value and the map's growth, then as many frees (6% of a benign GET's instructions).
//! A recycled TX keeps its keys and buffers with every key absent; setting one revives it.
//! The walk's key order is kept over every key it holds, absent or not, so that it is
//! sorted again only when a key it never held comes. The order is of the bytes a key stands
//! for (`tx_key`: a request's byte outside UTF-8 is kept as a character of its own).

use super::tx_key;
use rustc_hash::FxHashMap;
use std::cell::RefCell;

/// TX's values by lower-cased key.
#[derive(Debug)]
pub(crate) struct Tx {
    /// By key: its slot.
    index: FxHashMap<String, u32>,
    slots: Vec<Slot>,
    /// Every slot, in key order, once sorted (none after a new key came).
    order: RefCell<Option<Vec<u32>>>,
    /// By key pattern (`TX:/regex/`), the slots in key order whose key it selects, once
    /// asked (cleared with `order`). A slot's key never changes, so the answer holds for
    /// every request the TX is recycled for: CRS 3.3's 920450 walked the hundred-odd keys
    /// through its pattern on each (4% of a benign GET's instructions).
    selected: RefCell<Vec<(String, Vec<u32>)>>,
    /// For the rule set numbered first (`NativeRules`), by its TX read (`TxRead`): 1 +
    /// the read key's slot, once looked up (0: not yet). A slot's key never changes, so a
    /// recycled TX keeps them: CRS's gates and defaults read about a hundred keys a
    /// request, and a hash lookup each was 2% of a benign GET's instructions.
    reads: (u64, Vec<u32>),
}

#[derive(Debug)]
struct Slot {
    key: String,
    value: Vec<u8>,
    /// Whether the key is in TX (else its slot waits to be set again).
    present: bool,
}

/// A TX with more keys than this is not recycled: its keys may come from a request
/// (CRS 3.3's `tx.header_name_NAME`), and one request's should not stay for the thread's
/// life.
const RECYCLED_KEYS: usize = 512;

/// How many key patterns' selections a TX keeps ([`Tx::each_selected`]); a rule set has a
/// few such selectors (CRS 3.3.4 two).
const SELECTORS_KEPT: usize = 16;

/// How many TXs a thread keeps for the next transactions.
const KEPT: usize = 4;

/// A recycled TX's parts (no `Drop` of their own: a TX dropped while its thread keeps
/// enough is freed, not recycled again).
struct Recycled {
    index: FxHashMap<String, u32>,
    slots: Vec<Slot>,
    order: Option<Vec<u32>>,
    selected: Vec<(String, Vec<u32>)>,
    reads: (u64, Vec<u32>),
}

thread_local! {
    static RECYCLED: RefCell<Vec<Recycled>> = const { RefCell::new(Vec::new()) };
}

impl Default for Tx {
    /// An empty TX: a recycled one where this thread has one.
    fn default() -> Tx {
        let kept = RECYCLED.try_with(|r| r.borrow_mut().pop()).ok().flatten();
        let kept = kept.unwrap_or(Recycled {
            index: FxHashMap::default(),
            slots: Vec::new(),
            order: None,
            selected: Vec::new(),
            reads: (0, Vec::new()),
        });
        Tx {
            index: kept.index,
            slots: kept.slots,
            order: RefCell::new(kept.order),
            selected: RefCell::new(kept.selected),
            reads: kept.reads,
        }
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.slots.len() > RECYCLED_KEYS || self.slots.is_empty() {
            return;
        }
        for slot in &mut self.slots {
            slot.present = false;
            slot.value.clear();
        }
        let tx = Recycled {
            index: std::mem::take(&mut self.index),
            slots: std::mem::take(&mut self.slots),
            order: self.order.take(),
            selected: self.selected.take(),
            reads: std::mem::take(&mut self.reads),
        };
        // A thread being torn down keeps nothing.
        let _ = RECYCLED.try_with(|r| {
            let mut r = r.borrow_mut();
            if r.len() < KEPT {
                r.push(tx);
            }
        });
    }
}

impl Tx {
    fn slot(&self, key: &str) -> Option<&Slot> {
        let slot = &self.slots[*self.index.get(key)? as usize];
        slot.present.then_some(slot)
    }

    /// The value of `key` (lower-cased) for read `n` of rule set `owner` (numbered from 1):
    /// the slot found the first time is kept ([`Tx::reads`]), later reads index it.
    pub(crate) fn get_read(&mut self, owner: u64, n: usize, key: &str) -> Option<&Vec<u8>> {
        if self.reads.0 != owner {
            // (Cleared, not replaced: a thread serving two rule sets keeps the list.)
            self.reads.0 = owner;
            self.reads.1.clear();
        }
        let cache = &mut self.reads.1;
        if cache.len() <= n {
            cache.resize(n + 1, 0);
        }
        let at = match cache[n].checked_sub(1) {
            Some(at) => at,
            None => {
                let at = *self.index.get(key)?;
                cache[n] = at + 1;
                at
            }
        };
        let slot = &self.slots[at as usize];
        slot.present.then_some(&slot.value)
    }

    /// The value of `key` (lower-cased).
    pub(crate) fn get(&self, key: &str) -> Option<&Vec<u8>> {
        self.slot(key).map(|s| &s.value)
    }

    /// Sets `key` (lower-cased) to `value`, reusing the key's slot where it has one (a
    /// capture's `TX:0` is set again in most rules that capture).
    pub(crate) fn set(&mut self, key: &str, value: Vec<u8>) {
        *self.revive(key) = value;
    }

    /// Sets `key` (lower-cased) to a copy of `value`, in the key's buffer where it has one.
    pub(crate) fn set_bytes(&mut self, key: &str, value: &[u8]) {
        let slot = self.revive(key);
        slot.clear();
        slot.extend_from_slice(value);
    }

    /// The buffer of `key`, present from now on (a new slot where the key has none).
    fn revive(&mut self, key: &str) -> &mut Vec<u8> {
        let at = match self.index.get(key) {
            Some(&at) => at as usize,
            None => {
                let at = self.slots.len();
                self.slots.push(Slot {
                    key: key.to_string(),
                    value: Vec::new(),
                    present: false,
                });
                self.index
                    .insert(key.to_string(), u32::try_from(at).unwrap_or(u32::MAX));
                *self.order.get_mut() = None;
                self.selected.get_mut().clear();
                at
            }
        };
        let slot = &mut self.slots[at];
        slot.present = true;
        &mut slot.value
    }

    /// Removes `key` (lower-cased).
    pub(crate) fn remove(&mut self, key: &str) {
        if let Some(&at) = self.index.get(key) {
            let slot = &mut self.slots[at as usize];
            slot.present = false;
            slot.value.clear();
        }
    }

    /// Calls `f` with every key and value, in key order.
    pub(crate) fn each_sorted<'a>(&'a self, f: impl FnMut(&'a String, &'a Vec<u8>)) {
        self.sort();
        let order = self.order.borrow();
        self.each_of(order.as_deref().unwrap_or_default(), f);
    }

    /// [`Tx::each_sorted`] of the keys that `pattern` selects: `selects` asked of the bytes
    /// each key stands for ([`tx_key::bytes`]) once per slot, its answers kept under
    /// `pattern` (the selector's text) until a new key comes.
    pub(crate) fn each_selected<'a>(
        &'a self,
        pattern: &str,
        selects: &dyn Fn(&[u8]) -> bool,
        f: impl FnMut(&'a String, &'a Vec<u8>),
    ) {
        let known = self
            .selected
            .borrow()
            .iter()
            .position(|(p, _)| p == pattern);
        let at = match known {
            Some(at) => at,
            None => {
                self.sort();
                let order = self.order.borrow();
                let chosen: Vec<u32> = order
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|&i| selects(&tx_key::bytes(&self.slots[i as usize].key)))
                    .collect();
                // (A walk in progress holds the list: this one is not kept.)
                let Ok(mut selected) = self.selected.try_borrow_mut() else {
                    return self.each_of(&chosen, f);
                };
                if selected.len() >= SELECTORS_KEPT {
                    selected.clear();
                }
                selected.push((pattern.to_string(), chosen));
                selected.len() - 1
            }
        };
        let selected = self.selected.borrow();
        self.each_of(&selected[at].1, f);
    }

    /// Calls `f` with the key and value of each slot of `slots` that is present.
    fn each_of<'a>(&'a self, slots: &[u32], mut f: impl FnMut(&'a String, &'a Vec<u8>)) {
        for &i in slots {
            let slot = &self.slots[i as usize];
            if slot.present {
                f(&slot.key, &slot.value);
            }
        }
    }

    /// Makes `order`, where a new key undid it.
    fn sort(&self) {
        if self.order.borrow().is_none() {
            let mut order: Vec<u32> = (0..self.slots.len() as u32).collect();
            // By the bytes a key stands for: a request's byte outside UTF-8 is a character
            // of its own here (`tx_key`), which as text would sort after every other.
            order.sort_unstable_by(|&a, &b| {
                let key = |i: u32| tx_key::bytes(&self.slots[i as usize].key);
                key(a).cmp(&key(b))
            });
            *self.order.borrow_mut() = Some(order);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tx;

    /// Set, reset, remove and the walk in key order, whatever order the keys came in.
    #[test]
    fn tx_is_looked_up_by_key_and_walked_in_key_order() {
        let mut tx = Tx::default();
        for (k, v) in [
            ("score", "5"),
            ("1", "b"),
            ("0", "a"),
            ("anomaly", "x"),
            ("10", "c"),
        ] {
            tx.set(k, v.as_bytes().to_vec());
        }
        tx.set("score", b"10".to_vec());
        tx.remove("anomaly");
        tx.remove("absent");
        assert_eq!(tx.get("score").map(Vec::as_slice), Some(&b"10"[..]));
        assert!(tx.get("0").is_some());
        tx.set_bytes("1", b"b!");
        let mut walked: Vec<(&str, &[u8])> = Vec::new();
        tx.each_sorted(|k, v| walked.push((k.as_str(), v.as_slice())));
        assert_eq!(
            walked,
            [
                ("0", &b"a"[..]),
                ("1", b"b!"),
                ("10", b"c"),
                ("score", b"10")
            ]
        );
    }

    /// A read's slot, kept once found: the key's value as it changes, absent once removed
    /// and again once set; a read of a key not yet set finds it once it is; another rule
    /// set's read of the same number its own key; kept when the TX is recycled.
    #[test]
    fn a_read_keeps_its_slot_for_its_rule_set_only() {
        let mut tx = Tx::default();
        tx.set("other", b"o".to_vec());
        tx.set("level", b"1".to_vec());
        assert_eq!(
            tx.get_read(7, 0, "level").map(Vec::as_slice),
            Some(&b"1"[..])
        );
        tx.set("level", b"2".to_vec());
        assert_eq!(
            tx.get_read(7, 0, "level").map(Vec::as_slice),
            Some(&b"2"[..])
        );
        tx.remove("level");
        assert_eq!(tx.get_read(7, 0, "level"), None);
        tx.set("level", b"3".to_vec());
        assert_eq!(
            tx.get_read(7, 0, "level").map(Vec::as_slice),
            Some(&b"3"[..])
        );
        assert_eq!(tx.get_read(7, 5, "later"), None);
        tx.set("later", b"L".to_vec());
        assert_eq!(
            tx.get_read(7, 5, "later").map(Vec::as_slice),
            Some(&b"L"[..])
        );
        assert_eq!(
            tx.get_read(8, 0, "other").map(Vec::as_slice),
            Some(&b"o"[..])
        );
        assert_eq!(
            tx.get_read(7, 0, "level").map(Vec::as_slice),
            Some(&b"3"[..])
        );
        drop(tx);
        let mut tx = Tx::default();
        assert_eq!(
            tx.get_read(7, 0, "level"),
            None,
            "recycled: every key absent"
        );
        tx.set("level", b"4".to_vec());
        assert_eq!(
            tx.get_read(7, 0, "level").map(Vec::as_slice),
            Some(&b"4"[..])
        );
    }

    /// A key made from a request's bytes is walked in the order of those bytes, as
    /// libmodsecurity's keys are: byte 0x80 before `é` (0xc3 0xa9), though the character
    /// that stands for it is U+10FF80.
    #[test]
    fn escaped_keys_are_walked_in_byte_order() {
        let mut tx = Tx::default();
        let escaped = super::tx_key::text(b"p_\x80");
        for k in ["p_\u{e9}", &escaped, "p_z"] {
            tx.set(k, Vec::new());
        }
        let mut walked: Vec<Vec<u8>> = Vec::new();
        tx.each_sorted(|k, _| walked.push(super::tx_key::bytes(k).into_owned()));
        let want: [&[u8]; 3] = [b"p_z", b"p_\x80", "p_\u{e9}".as_bytes()];
        assert_eq!(walked, want);
    }

    /// A key pattern's walk: the selected keys in key order, present ones only; its answers
    /// kept per pattern (asked once per key) until a new key comes, which is then asked
    /// too; kept when the TX is recycled; asked of the bytes an escaped key stands for.
    #[test]
    fn a_key_patterns_selection_is_kept_until_a_new_key() {
        use std::cell::Cell;
        let asked = Cell::new(0);
        let header = |k: &[u8]| {
            asked.set(asked.get() + 1);
            k.starts_with(b"h_")
        };
        let walk = |tx: &Tx, pattern: &str, selects: &dyn Fn(&[u8]) -> bool| {
            let mut keys = Vec::new();
            tx.each_selected(pattern, selects, |k, v| {
                keys.push(format!("{k}={}", v.len()))
            });
            keys
        };
        let mut tx = Tx::default();
        for k in ["h_b", "x", "h_a", "h_c"] {
            tx.set(k, k.as_bytes().to_vec());
        }
        tx.remove("h_c");
        assert_eq!(walk(&tx, "^h_", &header), ["h_a=3", "h_b=3"]);
        assert_eq!(asked.replace(0), 4, "each key asked once");
        assert_eq!(walk(&tx, "^h_", &header), ["h_a=3", "h_b=3"]);
        assert_eq!(asked.replace(0), 0, "kept");
        assert_eq!(
            walk(&tx, "^x", &|k: &[u8]| k == b"x"),
            ["x=1"],
            "another pattern"
        );
        tx.set_bytes("h_c", b"");
        assert_eq!(walk(&tx, "^h_", &header), ["h_a=3", "h_b=3", "h_c=0"]);
        assert_eq!(asked.replace(0), 0, "an old key set again: still kept");
        tx.set("h_0", Vec::new());
        assert_eq!(
            walk(&tx, "^h_", &header),
            ["h_0=0", "h_a=3", "h_b=3", "h_c=0"]
        );
        assert_eq!(asked.replace(0), 5, "a new key: asked again");
        drop(tx);
        let mut tx = Tx::default();
        assert!(
            walk(&tx, "^h_", &header).is_empty(),
            "recycled: none present"
        );
        assert_eq!(asked.replace(0), 0, "recycled: kept");
        tx.set("h_b", b"1".to_vec());
        assert_eq!(walk(&tx, "^h_", &header), ["h_b=1"]);
        let escaped = super::tx_key::text(b"h_\x80");
        tx.set(&escaped, Vec::new());
        let raw = |k: &[u8]| k == b"h_\x80";
        assert_eq!(walk(&tx, "raw", &raw), [format!("{escaped}=0")]);
    }

    /// A recycled TX holds nothing of the request before: every key absent (read and
    /// walked), a key set again present with only its new value, and the walk
    /// in key order over old and new keys. One with too many keys is not kept.
    #[test]
    fn a_recycled_tx_starts_empty() {
        let mut tx = Tx::default();
        for k in ["b", "d", "a"] {
            tx.set(k, k.repeat(3).into_bytes());
        }
        drop(tx);
        let mut tx = Tx::default();
        assert!(!tx.slots.is_empty(), "recycled on this thread");
        for k in ["a", "b", "d"] {
            assert!(tx.get(k).is_none(), "{k}");
        }
        let mut walked = 0;
        tx.each_sorted(|_, _| walked += 1);
        assert_eq!(walked, 0);
        tx.set_bytes("d", b"x");
        tx.set("c", b"y".to_vec());
        tx.set_bytes("a", b"");
        let mut walked: Vec<(String, Vec<u8>)> = Vec::new();
        tx.each_sorted(|k, v| walked.push((k.clone(), v.clone())));
        let want: Vec<(String, Vec<u8>)> = [("a", ""), ("c", "y"), ("d", "x")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        assert_eq!(walked, want);
        drop(tx);
        let mut big = Tx::default();
        for n in 0..=super::RECYCLED_KEYS {
            big.set(&format!("k{n}"), Vec::new());
        }
        drop(big);
        // Drain this thread's kept ones: none is the big one.
        let kept: Vec<Tx> = (0..super::KEPT).map(|_| Tx::default()).collect();
        assert!(kept.iter().all(|t| t.slots.len() <= super::RECYCLED_KEYS));
    }
}
