//! The order in which libmodsecurity 3.0.9 hands out a collection's values.
//!
//! Its collections (`ARGS`, `REQUEST_HEADERS`, `FILES`, ...) are `AnchoredSetVariable`s: a
//! libstdc++ `std::unordered_multimap` keyed without regard to case, whose hash is the sum
//! of the key's bytes lowercased (`MyHash`), made with `reserve(10)`. A whole collection is
//! read by walking the map and inserting each value at the front of a vector, so rules see
//! the reverse of the map's node order; a `:key` selector walks `equal_range`, the map's
//! order. Which value a rule sees first decides `MATCHED_VAR` and captures, so the order is
//! reproduced here: libstdc++'s (GCC 12, Debian 12) node list, bucket array and prime rehash
//! policy, for the sequence of insertions, nothing else of the map.

/// No node.
const NIL: u32 = u32::MAX;
/// A bucket whose first node is the list's first: its "before" node is the list head.
const HEAD: u32 = u32::MAX - 1;

/// Bucket counts the map grows through from `reserve(10)`, one load factor each time it
/// fills (libstdc++'s `_Prime_rehash_policy` with `__prime_list`: the first listed prime
/// of at least twice the count).
const GROWTH: &[usize] = &[
    11, 23, 47, 97, 199, 409, 823, 1741, 3739, 7517, 15173, 30727, 62233, 126271, 256279, 520241,
    1056323, 2144977, 4355707, 8844859, 17961079, 36473443, 74066549, 150406843, 305431229,
    620239453, 1259520799, 2557710269,
];

/// `MyHash`: the sum of the key's bytes, each lowercased (`tolower` in the C locale), into a
/// `size_t`. `char` is signed on x86-64; glibc's `tolower` maps -128..-2 to 128..254, but -1
/// (byte 0xff) is `EOF`, which it returns as it is: that byte takes one from the sum (found
/// by crates/waf/fuzz: a cookie name with 0xff came in another order).
fn hash(key: &[u8]) -> u64 {
    key.iter().fold(0u64, |h, &b| match b {
        0xff => h.wrapping_sub(1),
        _ => h.wrapping_add(u64::from(b.to_ascii_lowercase())),
    })
}

/// One collection: its entries in insertion order, and the map's node order over them.
#[derive(Debug, Clone, Default)]
pub(super) struct Table {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    codes: Vec<u64>,
    next: Vec<u32>,
    first: u32,
    buckets: Vec<u32>,
    /// The reverse of the node order (how a rule reads the whole collection), made at the
    /// first read after an insertion: rules read a collection hundreds of times a request.
    reversed: std::cell::OnceCell<Vec<u32>>,
}

