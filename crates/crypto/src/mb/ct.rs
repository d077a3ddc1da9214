//! dudect (Reparaz, Balasch, Verbauwhede, 2017) for the `mb` kernel: is the time of a batch
//! of RSA private-key operations independent of the private keys?
//!
//! Two classes of measurements, interleaved at random: every lane computes with one *fixed*
//! key, or every lane with a key drawn at random from a set of others. The inputs and blinding
//! pairs are random in both (each valid for its key). The lanes' keys live in the same
//! buffers in both classes (copied in before the clock starts), so the two classes read the
//! same memory and differ only in its values: a difference in time is a dependence on the
//! secret, not on where it lies. Welch's t between the classes' times, on all samples and on
//! those below several percentiles (dudect's crops, which take out interrupts and other
//! noise on one side only), says whether the times could come from one distribution;
//! |t| ≥ 4.5 (dudect's threshold) over ~10^6 samples refutes constant time.
//!
//! `valgrind` (`scripts/ct-check`) already proves the portable kernel free of secret
//! branches and addresses; it cannot run AVX-512, which this measures instead.

use super::Kernel;
use super::arith::{Blinding, KeyLimbs, LaneIn};
use super::key::{MbKey, be_to_limbs};
use crate::PrivateKey;
use std::time::{Duration, Instant};

/// What a run measured.
#[derive(Debug, Clone)]
pub struct CtReport {
    /// The kernel measured.
    pub kernel: Kernel,
    /// Lanes per measured batch.
    pub lanes: usize,
    /// Measurements of the fixed key's class, and of the random keys'.
    pub fixed: usize,
    /// See `fixed`.
    pub random: usize,
    /// Welch's t on every sample.
    pub t_all: f64,
    /// The largest |t| of the crops (samples below the 50th, 75th, 90th and 99th percentile
    /// of all times) and of `t_all`.
    pub t_max: f64,
    /// Median time of one batch.
    pub median: Duration,
}

impl CtReport {
    /// dudect's verdict: no evidence of a dependence on the key at |t| < 4.5.
    pub fn constant_time(&self) -> bool {
        self.t_max.abs() < 4.5
    }
}

/// The keys and inputs of one run: `keys[0]` is the fixed class's; all of `bits`.
struct Material {
    keys: Vec<(PrivateKey, Vec<Vec<u64>>, Blinding)>,
    bits: u32,
}

/// An xorshift stream: the class and key choices (not secrets; reproducible per seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The RSA keys of `pkcs8` (one size: 2048, 3072 or 4096 bits), each with `inputs` random
/// inputs below its modulus.
fn material(pkcs8: &[Vec<u8>], inputs: usize, rng: &mut Rng) -> Result<Material, String> {
    if pkcs8.len() < 2 {
        return Err("a fixed key and at least one other are needed".into());
    }
    let mut keys = Vec::with_capacity(pkcs8.len());
    let mut bits = None;
    for der in pkcs8 {
        let key = PrivateKey::from_pkcs8(der).map_err(|e| e.to_string())?;
        let mb = key
            .mb()
            .filter(|m| bits.is_none_or(|b| m.bits == b))
            .ok_or("the mb engine does not take this key, or its size differs from the first's")?;
        bits = Some(mb.bits);
        let len = mb.bits as usize / 8;
        let n = num_bigint::BigUint::from_bytes_be(&super::key::limbs_to_be(&mb.limbs.n, len));
        let mut cs = Vec::with_capacity(inputs);
        for _ in 0..inputs {
            let bytes: Vec<u8> = (0..len + 8).map(|_| rng.next() as u8).collect();
            let c = num_bigint::BigUint::from_bytes_be(&bytes) % &n;
            let mut be = c.to_bytes_be();
            be.splice(0..0, std::iter::repeat_n(0, len - be.len()));
            cs.push(be_to_limbs(&be, mb.nn()).ok_or("an input does not fit")?);
        }
        let blinding = mb.take_blinding().ok_or("no blinding pair")?;
        keys.push((key, cs, blinding));
    }
    Ok(Material {
        keys,
        bits: bits.unwrap_or(2048),
    })
}

