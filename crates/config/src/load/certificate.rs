//! `[[certificate]]`: reading certificate chains and private keys, and checking that they
//! belong together, are strong enough and are not exposed to other users.

use super::{Cx, RawConfig, key_belongs};
use crate::acme::AcmeSettings;
use crate::pattern::HostPattern;
use crate::raw::*;
use crate::snapshot::*;
use boring::nid::Nid;
use boring::pkey::{Id, PKey, Private};
use boring::x509::X509;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

impl Cx<'_> {
    /// Every `[[certificate]]`, with the index of each name. A certificate that failed keeps
    /// its slot (`None`) so that indexes stay aligned with the file; the load then fails
    /// because an error was recorded.
    pub(super) fn certificates(
        &mut self,
        raw: &RawConfig,
        offload: &Offload,
        acme: &AcmeSettings,
        allow_insecure_keys: bool,
    ) -> (HashMap<String, usize>, Vec<Option<Arc<Certificate>>>) {
        let mut cert_names = HashMap::new();
        let mut certificates = Vec::new();
        for c in &raw.certificates {
            self.unique(&mut cert_names, &c.name, "certificate", certificates.len());
            let remote_ok = signs_remotely(c, offload);
            certificates.push(match &c.acme {
                Some(a) => {
                    self.acme_certificate(c, a, raw.acme.as_ref(), acme, allow_insecure_keys)
                }
                None => self.certificate(c, allow_insecure_keys, remote_ok),
            });
        }
        (cert_names, certificates)
    }

    /// Reads, checks and parses one certificate. Its files are read on every load, but when
    /// they and the entry's settings are what the cache holds from the previous load, the
    /// parsed certificate is taken from there: a reload of an unchanged file parses no key.
    pub(super) fn certificate(
        &mut self,
        raw: &RawCertificate,
        allow_insecure_keys: bool,
        remote_ok: bool,
    ) -> Option<Arc<Certificate>> {
        let name = raw.name.get_ref();
        let Some(cert_at) = &raw.cert else {
            self.err_at(
                &raw.name,
                format!("certificate `{name}` has no `cert`"),
                "give `cert = \"site.crt\"` (PEM, leaf first) and `key = \"site.key\"`, or have a CA issue it with `acme = { names = [\"example.com\"] }`",
            );
            return None;
        };
        let cert_path = self.path(cert_at.get_ref());
        let ocsp = self.ocsp_setting(raw);
        let client_auth = self.client_auth_mode(raw.client_auth.as_ref());
        let cert_pem = std::fs::read(&cert_path)
            .inspect_err(|e| {
                self.err_at(
                    cert_at,
                    format!("certificate `{name}`: cannot read {}: {e}", cert_path.display()),
                    "check the path (relative paths start at the configuration file's directory) and that Sluice may read it",
                );
            })
            .ok();
        let key_file = self
            .certificate_key_file(raw, allow_insecure_keys, remote_ok)
            .ok()?;
        let cert_pem = cert_pem?;
        let fingerprint =
            certificate_fingerprint(raw, &cert_pem, key_file.as_ref().map(|k| &k.pem[..]));
        if let Some(cached) = self.certs.lookup(&fingerprint) {
            self.used_certs.push(cached.clone());
            return Some(cached);
        }
        let chain = self.certificate_chain(name, cert_at, &cert_path, &cert_pem)?;
        let offload_engines = raw.offload_engines.as_ref().map(|list| {
            self.crypto_engines(list, &format!("certificate `{name}`: offload_engines"))
        });
        let (key, key_type) = match key_file {
            None => (None, self.public_key_type(name, cert_at, &chain[0])?),
            Some(k) => {
                let (key, key_type) = self.certificate_key(name, &k, &chain[0], &cert_path)?;
                (Some(key), key_type)
            }
        };
        let hosts = self.certificate_hosts(raw, cert_at, &chain[0]);
        Some(self.keep_certificate(Certificate {
            name: name.clone(),
            chain,
            key,
            key_type,
            hosts,
            offload_engines,
            fingerprint,
            acme: None,
            placeholder: false,
            ocsp,
            client_auth,
        }))
    }

    /// `key`: its file, read. `Ok(None)` when there is none and the key lives on key servers
    /// (`remote_ok`); `Err` when it is missing or unreadable (reported).
    fn certificate_key_file<'r>(
        &mut self,
        raw: &'r RawCertificate,
        allow_insecure_keys: bool,
        remote_ok: bool,
    ) -> Result<Option<KeyFile<'r>>, ()> {
        let name = raw.name.get_ref();
        match &raw.key {
            None if !remote_ok => {
                self.err_at(
                    &raw.name,
                    format!("certificate `{name}` has no `key`"),
                    "give `key = \"site.key\"`, or sign through key servers: add \"keyless\" to [offload.crypto] engines (or this certificate's offload_engines) and configure [offload.keyless]",
                );
                Err(())
            }
            None => Ok(None),
            Some(at) => {
                let path = self.path(at.get_ref());
                let what = format!("certificate `{name}`");
                let pem = self
                    .key_file(&what, at, &path, allow_insecure_keys)
                    .ok_or(())?;
                Ok(Some(KeyFile { at, path, pem }))
            }
        }
    }

    /// The certificates in `cert`'s PEM, leaf first; `None` when there is none (reported).
    fn certificate_chain(
        &mut self,
        name: &str,
        cert_at: &Spanned<String>,
        cert_path: &Path,
        cert_pem: &[u8],
    ) -> Option<Vec<X509>> {
        match X509::stack_from_pem(cert_pem) {
            Ok(chain) if !chain.is_empty() => Some(chain),
            _ => {
                self.err_at(
                    cert_at,
                    format!("certificate `{name}`: {} holds no PEM certificate", cert_path.display()),
                    "give a PEM file that starts with -----BEGIN CERTIFICATE-----, leaf first, then intermediates",
                );
                None
            }
        }
    }

    /// The key type of a certificate whose key lives on key servers, read from its public
    /// key.
    fn public_key_type(
        &mut self,
        name: &str,
        cert_at: &Spanned<String>,
        leaf: &X509,
    ) -> Option<KeyType> {
        let Ok(public) = leaf.public_key() else {
            self.err_at(
                cert_at,
                format!("certificate `{name}`: cannot read its public key"),
                "use an RSA, ECDSA (P-256, P-384) or Ed25519 certificate",
            );
            return None;
        };
        self.key_type(name, cert_at, public.id(), public.bits())
    }

    /// The private key in `key`, which must be `leaf`'s, and its type.
    fn certificate_key(
        &mut self,
        name: &str,
        key: &KeyFile<'_>,
        leaf: &X509,
        cert_path: &Path,
    ) -> Option<(PKey<Private>, KeyType)> {
        let Ok(private) = PKey::private_key_from_pem(&key.pem) else {
            self.err_at(
                key.at,
                format!("certificate `{name}`: {} holds no PEM private key", key.path.display()),
                "give an unencrypted PEM key (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA/EC PRIVATE KEY-----)",
            );
            return None;
        };
        if !key_belongs(leaf, &private) {
            self.err_at(
                key.at,
                format!(
                    "certificate `{name}`: the private key in {} does not belong to the certificate in {}",
                    key.path.display(),
                    cert_path.display()
                ),
                "pair each certificate with the key it was issued for (compare `openssl x509 -noout -pubkey` with `openssl pkey -pubout`)",
            );
            return None;
        }
        let key_type = self.key_type(name, key.at, private.id(), private.bits())?;
        Some((private, key_type))
    }
    /// `ocsp = "auto" | "off"` (default auto).
    pub(super) fn ocsp_setting(&mut self, raw: &RawCertificate) -> bool {
        match raw.ocsp.as_ref().map(|o| (o, o.get_ref().as_str())) {
            None | Some((_, "auto")) => true,
            Some((_, "off")) => false,
            Some((at, other)) => {
                self.err_at(
                    at,
                    format!(
                        "certificate `{}`: unknown ocsp `{other}`",
                        raw.name.get_ref()
                    ),
                    "use \"auto\" (staple when the certificate names an OCSP responder) or \"off\"",
                );
                false
            }
        }
    }

    pub(super) fn keep_certificate(&mut self, c: Certificate) -> Arc<Certificate> {
        let c = Arc::new(c);
        self.used_certs.push(c.clone());
        c
    }

    pub(super) fn key_type<T>(
        &mut self,
        name: &str,
        at: &Spanned<T>,
        id: Id,
        bits: u32,
    ) -> Option<KeyType> {
        let key_type = match id {
            Id::RSA => KeyType::Rsa(bits),
            Id::EC => KeyType::Ecdsa(bits),
            Id::ED25519 => KeyType::Ed25519,
            _ => {
                self.err_at(
                    at,
                    format!("certificate `{name}`: unsupported key type"),
                    "use an RSA, ECDSA (P-256, P-384) or Ed25519 key",
                );
                return None;
            }
        };
        if let KeyType::Rsa(bits) = key_type
            && bits < 2048
        {
            self.err_at(
                at,
                format!("certificate `{name}`: RSA-{bits} is too weak"),
                "use an RSA key of at least 2048 bits",
            );
        }
        Some(key_type)
    }

    pub(super) fn certificate_hosts(
        &mut self,
        raw: &RawCertificate,
        cert_at: &Spanned<String>,
        leaf: &X509,
    ) -> Vec<HostPattern> {
        let name = raw.name.get_ref();
        match &raw.hosts {
            Some(_) => self.certificate_hosts_listed(raw),
            None => {
                let hosts = certificate_names(leaf);
                if hosts.is_empty() {
                    self.err_at(
                        cert_at,
                        format!(
                            "certificate `{name}` names no host (no subjectAltName or common name)"
                        ),
                        "list the names it serves with `hosts = [\"example.com\"]`",
                    );
                }
                hosts
            }
        }
    }

    /// The hosts a certificate's `hosts = [...]` lists.
    pub(super) fn certificate_hosts_listed(&mut self, raw: &RawCertificate) -> Vec<HostPattern> {
        let name = raw.name.get_ref();
        let mut hosts = Vec::new();
        for h in raw.hosts.iter().flatten() {
            match HostPattern::parse(h.get_ref()) {
                Ok(p) => hosts.push(p),
                Err(e) => self.err_at(h, format!("certificate `{name}`: {e}"), ""),
            }
        }
        hosts
    }

    /// Reads the private key file at `path` for `what` (a certificate's name), refusing a
    /// file others may read; errors point at `at`.
    pub(super) fn key_file(
        &mut self,
        what: &str,
        at: &Spanned<String>,
        path: &Path,
        allow_insecure: bool,
    ) -> Option<Vec<u8>> {
        let name = what;
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                self.err_at(
                    at,
                    format!("{name}: cannot read {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                return None;
            }
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 && !allow_insecure {
                self.err_at(
                    at,
                    format!(
                        "{name}: {} is readable by group or others (mode {mode:03o})",
                        path.display()
                    ),
                    format!(
                        "run `chmod 600 {}` (or set allow_insecure_key_permissions = true under [dangerous], which is not recommended)",
                        path.display()
                    ),
                );
                return None;
            }
        }
        let _ = (meta, allow_insecure);
        match self.read_file(path) {
            Ok(p) => Some(p),
            Err(e) => {
                self.err_at(
                    at,
                    format!("{name}: cannot read {}: {e}", path.display()),
                    "check that Sluice's user may read it",
                );
                None
            }
        }
    }

    /// Reads and parses the private key at `path` (see [`Cx::key_file`]).
    pub(super) fn private_key(
        &mut self,
        what: &str,
        at: &Spanned<String>,
        path: &Path,
        allow_insecure: bool,
    ) -> Option<PKey<Private>> {
        let pem = self.key_file(what, at, path, allow_insecure)?;
        match PKey::private_key_from_pem(&pem) {
            Ok(k) => Some(k),
            Err(_) => {
                self.err_at(
                    at,
                    format!("{what}: {} holds no PEM private key", path.display()),
                    "give an unencrypted PEM key (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA/EC PRIVATE KEY-----)",
                );
                None
            }
        }
    }
}