impl Table {
    /// Adds `(key, value)` as `emplace` does.
    pub(super) fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) {
        if self.buckets.is_empty() {
            self.buckets = vec![NIL; GROWTH[0]];
            self.first = NIL;
        }
        if self.entries.len() + 1 > self.buckets.len() {
            let n = self.buckets.len();
            let grown = GROWTH.iter().copied().find(|&g| g > n).unwrap_or(n * 2 + 1);
            self.rehash(grown);
        }
        self.reversed.take();
        let code = hash(&key);
        let node = u32::try_from(self.entries.len()).expect("fewer than 4 billion values");
        self.entries.push((key, value));
        self.codes.push(code);
        self.next.push(NIL);
        let bkt = self.bucket(code);
        match self.before_equal(bkt, node) {
            Some(prev) => {
                self.next[node as usize] = self.after(prev);
                self.set_after(prev, node);
            }
            None => self.insert_bucket_begin(bkt, node),
        }
    }

    fn bucket(&self, code: u64) -> usize {
        (code % self.buckets.len() as u64) as usize
    }

    /// The node after `before` (a node or [`HEAD`]).
    fn after(&self, before: u32) -> u32 {
        if before == HEAD {
            self.first
        } else {
            self.next[before as usize]
        }
    }

    fn set_after(&mut self, before: u32, node: u32) {
        if before == HEAD {
            self.first = node;
        } else {
            self.next[before as usize] = node;
        }
    }

    /// `_M_find_before_node`: the node before the first one in `bkt` with `node`'s key.
    fn before_equal(&self, bkt: usize, node: u32) -> Option<u32> {
        let mut prev = self.buckets[bkt];
        if prev == NIL {
            return None;
        }
        let (code, key) = (self.codes[node as usize], &self.entries[node as usize].0);
        let mut p = self.after(prev);
        loop {
            let i = p as usize;
            if self.codes[i] == code && self.entries[i].0.eq_ignore_ascii_case(key) {
                return Some(prev);
            }
            let n = self.next[i];
            if n == NIL || self.bucket(self.codes[n as usize]) != bkt {
                return None;
            }
            prev = p;
            p = n;
        }
    }

    /// `_M_insert_bucket_begin`.
    fn insert_bucket_begin(&mut self, bkt: usize, node: u32) {
        let before = self.buckets[bkt];
        if before != NIL {
            self.next[node as usize] = self.after(before);
            self.set_after(before, node);
            return;
        }
        self.next[node as usize] = self.first;
        self.first = node;
        let n = self.next[node as usize];
        if n != NIL {
            let b = self.bucket(self.codes[n as usize]);
            self.buckets[b] = node;
        }
        self.buckets[bkt] = HEAD;
    }

    /// `_M_rehash_aux` for a map with equivalent keys.
    fn rehash(&mut self, count: usize) {
        let mut buckets = vec![NIL; count];
        let at = |code: u64| (code % count as u64) as usize;
        let mut p = self.first;
        self.first = NIL;
        let (mut bbegin, mut prev_bkt) = (0usize, 0usize);
        let mut prev = NIL;
        let mut check = false;
        while p != NIL {
            let next = self.next[p as usize];
            let bkt = at(self.codes[p as usize]);
            if prev != NIL && prev_bkt == bkt {
                self.next[p as usize] = self.next[prev as usize];
                self.next[prev as usize] = p;
                check = true;
            } else {
                if check {
                    let n = self.next[prev as usize];
                    if n != NIL {
                        let nb = at(self.codes[n as usize]);
                        if nb != prev_bkt {
                            buckets[nb] = prev;
                        }
                    }
                    check = false;
                }
                if buckets[bkt] == NIL {
                    self.next[p as usize] = self.first;
                    self.first = p;
                    buckets[bkt] = HEAD;
                    if self.next[p as usize] != NIL {
                        buckets[bbegin] = p;
                    }
                    bbegin = bkt;
                } else {
                    let before = buckets[bkt];
                    let after = if before == HEAD {
                        self.first
                    } else {
                        self.next[before as usize]
                    };
                    self.next[p as usize] = after;
                    if before == HEAD {
                        self.first = p;
                    } else {
                        self.next[before as usize] = p;
                    }
                }
            }
            prev = p;
            prev_bkt = bkt;
            p = next;
        }
        if check && prev != NIL {
            let n = self.next[prev as usize];
            if n != NIL {
                let nb = at(self.codes[n as usize]);
                if nb != prev_bkt {
                    buckets[nb] = prev;
                }
            }
        }
        self.buckets = buckets;
    }

    /// The map's node order (what `equal_range` and iteration walk).
    fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        let mut p = if self.buckets.is_empty() {
            NIL
        } else {
            self.first
        };
        std::iter::from_fn(move || {
            (p != NIL).then(|| {
                let i = p as usize;
                p = self.next[i];
                i
            })
        })
    }

    /// Every entry as a rule reads the whole collection: the reverse of the node order.
    pub(super) fn all(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let order = self.reversed.get_or_init(|| {
            let mut order: Vec<u32> = self.nodes().map(|i| i as u32).collect();
            order.reverse();
            order
        });
        order.iter().map(|&i| {
            let (k, v) = &self.entries[i as usize];
            (k.as_slice(), v.as_slice())
        })
    }

    /// The entries whose key is `key` (without regard to case), in `equal_range`'s order:
    /// the latest added first.
    pub(super) fn named<'a, 'k>(
        &'a self,
        key: &'k [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a, 'k> {
        // Each entry's hash is kept: most keys are told apart without reading them.
        let code = hash(key);
        self.nodes()
            .filter(move |&i| self.codes[i] == code && self.entries[i].0.eq_ignore_ascii_case(key))
            .map(|i| (self.entries[i].0.as_slice(), self.entries[i].1.as_slice()))
    }

    /// The first value for `key` (`resolveFirst`), or `None`.
    pub(super) fn first(&self, key: &[u8]) -> Option<&[u8]> {
        self.named(key).next().map(|(_, v)| v)
    }

    /// The entries in the order they were added.
    pub(super) fn in_insertion_order(&self) -> impl Iterator<Item = &(Vec<u8>, Vec<u8>)> {
        self.entries.iter()
    }
}