fn mb(key: &PrivateKey) -> &MbKey {
    key.mb().expect("checked in `material`")
}

/// `dst` takes `src`'s values in its own buffers (the same lengths: no allocation, so the
/// addresses the kernel reads stay the same from one measurement to the next).
fn load(dst: &mut KeyLimbs, src: &KeyLimbs) {
    dst.n.copy_from_slice(&src.n);
    dst.k0_n = src.k0_n;
    for (d, s) in [(&mut dst.p, &src.p), (&mut dst.q, &src.q)] {
        d.m.copy_from_slice(&s.m);
        d.k0 = s.k0;
        d.one.copy_from_slice(&s.one);
        d.r2.copy_from_slice(&s.r2);
        d.r3.copy_from_slice(&s.r3);
        d.windows.copy_from_slice(&s.windows);
    }
    dst.qinv_r.copy_from_slice(&src.qinv_r);
    dst.r2_n.copy_from_slice(&src.r2_n);
    dst.e = src.e;
}

fn copy_of(src: &KeyLimbs) -> KeyLimbs {
    let half = |h: &super::arith::Half| super::arith::Half {
        m: h.m.clone(),
        k0: h.k0,
        one: h.one.clone(),
        r2: h.r2.clone(),
        r3: h.r3.clone(),
        windows: h.windows.clone(),
    };
    KeyLimbs {
        n: src.n.clone(),
        k0_n: src.k0_n,
        p: half(&src.p),
        q: half(&src.q),
        qinv_r: src.qinv_r.clone(),
        r2_n: src.r2_n.clone(),
        e: src.e,
    }
}

/// One lane's buffers: its key, input and blinding pair, overwritten before each batch.
struct Lane {
    key: KeyLimbs,
    c: Vec<u64>,
    blinding: Blinding,
    /// Which key of the material it holds now (for [`verify`]).
    holds: usize,
}

/// `width` lanes' buffers, allocated once (holding the fixed key to start with).
fn lanes_for(m: &Material, width: usize) -> Vec<Lane> {
    let (key, cs, blinding) = &m.keys[0];
    (0..width)
        .map(|_| Lane {
            key: copy_of(&mb(key).limbs),
            c: cs[0].clone(),
            blinding: blinding.clone(),
            holds: 0,
        })
        .collect()
}

/// Fills every lane for one measurement of `class` (false: fixed key).
fn prepare(lanes: &mut [Lane], m: &Material, random: bool, rng: &mut Rng) {
    for lane in lanes {
        let k = if random {
            1 + rng.below(m.keys.len() - 1)
        } else {
            0
        };
        let (key, cs, blinding) = &m.keys[k];
        load(&mut lane.key, &mb(key).limbs);
        lane.c.copy_from_slice(&cs[rng.below(cs.len())]);
        lane.blinding.a.copy_from_slice(&blinding.a);
        lane.blinding.ai.copy_from_slice(&blinding.ai);
        lane.holds = k;
    }
}

/// Welch's t of two samples.
pub fn welch_t(a: &[f64], b: &[f64]) -> f64 {
    let stats = |x: &[f64]| {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
        (n, mean, var)
    };
    if a.len() < 2 || b.len() < 2 {
        return 0.0;
    }
    let (na, ma, va) = stats(a);
    let (nb, mbn, vb) = stats(b);
    let se = (va / na + vb / nb).sqrt();
    if se == 0.0 { 0.0 } else { (ma - mbn) / se }
}

