//! Credentials that change while listeners serve: ACME certificates that a CA issues and
//! renews, and the answers to its challenges.
//!
//! Every certificate a listener serves sits in a [`Slot`] that a handshake reads once. A
//! slot of an ACME certificate is shared, through the process-wide [`live`] registry, by
//! every listener (and every reload's new store) that serves the certificate, so that the
//! ACME manager puts a renewed certificate in force by swapping one pointer: no reload, no
//! rebuilt acceptor, and the next handshake serves it. The registry is process-wide because
//! a certificate's name is: the manager and the stores meet there across reloads without
//! either holding the other.

use arc_swap::ArcSwap;
use boring::ssl::SslCredential;
use boring::x509::X509;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

/// One certificate's credential as handshakes read it; swapped when the certificate changes.
pub struct Slot {
    credential: ArcSwap<SslCredential>,
}

impl Slot {
    /// A slot holding `credential`.
    pub fn new(credential: SslCredential) -> Self {
        Slot {
            credential: ArcSwap::from_pointee(credential),
        }
    }

    /// The credential in force now.
    pub fn load(&self) -> arc_swap::Guard<Arc<SslCredential>> {
        self.credential.load()
    }

    fn store(&self, credential: SslCredential) {
        self.credential.store(Arc::new(credential));
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

/// What an ACME certificate's slot was built with: a store built with other settings (a
/// changed engine list, other names) gets a slot of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotKey {
    pub(crate) names: Vec<String>,
    pub(crate) engines: Vec<sluice_crypto::EngineKind>,
    pub(crate) fallback_local: bool,
}

struct AcmeSlot {
    key: SlotKey,
    slot: Weak<Slot>,
    /// The certificate in force (its leaf tells a newer certificate from an older one).
    cert: Arc<sluice_config::Certificate>,
    /// The OCSP response stapled to it, if any.
    staple: Option<Arc<Vec<u8>>>,
}

impl AcmeSlot {
    /// The credential for the certificate in force, with its staple.
    fn credential(&self) -> Result<SslCredential, crate::TlsError> {
        let credential = crate::credential::x509_credential(
            &self.cert,
            self.key.engines.clone(),
            self.key.fallback_local,
        )?;
        if let Some(staple) = &self.staple {
            crate::credential::set_ocsp_response(&credential, staple)?;
        }
        Ok(credential)
    }
}

/// Where an ACME certificate stands, for `/status`, `/metrics` and the dashboard.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AcmeStatus {
    /// The DNS names ordered.
    pub names: Vec<String>,
    /// `"placeholder"` (self-signed, waiting for the CA), `"issued"`, `"ordering"` or
    /// `"retrying"`.
    pub state: &'static str,
    /// The challenge used.
    pub challenge: &'static str,
    /// The served certificate's expiry (Unix seconds); none for the placeholder.
    pub not_after: Option<i64>,
    /// When the next order starts (Unix seconds).
    pub next_attempt: Option<i64>,
    /// Orders that ended with a certificate.
    pub issued: u64,
    /// Orders that failed.
    pub failures: u64,
    /// Failures since the last certificate (the back-off's exponent).
    pub consecutive_failures: u32,
    /// The last failure, as the CA or the network said it.
    pub last_error: Option<String>,
    /// When the last certificate went into force (Unix seconds).
    pub last_issued: Option<i64>,
}

/// Where a certificate's OCSP stapling stands, for `/status`, `/metrics` and the dashboard.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OcspStatus {
    /// The responder asked (the certificate's AIA OCSP URL).
    pub responder: String,
    /// `"pending"` (first fetch under way), `"good"`, `"revoked"`, `"unknown"`, or
    /// `"failing"` (no current response: nothing stapled).
    pub state: &'static str,
    /// Whether handshakes carry a staple now.
    pub stapled: bool,
    /// The stapled response's thisUpdate and nextUpdate (Unix seconds).
    pub this_update: Option<i64>,
    /// See `this_update`.
    pub next_update: Option<i64>,
    /// When the next fetch starts (Unix seconds).
    pub next_fetch: Option<i64>,
    /// Fetches that brought a usable response.
    pub fetched: u64,
    /// Fetches that failed.
    pub failures: u64,
    /// The last failure.
    pub last_error: Option<String>,
}

/// The stores' slots of one certificate that staples, and its current staple.
struct Stapled {
    cert: Arc<sluice_config::Certificate>,
    slots: Vec<(Weak<Slot>, Vec<sluice_crypto::EngineKind>, bool)>,
    staple: Option<Arc<Vec<u8>>>,
}

