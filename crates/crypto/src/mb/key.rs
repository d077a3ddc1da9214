//! A key in the mb engine's form: Montgomery constants and exponent windows in 52-bit limbs,
//! computed once per key (at its first mb job), and its pool of blinding pairs.

use super::arith::{Blinding, Half, KeyLimbs, WINDOW};
use super::lanes::{LIMB_BITS, MASK52};
use crate::key::PrivateKey;
use crate::raw_rsa::Components;
use num_bigint::BigUint;
use std::sync::Mutex;

/// Blinding pairs kept per key: enough for every lane of a few batches in flight.
const POOL: usize = 32;

/// Limbs per prime for a modulus size the kernel has (16m < R holds for each: 1040, 1560
/// and 2080 bits for 1024-, 1536- and 2048-bit primes).
pub(crate) fn limbs_per_prime(bits: u32) -> Option<usize> {
    match bits {
        2048 => Some(20),
        3072 => Some(30),
        4096 => Some(40),
        _ => None,
    }
}

/// An RSA key ready for the mb kernel.
pub(crate) struct MbKey {
    pub(crate) bits: u32,
    pub(crate) limbs: KeyLimbs,
    n: BigUint,
    e: BigUint,
    /// `R_n mod n`, to put blinding pairs into Montgomery form.
    r_n: BigUint,
    nn: usize,
    blinding: Mutex<Vec<Blinding>>,
}

impl std::fmt::Debug for MbKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbKey")
            .field("bits", &self.bits)
            .finish_non_exhaustive()
    }
}

/// `-m^-1 mod 2^52` for odd `m0` (Newton's iteration doubles the correct bits each step).
pub(crate) fn neg_inv52(m0: u64) -> u64 {
    let mut x: u64 = 1;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(m0.wrapping_mul(x)));
    }
    x.wrapping_neg() & MASK52
}

/// `x` as `n` little-endian 52-bit limbs (`x` must fit).
pub(crate) fn to_limbs(x: &BigUint, n: usize) -> Vec<u64> {
    from_le_bytes(&x.to_bytes_le(), n)
}

/// Big-endian bytes as `n` 52-bit limbs; `None` when they do not fit.
pub(crate) fn be_to_limbs(bytes: &[u8], n: usize) -> Option<Vec<u64>> {
    let le: Vec<u8> = bytes.iter().rev().copied().collect();
    let fits = (le.len() * 8).saturating_sub(n * LIMB_BITS as usize);
    // Bytes beyond the limbs must be zero.
    if fits > 0 && le[n * LIMB_BITS as usize / 8..].iter().any(|&b| b != 0) {
        return None;
    }
    Some(from_le_bytes(&le, n))
}

fn from_le_bytes(le: &[u8], n: usize) -> Vec<u64> {
    let mut out = vec![0u64; n];
    let mut acc: u128 = 0;
    let mut have = 0u32;
    let mut j = 0;
    for &b in le {
        if j == n {
            break;
        }
        acc |= u128::from(b) << have;
        have += 8;
        while have >= LIMB_BITS && j < n {
            out[j] = acc as u64 & MASK52;
            acc >>= LIMB_BITS;
            have -= LIMB_BITS;
            j += 1;
        }
    }
    if j < n {
        out[j] = acc as u64 & MASK52;
    }
    out
}

/// Normalized limbs as `len` big-endian bytes (the value must fit).
pub(crate) fn limbs_to_be(limbs: &[u64], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut acc: u128 = 0;
    let mut have = 0u32;
    let mut i = 0;
    for &l in limbs {
        acc |= u128::from(l & MASK52) << have;
        have += LIMB_BITS;
        while have >= 8 && i < len {
            out[len - 1 - i] = acc as u8;
            acc >>= 8;
            have -= 8;
            i += 1;
        }
    }
    while i < len && have > 0 {
        out[len - 1 - i] = acc as u8;
        acc >>= 8;
        have = have.saturating_sub(8);
        i += 1;
    }
    out
}

fn half(m: &BigUint, d: &BigUint, np: usize) -> Half {
    let r = BigUint::from(1u8) << (np * LIMB_BITS as usize);
    let one = &r % m;
    let r2 = (&one * &one) % m;
    let r3 = (&r2 * &one) % m;
    // d < m (d = d mod (m - 1), checked by the caller): its windows span m's bits, a public
    // size, not the limbs' (1,040 bits for a 1,024-bit prime: 16 squarings and 4
    // multiplications more per half).
    let nwin = (m.bits() as usize).div_ceil(WINDOW);
    let windows = (0..nwin)
        .rev()
        .map(|w| {
            (0..WINDOW).fold(0u64, |v, b| {
                let bit = (w * WINDOW + b) as u64;
                v | (u64::from(d.bit(bit)) << b)
            })
        })
        .collect();
    let m0 = to_limbs(m, 2);
    Half {
        m: to_limbs(m, np),
        k0: neg_inv52(m0[0] | (m0[1] << LIMB_BITS)),
        one: to_limbs(&one, np),
        r2: to_limbs(&r2, np),
        r3: to_limbs(&r3, np),
        windows,
    }
}

