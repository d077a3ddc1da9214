//! The mb engine against BoringSSL, and its IFMA kernel against its portable reference.

use super::arith::LaneIn;
use super::key::{be_to_limbs, from_limbs, limbs_to_be, neg_inv52, to_limbs};
use super::*;
use crate::tests::{boring_key, boring_verifies};
use crate::{PrivateKey, SignatureScheme, VerifyPolicy};
use boring::pkey::{PKey, Private};
use boring::rsa::Padding;
use num_bigint::BigUint;
use sluice_offload::{DispatcherBuilder, FallbackReason, Inline};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

struct TestKey {
    boring: PKey<Private>,
    key: Arc<PrivateKey>,
    n: BigUint,
}

fn test_key(bits: u32) -> TestKey {
    let boring = boring_key(KeyKind::Rsa(bits));
    let key =
        Arc::new(PrivateKey::from_pkcs8(&boring.private_key_to_der_pkcs8().unwrap()).unwrap());
    let n = BigUint::from_bytes_be(&boring.rsa().unwrap().n().to_vec());
    TestKey { boring, key, n }
}

/// BoringSSL's raw private-key operation (no padding): the expected answer.
fn boring_raw(k: &TestKey, input: &[u8]) -> Vec<u8> {
    let rsa = k.boring.rsa().unwrap();
    let mut out = vec![0u8; rsa.size() as usize];
    let len = rsa.private_decrypt(input, &mut out, Padding::NONE).unwrap();
    out.truncate(len);
    out
}

/// A pseudo-random number below n (xorshift; reproducible per seed).
fn below(n: &BigUint, seed: u64) -> BigUint {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut bytes = Vec::new();
    for _ in 0..(n.bits() / 8 + 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.push(x as u8);
    }
    BigUint::from_bytes_be(&bytes) % n
}

fn padded(x: &BigUint, len: usize) -> Vec<u8> {
    let b = x.to_bytes_be();
    let mut out = vec![0u8; len - b.len()];
    out.extend_from_slice(&b);
    out
}

/// Runs inputs through a kernel, one lane per (key, input).
fn kernel_results(kernel: Kernel, work: &[(&TestKey, Vec<u8>)]) -> Vec<Vec<u8>> {
    let bits = work[0].0.key.mb().unwrap().bits;
    let prepared: Vec<_> = work
        .iter()
        .map(|(k, input)| {
            let mbk = k.key.mb().unwrap();
            (
                mbk,
                be_to_limbs(input, mbk.nn()).unwrap(),
                mbk.take_blinding().unwrap(),
            )
        })
        .collect();
    let lanes: Vec<LaneIn<'_>> = prepared
        .iter()
        .map(|(k, c, b)| LaneIn {
            key: &k.limbs,
            c,
            blinding: b,
        })
        .collect();
    let outs = compute(kernel, bits, &lanes);
    outs.into_iter()
        .zip(&prepared)
        .map(|(o, (k, _, _))| {
            k.put_blinding(o.next);
            limbs_to_be(&o.s, bits as usize / 8)
        })
        .collect()
}

/// Every lane of one batch through `kernel` equals BoringSSL's raw private operation.
fn assert_lanes_match_boringssl(kernel: Kernel, work: &[(&TestKey, Vec<u8>)], what: &str) {
    let fast = kernel_results(kernel, work);
    for (i, (k, input)) in work.iter().enumerate() {
        assert_eq!(
            fast[i],
            boring_raw(k, input),
            "{kernel:?}, {what}, lane {i}"
        );
    }
}

#[test]
fn limbs_round_trip_and_the_montgomery_constant_inverts() {
    let n = BigUint::from_bytes_be(&[0xc3; 256]) | BigUint::from(1u8);
    let l = to_limbs(&n, 40);
    assert!(l.iter().all(|&x| x < 1 << 52));
    assert_eq!(from_limbs(&l), n);
    assert_eq!(limbs_to_be(&l, 256), n.to_bytes_be());
    assert_eq!(be_to_limbs(&n.to_bytes_be(), 40).unwrap(), l);
    // Too big for 20 limbs (1040 bits).
    assert!(be_to_limbs(&n.to_bytes_be(), 20).is_none());
    for m0 in [1u64, 3, 0xffff_ffff_ffff_ffff, 0x1234_5678_9abc_def1] {
        let k0 = neg_inv52(m0);
        assert_eq!(
            m0.wrapping_mul(k0) & ((1 << 52) - 1),
            (1 << 52) - 1,
            "{m0:x}"
        );
    }
}

