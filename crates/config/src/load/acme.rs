//! `[acme]` and `[[certificate]] acme = { ... }`: certificates an ACME CA issues. The loader
//! serves what an earlier order left in storage, or a self-signed placeholder for the names
//! until the first order completes; ordering is the `sluice-acme` crate's.

use super::{Cx, key_belongs};
use crate::acme::*;
use crate::pattern::HostPattern;
use crate::raw::*;
use crate::snapshot::*;
use boring::pkey::PKey;
use boring::x509::X509;
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;

/// How long a placeholder is valid: long enough never to expire while orders are retried.
const PLACEHOLDER_DAYS: u32 = 30;

impl Cx<'_> {
    /// `[acme]`'s shared settings.
    pub(super) fn acme_settings(&mut self, raw: Option<&RawAcme>) -> AcmeSettings {
        let d = AcmeSettings::default();
        let Some(raw) = raw else {
            return AcmeSettings {
                storage: self.path("acme"),
                ..d
            };
        };
        let retry_min = self.duration(raw.retry_min.as_ref()).unwrap_or(d.retry_min);
        let retry_max = self
            .duration(raw.retry_max.as_ref())
            .unwrap_or(d.retry_max.max(retry_min));
        if retry_max < retry_min
            && let Some(at) = &raw.retry_max
        {
            self.err_at(
                at,
                "[acme] retry_max is shorter than retry_min",
                "make retry_max at least retry_min (they bound the back-off between failed orders)",
            );
        }
        AcmeSettings {
            storage: self.path(raw.storage.as_ref().map_or("acme", |s| s.get_ref())),
            retry_min,
            retry_max,
        }
    }

    /// One `[[certificate]]` with `acme = { ... }`: its order, and the certificate storage
    /// holds for it or a placeholder.
    pub(super) fn acme_certificate(
        &mut self,
        raw: &RawCertificate,
        acme: &Spanned<RawCertAcme>,
        defaults: Option<&RawAcme>,
        settings: &AcmeSettings,
        allow_insecure_keys: bool,
    ) -> Option<Arc<Certificate>> {
        let name = raw.name.get_ref();
        if !self.acme_entry_fits(raw) {
            return None;
        }
        let ocsp = self.ocsp_setting(raw);
        let order = self.acme_order(name, acme, defaults, settings)?;
        let order = Arc::new(order);
        let offload_engines = raw.offload_engines.as_ref().map(|list| {
            self.crypto_engines(list, &format!("certificate `{name}`: offload_engines"))
        });
        let hosts = match &raw.hosts {
            Some(_) => self.certificate_hosts_listed(raw),
            None => order
                .names
                .iter()
                .filter_map(|n| HostPattern::parse(n).ok())
                .collect(),
        };
        let serves = Serves {
            hosts,
            offload_engines,
            ocsp,
        };
        if let Some(c) = self.acme_from_storage(raw, acme, &order, &serves, allow_insecure_keys) {
            return Some(c);
        }
        // Nothing usable in storage: serve the placeholder, order again.
        self.acme_placeholder(raw, acme, order, serves)
    }

    /// An ACME certificate is kept in storage under its name: it has no files of its own,
    /// and its name must make a directory name.
    fn acme_entry_fits(&mut self, raw: &RawCertificate) -> bool {
        let name = raw.name.get_ref();
        if let Some(at) = raw.cert.as_ref().or(raw.key.as_ref()) {
            self.err_at(
                at,
                format!("certificate `{name}` has both `acme` and a certificate or key file"),
                "remove `cert` and `key`: an ACME certificate is kept in [acme] storage",
            );
            return false;
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || name.starts_with('.')
        {
            self.err_at(
                &raw.name,
                format!("certificate `{name}`: an ACME certificate's name names its directory in storage"),
                "use letters, digits, '-', '_' and '.' only (not starting with '.')",
            );
            return false;
        }
        true
    }

    /// What an earlier order stored, if it is there, whole and for these names; `None` when
    /// it is not (torn, or for other names).
    fn acme_from_storage(
        &mut self,
        raw: &RawCertificate,
        acme: &Spanned<RawCertAcme>,
        order: &Arc<AcmeOrder>,
        serves: &Serves,
        allow_insecure_keys: bool,
    ) -> Option<Arc<Certificate>> {
        let cert_path = order.cert_path();
        let key_path = order.key_path();
        if !cert_path.exists() {
            return None;
        }
        let what = format!("certificate `{}` (ACME storage)", raw.name.get_ref());
        let at = &acme.get_ref().names;
        let stored = std::fs::read(&cert_path).ok().zip(self.key_file(
            &what,
            &key_span(at),
            &key_path,
            allow_insecure_keys,
        ));
        let (cert_pem, key_pem) = stored?;
        self.stored_acme_certificate(raw, order, (&cert_pem, &key_pem), serves.clone())
    }

    /// A self-signed certificate for the order's names, served until the CA issues one.
    fn acme_placeholder(
        &mut self,
        raw: &RawCertificate,
        acme: &Spanned<RawCertAcme>,
        order: Arc<AcmeOrder>,
        serves: Serves,
    ) -> Option<Arc<Certificate>> {
        let name = raw.name.get_ref();
        let fingerprint = acme_fingerprint(raw, &order, None);
        if let Some(cached) = self.certs.lookup(&fingerprint) {
            self.used_certs.push(cached.clone());
            return Some(cached);
        }
        let names: Vec<&str> = order.names.iter().map(String::as_str).collect();
        let kind = match order.key_type {
            AcmeKeyType::EcdsaP256 => crate::selfsigned::KeyKind::EcdsaP256,
            AcmeKeyType::Rsa2048 => crate::selfsigned::KeyKind::Rsa2048,
        };
        let (leaf, key) = match crate::selfsigned::generate(
            kind,
            &names,
            PLACEHOLDER_DAYS,
            "Sluice placeholder until the ACME CA issues",
        ) {
            Ok(pair) => pair,
            Err(e) => {
                self.err_at(
                    acme,
                    format!("certificate `{name}`: cannot make its placeholder: {e}"),
                    "",
                );
                return None;
            }
        };
        let key_type = self.key_type(name, acme, key.id(), key.bits())?;
        let client_auth = self.client_auth_mode(raw.client_auth.as_ref());
        Some(self.keep_certificate(Certificate {
            name: name.clone(),
            chain: vec![leaf],
            key: Some(key),
            key_type,
            hosts: serves.hosts,
            offload_engines: serves.offload_engines,
            fingerprint,
            acme: Some(order),
            placeholder: true,
            ocsp: serves.ocsp,
            client_auth,
        }))
    }
    /// The certificate an earlier order stored (`stored`: its chain and key as PEM), if it
    /// is whole and for the order's names.
    fn stored_acme_certificate(
        &mut self,
        raw: &RawCertificate,
        order: &Arc<AcmeOrder>,
        stored: (&[u8], &[u8]),
        serves: Serves,
    ) -> Option<Arc<Certificate>> {
        let (cert_pem, key_pem) = stored;
        let Serves {
            hosts,
            offload_engines,
            ocsp,
        } = serves;
        let name = raw.name.get_ref();
        let fingerprint = acme_fingerprint(raw, order, Some((cert_pem, key_pem)));
        if let Some(cached) = self.certs.lookup(&fingerprint) {
            self.used_certs.push(cached.clone());
            return Some(cached);
        }
        let chain = X509::stack_from_pem(cert_pem)
            .ok()
            .filter(|c| !c.is_empty());
        let key = PKey::private_key_from_pem(key_pem).ok();
        let (Some(chain), Some(key)) = (chain, key) else {
            // Torn or unreadable: the placeholder serves until the next order replaces it.
            return None;
        };
        let covered = super::certificate::certificate_names(&chain[0]);
        let covers = order
            .names
            .iter()
            .all(|n| HostPattern::parse(n).is_ok_and(|want| covered.contains(&want)));
        if !key_belongs(&chain[0], &key) || !covers {
            // Issued for other names (the list changed): ordered again.
            return None;
        }
        let key_type = match key.id() {
            boring::pkey::Id::RSA => KeyType::Rsa(key.bits()),
            boring::pkey::Id::EC => KeyType::Ecdsa(key.bits()),
            boring::pkey::Id::ED25519 => KeyType::Ed25519,
            _ => return None,
        };
        let client_auth = self.client_auth_mode(raw.client_auth.as_ref());
        Some(self.keep_certificate(Certificate {
            name: name.clone(),
            chain,
            key: Some(key),
            key_type,
            hosts,
            offload_engines,
            fingerprint,
            acme: Some(order.clone()),
            placeholder: false,
            ocsp,
            client_auth,
        }))
    }

    /// `acme = { ... }` over `[acme]`'s shared settings: what to order, from which CA, how.
    fn acme_order(
        &mut self,
        name: &str,
        acme: &Spanned<RawCertAcme>,
        defaults: Option<&RawAcme>,
        settings: &AcmeSettings,
    ) -> Option<AcmeOrder> {
        let a = acme.get_ref();
        let what = format!("certificate `{name}`: acme");
        let challenge =
            self.acme_challenge(&what, pick(&a.challenge, defaults.map(|d| &d.challenge)))?;
        let names = self.acme_names(&what, &a.names, challenge)?;
        let directory = self.acme_directory(&what, acme, defaults)?;
        let email = pick(&a.email, defaults.map(|d| &d.email)).map(|e| e.into_inner());
        if let Some(e) = &email
            && !e.contains('@')
        {
            self.err_at(
                acme,
                format!("{what}: email `{e}` is not an address"),
                "give a contact address such as ops@example.com, or leave email out",
            );
        }
        let key_type =
            self.acme_key_type(&what, pick(&a.key_type, defaults.map(|d| &d.key_type)))?;
        let ca_file = match pick(&a.ca, defaults.map(|d| &d.ca)) {
            None => None,
            Some(c) => Some(self.acme_ca_file(&what, &c)?),
        };
        let renew_at = a
            .renew_before
            .as_ref()
            .or(defaults.and_then(|d| d.renew_before.as_ref()));
        let renew_before = self
            .duration(renew_at)
            .unwrap_or(Duration::from_secs(30 * 86_400));
        let dns = self.acme_order_dns(&what, acme, defaults, challenge).ok()?;
        let eab = match a.eab.as_ref().or(defaults.and_then(|d| d.eab.as_ref())) {
            Some(e) => Some(self.acme_eab(&what, e)?),
            None => None,
        };
        Some(AcmeOrder {
            directory,
            email,
            names,
            challenge,
            ca_file,
            renew_before,
            key_type,
            dir: settings.storage.join(name),
            settings: settings.clone(),
            dns,
            eab,
        })
    }

    /// `directory` (default Let's Encrypt's): the CA's ACME directory URL, which must be
    /// HTTPS.
    fn acme_directory(
        &mut self,
        what: &str,
        acme: &Spanned<RawCertAcme>,
        defaults: Option<&RawAcme>,
    ) -> Option<String> {
        let directory = pick(&acme.get_ref().directory, defaults.map(|d| &d.directory));
        let directory_url = directory
            .as_ref()
            .map_or(LETS_ENCRYPT.to_owned(), |d| d.get_ref().clone());
        if !directory_url.starts_with("https://") {
            let at = directory
                .as_ref()
                .map_or(acme.span().start, |d| d.span().start);
            self.err(
                at,
                format!("{what}: directory `{directory_url}` is not an https:// URL"),
                "give the CA's ACME directory URL, e.g. https://acme-v02.api.letsencrypt.org/directory (RFC 8555 requires HTTPS)",
            );
            return None;
        }
        Some(directory_url)
    }

    /// `key_type = "ecdsa" | "rsa"` (default ecdsa): the certificate's key.
    fn acme_key_type(
        &mut self,
        what: &str,
        chosen: Option<Spanned<String>>,
    ) -> Option<AcmeKeyType> {
        let Some(k) = chosen else {
            return Some(AcmeKeyType::EcdsaP256);
        };
        match k.get_ref().as_str() {
            "ecdsa" => Some(AcmeKeyType::EcdsaP256),
            "rsa" => Some(AcmeKeyType::Rsa2048),
            other => {
                self.err_at(
                    &k,
                    format!("{what}: unknown key_type `{other}`"),
                    "use \"ecdsa\" (P-256) or \"rsa\" (2048 bits)",
                );
                None
            }
        }
    }

    /// `dns = { ... }` (here or in `[acme]`), which the dns-01 challenge needs and the others
    /// do not use; `Err` on a mistake (reported).
    fn acme_order_dns(
        &mut self,
        what: &str,
        acme: &Spanned<RawCertAcme>,
        defaults: Option<&RawAcme>,
        challenge: AcmeChallenge,
    ) -> Result<Option<DnsUpdate>, ()> {
        match (challenge, pick_dns(acme.get_ref(), defaults)) {
            (AcmeChallenge::Dns01, Some(d)) => self.acme_dns(what, d).map(Some).ok_or(()),
            (AcmeChallenge::Dns01, None) => {
                self.err_at(
                    acme,
                    format!("{what}: the dns-01 challenge needs dns = {{ ... }}"),
                    "say where to publish the TXT records: dns = { server = \"ns1.example.com\", key_name = \"acme-update\", secret_file = \"acme-update.key\" } (here or in [acme])",
                );
                Err(())
            }
            _ => Ok(None),
        }
    }
    /// `challenge = "..."` (default http-01).
    fn acme_challenge(
        &mut self,
        what: &str,
        chosen: Option<Spanned<String>>,
    ) -> Option<AcmeChallenge> {
        Some(match chosen {
            None => AcmeChallenge::Http01,
            Some(c) => match c.get_ref().as_str() {
                "http-01" => AcmeChallenge::Http01,
                "tls-alpn-01" => AcmeChallenge::TlsAlpn01,
                "dns-01" => AcmeChallenge::Dns01,
                other => {
                    self.err_at(
                        &c,
                        format!("{what}: unknown challenge `{other}`"),
                        "use \"http-01\" (a plain-HTTP listener answers), \"tls-alpn-01\" (a TLS listener answers) or \"dns-01\" (a TXT record by RFC 2136 update)",
                    );
                    return None;
                }
            },
        })
    }

    /// `ca = "file"`: the PEM of the CA that the ACME server's HTTPS certificate chains to.
    fn acme_ca_file(&mut self, what: &str, c: &Spanned<String>) -> Option<std::path::PathBuf> {
        let path = self.path(c.get_ref());
        match self.read_file(&path) {
            Ok(pem) if X509::from_pem(&pem).is_ok() => Some(path),
            Ok(_) => {
                self.err_at(
                    c,
                    format!("{what}: {} holds no PEM certificate", path.display()),
                    "give the PEM of the CA that signed the ACME server's HTTPS certificate",
                );
                None
            }
            Err(e) => {
                self.err_at(
                    c,
                    format!("{what}: cannot read {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                None
            }
        }
    }

    /// An order's names: lower case, no trailing dot, no duplicates; wildcards only for
    /// dns-01, never IP addresses or single labels.
    fn acme_names(
        &mut self,
        what: &str,
        names_at: &Spanned<Vec<String>>,
        challenge: AcmeChallenge,
    ) -> Option<Vec<String>> {
        let mut names = Vec::new();
        for n in names_at.get_ref() {
            let n = n.trim().trim_end_matches('.').to_ascii_lowercase();
            let bad = match HostPattern::parse(&n) {
                _ if n.parse::<std::net::IpAddr>().is_ok() => Some("an IP address"),
                Ok(HostPattern::Wildcard(_)) if challenge != AcmeChallenge::Dns01 => {
                    Some("a wildcard")
                }
                Ok(HostPattern::Wildcard(_)) => None,
                Ok(HostPattern::Exact(_)) if n.contains('.') || n == "localhost" => None,
                Ok(HostPattern::Exact(_)) => Some("not a fully qualified domain name"),
                Err(_) => Some("not a host name"),
            };
            if let Some(why) = bad {
                self.err_at(
                    names_at,
                    format!("{what}: names: `{n}` is {why}"),
                    "list DNS names the CA can reach this gateway at (a wildcard needs challenge = \"dns-01\")",
                );
                return None;
            }
            if !names.contains(&n) {
                names.push(n);
            }
        }
        if names.is_empty() {
            self.err_at(
                names_at,
                format!("{what}: names is empty"),
                "list the DNS names to order, e.g. names = [\"example.com\", \"www.example.com\"]",
            );
            return None;
        }
        Some(names)
    }

    /// In fleet mode, the gateway that orders an ACME certificate shares its key with the
    /// others through etcd, sealed with `[config] keyring`.
    pub(super) fn check_acme_in_fleet(
        &mut self,
        raw_certs: &[RawCertificate],
        fleet: Option<&FleetSource>,
    ) {
        if fleet.is_some_and(|f| f.keyring.is_empty())
            && let Some(at) = raw_certs.iter().find_map(|c| c.acme.as_ref())
        {
            self.err_at(
                at,
                "an ACME certificate in fleet mode needs [config] keyring: the gateway that orders shares the key with the others through etcd, sealed",
                "add keyring = [...] to [config] (the same keys on every gateway), as for certificates stored in etcd",
            );
        }
    }

    /// Each ACME certificate's challenge must have a listener to answer it.
    pub(super) fn check_acme_listeners(
        &mut self,
        raw_certs: &[RawCertificate],
        certificates: &[Option<Arc<Certificate>>],
        listeners: &[Listener],
    ) {
        for (i, (raw, cert)) in raw_certs.iter().zip(certificates).enumerate() {
            let (Some(at), Some(order)) = (&raw.acme, cert.as_ref().and_then(|c| c.acme.clone()))
            else {
                continue;
            };
            let name = raw.name.get_ref();
            let answered = match order.challenge {
                AcmeChallenge::Http01 => listeners
                    .iter()
                    .any(|l| l.tls.is_none() && matches!(l.kind, ListenerKind::Http)),
                AcmeChallenge::TlsAlpn01 => listeners
                    .iter()
                    .any(|l| l.tls.as_ref().is_some_and(|t| t.certificates.contains(&i))),
                // Answered in DNS: no listener takes part.
                AcmeChallenge::Dns01 => true,
            };
            if !answered {
                let help = match order.challenge {
                    AcmeChallenge::Http01 => {
                        "add a plain-HTTP [[listener]] (port 80 for a public CA), or use challenge = \"tls-alpn-01\""
                    }
                    AcmeChallenge::TlsAlpn01 => {
                        "serve this certificate on an HTTPS [[listener]] (port 443 for a public CA), or use challenge = \"http-01\""
                    }
                    AcmeChallenge::Dns01 => "",
                };
                self.err_at(
                    at,
                    format!(
                        "certificate `{name}` uses the {} challenge, but no listener can answer it",
                        order.challenge.as_str()
                    ),
                    help,
                );
            }
        }
    }
}

/// A key of `acme = { ... }`, or else of `[acme]`.
fn pick(
    own: &Option<Spanned<String>>,
    shared: Option<&Option<Spanned<String>>>,
) -> Option<Spanned<String>> {
    own.clone().or_else(|| shared.and_then(Clone::clone))
}

/// The order's own `dns`, else `[acme]`'s.
fn pick_dns<'a>(
    a: &'a RawCertAcme,
    defaults: Option<&'a RawAcme>,
) -> Option<&'a Spanned<RawAcmeDns>> {
    a.dns.as_ref().or(defaults.and_then(|d| d.dns.as_ref()))
}