impl PrivateKey {
    /// The mb engine's form of an RSA key (computed once, kept with the key); `None` for
    /// other keys and for RSA keys the kernel has no size for.
    pub(crate) fn mb(&self) -> Option<&MbKey> {
        self.engine_form(|key| MbKey::new(&key.raw_rsa.as_ref()?.components()?))
    }
}

impl MbKey {
    /// The mb form of a key; `None` when the kernel has no size for it (RSA 2048, 3072 and
    /// 4096 with primes of exactly half the modulus size).
    pub(crate) fn new(c: &Components) -> Option<MbKey> {
        let n = BigUint::from_bytes_be(&c.n);
        let bits = u32::try_from(n.bits()).ok()?;
        let np = limbs_per_prime(bits)?;
        let [p, q, dp, dq, qinv, e] =
            [&c.p, &c.q, &c.dp, &c.dq, &c.qinv, &c.e].map(|b| BigUint::from_bytes_be(b));
        // The check before release runs e in the kernel: a u64 (65537 in practice).
        let e_small = u64::try_from(&e).ok().filter(|&e| e >= 3)?;
        let half_bits = u64::from(bits / 2);
        if p.bits() != half_bits || q.bits() != half_bits || &p * &q != n || !n.bit(0) {
            return None;
        }
        // The exponent windows cover the primes' bits only (`half`).
        if dp >= p || dq >= q {
            return None;
        }
        let nn = 2 * np;
        let r_n = (BigUint::from(1u8) << (nn * LIMB_BITS as usize)) % &n;
        let p_half = half(&p, &dp, np);
        let qinv_r = (&qinv * from_limbs(&p_half.one)) % &p;
        let n0 = to_limbs(&n, 2);
        let key = MbKey {
            bits,
            limbs: KeyLimbs {
                n: to_limbs(&n, nn),
                k0_n: neg_inv52(n0[0] | (n0[1] << LIMB_BITS)),
                qinv_r: to_limbs(&qinv_r, np),
                r2_n: to_limbs(&((&r_n * &r_n) % &n), nn),
                e: e_small,
                p: p_half,
                q: half(&q, &dq, np),
            },
            n,
            e,
            r_n,
            nn,
            blinding: Mutex::new(Vec::new()),
        };
        let pairs = (0..8).filter_map(|_| key.fresh_blinding()).collect();
        *key.blinding.lock().unwrap_or_else(|e| e.into_inner()) = pairs;
        Some(key)
    }

    /// Limbs of n (and of every input and output).
    pub(crate) fn nn(&self) -> usize {
        self.nn
    }

    /// A blinding pair nobody else uses (made fresh when the pool is empty).
    pub(crate) fn take_blinding(&self) -> Option<Blinding> {
        let pooled = self
            .blinding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        pooled.or_else(|| self.fresh_blinding())
    }

    /// Returns a pair (already advanced by the kernel) to the pool.
    pub(crate) fn put_blinding(&self, b: Blinding) {
        let mut pool = self.blinding.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL {
            pool.push(b);
        }
    }

    /// `(r^e R, r^-1 R) mod n` for a random r.
    fn fresh_blinding(&self) -> Option<Blinding> {
        use aws_lc_rs::rand::{SecureRandom, SystemRandom};
        let mut bytes = vec![0u8; self.n.bits().div_ceil(8) as usize + 8];
        for _ in 0..4 {
            SystemRandom::new().fill(&mut bytes).ok()?;
            let r = BigUint::from_bytes_be(&bytes) % &self.n;
            let Some(ri) = r.modinv(&self.n) else {
                continue;
            };
            let a = (r.modpow(&self.e, &self.n) * &self.r_n) % &self.n;
            let ai = (ri * &self.r_n) % &self.n;
            return Some(Blinding {
                a: to_limbs(&a, self.nn),
                ai: to_limbs(&ai, self.nn),
            });
        }
        None
    }
}

/// Limbs back to a number (tests and precomputation).
pub(crate) fn from_limbs(limbs: &[u64]) -> BigUint {
    let mut x = BigUint::from(0u8);
    for &l in limbs.iter().rev() {
        x = (x << LIMB_BITS) + BigUint::from(l);
    }
    x
}

impl MbKey {
    /// Whether a big-endian number is below n (public data: a ciphertext).
    pub(crate) fn below_n(&self, x: &[u8]) -> bool {
        BigUint::from_bytes_be(x) < self.n
    }
}
