//! Session ticket keys shared by the fleet, so that a client resumes on whichever gateway the
//! L4 balancer picks.
//!
//! `{prefix}/ticket_keys` holds `{"sealed": "...", "rotated_at": UNIX}`: the keys (80 bytes
//! each, NGINX's format) sealed with the keyring. Their order is the rings' order: the first
//! encrypts, every one decrypts. The second is the **next** key: every gateway has it one
//! period before it starts encrypting with it, so a ticket issued by the first gateway to
//! rotate already opens everywhere. Each rotation makes the next key current, appends a new
//! next key and keeps the previous current one for tickets still in flight.
//!
//! Every gateway checks the schedule; the one that writes first wins (an etcd transaction on
//! the key's `mod_revision`), so one gateway rotates at a time with no leader to elect.

use crate::keyring::Keyring;
use serde_json::{Value, json};

/// One key: 16 name, 32 HMAC, 32 AES bytes.
const KEY_LEN: usize = 80;
/// Current, next, previous.
const KEPT: usize = 3;

/// The keys of a `ticket_keys` value, as a key file's bytes.
pub(crate) fn open(value: &Value, keyring: &Keyring, context: &str) -> Result<Vec<u8>, String> {
    let sealed = value
        .get("sealed")
        .and_then(Value::as_str)
        .ok_or("ticket_keys has no `sealed` keys")?;
    let keys = keyring.open(sealed, context)?;
    if keys.is_empty() || keys.len() % KEY_LEN != 0 {
        return Err(format!(
            "ticket_keys holds {} bytes, not whole 80-byte keys",
            keys.len()
        ));
    }
    Ok(keys)
}

/// The first value: a current and a next key.
pub(crate) fn initial(keyring: &Keyring, context: &str, now: u64) -> Result<Value, String> {
    let keys = [random_key()?, random_key()?].concat();
    Ok(json!({ "sealed": keyring.seal(&keys, context)?, "rotated_at": now }))
}

/// The value after one rotation of `value`: next becomes current, a new next, the old current
/// kept; `None` when it is not due yet (`rotation` seconds since the last).
pub(crate) fn rotated(
    value: &Value,
    keyring: &Keyring,
    context: &str,
    now: u64,
    rotation: u64,
) -> Result<Option<Value>, String> {
    let last = value.get("rotated_at").and_then(Value::as_u64).unwrap_or(0);
    if now < last.saturating_add(rotation) {
        return Ok(None);
    }
    let keys = open(value, keyring, context)?;
    let keys: Vec<&[u8]> = keys.chunks(KEY_LEN).collect();
    let current = keys[0];
    let next = keys.get(1).copied().unwrap_or(current);
    let fresh = random_key()?;
    let mut out = Vec::with_capacity(KEPT * KEY_LEN);
    out.extend_from_slice(next);
    out.extend_from_slice(&fresh);
    out.extend_from_slice(current);
    Ok(Some(
        json!({ "sealed": keyring.seal(&out, context)?, "rotated_at": now }),
    ))
}

fn random_key() -> Result<Vec<u8>, String> {
    let mut k = vec![0u8; KEY_LEN];
    boring::rand::rand_bytes(&mut k).map_err(|e| format!("random ticket key: {e}"))?;
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_promotes_the_key_every_gateway_already_has() {
        let ring = Keyring::new(vec![("k1".into(), [7; 32])]);
        let ctx = "/sluice/ticket_keys";
        let v0 = initial(&ring, ctx, 1000).unwrap();
        let k0 = open(&v0, &ring, ctx).unwrap();
        assert_eq!(k0.len(), 160);
        // Not due yet.
        assert!(rotated(&v0, &ring, ctx, 1000 + 59, 60).unwrap().is_none());
        let v1 = rotated(&v0, &ring, ctx, 1000 + 60, 60).unwrap().unwrap();
        let k1 = open(&v1, &ring, ctx).unwrap();
        assert_eq!(k1.len(), 240);
        // The old next key encrypts now; the old current one still decrypts; one new key.
        assert_eq!(&k1[..80], &k0[80..160]);
        assert_eq!(&k1[160..], &k0[..80]);
        assert_ne!(&k1[80..160], &k0[..80]);
        assert_ne!(&k1[80..160], &k0[80..160]);
        let v2 = rotated(&v1, &ring, ctx, 2000, 60).unwrap().unwrap();
        let k2 = open(&v2, &ring, ctx).unwrap();
        assert_eq!(k2.len(), 240, "three keys kept");
        assert_eq!(&k2[..80], &k1[80..160]);
        // Sealed: the keys are not in the value, and another context does not open them.
        assert!(!v2.to_string().contains("rotated_at\":1000"));
        assert!(open(&v2, &ring, "/other/ticket_keys").is_err());
    }
}
