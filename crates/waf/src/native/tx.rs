//! TX, the transaction's own collection: keys lower-cased, looked up by hash, walked in key
//! order.
//!
//! CRS asks for one TX key in most of its rules (`TX:DETECTION_PARANOIA_LEVEL`, the
//! scores, `%{tx.…}` in operator arguments and `setvar`s): a GET asks about 160 times.
//! A `BTreeMap` with CRS's hundred keys compared six strings a lookup (4% of a GET's
//! instructions with the `memcmp`s); a hash lookup compares one. A rule that reads the
//! whole collection (`TX`, `TX:/regex/`: CRS 3.3's 920450, once a request) walks it in key
//! order, as the ordered map did, so that its values and matches come in the same order.

use rustc_hash::FxHashMap;

/// TX's values by lower-cased key.
#[derive(Debug, Default)]
pub(crate) struct Tx(FxHashMap<String, Vec<u8>>);

impl Tx {
    /// The value of `key` (lower-cased).
    pub(crate) fn get(&self, key: &str) -> Option<&Vec<u8>> {
        self.0.get(key)
    }

    /// The stored key and value of `key` (lower-cased).
    pub(crate) fn get_key_value(&self, key: &str) -> Option<(&String, &Vec<u8>)> {
        self.0.get_key_value(key)
    }

    /// The value of `key` (lower-cased), to change in place.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Vec<u8>> {
        self.0.get_mut(key)
    }

    /// Sets `key` (lower-cased) to `value`, reusing the key's entry where it has one (a
    /// capture's `TX:0` is set again in most rules that capture).
    pub(crate) fn set(&mut self, key: &str, value: Vec<u8>) {
        match self.0.get_mut(key) {
            Some(slot) => *slot = value,
            None => {
                self.0.insert(key.to_string(), value);
            }
        }
    }

    /// Removes `key` (lower-cased).
    pub(crate) fn remove(&mut self, key: &str) {
        self.0.remove(key);
    }

    /// Every key and value, in key order.
    pub(crate) fn sorted(&self) -> Vec<(&String, &Vec<u8>)> {
        let mut all: Vec<_> = self.0.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all
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
        assert_eq!(tx.get_key_value("0").map(|(k, _)| k.as_str()), Some("0"));
        tx.get_mut("1").unwrap().push(b'!');
        let walked: Vec<(&str, &[u8])> = tx
            .sorted()
            .into_iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect();
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
}
