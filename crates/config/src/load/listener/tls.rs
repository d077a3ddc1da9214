//! `[listener.tls]`: the certificates a listener serves and its TLS settings.

use crate::load::Cx;
use crate::raw::*;
use crate::snapshot::*;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// `[listener.tls]`, its client certificates aside (see `Cx::listener_client_auth`);
    /// `None` when it has a mistake (reported).
    pub(super) fn listener_tls(
        &mut self,
        listener: &str,
        raw: &RawListenerTls,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<TlsListener> {
        let (certificates, all_found) =
            self.served_certificates(listener, raw, cert_names, raw_certs, broken);
        if certificates.is_empty() && all_found {
            self.err(
                0,
                format!("HTTPS listener `{listener}` has no certificate"),
                "add a [[certificate]] (cert and key files) or remove [listener.tls]",
            );
            return None;
        }
        let default_certificate =
            self.default_certificate(listener, raw, cert_names, raw_certs, &certificates);
        let unknown_sni = self
            .choice(
                raw.unknown_sni.as_ref(),
                "unknown_sni",
                &[
                    ("default", UnknownSni::Default),
                    ("reject", UnknownSni::Reject),
                ],
            )
            .unwrap_or(UnknownSni::Default);
        let (min_version, max_version) = self.tls_versions(listener, raw);
        let ticket_key_file = self.ticket_key_file(listener, raw);
        let ticket_key_rotation = self
            .duration(raw.ticket_key_rotation.as_ref())
            .unwrap_or(Duration::from_secs(3600));
        let ticket_keys_read = raw.ticket_key_file.is_none() || ticket_key_file.is_some();
        let rsa_key_exchange = self.rsa_key_exchange(listener, raw, min_version);
        let groups = raw.groups.as_ref().and_then(|g| self.groups(g, listener));
        let groups_ok = raw.groups.is_none() || groups.is_some();
        let (true, true, Some(rsa_key_exchange), true) =
            (all_found, ticket_keys_read, rsa_key_exchange, groups_ok)
        else {
            return None;
        };
        Some(TlsListener {
            certificates,
            default_certificate: default_certificate?,
            unknown_sni,
            min_version,
            max_version,
            session_tickets: raw.session_tickets.unwrap_or(true),
            ticket_key_file,
            ticket_key_rotation,
            rsa_key_exchange,
            groups,
            client_auth: None,
        })
    }

    /// `certificates`: the indexes of the certificates the listener serves (every one by
    /// default), and whether each name it lists is defined.
    fn served_certificates(
        &mut self,
        listener: &str,
        raw: &RawListenerTls,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> (Vec<usize>, bool) {
        let Some(list) = &raw.certificates else {
            return ((0..raw_certs.len()).collect(), true);
        };
        let mut all_found = true;
        let mut certificates = Vec::new();
        for n in list {
            let found = cert_names.get(n.get_ref()).copied();
            certificates.extend(found);
            if found.is_some() {
                continue;
            }
            all_found = false;
            if broken
                .get("certificate")
                .is_some_and(|set| set.contains(n.get_ref()))
            {
                continue;
            }
            self.err_at(
                n,
                format!(
                    "listener `{listener}` uses certificate `{}`, which is not defined",
                    n.get_ref()
                ),
                format!(
                    "add a [[certificate]] with that name or fix the name ({})",
                    defined_certificates(raw_certs)
                ),
            );
        }
        (certificates, all_found)
    }

    /// `default_certificate`: the one served to a client whose name none matches (the first
    /// of `certificates` by default); `None` when it is not one of them (reported).
    fn default_certificate(
        &mut self,
        listener: &str,
        raw: &RawListenerTls,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
        certificates: &[usize],
    ) -> Option<usize> {
        let Some(n) = &raw.default_certificate else {
            return certificates.first().copied();
        };
        match cert_names.get(n.get_ref()) {
            Some(i) if certificates.contains(i) => Some(*i),
            Some(_) => {
                self.err_at(n, format!("listener `{listener}`: default_certificate `{}` is not in its `certificates` list", n.get_ref()), "add it to `certificates` or pick one from that list");
                None
            }
            None => {
                self.err_at(
                    n,
                    format!(
                        "listener `{listener}`: default_certificate `{}` is not defined",
                        n.get_ref()
                    ),
                    defined_certificates(raw_certs),
                );
                None
            }
        }
    }

    /// `min_version` and `max_version` (TLS 1.2 and 1.3 by default), in that order.
    fn tls_versions(&mut self, listener: &str, raw: &RawListenerTls) -> (TlsVersion, TlsVersion) {
        let versions = [("1.2", TlsVersion::V1_2), ("1.3", TlsVersion::V1_3)];
        let min_version = self
            .choice(raw.min_version.as_ref(), "min_version", &versions)
            .unwrap_or(TlsVersion::V1_2);
        let max_version = self
            .choice(raw.max_version.as_ref(), "max_version", &versions)
            .unwrap_or(TlsVersion::V1_3);
        if min_version > max_version
            && let Some(v) = &raw.min_version
        {
            self.err_at(
                v,
                format!("listener `{listener}`: min_version is above max_version"),
                "make min_version at most max_version",
            );
        }
        (min_version, max_version)
    }

    /// `ticket_key_file`: session ticket keys shared by several gateways (NGINX's format,
    /// 80 bytes each), checked now; `None` when unset or unusable (reported).
    fn ticket_key_file(&mut self, listener: &str, raw: &RawListenerTls) -> Option<PathBuf> {
        let f = raw.ticket_key_file.as_ref()?;
        let path = self.path(f.get_ref());
        match self.read_file(&path) {
            Ok(bytes) if !bytes.is_empty() && bytes.len() % 80 == 0 => Some(path),
            Ok(bytes) => {
                self.err_at(f, format!("listener `{listener}`: ticket key file {} is {} bytes, not a multiple of 80", path.display(), bytes.len()), "write one or more 80-byte keys, newest first, e.g. `openssl rand 80 > ticket.key` (NGINX's format)");
                None
            }
            Err(e) => {
                self.err_at(
                    f,
                    format!(
                        "listener `{listener}`: cannot read ticket key file {}: {e}",
                        path.display()
                    ),
                    "check the path and permissions",
                );
                None
            }
        }
    }

    /// `rsa_key_exchange` (default off), which TLS 1.3 does not have; `None` when it is
    /// asked for with `min_version = "1.3"` (reported).
    fn rsa_key_exchange(
        &mut self,
        listener: &str,
        raw: &RawListenerTls,
        min_version: TlsVersion,
    ) -> Option<bool> {
        let rsa_key_exchange = raw.rsa_key_exchange.as_ref().is_some_and(|r| *r.get_ref());
        if rsa_key_exchange
            && min_version == TlsVersion::V1_3
            && let Some(r) = &raw.rsa_key_exchange
        {
            self.err_at(
                r,
                format!("listener `{listener}`: rsa_key_exchange needs TLS 1.2, but min_version is 1.3"),
                "set min_version = \"1.2\" or remove rsa_key_exchange (TLS 1.3 has no RSA key exchange)",
            );
            return None;
        }
        Some(rsa_key_exchange)
    }

    /// `[listener.tls] groups`: every name known (any spelling OpenSSL accepts, mapped to
    /// BoringSSL's), none twice, at least one.
    fn groups(&mut self, list: &Spanned<Vec<String>>, listener: &str) -> Option<Vec<&'static str>> {
        let known = || {
            KNOWN_GROUPS
                .iter()
                .map(|(n, _)| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if list.get_ref().is_empty() {
            self.err_at(
                list,
                format!(
                    "listener `{listener}`: groups is empty, so no key exchange could be agreed"
                ),
                format!(
                    "name at least one of {}, or remove groups for the default ({})",
                    known(),
                    DEFAULT_GROUPS.join(", ")
                ),
            );
            return None;
        }
        let mut out: Vec<&'static str> = Vec::new();
        let mut ok = true;
        for name in list.get_ref() {
            let found = KNOWN_GROUPS.iter().find(|(n, aliases)| {
                n.eq_ignore_ascii_case(name) || aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
            });
            match found {
                Some((n, _)) if out.contains(n) => {
                    self.err_at(
                        list,
                        format!("listener `{listener}`: groups names {n} twice (as \"{name}\")"),
                        "name each group once, in preference order",
                    );
                    ok = false;
                }
                Some((n, _)) => out.push(n),
                None => {
                    self.err_at(
                        list,
                        format!("listener `{listener}`: groups names \"{name}\", which is not a key-exchange group this build has"),
                        format!("use {} (OpenSSL's spellings prime256v1, secp384r1, ... work too)", known()),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }
}

/// The certificates a listener could name, for a help message.
fn defined_certificates(raw_certs: &[RawCertificate]) -> String {
    let names: Vec<&str> = raw_certs
        .iter()
        .map(|c| c.name.get_ref().as_str())
        .collect();
    if names.is_empty() {
        "none are defined yet".to_owned()
    } else {
        format!("defined: {}", names.join(", "))
    }
}