/// Where to point a storage key error: the names list (the key file is not in the file).
fn key_span(at: &Spanned<Vec<String>>) -> Spanned<String> {
    Spanned::new(at.span(), String::new())
}

/// SHA-256 of an ACME certificate's order and, when storage holds them, its files' bytes.
fn acme_fingerprint(
    raw: &RawCertificate,
    order: &AcmeOrder,
    files: Option<(&[u8], &[u8])>,
) -> [u8; 32] {
    let mut h = boring::sha::Sha256::new();
    let mut field = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(b"acme");
    field(raw.name.get_ref().as_bytes());
    // Every setting of the order: a changed one is a different certificate entry.
    field(format!("{order:?}").as_bytes());
    field(
        raw.ocsp
            .as_ref()
            .map_or(b"auto".as_slice(), |o| o.get_ref().as_bytes()),
    );
    match files {
        Some((cert, key)) => {
            field(cert);
            field(key);
        }
        None => field(b"\0placeholder"),
    }
    for host in raw.hosts.iter().flatten() {
        field(host.get_ref().as_bytes());
    }
    field(b"engines");
    for e in raw.offload_engines.iter().flat_map(|l| l.get_ref()) {
        field(e.as_bytes());
    }
    h.finish()
}

/// What a `[[certificate]]` entry says about serving its certificate: the hosts it is for,
/// the engines its key's operations may use, and OCSP stapling.
#[derive(Clone)]
struct Serves {
    hosts: Vec<HostPattern>,
    offload_engines: Option<Vec<CryptoEngine>>,
    ocsp: bool,
}