#[test]
fn reference_kernel_matches_boringssl_raw_rsa_for_every_size() {
    // Keys are slow to generate: several 2048-bit keys, one of each larger size.
    let keys: Vec<TestKey> = [2048, 2048, 2048, 3072, 4096]
        .into_iter()
        .map(test_key)
        .collect();
    for (ki, k) in keys.iter().enumerate() {
        let len = k.n.bits().div_ceil(8) as usize;
        let n1 = &k.n - 1u8;
        let mut inputs = vec![
            BigUint::from(0u8),
            BigUint::from(1u8),
            BigUint::from(2u8),
            n1.clone(),
        ];
        let extra = if len == 256 { 40 } else { 6 };
        inputs.extend((0..extra).map(|i| below(&k.n, (ki * 1000 + i) as u64)));
        for x in &inputs {
            let input = padded(x, len);
            let got = kernel_results(Kernel::Reference, &[(k, input.clone())]);
            assert_eq!(got[0], boring_raw(k, &input), "key {ki} input {x:x}");
        }
    }
}

/// The IFMA kernels of both widths this CPU has.
fn ifma_kernels_here() -> Vec<Kernel> {
    [8, 4]
        .into_iter()
        .filter_map(Kernel::detect_lanes)
        .collect()
}

/// [`ifma_kernels_here`], saying so when there are none (the reference is tested anyway).
fn ifma_kernels() -> Vec<Kernel> {
    let kernels = ifma_kernels_here();
    if kernels.is_empty() {
        eprintln!("skipped: this CPU has no AVX-512 IFMA (the reference is tested anyway)");
    }
    kernels
}

#[test]
fn ifma_kernel_equals_the_reference_on_mixed_keys_and_partial_batches() {
    for kernel in ifma_kernels() {
        ifma_kernel_on_mixed_keys_and_partial_batches(kernel);
    }
}

fn ifma_kernel_on_mixed_keys_and_partial_batches(kernel: Kernel) {
    for bits in [2048, 3072, 4096] {
        let keys: Vec<TestKey> = (0..if bits == 2048 { 3 } else { 2 })
            .map(|_| test_key(bits))
            .collect();
        let len = bits as usize / 8;
        // 1, 3, 8 and 11 lanes (a full batch and a partial one), keys interleaved, with 0,
        // 1 and n-1 among the inputs.
        for count in [1usize, 3, 8, 11] {
            let work: Vec<(&TestKey, Vec<u8>)> = (0..count)
                .map(|i| {
                    let k = &keys[i % keys.len()];
                    let x = match i {
                        0 => &k.n - 1u8,
                        1 => BigUint::from(0u8),
                        2 => BigUint::from(1u8),
                        _ => below(&k.n, (bits as usize * 100 + count * 10 + i) as u64),
                    };
                    (k, padded(&x, len))
                })
                .collect();
            assert_lanes_match_boringssl(kernel, &work, &format!("{bits} bits, {count} lanes"));
        }
    }
}

#[test]
fn ifma_kernel_matches_boringssl_on_many_messages() {
    // As many rounds of 3072 and 4096 as the time of 2048's allows (a 4096 batch is ~8x).
    for (bits, rounds) in [(2048u32, 128u64), (3072, 32), (4096, 16)] {
        let keys: Vec<TestKey> = (0..8).map(|_| test_key(bits)).collect();
        let len = bits as usize / 8;
        for kernel in ifma_kernels() {
            for round in 0..rounds {
                let work: Vec<(&TestKey, Vec<u8>)> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| (k, padded(&below(&k.n, round * 8 + i as u64), len)))
                    .collect();
                assert_lanes_match_boringssl(kernel, &work, &format!("{bits} bits, round {round}"));
            }
        }
    }
}

/// A CPU that has AVX-512 IFMA runs the IFMA kernels' tests: they may not skip there (a
/// detection that failed would make every IFMA test above pass having tested nothing).
#[test]
fn an_ifma_cpu_runs_the_ifma_kernels() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let has = |f: &str| flags.contains(&f);
    let here = ifma_kernels_here();
    match (has("avx512ifma") && has("avx512f"), has("avx512vl")) {
        (true, true) => assert_eq!(here.len(), 2, "8 and 4 lanes: {here:?}"),
        (true, false) => assert_eq!(here.len(), 1, "8 lanes: {here:?}"),
        (false, _) => assert!(here.is_empty(), "{here:?} without avx512ifma in {flags:?}"),
    }
}

