//! What an ACME order needs beyond the CA's address: the TSIG key and server that publish
//! dns-01 answers (`dns = { ... }`), and the key that binds a new account to the CA's own
//! account (`eab = { ... }`). Both are secrets: read from the file or the value given, kept
//! decoded, and never printed (see [`Secret`]).

use super::Cx;
use crate::acme::*;
use crate::raw::*;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// `dns = { ... }` of an order (or `[acme]`'s): where and with which key dns-01 answers
    /// are published.
    pub(super) fn acme_dns(&mut self, what: &str, raw: &Spanned<RawAcmeDns>) -> Option<DnsUpdate> {
        let d = raw.get_ref();
        let server = d.server.get_ref().trim().to_owned();
        if server.is_empty() || server.contains('/') {
            self.err_at(
                &d.server,
                format!("{what}: dns.server `{server}` is not host[:port]"),
                "give the primary name server that takes dynamic updates, e.g. server = \"ns1.example.com:53\"",
            );
            return None;
        }
        let (file_key, file_secret) = match &d.secret_file {
            Some(f) => self.tsig_file(what, f)?,
            None => (None, None),
        };
        let secret = match (&d.secret, file_secret) {
            (Some(s), None) => self.base64_secret(what, "dns.secret", s)?,
            (None, Some(s)) => s,
            (Some(_), Some(_)) | (None, None) => {
                self.err_at(
                    raw,
                    format!("{what}: dns needs exactly one of secret and secret_file"),
                    "give the TSIG key's secret: secret_file = \"acme.key\" (as `tsig-keygen` or `keymgr -t` writes it) or secret = \"<base64>\"",
                );
                return None;
            }
        };
        let (file_name, file_algorithm) = file_key.unzip();
        let key_name = match (&d.key_name, file_name) {
            (Some(n), _) => n.get_ref().trim().trim_end_matches('.').to_owned(),
            (None, Some(n)) => n,
            (None, None) => {
                self.err_at(
                    raw,
                    format!("{what}: dns.key_name is missing"),
                    "give the TSIG key's name as the DNS server knows it, e.g. key_name = \"acme-update\"",
                );
                return None;
            }
        };
        let algorithm = match (&d.algorithm, file_algorithm) {
            (Some(a), _) => match TsigAlgorithm::parse(a.get_ref()) {
                Some(a) => a,
                None => {
                    self.err_at(
                        a,
                        format!("{what}: unknown dns.algorithm `{}`", a.get_ref()),
                        "use \"hmac-sha256\" (the default), \"hmac-sha384\" or \"hmac-sha512\"",
                    );
                    return None;
                }
            },
            (None, Some(a)) => a,
            (None, None) => TsigAlgorithm::HmacSha256,
        };
        let propagation_delay = match &d.propagation_delay {
            None => Duration::ZERO,
            Some(p) => match crate::units::parse_duration(p.get_ref()) {
                Ok(d) => d,
                Err(e) => {
                    self.err_at(p, format!("{what}: dns.propagation_delay: {e}"), "");
                    return None;
                }
            },
        };
        let zone = d.zone.as_ref().map(|z| {
            z.get_ref()
                .trim()
                .trim_end_matches('.')
                .to_ascii_lowercase()
        });
        Some(DnsUpdate {
            server,
            zone,
            key_name,
            algorithm,
            secret,
            propagation_delay,
        })
    }

    /// `eab = { kid, hmac_key | hmac_key_file }`.
    pub(super) fn acme_eab(
        &mut self,
        what: &str,
        raw: &Spanned<RawAcmeEab>,
    ) -> Option<ExternalAccount> {
        let e = raw.get_ref();
        let text = match (&e.hmac_key, &e.hmac_key_file) {
            (Some(k), None) => k.clone(),
            (None, Some(f)) => {
                let path = self.path(f.get_ref());
                match self.read_file(&path) {
                    Ok(b) => Spanned::new(f.span(), String::from_utf8_lossy(&b).trim().to_owned()),
                    Err(err) => {
                        self.err_at(
                            f,
                            format!("{what}: cannot read {}: {err}", path.display()),
                            "check the path (relative paths start at the configuration file's directory)",
                        );
                        return None;
                    }
                }
            }
            _ => {
                self.err_at(
                    raw,
                    format!("{what}: eab needs exactly one of hmac_key and hmac_key_file"),
                    "give the HMAC key the CA showed with the key ID (base64url), e.g. hmac_key_file = \"eab.key\"",
                );
                return None;
            }
        };
        let hmac_key = self.base64_secret(what, "eab.hmac_key", &text)?;
        Some(ExternalAccount {
            kid: e.kid.get_ref().trim().to_owned(),
            hmac_key,
        })
    }

    /// A TSIG key file: a bare base64 secret, or the `key "name" { algorithm ..; secret ".."; };`
    /// clause that BIND's `tsig-keygen` and Knot's `keymgr -t` (BIND style) write; returns
    /// the clause's name and algorithm when it has them.
    #[allow(clippy::type_complexity)]
    fn tsig_file(
        &mut self,
        what: &str,
        f: &Spanned<String>,
    ) -> Option<(Option<(String, TsigAlgorithm)>, Option<Secret>)> {
        let path = self.path(f.get_ref());
        let text = match self.read_file(&path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                self.err_at(
                    f,
                    format!("{what}: cannot read {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                return None;
            }
        };
        let Some(clause) = parse_key_clause(&text) else {
            let secret = self.base64_secret(
                what,
                "dns.secret_file",
                &Spanned::new(f.span(), text.trim().to_owned()),
            )?;
            return Some((None, Some(secret)));
        };
        let Some(algorithm) = TsigAlgorithm::parse(&clause.algorithm) else {
            self.err_at(
                f,
                format!(
                    "{what}: {} uses TSIG algorithm `{}`",
                    path.display(),
                    clause.algorithm
                ),
                "make a hmac-sha256 key: `tsig-keygen -a hmac-sha256 acme-update`",
            );
            return None;
        };
        let secret = self.base64_secret(
            what,
            "dns.secret_file",
            &Spanned::new(f.span(), clause.secret),
        )?;
        Some((Some((clause.name, algorithm)), Some(secret)))
    }

    /// Decodes a base64 (or base64url) secret, refusing an empty one.
    fn base64_secret(&mut self, what: &str, key: &str, s: &Spanned<String>) -> Option<Secret> {
        match decode_base64(s.get_ref()) {
            Some(b) if !b.is_empty() => Some(Secret(b)),
            _ => {
                self.err_at(
                    s,
                    format!("{what}: {key} is not base64"),
                    "paste the key exactly as the DNS server or CA gave it",
                );
                None
            }
        }
    }
}

