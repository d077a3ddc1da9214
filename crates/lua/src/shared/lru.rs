//! A dictionary's entries: a hash table of byte-string keys over a slab of nodes linked in
//! least-recently-used order, as NGINX's shared dictionary keeps an rbtree and a queue.
//!
//! Why not the `lru` crate (which this replaced): an `incr` loop is the dictionary's hot
//! path, one lookup and one move to the front per call, and `LruCache::get_mut` cost about
//! 120 instructions a call (callgrind over the gateway running `bench/lua`'s increment
//! script): its default hasher, a key comparison through its `KeyRef` wrapper, and a node
//! allocated per entry. Here the table holds slab indexes (each key stored once, in its
//! node), the hash is FxHash, and a move to the front rewrites four indexes.

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use std::hash::BuildHasher;

/// No node (the ends of the list).
const NIL: usize = usize::MAX;

struct Node<V> {
    key: Box<[u8]>,
    /// `None` while the node is free (on the free list).
    value: Option<V>,
    hash: u64,
    /// Towards the most recently used.
    prev: usize,
    /// Towards the least recently used.
    next: usize,
}

/// Entries by key, most recently used first.
pub(crate) struct LruMap<V> {
    table: HashTable<usize>,
    nodes: Vec<Node<V>>,
    free: Vec<usize>,
    /// The most recently used node.
    head: usize,
    /// The least recently used node.
    tail: usize,
    hasher: FxBuildHasher,
}

impl<V> Default for LruMap<V> {
    fn default() -> Self {
        LruMap {
            table: HashTable::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            hasher: FxBuildHasher,
        }
    }
}

impl<V> LruMap<V> {
    fn find(&self, key: &[u8]) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        let nodes = &self.nodes;
        self.table.find(hash, |&i| *nodes[i].key == *key).copied()
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = {
            let n = &self.nodes[i];
            (n.prev, n.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.nodes[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n].prev = prev,
        }
    }

    fn push_front(&mut self, i: usize) {
        let old = self.head;
        {
            let n = &mut self.nodes[i];
            n.prev = NIL;
            n.next = old;
        }
        match old {
            NIL => self.tail = i,
            o => self.nodes[o].prev = i,
        }
        self.head = i;
    }

    fn touch(&mut self, i: usize) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// The value of `key`, made the most recently used.
    pub(crate) fn get(&mut self, key: &[u8]) -> Option<&V> {
        self.get_mut(key).map(|v| &*v)
    }

    /// The value of `key` to change, made the most recently used.
    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let i = self.find(key)?;
        self.touch(i);
        self.nodes[i].value.as_mut()
    }

    /// The value of `key`, its place in the order unchanged.
    pub(crate) fn peek(&self, key: &[u8]) -> Option<&V> {
        let i = self.find(key)?;
        self.nodes[i].value.as_ref()
    }

    /// The value of `key` to change, its place in the order unchanged.
    pub(crate) fn peek_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let i = self.find(key)?;
        self.nodes[i].value.as_mut()
    }

    /// `key` set to `value`, the most recently used (a key there already is replaced).
    pub(crate) fn put(&mut self, key: &[u8], value: V) {
        if let Some(i) = self.find(key) {
            self.nodes[i].value = Some(value);
            self.touch(i);
            return;
        }
        let hash = self.hasher.hash_one(key);
        let node = Node {
            key: key.into(),
            value: Some(value),
            hash,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        let nodes = &self.nodes;
        self.table.insert_unique(hash, i, |&j| nodes[j].hash);
        self.push_front(i);
    }

    /// Takes node `i` (one in the list) out: its key and value.
    fn remove(&mut self, i: usize) -> Option<(Box<[u8]>, V)> {
        let hash = self.nodes[i].hash;
        if let Ok(slot) = self.table.find_entry(hash, |&j| j == i) {
            slot.remove();
        }
        self.unlink(i);
        self.free.push(i);
        let n = &mut self.nodes[i];
        Some((std::mem::take(&mut n.key), n.value.take()?))
    }

    /// Takes `key` out.
    pub(crate) fn pop(&mut self, key: &[u8]) -> Option<V> {
        let i = self.find(key)?;
        self.remove(i).map(|(_, v)| v)
    }

    /// Takes the least recently used entry out.
    pub(crate) fn pop_lru(&mut self) -> Option<(Box<[u8]>, V)> {
        match self.tail {
            NIL => None,
            i => self.remove(i),
        }
    }

    /// Every entry, most recently used first (lua-nginx-module's `get_keys` order).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        let mut at = self.head;
        std::iter::from_fn(move || {
            let n = self.nodes.get(at)?;
            at = n.next;
            Some((&*n.key, n.value.as_ref()?))
        })
    }

    /// Entries held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len()
    }

    /// Every entry out (the memory too).
    pub(crate) fn clear(&mut self) {
        *self = LruMap::default();
    }
}

