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

    /// The keys' names, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.by_hash.values().map(|n| n.to_string()).collect();
        names.sort();
        names
    }

    /// The name of `key`, if it is one of the file's.
    pub(crate) fn name_of(&self, key: &[u8]) -> Option<&Arc<str>> {
        self.by_hash.get(&digest(key))
    }
}

/// Why a key file was not changed.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyEditError {
    /// A key of that name is in the file already.
    Exists,
    /// No key of that name is in the file.
    Missing,
    /// The name cannot be one (empty, `:`, whitespace), or the key is too short.
    Invalid(String),
    /// The file could not be read or written.
    Io(String),
}

impl std::fmt::Display for KeyEditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyEditError::Exists => f.write_str("a key of that name exists; remove it first"),
            KeyEditError::Missing => f.write_str("no key of that name"),
            KeyEditError::Invalid(why) | KeyEditError::Io(why) => f.write_str(why),
        }
    }
}

/// The file's lines with `name:sha256:…` for `key` added, or without `name`'s line
/// (`key` `None`), written whole to a new file renamed over the old one (so the watcher
/// never reads half a file), with the old one's permissions.
pub(crate) fn edit(
    path: &std::path::Path,
    name: &str,
    key: Option<&[u8]>,
) -> Result<(), KeyEditError> {
    if name.is_empty() || name.contains(':') || name.chars().any(char::is_whitespace) {
        return Err(KeyEditError::Invalid(
            "a key name is one word without ':'".to_owned(),
        ));
    }
    if key.is_some_and(|k| k.len() < 16) {
        return Err(KeyEditError::Invalid(
            "an API key has 16 characters at least (leave \"key\" out to have one made)".to_owned(),
        ));
    }
    let io = |e: std::io::Error| KeyEditError::Io(format!("{}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(io)?;
    let prefix = format!("{name}:");
    let present = text.lines().any(|l| l.trim().starts_with(&prefix));
    let mut out = String::with_capacity(text.len() + 100);
    match key {
        Some(_) if present => return Err(KeyEditError::Exists),
        None if !present => return Err(KeyEditError::Missing),
        Some(k) => {
            out.push_str(&text);
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&key_line(name, k));
            out.push('\n');
        }
        None => {
            for line in text.lines().filter(|l| !l.trim().starts_with(&prefix)) {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    ApiKeys::parse(&out).map_err(KeyEditError::Invalid)?;
    let tmp = path.with_extension("sluice-new");
    std::fs::write(&tmp, out).map_err(io)?;
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(&tmp, meta.permissions()).map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
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
    fn keys_are_added_and_removed_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, "# ours\n").unwrap();
        edit(&path, "ios", Some(b"k-ios-0123456789")).unwrap();
        edit(&path, "web", Some(b"k-web-0123456789")).unwrap();
        assert_eq!(
            edit(&path, "ios", Some(b"k-other-01234567")),
            Err(KeyEditError::Exists)
        );
        assert!(matches!(
            edit(&path, "a b", Some(b"k-other-01234567")),
            Err(KeyEditError::Invalid(_))
        ));
        assert!(matches!(
            edit(&path, "tv", Some(b"short")),
            Err(KeyEditError::Invalid(_))
        ));
        let keys = ApiKeys::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(keys.names(), ["ios", "web"]);
        edit(&path, "ios", None).unwrap();
        assert_eq!(edit(&path, "ios", None), Err(KeyEditError::Missing));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# ours\n") && !text.contains("ios"));
        assert!(!text.contains("k-web"), "only hashes are written");
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