/// The process-wide registry: ACME certificates' slots and status, stapling certificates'
/// slots and staples, and challenge answers.
#[derive(Default)]
pub struct Live {
    /// Certificate fingerprint → its stapling slots.
    stapled: Mutex<HashMap<[u8; 32], Stapled>>,
    ocsp_status: Mutex<BTreeMap<String, OcspStatus>>,
    acme: Mutex<HashMap<String, AcmeSlot>>,
    status: Mutex<BTreeMap<String, AcmeStatus>>,
    /// TLS-ALPN-01: host name → the challenge certificate to serve to `acme-tls/1`.
    alpn: RwLock<HashMap<String, Arc<SslCredential>>>,
    /// HTTP-01: token → key authorization.
    http: RwLock<HashMap<String, String>>,
}

/// The registry.
pub fn live() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(Live::default)
}

impl Live {
    /// The slot a store serves ACME certificate `cert` from: the shared one when it was
    /// built with the same settings and holds a certificate at least as new as `cert`'s,
    /// else a new one serving `cert` (stapled with `staple`, what disk keeps for it), which
    /// becomes the shared one.
    pub(crate) fn acme_slot(
        &self,
        cert: &Arc<sluice_config::Certificate>,
        key: SlotKey,
        staple: Option<Arc<Vec<u8>>>,
    ) -> Result<Arc<Slot>, crate::TlsError> {
        let mut acme = self.acme.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = acme.get(&cert.name)
            && held.key == key
            && let Some(slot) = held.slot.upgrade()
        {
            let (placeholder, was) = (cert.placeholder, held.cert.placeholder);
            let newer = placeholder && !was
                || (placeholder == was
                    && held.cert.chain[0].not_after() >= cert.chain[0].not_after());
            if newer {
                return Ok(slot);
            }
        }
        let mut held = AcmeSlot {
            key,
            slot: Weak::new(),
            cert: cert.clone(),
            staple,
        };
        let slot = Arc::new(Slot::new(held.credential()?));
        held.slot = Arc::downgrade(&slot);
        acme.insert(cert.name.clone(), held);
        Ok(slot)
    }

    /// The certificate in force for ACME certificate `name`, if a listener serves it.
    pub fn acme_current(&self, name: &str) -> Option<Arc<sluice_config::Certificate>> {
        let acme = self.acme.lock().unwrap_or_else(|e| e.into_inner());
        let held = acme.get(name)?;
        held.slot.upgrade().map(|_| held.cert.clone())
    }

    /// Staples `response` (or nothing) to ACME certificate `name` while `leaf` is the one in
    /// force (a renewal since the fetch makes it moot). Returns how many slots carry it.
    pub fn staple_acme(
        &self,
        name: &str,
        leaf: &X509,
        response: Option<Vec<u8>>,
    ) -> Result<usize, crate::TlsError> {
        let mut acme = self.acme.lock().unwrap_or_else(|e| e.into_inner());
        let Some(held) = acme.get_mut(name) else {
            return Ok(0);
        };
        let (Some(slot), Ok(a), Ok(b)) = (
            held.slot.upgrade(),
            held.cert.chain[0].to_der(),
            leaf.to_der(),
        ) else {
            return Ok(0);
        };
        if a != b {
            return Ok(0);
        }
        held.staple = response.map(Arc::new);
        slot.store(held.credential()?);
        Ok(1)
    }

    /// Puts a newly issued certificate for ACME certificate `cert.name` in force in every
    /// store that serves it, built with the engines the slot was built with and `staple`
    /// (what disk keeps for it; none until the stapler fetches one otherwise). Returns
    /// whether any listener serves it (false: the next reload's stores take it from storage).
    pub fn install(
        &self,
        cert: Arc<sluice_config::Certificate>,
        staple: Option<Arc<Vec<u8>>>,
    ) -> Result<bool, crate::TlsError> {
        let mut acme = self.acme.lock().unwrap_or_else(|e| e.into_inner());
        let Some(held) = acme.get_mut(&cert.name) else {
            return Ok(false);
        };
        let Some(slot) = held.slot.upgrade() else {
            return Ok(false);
        };
        let (was, staple) = (
            std::mem::replace(&mut held.cert, cert.clone()),
            std::mem::replace(&mut held.staple, staple),
        );
        match held.credential() {
            Ok(c) => slot.store(c),
            Err(e) => {
                (held.cert, held.staple) = (was, staple);
                return Err(e);
            }
        }
        Ok(true)
    }

