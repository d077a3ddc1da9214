//! Hashing and randomness every part of the data plane shares: the hash behind `ip_hash`,
//! `consistent_hash`, sticky cookies and connection limits, and the per-thread random source
//! behind sampled choices (balancers, mirroring, request IDs, retry jitter). A leaf: it
//! imports nothing of the crate.
//!
//! Every gateway of a fleet must send a key to the same server, so the hash is fixed here
//! (FNV-1a over the bytes, then MurmurHash3's 64-bit finaliser to spread FNV's weak low bits)
//! rather than `std`'s `DefaultHasher`, whose algorithm may change between Rust releases.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A stable 64-bit hash of `bytes`, seeded so that one input gives independent hashes.
pub(crate) fn hash64(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET ^ seed.wrapping_mul(FNV_PRIME);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    fmix64(h)
}

/// MurmurHash3's finaliser: every input bit affects every output bit.
pub(crate) fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The hash of a client address (its octets, so IPv4 and IPv6 both work).
pub(crate) fn hash_ip(ip: std::net::IpAddr) -> u64 {
    match ip {
        std::net::IpAddr::V4(a) => hash64(0, &a.octets()),
        std::net::IpAddr::V6(a) => hash64(0, &a.octets()),
    }
}

/// A small, fast per-thread random source for sampled choices (power of two choices).
/// Quality matters little here; speed and no shared state do.
pub(crate) fn random() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            // Seeded per thread from its stack address and the time, so threads differ.
            let local = 0u8;
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            fmix64((&local as *const u8 as u64) ^ t) | 1
        });
    }
    STATE.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// A uniform index below `n` (Lemire's multiply-shift; `n` ≥ 1).
pub(crate) fn below(n: usize) -> usize {
    ((u128::from(random()) * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed_across_builds() {
        // Pinned values: a change here remaps every consistent-hash key of a fleet.
        assert_eq!(hash64(0, b""), 0xefd0_1f60_ba99_2926);
        let a = hash64(0, b"user-42");
        assert_eq!(a, 0xa395_32c7_ab05_1e8d);
        assert_eq!(a, hash64(0, b"user-42"));
        assert_ne!(a, hash64(1, b"user-42"), "the seed gives another hash");
        assert_ne!(a, hash64(0, b"user-43"));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut seen = [0u32; 7];
        for _ in 0..7_000 {
            seen[below(7)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 700), "{seen:?}");
    }
}
