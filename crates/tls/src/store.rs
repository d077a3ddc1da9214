use crate::TlsError;
use crate::credential::x509_credential;
use crate::live::{Slot, SlotKey, live};
use sluice_config::{ClientAuthMode, HostPattern, KeyType, Snapshot, TlsListener, normalize_host};
use std::collections::HashMap;
use std::sync::Arc;

/// The credentials a listener serves, indexed by host name, each in a [`Slot`] (read once
/// per handshake; an ACME certificate's is swapped when the CA issues).
///
/// Several certificates may serve one name (typically an RSA and an ECDSA one); they form a
/// *set*, ordered ECDSA, Ed25519, RSA, and BoringSSL takes the first the client supports.
pub struct CertStore {
    exact: HashMap<String, Vec<Arc<Slot>>>,
    /// Keyed by the suffix after `*.`.
    wildcard: HashMap<String, Vec<Arc<Slot>>>,
    default: Vec<Arc<Slot>>,
    /// Names whose certificate sets its own `client_auth` (exact, and wildcard suffixes
    /// after `*.`); empty unless the listener asks for client certificates.
    client_auth: (
        HashMap<String, ClientAuthMode>,
        HashMap<String, ClientAuthMode>,
    ),
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("exact", &self.exact.keys().collect::<Vec<_>>())
            .field("wildcard", &self.wildcard.keys().collect::<Vec<_>>())
            .field("default", &self.default.len())
            .finish()
    }
}

fn preference(key: KeyType) -> u8 {
    match key {
        KeyType::Ecdsa(_) => 0,
        KeyType::Ed25519 => 1,
        KeyType::Rsa(_) => 2,
    }
}

impl CertStore {
    /// Builds the store for one HTTPS listener.
    pub fn build(snapshot: &Snapshot, tls: &TlsListener) -> Result<Self, TlsError> {
        let mut order = tls.certificates.clone();
        order.sort_by_key(|&i| preference(snapshot.certificates[i].key_type));
        let mut credentials = HashMap::new();
        for &i in &order {
            let cert = &snapshot.certificates[i];
            let fallback_local = snapshot
                .offload
                .keyless
                .as_ref()
                .is_none_or(|k| k.fallback_local);
            let engines = crate::chain::certificate_engines(snapshot, cert);
            let slot = match &cert.acme {
                // Shared with the ACME manager, which swaps in what the CA issues.
                Some(order) => live().acme_slot(
                    cert,
                    SlotKey {
                        names: order.names.clone(),
                        engines: engines.clone(),
                        fallback_local,
                    },
                    crate::ocsp::kept::for_certificate(cert),
                )?,
                // Rebuilt with each OCSP response the stapler fetches.
                None if crate::ocsp::staples(cert) => live().stapled_slot(
                    cert,
                    (engines, fallback_local),
                    crate::ocsp::kept::for_certificate(cert),
                )?,
                None => Arc::new(Slot::new(x509_credential(cert, engines, fallback_local)?)),
            };
            credentials.insert(i, slot);
        }
        let mut exact: HashMap<String, Vec<Arc<Slot>>> = HashMap::new();
        let mut wildcard: HashMap<String, Vec<Arc<Slot>>> = HashMap::new();
        let mut client_auth = (HashMap::new(), HashMap::new());
        for &i in &order {
            let mode = snapshot.certificates[i]
                .client_auth
                .filter(|_| tls.client_auth.is_some());
            for host in &snapshot.certificates[i].hosts {
                let (map, modes, key) = match host {
                    HostPattern::Exact(n) => (&mut exact, &mut client_auth.0, n.clone()),
                    HostPattern::Wildcard(s) => (&mut wildcard, &mut client_auth.1, s.clone()),
                };
                if let Some(m) = mode {
                    modes.insert(key.clone(), m);
                }
                map.entry(key).or_default().push(credentials[&i].clone());
            }
        }
        // The default set is everything that serves the default certificate's first name, so
        // a client without SNI (or connecting by IP) still gets ECDSA or RSA as it supports.
        let default_cert = &snapshot.certificates[tls.default_certificate];
        let default = match default_cert.hosts.first() {
            Some(HostPattern::Exact(n)) => exact.get(n).cloned(),
            Some(HostPattern::Wildcard(s)) => wildcard.get(s).cloned(),
            None => None,
        }
        .unwrap_or_else(|| vec![credentials[&tls.default_certificate].clone()]);
        Ok(CertStore {
            exact,
            wildcard,
            default,
            client_auth,
        })
    }

    /// The credential set for an SNI name: exact match, then the wildcard one label up.
    pub fn lookup(&self, sni: &str) -> Option<&[Arc<Slot>]> {
        let host = normalize_host(sni);
        if let Some(set) = self.exact.get(&host) {
            return Some(set);
        }
        let (_, parent) = host.split_once('.')?;
        self.wildcard.get(parent).map(Vec::as_slice)
    }

    /// The `client_auth` of the certificate that serves `sni`, where it sets its own.
    pub fn client_auth_for(&self, sni: &str) -> Option<ClientAuthMode> {
        let (exact, wildcard) = &self.client_auth;
        if exact.is_empty() && wildcard.is_empty() {
            return None;
        }
        let host = normalize_host(sni);
        if let Some(m) = exact.get(&host) {
            return Some(*m);
        }
        let (_, parent) = host.split_once('.')?;
        wildcard.get(parent).copied()
    }

    /// The set served when SNI is absent or unknown (and the listener allows it).
    pub fn default_set(&self) -> &[Arc<Slot>] {
        &self.default
    }
}
