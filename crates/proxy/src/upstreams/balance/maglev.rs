//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of M slots, M a
//! prime of at least 100 × the servers, filled from each server's own permutation of the
//! slots. M comes from a fixed ladder (the first prime above a power of two, 65,537 up to 655
//! servers), not from the exact count: a table of another size would move nearly every key.
//!
//! Why Maglev rather than a ketama ring: a lookup is one index into the table (no binary
//! search), the table spreads keys evenly (within a few percent at 100 slots per server,
//! where a ring needs hundreds of points per server), and when one of N servers leaves about
//! 1/N of the keys move — the removed server's, plus a little churn the paper measures.
//! Permutations come from each server's name (its address as configured), so every gateway
//! of a fleet, and every reload, builds the same table from the same servers.

use crate::hash::hash64;

/// A Maglev lookup table: slot → server index.
#[derive(Debug)]
pub(crate) struct Maglev {
    slots: Box<[u32]>,
}

impl Maglev {
    /// Builds the table for servers `(name, weight)`. A server with weight w takes w turns
    /// per round of the fill, so it ends up with w shares of the slots.
    pub(crate) fn new(servers: &[(&str, u32)]) -> Self {
        // No server (a name that never resolved): nothing to fill; never looked up, since a
        // group without servers picks none.
        if servers.is_empty() {
            return Maglev {
                slots: Box::new([0]),
            };
        }
        let m = prime_at_least((servers.len() * 100).next_power_of_two().max(1 << 16)) as u64;
        let mut offset = Vec::with_capacity(servers.len());
        let mut skip = Vec::with_capacity(servers.len());
        for (name, _) in servers {
            offset.push(hash64(0x6d61_676c, name.as_bytes()) % m);
            skip.push(hash64(0x736b_6970, name.as_bytes()) % (m - 1) + 1);
        }
        // Filled in name order, so that the table does not depend on the order servers are
        // listed in (two gateways with the same servers listed differently agree).
        let mut order: Vec<usize> = (0..servers.len()).collect();
        order.sort_by(|&a, &b| servers[a].0.cmp(servers[b].0));
        let mut next = vec![0u64; servers.len()];
        let mut slots = vec![u32::MAX; m as usize];
        let mut filled = 0u64;
        'fill: loop {
            for &i in &order {
                for _ in 0..servers[i].1.max(1) {
                    let mut c = (offset[i] + next[i] * skip[i]) % m;
                    while slots[c as usize] != u32::MAX {
                        next[i] += 1;
                        c = (offset[i] + next[i] * skip[i]) % m;
                    }
                    slots[c as usize] = i as u32;
                    next[i] += 1;
                    filled += 1;
                    if filled == m {
                        break 'fill;
                    }
                }
            }
        }
        Maglev {
            slots: slots.into_boxed_slice(),
        }
    }

    /// The slot a key hashes to.
    pub(crate) fn slot(&self, key: u64) -> usize {
        (key % self.slots.len() as u64) as usize
    }

    /// The server of `slot` (any number; it wraps).
    pub(crate) fn server(&self, slot: usize) -> usize {
        self.slots[slot % self.slots.len()] as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

fn prime_at_least(n: usize) -> usize {
    let is_prime = |k: usize| {
        k >= 2
            && (k < 4
                || (!k.is_multiple_of(2)
                    && (3..)
                        .step_by(2)
                        .take_while(|d| d * d <= k)
                        .all(|d| !k.is_multiple_of(d))))
    };
    (n..).find(|&k| is_prime(k)).expect("primes never run out")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.0.{}.{}:8080", i / 250, i % 250 + 1))
            .collect()
    }

    fn table(names: &[String]) -> Maglev {
        let servers: Vec<(&str, u32)> = names.iter().map(|n| (n.as_str(), 1)).collect();
        Maglev::new(&servers)
    }

    #[test]
    fn primes() {
        assert_eq!(prime_at_least(1021), 1021);
        assert_eq!(prime_at_least(1022), 1031);
        assert_eq!(prime_at_least(1 << 16), 65_537);
        assert_eq!(prime_at_least(1 << 18), 262_147);
        // 2,000 servers: 262,147 slots (1 MiB).
        assert_eq!(table(&names(2_000)).len(), 262_147);
        assert_eq!(table(&names(655)).len(), 65_537);
    }

    #[test]
    fn every_server_gets_about_its_share_of_slots() {
        let names = names(50);
        let t = table(&names);
        let mut count = vec![0usize; 50];
        for s in 0..t.len() {
            count[t.server(s)] += 1;
        }
        let mean = t.len() as f64 / 50.0;
        for (i, &c) in count.iter().enumerate() {
            assert!(
                (c as f64 - mean).abs() < mean * 0.1,
                "server {i}: {c} slots, mean {mean}"
            );
        }
    }

    #[test]
    fn weights_give_proportional_shares() {
        let t = Maglev::new(&[("a:1", 3), ("b:1", 1)]);
        let a = (0..t.len()).filter(|&s| t.server(s) == 0).count() as f64;
        let share = a / t.len() as f64;
        assert!((share - 0.75).abs() < 0.01, "weight 3 of 4 took {share}");
    }

    #[test]
    fn removing_one_of_n_servers_moves_about_one_nth_of_the_keys() {
        let before_names = names(20);
        let mut after_names = before_names.clone();
        let gone = after_names.remove(7);
        let (before, after) = (table(&before_names), table(&after_names));
        let keys = 100_000u64;
        let (mut moved, mut on_gone) = (0, 0);
        for k in 0..keys {
            let key = hash64(0, &k.to_le_bytes());
            let a = &before_names[before.server(before.slot(key))];
            let b = &after_names[after.server(after.slot(key))];
            if a != b {
                moved += 1;
            }
            if *a == gone {
                on_gone += 1;
            }
        }
        let fraction = moved as f64 / keys as f64;
        // The removed server's keys must move (about 1/20 = 5%); Maglev moves a few more
        // (5.3% here).
        assert!(moved >= on_gone);
        assert!(fraction < 1.0 / 20.0 * 1.2, "{fraction} of keys moved");
        // Against a modulo hash, which moves nearly all of them.
        let modulo_moved = (0..keys)
            .filter(|k| {
                let key = hash64(0, &k.to_le_bytes());
                before_names[(key % 20) as usize] != after_names[(key % 19) as usize]
            })
            .count();
        assert!(modulo_moved as f64 / keys as f64 > 0.8);
    }

    #[test]
    fn the_table_depends_on_names_not_on_order() {
        let a = names(10);
        let mut b = a.clone();
        b.reverse();
        let (ta, tb) = (table(&a), table(&b));
        let differ = (0..ta.len())
            .filter(|&s| a[ta.server(s)] != b[tb.server(s)])
            .count();
        assert_eq!(differ, 0, "the same servers listed in another order");
    }
}
