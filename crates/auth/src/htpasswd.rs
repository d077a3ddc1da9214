//! htpasswd files as Apache's `htpasswd` writes them: `user:hash` lines with bcrypt
//! (`$2y$`, `-B`), `$apr1$` (Apache's MD5-crypt, the default) and `{SHA}` (`-s`) hashes.
//! crypt(3) DES and plain-text entries are refused: the first is 8 characters of password
//! at most, the second no hash at all.

use boring::hash::{MessageDigest, hash};
use std::collections::HashMap;

/// One user's stored hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    Bcrypt(String),
    Apr1 { salt: Vec<u8>, hash: String },
    Sha1([u8; 20]),
}

/// What checking a password against a stored hash costs, cheapest first: its algorithm and,
/// for bcrypt, its cost factor (2^cost rounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cost {
    Sha1,
    Apr1,
    Bcrypt(u32),
}

impl Stored {
    /// Whether checking it is slow enough to leave the event loop (bcrypt's cost, apr1's
    /// thousand rounds).
    pub(crate) fn is_slow(&self) -> bool {
        !matches!(self, Stored::Sha1(_))
    }

    /// What checking a password against it costs.
    pub(crate) fn cost(&self) -> Cost {
        match self {
            Stored::Sha1(_) => Cost::Sha1,
            Stored::Apr1 { .. } => Cost::Apr1,
            // `$2y$NN$`: parsed as 60 characters with this prefix.
            Stored::Bcrypt(h) => {
                Cost::Bcrypt(h.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(0))
            }
        }
    }

    /// Whether `password` hashes to it.
    pub(crate) fn verify(&self, password: &[u8]) -> bool {
        match self {
            Stored::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Stored::Apr1 { salt, hash: h } => {
                constant_time_eq(apr1(password, salt).as_bytes(), h.as_bytes())
            }
            Stored::Sha1(digest) => {
                hash(MessageDigest::sha1(), password).is_ok_and(|d| constant_time_eq(&d, digest))
            }
        }
    }
}

/// An htpasswd file's users.
#[derive(Debug, Default)]
pub(crate) struct Htpasswd {
    pub(crate) users: HashMap<String, Stored>,
    /// What an unknown user's password is checked against: the file's costliest hash (the
    /// highest bcrypt cost, else apr1, else SHA-1), so that an unknown name costs what a
    /// wrong password does and cannot be told from one by the time it takes. Its answer is
    /// never used. `None` for a file without users.
    pub(crate) decoy: Option<Stored>,
}

impl Htpasswd {
    /// Parses a file; an error names the line and what to do.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let at = i + 1;
            let Some((user, stored)) = line.split_once(':') else {
                return Err(format!("line {at}: not `user:hash`"));
            };
            if user.is_empty() {
                return Err(format!("line {at}: no user name"));
            }
            let stored =
                parse_hash(stored).map_err(|e| format!("line {at} (user `{user}`): {e}"))?;
            users.insert(user.to_owned(), stored);
        }
        let decoy = users.values().max_by_key(|s| s.cost()).cloned();
        Ok(Htpasswd { users, decoy })
    }
}

fn parse_hash(h: &str) -> Result<Stored, String> {
    if ["$2y$", "$2a$", "$2b$"].iter().any(|p| h.starts_with(p)) {
        if h.len() != 60 {
            return Err("a bcrypt hash is 60 characters".to_owned());
        }
        return Ok(Stored::Bcrypt(h.to_owned()));
    }
    if let Some(rest) = h.strip_prefix("$apr1$") {
        let (salt, digest) = rest
            .split_once('$')
            .ok_or("an $apr1$ hash is $apr1$SALT$HASH")?;
        if salt.is_empty() || salt.len() > 8 || digest.len() != 22 {
            return Err(
                "an $apr1$ hash is $apr1$SALT$HASH, the salt 1-8 characters, the hash 22"
                    .to_owned(),
            );
        }
        return Ok(Stored::Apr1 {
            salt: salt.as_bytes().to_vec(),
            hash: h.to_owned(),
        });
    }
    if let Some(b64) = h.strip_prefix("{SHA}") {
        use base64::Engine as _;
        let d = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| "a {SHA} hash is base64")?;
        return d
            .try_into()
            .map(Stored::Sha1)
            .map_err(|_| "a {SHA} hash is 20 bytes".to_owned());
    }
    Err(
        "not a bcrypt, $apr1$ or {SHA} hash (crypt(3) and plain text are refused)".to_owned()
            + "; write it again with `htpasswd -B`",
    )
}