/// A `key "name" { algorithm a; secret "s"; };` clause.
struct KeyClause {
    name: String,
    algorithm: String,
    secret: String,
}

fn parse_key_clause(text: &str) -> Option<KeyClause> {
    let rest = text.trim_start().strip_prefix("key")?;
    let (head, body) = rest.split_once('{')?;
    let name = head
        .trim()
        .trim_matches('"')
        .trim_end_matches('.')
        .to_owned();
    let mut algorithm = None;
    let mut secret = None;
    for stmt in body.split(';') {
        let stmt = stmt.trim().trim_start_matches('}').trim();
        if let Some(a) = stmt.strip_prefix("algorithm") {
            algorithm = Some(a.trim().trim_matches('"').to_owned());
        } else if let Some(s) = stmt.strip_prefix("secret") {
            secret = Some(s.trim().trim_matches('"').to_owned());
        }
    }
    Some(KeyClause {
        name,
        algorithm: algorithm?,
        secret: secret?,
    })
}

/// Standard or URL-safe base64, padded or not.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let mut t: String = s
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !t.len().is_multiple_of(4) {
        t.push('=');
    }
    boring::base64::decode_block(&t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_key_clause_gives_name_algorithm_and_secret() {
        let text = "key \"acme-update\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0LXNlY3JldA==\";\n};\n";
        let k = parse_key_clause(text).unwrap();
        assert_eq!(k.name, "acme-update");
        assert_eq!(k.algorithm, "hmac-sha256");
        assert_eq!(decode_base64(&k.secret).unwrap(), b"secret-secret");
        assert!(parse_key_clause("c2VjcmV0LXNlY3JldA==").is_none());
    }

    #[test]
    fn base64url_without_padding_decodes_like_base64() {
        // 0xfb 0xff: "+/8=" in base64, "-_8" in base64url without padding.
        assert_eq!(decode_base64("-_8").unwrap(), [0xfb, 0xff]);
        assert_eq!(decode_base64("+/8=").unwrap(), [0xfb, 0xff]);
        assert!(decode_base64("not base64!").is_none());
    }
}
