//! Signature encodings (RFC 8017): what the software engines get from aws-lc inside its
//! sign call, the mb engine must build itself before the raw private-key operation.

use aws_lc_rs::digest::{self, Algorithm};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

/// DigestInfo prefixes of EMSA-PKCS1-v1_5 (RFC 8017 section 9.2, note 1).
const SHA256_INFO: &[u8] = &[
    0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05,
    0x00, 0x04, 0x20,
];
const SHA384_INFO: &[u8] = &[
    0x30, 0x41, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02, 0x05,
    0x00, 0x04, 0x30,
];
const SHA512_INFO: &[u8] = &[
    0x30, 0x51, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03, 0x05,
    0x00, 0x04, 0x40,
];

/// EMSA-PKCS1-v1_5 of a digest, `k` bytes (the modulus length).
pub(crate) fn pkcs1(hash: &[u8], k: usize) -> Option<Vec<u8>> {
    let info = match hash.len() {
        32 => SHA256_INFO,
        48 => SHA384_INFO,
        64 => SHA512_INFO,
        _ => return None,
    };
    let t = info.len() + hash.len();
    if k < t + 11 {
        return None;
    }
    let mut em = vec![0xffu8; k];
    em[0] = 0;
    em[1] = 1;
    em[k - t - 1] = 0;
    em[k - t..k - hash.len()].copy_from_slice(info);
    em[k - hash.len()..].copy_from_slice(hash);
    Some(em)
}

/// EMSA-PSS of a digest with a random salt as long as the hash (what TLS 1.3 requires),
/// MGF1 with the same hash, as `k` bytes for a modulus of `mod_bits` bits.
pub(crate) fn pss(
    alg: &'static Algorithm,
    hash: &[u8],
    mod_bits: usize,
    k: usize,
) -> Option<Vec<u8>> {
    let h_len = alg.output_len();
    let s_len = h_len;
    let em_bits = mod_bits - 1;
    let em_len = em_bits.div_ceil(8);
    if hash.len() != h_len || em_len < h_len + s_len + 2 || em_len > k {
        return None;
    }
    let mut salt = vec![0u8; s_len];
    SystemRandom::new().fill(&mut salt).ok()?;
    let mut ctx = digest::Context::new(alg);
    ctx.update(&[0u8; 8]);
    ctx.update(hash);
    ctx.update(&salt);
    let h = ctx.finish();
    let db_len = em_len - h_len - 1;
    let mut db = vec![0u8; db_len];
    db[db_len - s_len - 1] = 1;
    db[db_len - s_len..].copy_from_slice(&salt);
    // MGF1(H) xored into DB.
    for (counter, chunk) in db.chunks_mut(h_len).enumerate() {
        let mut c = digest::Context::new(alg);
        c.update(h.as_ref());
        c.update(&(counter as u32).to_be_bytes());
        for (d, m) in chunk.iter_mut().zip(c.finish().as_ref()) {
            *d ^= m;
        }
    }
    db[0] &= 0xff >> (8 * em_len - em_bits);
    let mut em = vec![0u8; k - em_len];
    em.extend_from_slice(&db);
    em.extend_from_slice(h.as_ref());
    em.push(0xbc);
    Some(em)
}