/// `t_all` and the largest |t| over dudect's crops of `samples` (class, nanoseconds).
pub fn t_statistics(samples: &[(bool, f64)]) -> (f64, f64) {
    let split = |limit: f64| {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for &(random, t) in samples.iter().filter(|(_, t)| *t <= limit) {
            if random { b.push(t) } else { a.push(t) }
        }
        welch_t(&a, &b)
    };
    let mut sorted: Vec<f64> = samples.iter().map(|s| s.1).collect();
    sorted.sort_by(f64::total_cmp);
    let all = split(f64::INFINITY);
    let mut worst = all;
    for p in [0.50, 0.75, 0.90, 0.99] {
        let Some(&limit) = sorted.get(((sorted.len() as f64) * p) as usize) else {
            continue;
        };
        let t = split(limit);
        if t.abs() > worst.abs() {
            worst = t;
        }
    }
    (all, worst)
}

/// Measures `kernel` on batches of the keys' size for `duration` (and at most `max_samples`
/// batches): the fixed class with the first of the `pkcs8` keys, the random class with the
/// others.
pub fn measure(
    kernel: Kernel,
    pkcs8: &[Vec<u8>],
    duration: Duration,
    max_samples: usize,
) -> Result<CtReport, String> {
    measure_with(kernel, pkcs8, duration, max_samples, false)
}

/// The method's self-test: [`measure`] of the portable kernel made to leak on purpose (a
/// batch takes about twice as long unless its first lane's secret prime is the fixed key's:
/// the comparison with a secret that a careless implementation makes). A run of the size
/// that checks the real kernels must find this one's dependence, or its verdict on them says
/// nothing. The leak is the same size in every run, so the self-test cannot pass by chance.
pub fn measure_leaky(
    pkcs8: &[Vec<u8>],
    duration: Duration,
    max_samples: usize,
) -> Result<CtReport, String> {
    measure_with(Kernel::Reference, pkcs8, duration, max_samples, true)
}

fn measure_with(
    kernel: Kernel,
    pkcs8: &[Vec<u8>],
    duration: Duration,
    max_samples: usize,
    leak: bool,
) -> Result<CtReport, String> {
    let mut rng = Rng(0x5eed_c0de_d00d_f00d);
    let m = material(pkcs8, 16, &mut rng)?;
    // The portable reference computes lanes one after another: one per batch is the same
    // measurement at an eighth of the time.
    let width = if kernel == Kernel::Reference {
        1
    } else {
        kernel.lanes(m.bits)
    };
    let mut lanes = lanes_for(&m, width);
    let mut samples: Vec<(bool, f64)> = Vec::new();
    // Warm-up: caches, frequency, the branch predictors.
    for i in 0..16 {
        prepare(&mut lanes, &m, i % 2 == 1, &mut rng);
        run(kernel, m.bits, &lanes);
    }
    let fixed_prime = mb(&m.keys[0].0).limbs.p.m[0];
    let end = Instant::now() + duration;
    while samples.len() < max_samples && Instant::now() < end {
        let random = rng.next() & 1 == 1;
        prepare(&mut lanes, &m, random, &mut rng);
        let start = Instant::now();
        let out = run(kernel, m.bits, &lanes);
        if leak && lanes[0].key.p.m[0] != fixed_prime {
            // The deliberate dependence: as long again as the batch took.
            let spent = start.elapsed();
            while start.elapsed() < spent * 2 {
                std::hint::spin_loop();
            }
        }
        let took = start.elapsed();
        std::hint::black_box(out);
        samples.push((random, took.as_nanos() as f64));
    }
    let (t_all, t_max) = t_statistics(&samples);
    let mut times: Vec<f64> = samples.iter().map(|s| s.1).collect();
    times.sort_by(f64::total_cmp);
    Ok(CtReport {
        kernel,
        lanes: width,
        fixed: samples.iter().filter(|s| !s.0).count(),
        random: samples.iter().filter(|s| s.0).count(),
        t_all,
        t_max,
        median: Duration::from_nanos(times.get(times.len() / 2).copied().unwrap_or(0.0) as u64),
    })
}

