//! Session ticket keys: generated and rotated on a schedule, or read from a file that several
//! instances share (NGINX's `ssl_session_ticket_key` format), and re-read on the same schedule.

use crate::TlsError;
use boring::hash::MessageDigest;
use boring::hmac::HmacCtxRef;
use boring::ssl::{SslRef, TicketKeyCallbackResult};
use boring::symm::{Cipher, CipherCtxRef};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

/// Bytes in one key as stored in a key file: 16 name, 32 HMAC-SHA256, 32 AES-256.
pub const TICKET_KEY_LEN: usize = 80;

/// Generated keys kept for decryption: tickets stay valid for about this many rotations.
const GENERATED_KEYS_KEPT: usize = 3;

#[derive(Clone)]
struct Key {
    name: [u8; 16],
    hmac: [u8; 32],
    aes: [u8; 32],
}

impl Key {
    fn from_bytes(b: &[u8]) -> Key {
        let mut k = Key {
            name: [0; 16],
            hmac: [0; 32],
            aes: [0; 32],
        };
        k.name.copy_from_slice(&b[..16]);
        k.hmac.copy_from_slice(&b[16..48]);
        k.aes.copy_from_slice(&b[48..80]);
        k
    }

    fn random() -> Result<Key, TlsError> {
        let mut b = [0u8; TICKET_KEY_LEN];
        boring::rand::rand_bytes(&mut b).map_err(TlsError::boring("generating a ticket key"))?;
        Ok(Key::from_bytes(&b))
    }
}

/// The key ring one listener encrypts and decrypts session tickets with. The first key
/// encrypts; every key decrypts, and a ticket under an older key is renewed.
pub struct TicketKeys {
    keys: RwLock<Vec<Key>>,
    file: Option<PathBuf>,
    /// Set once the rotation task runs: a ring kept across a reload is not rotated twice.
    rotating: AtomicBool,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("TicketKeys")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl TicketKeys {
    /// A ring of generated keys.
    pub fn generated() -> Result<Arc<Self>, TlsError> {
        Ok(Arc::new(TicketKeys {
            keys: RwLock::new(vec![Key::random()?]),
            file: None,
            rotating: AtomicBool::new(false),
        }))
    }

    /// A ring read from `path`: one or more 80-byte keys, the first one encrypting.
    pub fn from_file(path: &Path) -> Result<Arc<Self>, TlsError> {
        let ring = TicketKeys {
            keys: RwLock::new(Vec::new()),
            file: Some(path.to_path_buf()),
            rotating: AtomicBool::new(false),
        };
        ring.reload()?;
        let ring = Arc::new(ring);
        let mut rings = FILE_RINGS.lock().unwrap_or_else(|e| e.into_inner());
        rings.retain(|w| w.strong_count() > 0);
        rings.push(Arc::downgrade(&ring));
        Ok(ring)
    }

    fn reload(&self) -> Result<(), TlsError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let bad = |reason: String| TlsError::TicketKeyFile {
            path: path.display().to_string(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
        if bytes.is_empty() || bytes.len() % TICKET_KEY_LEN != 0 {
            return Err(bad(format!(
                "it is {} bytes; it must hold whole {TICKET_KEY_LEN}-byte keys (`openssl rand 80 > FILE`)",
                bytes.len()
            )));
        }
        let keys = bytes.chunks(TICKET_KEY_LEN).map(Key::from_bytes).collect();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
        Ok(())
    }

    /// One rotation step: a new generated key, or a fresh read of the key file.
    pub fn rotate(&self) -> Result<(), TlsError> {
        if self.file.is_some() {
            return self.reload();
        }
        let key = Key::random()?;
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        keys.insert(0, key);
        keys.truncate(GENERATED_KEYS_KEPT);
        Ok(())
    }

    /// Rotates every `interval` on the current tokio runtime until the ring is dropped. A
    /// second call on the same ring does nothing.
    pub fn spawn_rotation(self: &Arc<Self>, interval: Duration) {
        if self.rotating.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(ring) = weak.upgrade() else { return };
                if let Err(e) = ring.rotate() {
                    tracing::warn!(error = %e, "session ticket key rotation failed; keeping the current keys");
                }
            }
        });
    }

    /// The body of BoringSSL's ticket key callback.
    pub(crate) fn callback(
        &self,
        name: &mut [u8; 16],
        iv: &mut [u8; 16],
        cipher: &mut CipherCtxRef,
        hmac: &mut HmacCtxRef,
        encrypt: bool,
    ) -> TicketKeyCallbackResult {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        if encrypt {
            let Some(key) = keys.first() else {
                return TicketKeyCallbackResult::Noop;
            };
            name.copy_from_slice(&key.name);
            if boring::rand::rand_bytes(iv).is_err()
                || cipher
                    .init_encrypt(&Cipher::aes_256_cbc(), &key.aes, iv)
                    .is_err()
                || hmac.init(&key.hmac, &MessageDigest::sha256()).is_err()
            {
                return TicketKeyCallbackResult::Error;
            }
            return TicketKeyCallbackResult::Success;
        }
        let Some(pos) = keys.iter().position(|k| &k.name == name) else {
            // Unknown or expired key: a full handshake, not an error.
            return TicketKeyCallbackResult::Noop;
        };
        let key = &keys[pos];
        if cipher
            .init_decrypt(&Cipher::aes_256_cbc(), &key.aes, iv)
            .is_err()
            || hmac.init(&key.hmac, &MessageDigest::sha256()).is_err()
        {
            return TicketKeyCallbackResult::Error;
        }
        if pos == 0 {
            TicketKeyCallbackResult::Success
        } else {
            TicketKeyCallbackResult::DecryptSuccessRenew
        }
    }
}

/// Every live ring read from a key file, for [`reread_ticket_key_files`].
static FILE_RINGS: std::sync::Mutex<Vec<Weak<TicketKeys>>> = std::sync::Mutex::new(Vec::new());

/// Reads every ring's key file again now, instead of at its next scheduled rotation: fleet
/// mode calls it when the fleet's keys changed in etcd, so that a gateway starts decrypting
/// (and, once promoted, encrypting with) a new key at once. A file that fails to read keeps
/// its ring's keys (logged).
pub fn reread_ticket_key_files() {
    let rings: Vec<Arc<TicketKeys>> = FILE_RINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for ring in rings {
        if let Err(e) = ring.reload() {
            tracing::warn!(error = %e, "re-reading a session ticket key file failed; keeping the current keys");
        }
    }
}

/// Adapter with the exact signature `set_ticket_key_callback` wants.
pub(crate) fn callback_for(
    ring: Arc<TicketKeys>,
) -> impl Fn(
    &SslRef,
    &mut [u8; 16],
    &mut [u8; 16],
    &mut CipherCtxRef,
    &mut HmacCtxRef,
    bool,
) -> TicketKeyCallbackResult
+ Send
+ Sync
+ 'static {
    move |_ssl, name, iv, cipher, hmac, encrypt| ring.callback(name, iv, cipher, hmac, encrypt)
}