/// A certificate's `key` file, read.
struct KeyFile<'a> {
    /// Where the configuration names it.
    at: &'a Spanned<String>,
    path: PathBuf,
    pem: Vec<u8>,
}

/// Whether `raw`'s key may live on key servers (so the entry needs no `key`): its own
/// `offload_engines`, or `[offload.crypto] engines`, include "keyless".
fn signs_remotely(raw: &RawCertificate, offload: &Offload) -> bool {
    raw.offload_engines.as_ref().map_or_else(
        || {
            // A chain chosen at start never includes key servers: they are where keys live,
            // a choice the file makes, not a property of the machine.
            offload
                .crypto
                .engines
                .as_ref()
                .is_some_and(|e| e.contains(&CryptoEngine::Keyless))
        },
        |list| list.get_ref().iter().any(|e| e == "keyless"),
    )
}

/// SHA-256 over everything a `[[certificate]]` is made of: its settings and its files' bytes.
fn certificate_fingerprint(raw: &RawCertificate, cert: &[u8], key: Option<&[u8]>) -> [u8; 32] {
    let mut h = boring::sha::Sha256::new();
    let mut field = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(raw.name.get_ref().as_bytes());
    field(cert);
    field(key.unwrap_or(b"\0no key"));
    for host in raw.hosts.iter().flatten() {
        field(host.get_ref().as_bytes());
    }
    field(b"engines");
    for e in raw.offload_engines.iter().flat_map(|l| l.get_ref()) {
        field(e.as_bytes());
    }
    field(
        raw.ocsp
            .as_ref()
            .map_or(b"auto".as_slice(), |o| o.get_ref().as_bytes()),
    );
    field(
        raw.client_auth
            .as_ref()
            .map_or(b"listener".as_slice(), |o| o.get_ref().as_bytes()),
    );
    h.finish()
}

/// Names a certificate serves by default: its DNS and IP subjectAltNames, else its CN.
pub(super) fn certificate_names(leaf: &X509) -> Vec<HostPattern> {
    let mut names = Vec::new();
    if let Some(sans) = leaf.subject_alt_names() {
        for san in &sans {
            if let Some(dns) = san.dnsname() {
                names.extend(HostPattern::parse(dns).ok());
            } else if let Some(ip) = san.ipaddress() {
                names.extend(ip_text(ip).and_then(|t| HostPattern::parse(&t).ok()));
            }
        }
    }
    if names.is_empty() {
        for cn in leaf.subject_name().entries_by_nid(Nid::COMMONNAME) {
            if let Ok(s) = cn.data().as_utf8() {
                names.extend(HostPattern::parse(&s).ok());
            }
        }
    }
    let mut seen = HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

pub(super) fn ip_text(ip: &[u8]) -> Option<String> {
    if let Ok(v4) = <[u8; 4]>::try_from(ip) {
        return Some(std::net::Ipv4Addr::from(v4).to_string());
    }
    let v6 = <[u8; 16]>::try_from(ip).ok()?;
    Some(format!("[{}]", std::net::Ipv6Addr::from(v6)))
}