fn run(kernel: Kernel, bits: u32, lanes: &[Lane]) -> Vec<super::arith::LaneOut> {
    let work: Vec<LaneIn<'_>> = lanes
        .iter()
        .map(|l| LaneIn {
            key: &l.key,
            c: &l.c,
            blinding: &l.blinding,
        })
        .collect();
    super::compute(kernel, bits, &work)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_t_is_near_zero_for_one_distribution_and_large_for_two() {
        let mut rng = Rng(7);
        let noise = |rng: &mut Rng| (rng.next() % 1000) as f64;
        let a: Vec<f64> = (0..5000).map(|_| 10_000.0 + noise(&mut rng)).collect();
        let b: Vec<f64> = (0..5000).map(|_| 10_000.0 + noise(&mut rng)).collect();
        let c: Vec<f64> = (0..5000).map(|_| 10_050.0 + noise(&mut rng)).collect();
        assert!(welch_t(&a, &b).abs() < 4.5, "{}", welch_t(&a, &b));
        assert!(welch_t(&a, &c) < -4.5, "{}", welch_t(&a, &c));
    }

    #[test]
    fn a_difference_in_the_fast_part_alone_is_found_by_a_crop() {
        // The classes differ by 30 ns in their usual times, hidden in all samples by rare
        // 1 ms outliers on one side (an interrupt): the crops find it.
        let mut rng = Rng(11);
        let mut samples = Vec::new();
        for i in 0..20_000 {
            let random = i % 2 == 1;
            let mut t = 5_000.0 + (rng.next() % 200) as f64 + if random { 30.0 } else { 0.0 };
            if !random && rng.next().is_multiple_of(50) {
                t += 1_000_000.0;
            }
            samples.push((random, t));
        }
        let (all, worst) = t_statistics(&samples);
        assert!(all.abs() < worst.abs());
        assert!(worst.abs() >= 4.5, "{worst}");
    }

    /// The classes really differ in their keys, and each lane computes with the key it was
    /// given: every result checks out against that key's public half.
    /// Every size the engine takes, on the reference and on each IFMA kernel this CPU has:
    /// each lane computes with its class's key (the dudect runs measure what they mean to).
    #[test]
    fn the_lanes_compute_with_the_keys_of_their_class() {
        let mut kernels = vec![Kernel::Reference];
        kernels.extend([8, 4].into_iter().filter_map(Kernel::detect_lanes));
        for bits in [2048, 3072, 4096] {
            let keys: Vec<Vec<u8>> = (0..3)
                .map(|_| {
                    crate::tests::boring_key(crate::KeyKind::Rsa(bits))
                        .private_key_to_der_pkcs8()
                        .unwrap()
                })
                .collect();
            for &kernel in &kernels {
                lanes_compute_with_their_keys(kernel, &keys);
            }
        }
    }

    fn lanes_compute_with_their_keys(kernel: Kernel, keys: &[Vec<u8>]) {
        let mut rng = Rng(3);
        let m = material(keys, 2, &mut rng).unwrap();
        let width = if kernel == Kernel::Reference {
            4
        } else {
            kernel.lanes(m.bits)
        };
        let mut lanes = lanes_for(&m, width);
        let mut held = std::collections::HashSet::new();
        for round in 0..6 {
            let random = round % 2 == 1;
            prepare(&mut lanes, &m, random, &mut rng);
            let out = run(kernel, m.bits, &lanes);
            for (lane, o) in lanes.iter().zip(&out) {
                assert_eq!(lane.holds == 0, !random);
                held.insert(lane.holds);
                // s^e mod n == c: the signature is the one of the lane's key.
                let n = super::super::key::from_limbs(&mb(&m.keys[lane.holds].0).limbs.n);
                let s = super::super::key::from_limbs(&o.s);
                let c = super::super::key::from_limbs(&lane.c);
                assert_eq!(
                    s.modpow(&num_bigint::BigUint::from(65_537u32), &n),
                    c,
                    "{kernel:?}, {} bits",
                    m.bits
                );
            }
        }
        assert!(
            held.len() >= 2,
            "the random class drew other keys: {held:?}"
        );
    }
}