    /// A slot for `cert`, whose OCSP response is stapled: built with the current staple (at
    /// first `kept`, what disk keeps for it), and rebuilt whenever [`Live::staple`] brings
    /// another.
    pub(crate) fn stapled_slot(
        &self,
        cert: &Arc<sluice_config::Certificate>,
        (engines, fallback_local): (Vec<sluice_crypto::EngineKind>, bool),
        kept: Option<Arc<Vec<u8>>>,
    ) -> Result<Arc<Slot>, crate::TlsError> {
        let mut stapled = self.stapled.lock().unwrap_or_else(|e| e.into_inner());
        stapled.retain(|_, s| s.slots.iter().any(|(w, ..)| w.strong_count() > 0));
        let entry = stapled.entry(cert.fingerprint).or_insert_with(|| Stapled {
            cert: cert.clone(),
            slots: Vec::new(),
            // A restarted process staples from its first handshake what the last one kept.
            staple: kept,
        });
        let credential = crate::credential::x509_credential(cert, engines.clone(), fallback_local)?;
        if let Some(staple) = &entry.staple {
            crate::credential::set_ocsp_response(&credential, staple)?;
        }
        let slot = Arc::new(Slot::new(credential));
        entry
            .slots
            .push((Arc::downgrade(&slot), engines, fallback_local));
        Ok(slot)
    }

    /// Staples `response` (or, with `None`, nothing) to every handshake of the certificate
    /// with `fingerprint`, in every store serving it. Returns how many slots now carry it.
    pub fn staple(
        &self,
        fingerprint: &[u8; 32],
        response: Option<Vec<u8>>,
    ) -> Result<usize, crate::TlsError> {
        let mut stapled = self.stapled.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = stapled.get_mut(fingerprint) else {
            return Ok(0);
        };
        entry.staple = response.map(Arc::new);
        entry.slots.retain(|(w, ..)| w.strong_count() > 0);
        let mut n = 0;
        for (slot, engines, fallback) in &entry.slots {
            let Some(slot) = slot.upgrade() else { continue };
            let credential =
                crate::credential::x509_credential(&entry.cert, engines.clone(), *fallback)?;
            if let Some(staple) = &entry.staple {
                crate::credential::set_ocsp_response(&credential, staple)?;
            }
            slot.store(credential);
            n += 1;
        }
        Ok(n)
    }

    /// Records where certificate `name`'s stapling stands.
    pub fn set_ocsp_status(&self, name: &str, status: OcspStatus) {
        self.ocsp_status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), status);
    }

    /// Forgets the stapling status of certificates no longer stapled.
    pub fn retain_ocsp_status(&self, keep: &dyn Fn(&str) -> bool) {
        self.ocsp_status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name, _| keep(name));
    }

    /// Every stapling certificate's status, by name.
    pub fn ocsp_statuses(&self) -> BTreeMap<String, OcspStatus> {
        self.ocsp_status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records where ACME certificate `name` stands.
    pub fn set_status(&self, name: &str, status: AcmeStatus) {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), status);
    }

    /// Forgets certificates no longer configured.
    pub fn retain_status(&self, keep: &dyn Fn(&str) -> bool) {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name, _| keep(name));
    }

    /// Every ACME certificate's status, by name.
    pub fn statuses(&self) -> BTreeMap<String, AcmeStatus> {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Serves `credential` to a TLS-ALPN-01 validation of `host` until withdrawn.
    pub fn publish_alpn(&self, host: &str, credential: SslCredential) {
        self.alpn
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(host.to_ascii_lowercase(), Arc::new(credential));
    }

    /// Stops answering TLS-ALPN-01 for `host`.
    pub fn withdraw_alpn(&self, host: &str) {
        self.alpn
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&host.to_ascii_lowercase());
    }

    /// The TLS-ALPN-01 challenge certificate for `host`, while one is published.
    pub fn alpn_challenge(&self, host: &str) -> Option<Arc<SslCredential>> {
        let alpn = self.alpn.read().unwrap_or_else(|e| e.into_inner());
        if alpn.is_empty() {
            return None;
        }
        alpn.get(&host.to_ascii_lowercase()).cloned()
    }

    /// Answers `GET /.well-known/acme-challenge/<token>` with `key_authorization` until
    /// withdrawn.
    pub fn publish_http(&self, token: &str, key_authorization: &str) {
        self.http
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.to_owned(), key_authorization.to_owned());
    }

    /// Stops answering HTTP-01 for `token`.
    pub fn withdraw_http(&self, token: &str) {
        self.http
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(token);
    }

    /// The key authorization for an HTTP-01 request path, if it asks for a published token.
    pub fn http_answer(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(HTTP01_PREFIX)?;
        let http = self.http.read().unwrap_or_else(|e| e.into_inner());
        http.get(token).cloned()
    }
}

/// Where HTTP-01 tokens are asked for (RFC 8555 §8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The ALPN protocol of TLS-ALPN-01 validations (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
