//! Parsed certificates kept from one load to the next.

use crate::snapshot::Certificate;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The certificates of the last successful load, by fingerprint (their settings and their
/// files' bytes). A reload reads every certificate and key file again, which is cheap, but
/// parses and checks only those whose bytes changed; the unchanged ones come back as the very
/// same `Arc`, which tells the TLS layer it may keep what it built from them.
#[derive(Debug, Default)]
pub struct CertCache {
    entries: Mutex<HashMap<[u8; 32], Arc<Certificate>>>,
}

impl CertCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn lookup(&self, fingerprint: &[u8; 32]) -> Option<Arc<Certificate>> {
        self.lock().get(fingerprint).cloned()
    }

    /// After a successful load: keep exactly the certificates it used.
    pub(crate) fn replace(&self, used: &[Arc<Certificate>]) {
        let mut entries = self.lock();
        entries.clear();
        for c in used {
            entries.insert(c.fingerprint, c.clone());
        }
    }

    /// Certificates held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<Certificate>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