#[cfg(test)]
mod tests {
    use super::LruMap;

    fn order(m: &LruMap<u32>) -> Vec<(Vec<u8>, u32)> {
        m.iter().map(|(k, v)| (k.to_vec(), *v)).collect()
    }

    /// Reads move an entry to the front, peeks do not, the least recently used goes first,
    /// and freed nodes are reused without disturbing the order or the lookups.
    #[test]
    fn entries_leave_in_least_recently_used_order() {
        let mut m = LruMap::default();
        for (i, k) in [b"a", b"b", b"c"].into_iter().enumerate() {
            m.put(k, u32::try_from(i).unwrap());
        }
        assert_eq!(
            order(&m),
            [(b"c".to_vec(), 2), (b"b".to_vec(), 1), (b"a".to_vec(), 0)]
        );
        assert_eq!(m.get(b"a"), Some(&0));
        assert_eq!(m.peek(b"b"), Some(&1));
        *m.get_mut(b"b").unwrap() += 10;
        *m.peek_mut(b"c").unwrap() += 20;
        assert_eq!(
            order(&m),
            [(b"b".to_vec(), 11), (b"a".to_vec(), 0), (b"c".to_vec(), 22)]
        );
        assert_eq!(m.pop_lru(), Some((b"c".to_vec().into(), 22)));
        assert_eq!(m.pop(b"b"), Some(11));
        assert_eq!(m.pop(b"b"), None);
        assert_eq!(m.get(b"zz"), None);
        m.put(b"d", 3);
        m.put(b"a", 5);
        assert_eq!(order(&m), [(b"a".to_vec(), 5), (b"d".to_vec(), 3)]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.pop_lru(), Some((b"d".to_vec().into(), 3)));
        assert_eq!(m.pop_lru(), Some((b"a".to_vec().into(), 5)));
        assert_eq!(m.pop_lru(), None);
        assert_eq!((m.len(), order(&m)), (0, vec![]));
    }

    /// Many keys in and out in a pattern, checked against a simple model of the same
    /// order (a vector, most recent first): the table and the links agree after every
    /// step, empty and binary keys included.
    #[test]
    fn the_map_agrees_with_a_plain_model() {
        let mut m = LruMap::default();
        let mut model: Vec<(Vec<u8>, u32)> = Vec::new();
        let mut x = 7_u32;
        for step in 0..5_000_u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let key = match (x >> 8) % 40 {
                0 => Vec::new(),
                k => vec![0, u8::try_from(k).unwrap(), 0xff],
            };
            let at = model.iter().position(|(k, _)| *k == key);
            match (x >> 16) % 5 {
                0 | 1 => {
                    m.put(&key, step);
                    if let Some(p) = at {
                        model.remove(p);
                    }
                    model.insert(0, (key, step));
                }
                2 => {
                    let got = m.get(&key).copied();
                    assert_eq!(got, at.map(|p| model[p].1));
                    if let Some(p) = at {
                        let e = model.remove(p);
                        model.insert(0, e);
                    }
                }
                3 => {
                    assert_eq!(m.pop(&key), at.map(|p| model.remove(p).1));
                }
                _ => {
                    let got = m.pop_lru().map(|(k, v)| (k.to_vec(), v));
                    assert_eq!(got, model.pop());
                }
            }
            assert_eq!(order(&m), model, "step {step}");
            assert_eq!(m.len(), model.len());
        }
        m.clear();
        assert_eq!((m.len(), order(&m)), (0, vec![]));
    }
}
