//! API key files: one `name:sha256:HEX` line per key, the SHA-256 of the key in hex, so the
//! file (and memory) never holds a key itself. API keys are long random strings, for which
//! a fast hash is enough (passwords, which are guessable, get bcrypt in htpasswd files).
//! `sluice hash-key NAME` prints a line for a key read from standard input.

use boring::hash::{MessageDigest, hash};
use std::collections::HashMap;
use std::sync::Arc;

/// The keys of one file, by their hash.
#[derive(Debug, Default)]
pub(crate) struct ApiKeys {
    by_hash: HashMap<[u8; 32], Arc<str>>,
}

/// The SHA-256 of `key`.
pub(crate) fn digest(key: &[u8]) -> [u8; 32] {
    let d = hash(MessageDigest::sha256(), key).expect("hashing into memory");
    d[..].try_into().expect("SHA-256 is 32 bytes")
}

/// The file line for a key named `name`.
pub fn key_line(name: &str, key: &[u8]) -> String {
    let mut line = format!("{name}:sha256:");
    for b in digest(key) {
        line.push_str(&format!("{b:02x}"));
    }
    line
}

impl ApiKeys {
    /// Parses a file; an error names the line and what to do.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut by_hash = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = i + 1;
            let fix = "write `name:sha256:HEX` (`echo KEY | sluice hash-key NAME` prints one)";
            let Some((name, rest)) = line.split_once(':') else {
                return Err(format!("line {at}: not `name:sha256:HEX`; {fix}"));
            };
            let hex = rest
                .strip_prefix("sha256:")
                .ok_or_else(|| format!("line {at} (key `{name}`): not a sha256: hash; {fix}"))?;
            let d = parse_hex(hex).ok_or_else(|| {
                format!("line {at} (key `{name}`): the hash is not 64 hex digits; {fix}")
            })?;
            if name.is_empty() {
                return Err(format!("line {at}: no key name; {fix}"));
            }
            if by_hash.insert(d, Arc::from(name)).is_some() {
                return Err(format!(
                    "line {at} (key `{name}`): the same key is listed twice"
                ));
            }
        }
        Ok(ApiKeys { by_hash })
    }

    /// The name of `key`, if it is one of the file's.
    pub(crate) fn name_of(&self, key: &[u8]) -> Option<&Arc<str>> {
        self.by_hash.get(&digest(key))
    }
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_their_hash_only() {
        let file = format!(
            "# mobile apps\n{}\n{}\n",
            key_line("ios", b"k-ios-0123456789"),
            key_line("android", b"k-and-0123456789")
        );
        assert!(!file.contains("k-ios"), "the file holds no key");
        let keys = ApiKeys::parse(&file).unwrap();
        assert_eq!(keys.name_of(b"k-ios-0123456789").map(|n| &**n), Some("ios"));
        assert_eq!(
            keys.name_of(b"k-and-0123456789").map(|n| &**n),
            Some("android")
        );
        assert!(keys.name_of(b"k-ios-012345678").is_none());
        // sha256("abc"), FIPS 180-2's example.
        assert!(
            key_line("x", b"abc")
                .ends_with("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
    }

    #[test]
    fn a_plain_key_is_refused_with_the_fix() {
        let e = ApiKeys::parse("ios:k-ios-0123456789\n").unwrap_err();
        assert!(
            e.starts_with("line 1 (key `ios`)") && e.contains("hash-key"),
            "{e}"
        );
    }
}