/// The crypt(3) alphabet.
const ITOA64: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's MD5-crypt (`$apr1$`): Poul-Henning Kamp's md5crypt with the magic `$apr1$`, as
/// APR's `apr_md5_encode` computes it. The whole `$apr1$salt$hash` string.
pub(crate) fn apr1(password: &[u8], salt: &[u8]) -> String {
    const MAGIC: &[u8] = b"$apr1$";
    let md5 = |parts: &[&[u8]]| -> [u8; 16] {
        let mut h = boring::hash::Hasher::new(MessageDigest::md5()).expect("MD5 is available");
        for p in parts {
            h.update(p).expect("hashing into memory");
        }
        let out = h.finish().expect("hashing into memory");
        out[..16].try_into().expect("MD5 is 16 bytes")
    };
    let alternate = md5(&[password, salt, password]);
    let mut ctx: Vec<u8> = [password, MAGIC, salt].concat();
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.extend_from_slice(&alternate[..n]);
        left -= n;
    }
    let mut bits = password.len();
    while bits > 0 {
        ctx.push(if bits & 1 == 1 { 0 } else { password[0] });
        bits >>= 1;
    }
    let mut digest = md5(&[&ctx]);
    for i in 0..1000 {
        let mut round: Vec<u8> = Vec::with_capacity(64);
        round.extend_from_slice(if i & 1 == 1 { password } else { &digest });
        if i % 3 != 0 {
            round.extend_from_slice(salt);
        }
        if i % 7 != 0 {
            round.extend_from_slice(password);
        }
        round.extend_from_slice(if i & 1 == 1 { &digest } else { password });
        digest = md5(&[&round]);
    }
    let mut out = String::with_capacity(37);
    out.push_str("$apr1$");
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let d = digest;
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put(
            (u32::from(d[a]) << 16) | (u32::from(d[b]) << 8) | u32::from(d[c]),
            4,
        );
    }
    put(u32::from(d[11]), 2);
    out
}

/// Whether `a` and `b` are equal, in time that depends on their length only (BoringSSL's
/// `CRYPTO_memcmp`, which the optimizer cannot turn into an early exit as it may a loop).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && boring::memcmp::eq(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines written by Apache's `htpasswd` 2.4 (`-m`, `-s`, `-B`) for the password
    /// "secret"; each verifies, and a wrong password does not.
    #[test]
    fn apaches_hashes_verify() {
        let file = "alice:$apr1$/oBKQl8R$I91kEsGzPTywSlBSI9SQa.\n\
                    # a comment\n\
                    bob:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n\
                    carol:$2y$05$Xcl/aAsnwSTbu0tlVkY/k..WfLCrLQM5fEdyWxXjU96auSWfaPHe.\n";
        let h = Htpasswd::parse(file).unwrap();
        assert_eq!(h.users.len(), 3);
        for user in ["alice", "bob", "carol"] {
            let stored = &h.users[user];
            assert!(stored.verify(b"secret"), "{user}");
            assert!(!stored.verify(b"Secret"), "{user}");
            assert!(!stored.verify(b""), "{user}");
        }
        assert!(!h.users["bob"].is_slow() && h.users["carol"].is_slow());
    }

    /// An unknown user is checked against the costliest hash in the file, whatever the
    /// order of its lines.
    #[test]
    fn the_decoy_is_the_costliest_hash() {
        let file = "sha:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n\
                    cheap:$2y$05$Xcl/aAsnwSTbu0tlVkY/k..WfLCrLQM5fEdyWxXjU96auSWfaPHe.\n\
                    dear:$2y$07$Xcl/aAsnwSTbu0tlVkY/k..WfLCrLQM5fEdyWxXjU96auSWfaPHe.\n\
                    apr:$apr1$/oBKQl8R$I91kEsGzPTywSlBSI9SQa.\n";
        let h = Htpasswd::parse(file).unwrap();
        assert_eq!(h.decoy.as_ref().map(Stored::cost), Some(Cost::Bcrypt(7)));
        assert!(Cost::Bcrypt(4) > Cost::Apr1 && Cost::Apr1 > Cost::Sha1);
        let h = Htpasswd::parse("apr:$apr1$/oBKQl8R$I91kEsGzPTywSlBSI9SQa.\n").unwrap();
        assert_eq!(h.decoy.as_ref().map(Stored::cost), Some(Cost::Apr1));
        assert!(Htpasswd::parse("# nobody\n").unwrap().decoy.is_none());
    }

    #[test]
    fn apr1_matches_the_reference_computation() {
        // openssl passwd -apr1 -salt r31..... secret
        assert_eq!(
            apr1(b"secret", b"r31....."),
            "$apr1$r31.....$G/cElGhD0cboYkZN5h5Ne/"
        );
    }

    #[test]
    fn broken_lines_are_named() {
        let e =
            Htpasswd::parse("ok:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\nplain:secret\n").unwrap_err();
        assert!(e.starts_with("line 2 (user `plain`)"), "{e}");
        assert!(e.contains("htpasswd -B"), "{e}");
        let e = Htpasswd::parse("nohash\n").unwrap_err();
        assert!(e.starts_with("line 1"), "{e}");
    }
}