/// Every batch through the kernel, even a batch of one.
const ALWAYS_KERNEL: MbConfig = MbConfig {
    max_wait: std::time::Duration::from_micros(200),
    capacity: 256,
    min_batch: Some(1),
    on_worker: false,
    lanes: None,
};

fn engine_kernel() -> Kernel {
    Kernel::detect().unwrap_or(Kernel::Reference)
}

/// Every kernel this CPU has (both IFMA widths where it has them), or the reference.
fn engine_kernels() -> Vec<Kernel> {
    let mut k = ifma_kernels_here();
    if k.is_empty() {
        k.push(Kernel::Reference);
    }
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rsa_scheme_and_decryption_through_the_engine_thread() {
    every_rsa_scheme_and_decryption(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rsa_scheme_and_decryption_on_the_submitting_worker() {
    every_rsa_scheme_and_decryption(true).await;
}

async fn every_rsa_scheme_and_decryption(on_worker: bool) {
    let keys = [test_key(2048), test_key(2048), test_key(3072)];
    for kernel in engine_kernels() {
        every_rsa_scheme_and_decryption_with(on_worker, kernel, &keys).await;
    }
}

async fn every_rsa_scheme_and_decryption_with(on_worker: bool, kernel: Kernel, keys: &[TestKey]) {
    let mb = Arc::new(
        Mb::with_kernel(
            MbConfig {
                on_worker,
                ..ALWAYS_KERNEL
            },
            Arc::new(AtomicUsize::new(0)),
            kernel,
            None,
        )
        .unwrap(),
    );
    let d = Arc::new(
        DispatcherBuilder::new(Arc::new(Inline::new(crate::run)))
            .engine(mb)
            .deadline(std::time::Duration::from_secs(30))
            .build(),
    );
    let mut tasks = Vec::new();
    for (ki, k) in keys.iter().enumerate() {
        for &scheme in k.key.schemes() {
            for i in 0..3 {
                let msg = format!("transcript {ki} {scheme:?} {i}").into_bytes();
                let job = KeyJob::sign(k.key.clone(), scheme, &msg, VerifyPolicy::Rsa).unwrap();
                let d = d.clone();
                tasks.push(tokio::spawn(
                    async move { (ki, scheme, msg, d.run(job).await) },
                ));
            }
        }
    }
    for t in tasks {
        let (ki, scheme, msg, sig) = t.await.unwrap();
        let sig = sig.unwrap();
        assert!(
            boring_verifies(&keys[ki].boring, scheme, &msg, &sig),
            "{kernel:?} {ki} {scheme:?}"
        );
    }
    // Decryption: BoringSSL encrypts with PKCS#1 padding; the raw result holds it.
    let k = &keys[0];
    let secret = b"premaster secret, 48 bytes long, for TLS 1.2 !!";
    let mut ct = vec![0u8; 256];
    let len = k
        .boring
        .rsa()
        .unwrap()
        .public_encrypt(secret, &mut ct, Padding::PKCS1)
        .unwrap();
    assert_eq!(len, 256);
    let raw = d
        .run(KeyJob::decrypt(k.key.clone(), &ct).unwrap())
        .await
        .unwrap();
    assert_eq!(raw, boring_raw(k, &ct));
    assert!(raw.ends_with(secret));
    let c = &d.counters()[0];
    assert_eq!(c.engine, "mb");
    assert_eq!(c.failed, 0, "{c:?}");
    assert_eq!(
        c.completed,
        (keys.iter().map(|k| k.key.schemes().len()).sum::<usize>() * 3 + 1) as u64
    );
    assert!(
        c.batch_size.sum >= c.completed,
        "every job went through a batch: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_lane_is_caught_and_its_job_falls_back() {
    corrupted_lane_falls_back(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_lane_is_caught_on_the_submitting_worker_too() {
    corrupted_lane_falls_back(true).await;
}

async fn corrupted_lane_falls_back(on_worker: bool) {
    let k = test_key(2048);
    let mb = Mb::with_kernel(
        MbConfig {
            on_worker,
            ..ALWAYS_KERNEL
        },
        Arc::new(AtomicUsize::new(0)),
        engine_kernel(),
        Some(0),
    )
    .unwrap();
    let d = DispatcherBuilder::new(Arc::new(Inline::new(crate::run)))
        .engine(Arc::new(mb))
        .breaker(sluice_offload::BreakerConfig {
            failures: 1000,
            ..Default::default()
        })
        .build();
    for i in 0..4 {
        let msg = format!("m{i}").into_bytes();
        let job = KeyJob::sign(
            k.key.clone(),
            SignatureScheme::RsaPssSha256,
            &msg,
            VerifyPolicy::Rsa,
        )
        .unwrap();
        let sig = d.run(job).await.unwrap();
        assert!(boring_verifies(
            &k.boring,
            SignatureScheme::RsaPssSha256,
            &msg,
            &sig
        ));
    }
    let c = d.counters();
    assert_eq!(
        c[0].failed, 4,
        "lane 0 of each one-job batch was corrupted: {:?}",
        c[0]
    );
    assert_eq!(c[0].fell_back(FallbackReason::Error), 4);
    assert_eq!(c[1].completed, 4, "inline signed them instead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_batches_are_signed_in_software_on_the_engine_thread() {
    let k = test_key(2048);
    // The kernel would corrupt lane 0: a job that succeeds without falling back was not
    // computed by it.
    let mb = Mb::with_kernel(
        MbConfig {
            min_batch: Some(8),
            ..ALWAYS_KERNEL
        },
        Arc::new(AtomicUsize::new(0)),
        engine_kernel(),
        Some(0),
    )
    .unwrap();
    let d = DispatcherBuilder::new(Arc::new(Inline::new(crate::run)))
        .engine(Arc::new(mb))
        .build();
    let job = KeyJob::sign(
        k.key.clone(),
        SignatureScheme::RsaPkcs1Sha256,
        b"lone",
        VerifyPolicy::Rsa,
    )
    .unwrap();
    let sig = d.run(job).await.unwrap();
    assert!(boring_verifies(
        &k.boring,
        SignatureScheme::RsaPkcs1Sha256,
        b"lone",
        &sig
    ));
    let c = d.counters();
    assert_eq!(
        (c[0].completed, c[0].failed, c[1].completed),
        (1, 0, 0),
        "{c:?}"
    );
}

/// Where the measured costs put a partial batch, it goes: here (set, RSA-4096, which no
/// other test measures) one software operation 1 ms and a batch 2.5 ms, so two jobs are
/// signed in software and three on the kernel, whose corrupted lane 0 gives it away.
#[test]
fn a_partial_batch_goes_where_the_measured_costs_say() {
    let k = test_key(4096);
    let kernel = engine_kernel();
    crate::cost::set_for_test(4096, std::time::Duration::from_micros(1000));
    crossover::set_for_test(4096, kernel, std::time::Duration::from_micros(2500));
    let jobs = |n: usize| -> Vec<KeyJob> {
        (0..n)
            .map(|i| {
                KeyJob::sign(
                    k.key.clone(),
                    SignatureScheme::RsaPkcs1Sha256,
                    &[i as u8],
                    VerifyPolicy::Rsa,
                )
                .unwrap()
            })
            .collect()
    };
    let two = compute_jobs(kernel, None, Some(0), &jobs(2));
    assert!(
        two.iter().all(Result::is_ok),
        "two jobs in software: {two:?}"
    );
    let three = compute_jobs(kernel, None, Some(0), &jobs(3));
    assert!(
        matches!(three[0], Err(EngineError::WrongResult(_))),
        "three jobs on the kernel, lane 0 corrupted: {three:?}"
    );
    assert!(three[1..].iter().all(Result::is_ok));
    // The operator's number wins over the measurement.
    let fixed = compute_jobs(kernel, Some(4), Some(0), &jobs(3));
    assert!(fixed.iter().all(Result::is_ok), "{fixed:?}");
}

/// Loading a key measures a full batch on each IFMA kernel this CPU has (none without IFMA).
#[test]
fn calibrating_a_key_times_a_batch_on_each_ifma_kernel_here() {
    let k = test_key(3072);
    assert_eq!(crossover::batch_cost(3072, Kernel::Ifma), None);
    crate::calibrate(&k.key);
    assert!(crate::cost::inline_cost(3072).is_some());
    let here = ifma_kernels_here();
    for kernel in &here {
        assert!(
            crossover::batch_cost(3072, kernel.for_bits(3072)).is_some(),
            "{kernel:?}"
        );
    }
    if here.is_empty() {
        assert_eq!(crossover::batch_cost(3072, Kernel::Ifma), None);
    }
    assert_eq!(crossover::batch_cost(3072, Kernel::Reference), None);
}

#[test]
fn other_keys_are_unsupported() {
    let ec = boring_key(KeyKind::EcdsaP256);
    let key = Arc::new(PrivateKey::from_pkcs8(&ec.private_key_to_der_pkcs8().unwrap()).unwrap());
    let mb = Mb::with_kernel(
        ALWAYS_KERNEL,
        Arc::new(AtomicUsize::new(0)),
        Kernel::Reference,
        None,
    )
    .unwrap();
    let job = KeyJob::sign(
        key,
        SignatureScheme::EcdsaP256Sha256,
        b"m",
        VerifyPolicy::Rsa,
    )
    .unwrap();
    assert_eq!(mb.submit(job).err(), Some(Reject::Unsupported));
}

/// Valgrind's memcheck client requests (the magic sequence of `valgrind.h`, x86-64), for the
/// constant-time test: outside valgrind they do nothing and return the default.
#[cfg(target_arch = "x86_64")]
mod memcheck {
    const MC_BASE: usize = ((b'M' as usize) << 24) | ((b'C' as usize) << 16);
    const RUNNING_ON_VALGRIND: usize = 0x1001;

    #[expect(unsafe_code, reason = "valgrind's client-request instruction sequence")]
    fn request(default: usize, args: [usize; 6]) -> usize {
        let result: usize;
        // SAFETY: the four rotations turn rdi by 128 bits (a no-op) and `xchg rbx, rbx` does
        // nothing on a CPU; valgrind recognises the sequence and reads the six words at rax
        // (a live array) as a request, writing its answer to rdx. Nothing else changes.
        unsafe {
            std::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                inout("rdx") default => result,
                in("rax") args.as_ptr(),
                inout("rdi") 0usize => _,
                options(nostack),
            );
        }
        result
    }

    pub(super) fn running_on_valgrind() -> bool {
        request(0, [RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0]) != 0
    }

    /// Marks `v`'s bytes undefined: memcheck then reports any branch or address computed
    /// from them.
    pub(super) fn secret<T>(v: &[T]) {
        request(
            0,
            [MC_BASE + 1, v.as_ptr() as usize, size_of_val(v), 0, 0, 0],
        );
    }

    /// Marks `v`'s bytes defined again (a result that is public once computed).
    pub(super) fn public<T>(v: &[T]) {
        request(
            0,
            [MC_BASE + 2, v.as_ptr() as usize, size_of_val(v), 0, 0, 0],
        );
    }
}

/// Constant time, checked by memcheck: the primes, their Montgomery constants, the private
/// exponents' windows, `q^-1` and the blinding pair are marked undefined, so any branch or
/// memory index that depends on them is reported, and valgrind's `--error-exitcode` fails the
/// run. It runs the portable kernel (valgrind does not execute AVX-512); the IFMA kernel is the
/// same generic code over another lane type, whose selections and subtractions are mask
/// blends. `scripts/ct-check` runs it; `scripts/test` calls that.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "needs valgrind: scripts/ct-check runs it"]
fn reference_kernel_is_constant_time_under_memcheck() {
    assert!(
        memcheck::running_on_valgrind(),
        "run this test under valgrind: scripts/ct-check"
    );
    let k = test_key(2048);
    let mbk = k.key.mb().unwrap();
    let input = padded(&below(&k.n, 7), 256);
    let expected = boring_raw(&k, &input);
    let c = be_to_limbs(&input, mbk.nn()).unwrap();
    let blinding = mbk.take_blinding().unwrap();
    let key = &mbk.limbs;
    for h in [&key.p, &key.q] {
        for v in [&h.m, &h.one, &h.r2, &h.r3, &h.windows] {
            memcheck::secret(v);
        }
        memcheck::secret(std::slice::from_ref(&h.k0));
    }
    memcheck::secret(&key.qinv_r);
    memcheck::secret(&blinding.a);
    memcheck::secret(&blinding.ai);
    let out = super::arith::private_reference::<20, 40>(&[LaneIn {
        key,
        c: &c,
        blinding: &blinding,
    }]);
    memcheck::public(&out[0].s);
    assert_eq!(limbs_to_be(&out[0].s, 256), expected);
}

/// The exponent windows span the primes' bits, so a key whose CRT exponents are not reduced
/// (d_p >= p: valid arithmetic, but longer than the windows) is left to the software engine
/// rather than computed wrong.
#[test]
fn keys_with_unreduced_crt_exponents_are_not_taken() {
    let k = test_key(2048);
    let mut c = k.key.raw_rsa.as_ref().unwrap().components().unwrap();
    assert!(key::MbKey::new(&c).is_some());
    let p = BigUint::from_bytes_be(&c.p);
    let dp = BigUint::from_bytes_be(&c.dp) + (&p - 1u8);
    c.dp = dp.to_bytes_be();
    assert!(key::MbKey::new(&c).is_none());
}
