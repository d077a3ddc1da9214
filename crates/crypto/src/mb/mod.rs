//! The `mb` engine: RSA private-key operations eight at a time, one per 64-bit lane of
//! AVX-512 IFMA (`vpmadd52luq`/`vpmadd52huq`), the idea of Intel's QAT_SW (crypto_mb) that
//! vivo used to double its RSA handshakes.
//!
//! A batch holds up to eight jobs of one modulus size (2048, 3072 or 4096 bits; any keys,
//! signatures and decryptions mixed). Each lane does what a careful software RSA does:
//! base blinding with a per-key pair squared after each use, both CRT halves as
//! fixed-window (4-bit) Montgomery exponentiations in 52-bit limbs, Garner's
//! recombination, unblinding, and the result is checked with the public key before it
//! leaves the process, in the lanes too (the Lenstra check: `s^e mod n` must give the input
//! back; a wrong lane is an engine failure and its job falls back; the other lanes are
//! unaffected).
//!
//! **Constant time.** The kernel ([`arith`]) has no branch and no memory index that depends
//! on a secret: sizes and loop counts are public, the window table is scanned whole with
//! masked moves, and the final subtractions are masked. Padding, limb conversion and the
//! public-key check work on public data, like aws-lc's own. The
//! blinding keeps the exponentiation's input unknown to an attacker in any case. Checked:
//! `scripts/ct-check` (part of the test command) runs the portable kernel under valgrind
//! memcheck with the primes, their constants, the exponent windows, `q^-1` and the blinding
//! pair marked undefined, so a branch or an address computed from them fails the run. It
//! caught LLVM compiling the portable masked select into a branch on the window (the mask
//! now goes through `black_box`). Valgrind cannot run AVX-512: the IFMA kernels' time is
//! measured instead, by dudect ([`ct`]: Welch's t between batches with a fixed key and with
//! random keys, `sluice ct-check`, `bench/ct`; a smoke run in CI).
//!
//! **Where batches run**: by default on the event-loop worker that submits a batch's eighth
//! job (a partial batch: on the submitter's runtime once its other ready tasks have run),
//! which measured up to 10% faster than handing batches to a thread on a shared core
//! (`docs/ARCHITECTURE.md`); `on_worker = false` keeps the engine's own thread:
//!
//! **Batching** on the thread is the [`BatchQueue`]'s: a batch is flushed when full, when its oldest job
//! has waited `max_wait`, or at once when every possible submitter is already waiting. The
//! gateway passes no handshake count, so the kernel thread takes whatever has queued each
//! time it is free: a lone handshake never waits, and under load batches fill while the
//! previous one computes.
//!
//! Without AVX-512 IFMA the engine answers `Unsupported` and the chain falls through. The
//! same arithmetic runs portably in `u64` ([`arith::private_reference`]) and is tested on
//! every machine; on machines with IFMA the tests also compare both bit for bit.

pub(crate) mod arith;
pub(crate) mod crossover;
pub mod ct;
#[cfg(target_arch = "x86_64")]
pub(crate) mod ifma;
pub(crate) mod key;
pub(crate) mod lanes;
pub(crate) mod pad;
mod prepare;

use crate::job::KeyJob;
use crate::key::KeyKind;
use arith::{CheckIn, LaneIn, LaneOut};
use key::MbKey;
use sluice_offload::{
    BatchConfig, BatchQueue, Engine, EngineCounters, EngineError, Pending, Reject,
};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// Which arithmetic computes the batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// AVX-512 IFMA on 512-bit registers, eight lanes.
    Ifma,
    /// AVX-512 IFMA on 256-bit registers, four lanes, for RSA-2048 (`mb_lanes = 4`): where
    /// 512-bit instructions issue at half the rate of 256-bit ones (AMD Zen 4), a batch takes
    /// half the time of eight lanes (0.7 against 1.3 ms) for 5-11% fewer signatures a
    /// second. RSA-3072 and 4096 measured 15% and 27% slower on four lanes: they keep eight.
    Ifma256,
    /// The portable reference, one lane at a time (tests; never faster than `inline`).
    Reference,
}

impl Kernel {
    /// The eight-lane IFMA kernel when this CPU has IFMA (the most signatures per core).
    pub fn detect() -> Option<Kernel> {
        #[cfg(target_arch = "x86_64")]
        if ifma::ifma_available() {
            return Some(Kernel::Ifma);
        }
        None
    }

    /// The kernel for `lanes` per RSA-2048 batch (4 or 8; `None`: [`Kernel::detect`]'s
    /// choice) when this CPU has it.
    pub fn choose(lanes: Option<usize>) -> Option<Kernel> {
        match lanes {
            None => Kernel::detect(),
            Some(n) => Kernel::detect_lanes(n),
        }
    }

    /// The kernel of the given width (`4` or `8` lanes) when this CPU has it.
    pub fn detect_lanes(lanes: usize) -> Option<Kernel> {
        #[cfg(target_arch = "x86_64")]
        match lanes {
            8 if ifma::ifma_available() => return Some(Kernel::Ifma),
            4 if ifma::ifma256_available() => return Some(Kernel::Ifma256),
            _ => {}
        }
        let _ = lanes;
        None
    }

    /// The kernel that computes a modulus of `bits`: four lanes serve RSA-2048 only.
    fn for_bits(self, bits: u32) -> Kernel {
        match self {
            Kernel::Ifma256 if bits != 2048 => Kernel::Ifma,
            k => k,
        }
    }

    /// Operations computed together for a modulus of `bits`.
    pub fn lanes(self, bits: u32) -> usize {
        match self.for_bits(bits) {
            Kernel::Ifma256 => 4,
            _ => 8,
        }
    }

    /// [`Kernel::lanes`] for a batch key (`Job::batch_key`: the modulus size for RSA).
    fn lanes_for_key(self, key: u64) -> usize {
        self.lanes(u32::try_from(key).unwrap_or(0))
    }
}

/// `mb` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MbConfig {
    /// Longest a job waits for company (only when a handshake count says more may come).
    pub max_wait: Duration,
    /// Jobs queued at once before the engine answers busy.
    pub capacity: usize,
    /// Smaller batches are computed one job at a time with the software primitive (on the
    /// engine's thread): eight lanes cost the same time as one, so a lone handshake would
    /// otherwise wait for a whole batch's computation. `None`: where this CPU's measured
    /// costs put the line ([`crossover`]: eight on AMD Zen 4, four on an Intel Xeon).
    pub min_batch: Option<usize>,
    /// Run the kernel on the worker that submits a batch's eighth job (or, for a partial
    /// batch, on the worker that submitted, once its other ready tasks have run) instead of
    /// on the engine's own thread.
    pub on_worker: bool,
    /// Lanes per RSA-2048 batch: 4 (256-bit IFMA, half the time per batch) or 8 (512-bit,
    /// the most signatures per core); `None`: [`Kernel::detect`]'s choice (8).
    pub lanes: Option<usize>,
}

impl Default for MbConfig {
    fn default() -> Self {
        MbConfig {
            max_wait: Duration::from_micros(200),
            capacity: 256,
            min_batch: None,
            on_worker: true,
            lanes: None,
        }
    }
}

/// Where batches are computed.
enum Runner {
    /// On the engine's thread, fed by a batching queue.
    Thread(BatchQueue<KeyJob>),
    /// On the submitting worker.
    Worker(Arc<WorkerBatches>),
}

/// The engine.
pub struct Mb {
    queue: Option<Runner>,
    counters: Arc<EngineCounters>,
    capacity: usize,
}

type Waiting = (
    KeyJob,
    tokio::sync::oneshot::Sender<Result<Vec<u8>, EngineError>>,
);

/// Batches computed on the submitting worker: the submission that makes eight of one size
/// computes them there and then; fewer are computed by a task spawned on the submitter's
/// runtime after it yields twice, so the handshakes already runnable on that worker add
/// their jobs first (the "every submitter is waiting" flush, without a count).
struct WorkerBatches {
    kernel: Kernel,
    corrupt_lane: Option<usize>,
    /// The operator's `mb_min_batch` (`None`: [`crossover`]'s measured line).
    min_batch: Option<usize>,
    counters: Arc<EngineCounters>,
    queued: std::sync::Mutex<Vec<Waiting>>,
    flush_scheduled: std::sync::atomic::AtomicBool,
}

impl WorkerBatches {
    fn push(self: &Arc<Self>, job: KeyJob) -> Pending<Vec<u8>> {
        use std::sync::atomic::Ordering;
        let (tx, pending) = sluice_offload::completer();
        let key = sluice_offload::Job::batch_key(&job);
        let full = {
            let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
            q.push((job, tx));
            let same = q
                .iter()
                .filter(|(j, _)| sluice_offload::Job::batch_key(j) == key)
                .count();
            (same >= self.kernel.lanes_for_key(key)).then(|| {
                let (take, keep): (Vec<_>, Vec<_>) = q
                    .drain(..)
                    .partition(|(j, _)| sluice_offload::Job::batch_key(j) == key);
                *q = keep;
                take
            })
        };
        if let Some(batch) = full {
            self.run(batch, sluice_offload::FlushReason::Full);
        } else if !self.flush_scheduled.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let me = self.clone();
                    rt.spawn(async move {
                        tokio::task::yield_now().await;
                        tokio::task::yield_now().await;
                        me.flush_scheduled.store(false, Ordering::Release);
                        me.flush_all();
                    });
                }
                Err(_) => {
                    self.flush_scheduled.store(false, Ordering::Release);
                    self.flush_all();
                }
            }
        }
        pending
    }

    fn queued(&self) -> usize {
        self.queued.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn flush_all(&self) {
        let mut all = std::mem::take(&mut *self.queued.lock().unwrap_or_else(|e| e.into_inner()));
        while let Some((first, _)) = all.first() {
            let key = sluice_offload::Job::batch_key(first);
            let (mut group, rest): (Vec<_>, Vec<_>) = all
                .into_iter()
                .partition(|(j, _)| sluice_offload::Job::batch_key(j) == key);
            all = rest;
            while !group.is_empty() {
                let tail = group.split_off(group.len().min(self.kernel.lanes_for_key(key)));
                self.run(group, sluice_offload::FlushReason::AllWaiting);
                group = tail;
            }
        }
    }

    fn run(&self, batch: Vec<Waiting>, reason: sluice_offload::FlushReason) {
        self.counters.flushed(reason, batch.len());
        let (jobs, senders): (Vec<KeyJob>, Vec<_>) = batch.into_iter().unzip();
        let results = compute_jobs(self.kernel, self.min_batch, self.corrupt_lane, &jobs);
        for (tx, r) in senders.into_iter().zip(results) {
            let _ = tx.send(r);
        }
    }
}

impl std::fmt::Debug for Mb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mb")
            .field("available", &self.queue.is_some())
            .finish_non_exhaustive()
    }
}

impl Mb {
    /// The engine on this CPU's IFMA kernel; without IFMA it exists and answers
    /// `Unsupported` to every job. `potential` counts the submitters that could add to a
    /// batch (0: flush whenever the kernel thread is free).
    /// `config.lanes` picks the width; a width this CPU lacks is treated as no IFMA.
    pub fn new(config: MbConfig, potential: Arc<AtomicUsize>) -> std::io::Result<Mb> {
        match Kernel::choose(config.lanes) {
            Some(k) => Self::with_kernel(config, potential, k, None),
            None => Ok(Mb {
                queue: None,
                counters: Arc::new(EngineCounters::new("mb")),
                capacity: 0,
            }),
        }
    }

    /// The engine on a given kernel; `corrupt_lane` flips a bit of that lane's result in
    /// every batch (fault-injection tests: the check must catch it).
    pub fn with_kernel(
        config: MbConfig,
        potential: Arc<AtomicUsize>,
        kernel: Kernel,
        corrupt_lane: Option<usize>,
    ) -> std::io::Result<Mb> {
        let counters = Arc::new(EngineCounters::new("mb"));
        let min_batch = config.min_batch;
        if config.on_worker {
            return Ok(Mb {
                queue: Some(Runner::Worker(Arc::new(WorkerBatches {
                    kernel,
                    corrupt_lane,
                    min_batch,
                    counters: counters.clone(),
                    queued: Default::default(),
                    flush_scheduled: Default::default(),
                }))),
                counters,
                capacity: config.capacity,
            });
        }
        let queue = BatchQueue::new(
            "sluice-mb",
            BatchConfig {
                // The largest width; `compute` splits a batch for a narrower kernel.
                max_batch: 8,
                max_wait: config.max_wait,
            },
            potential,
            counters.clone(),
            move |jobs| compute_jobs(kernel, min_batch, corrupt_lane, &jobs),
        )?;
        Ok(Mb {
            queue: Some(Runner::Thread(queue)),
            counters,
            capacity: config.capacity,
        })
    }
}

impl Engine<KeyJob> for Mb {
    fn name(&self) -> &str {
        "mb"
    }

    fn submit(&self, job: KeyJob) -> Result<Pending<Vec<u8>>, Reject> {
        let Some(queue) = &self.queue else {
            return Err(Reject::Unsupported);
        };
        if !matches!(job.key_kind(), KeyKind::Rsa(2048 | 3072 | 4096)) || job.mb_key().is_none() {
            return Err(Reject::Unsupported);
        }
        match queue {
            Runner::Thread(q) => {
                if q.queued() >= self.capacity {
                    return Err(Reject::Busy);
                }
                Ok(q.push(job))
            }
            Runner::Worker(w) => {
                if w.queued() >= self.capacity {
                    return Err(Reject::Busy);
                }
                Ok(w.push(job))
            }
        }
    }

    fn counters(&self) -> Option<Arc<EngineCounters>> {
        Some(self.counters.clone())
    }
}

/// Computes queued jobs of one modulus size: together on the kernel, or one at a time in
/// software where that is cheaper ([`crossover::on_kernel`]).
fn compute_jobs(
    kernel: Kernel,
    min_batch: Option<usize>,
    corrupt_lane: Option<usize>,
    jobs: &[KeyJob],
) -> Vec<Result<Vec<u8>, EngineError>> {
    let class = jobs.first().map_or(0, sluice_offload::Job::batch_key);
    if crossover::on_kernel(kernel, min_batch, class, jobs.len()) {
        run_batch(kernel, corrupt_lane, jobs)
    } else {
        jobs.iter().map(crate::job::run).collect()
    }
}

/// One lane's job, prepared.
struct Prepared<'a> {
    index: usize,
    key: &'a MbKey,
    input: Vec<u64>,
    blinding: arith::Blinding,
}

/// Computes a batch (jobs of one modulus size): prepare, kernel, check.
pub(crate) fn run_batch(
    kernel: Kernel,
    corrupt_lane: Option<usize>,
    jobs: &[KeyJob],
) -> Vec<Result<Vec<u8>, EngineError>> {
    let mut results: Vec<Option<Result<Vec<u8>, EngineError>>> = vec![None; jobs.len()];
    let mut prepared = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.iter().enumerate() {
        match job.mb_prepare() {
            Ok((key, input)) => match key.take_blinding() {
                Some(blinding) => prepared.push(Prepared {
                    index,
                    key,
                    input,
                    blinding,
                }),
                None => {
                    results[index] = Some(Err(EngineError::Failed(
                        "no blinding value could be made".into(),
                    )))
                }
            },
            Err(e) => results[index] = Some(Err(e)),
        }
    }
    // Jobs of one batch share a modulus size (the batch key); group anyway.
    let mut sizes: Vec<u32> = prepared.iter().map(|p| p.key.bits).collect();
    sizes.dedup();
    for bits in sizes {
        let group: Vec<&Prepared<'_>> = prepared.iter().filter(|p| p.key.bits == bits).collect();
        let lanes: Vec<LaneIn<'_>> = group
            .iter()
            .map(|p| LaneIn {
                key: &p.key.limbs,
                c: &p.input,
                blinding: &p.blinding,
            })
            .collect();
        let mut outs = compute(kernel, bits, &lanes);
        if let Some(lane) = corrupt_lane
            && let Some(out) = outs.get_mut(lane)
        {
            out.s[3] ^= 1 << 7;
        }
        // The check before release, in the lanes too (grouped by public exponent).
        let checks: Vec<CheckIn<'_>> = group
            .iter()
            .zip(&outs)
            .map(|(p, out)| CheckIn {
                key: &p.key.limbs,
                s: &out.s,
                c: &p.input,
            })
            .collect();
        let ok = check(kernel, bits, &checks);
        for ((p, out), ok) in group.iter().zip(outs).zip(ok) {
            p.key.put_blinding(out.next);
            results[p.index] = Some(if ok {
                Ok(key::limbs_to_be(&out.s, bits as usize / 8))
            } else {
                Err(EngineError::WrongResult(
                    "an mb lane failed its public-key check (s^e mod n is not the input)".into(),
                ))
            });
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(EngineError::Failed("job not computed".into()))))
        .collect()
}

/// The public-key check of every lane (lanes grouped by exponent).
fn check(kernel: Kernel, bits: u32, lanes: &[CheckIn<'_>]) -> Vec<bool> {
    let mut ok = vec![false; lanes.len()];
    let mut exponents: Vec<u64> = lanes.iter().map(|l| l.key.e).collect();
    exponents.sort_unstable();
    exponents.dedup();
    for e in exponents {
        let idx: Vec<usize> = (0..lanes.len()).filter(|&i| lanes[i].key.e == e).collect();
        let group: Vec<CheckIn<'_>> = idx
            .iter()
            .map(|&i| CheckIn {
                key: lanes[i].key,
                s: lanes[i].s,
                c: lanes[i].c,
            })
            .collect();
        let results: Vec<bool> = match kernel.for_bits(bits) {
            #[cfg(target_arch = "x86_64")]
            Kernel::Ifma if ifma::ifma_available() => group
                .chunks(8)
                .flat_map(|chunk| check_ifma(bits, chunk, e))
                .collect(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Ifma256 if ifma::ifma256_available() => group
                .chunks(4)
                .flat_map(|chunk| check_ifma4(bits, chunk, e))
                .collect(),
            _ => match bits {
                2048 => arith::public_check_reference::<40>(&group, e),
                3072 => arith::public_check_reference::<60>(&group, e),
                _ => arith::public_check_reference::<80>(&group, e),
            },
        };
        for (i, r) in idx.into_iter().zip(results) {
            ok[i] = r;
        }
    }
    ok
}

#[cfg(target_arch = "x86_64")]
#[expect(unsafe_code, reason = "calls the target_feature kernel")]
fn check_ifma(bits: u32, lanes: &[CheckIn<'_>], e: u64) -> Vec<bool> {
    // SAFETY: the caller checked that this CPU has AVX-512 F and IFMA.
    unsafe {
        match bits {
            2048 => ifma::public_check_ifma::<40>(lanes, e),
            3072 => ifma::public_check_ifma::<60>(lanes, e),
            _ => ifma::public_check_ifma::<80>(lanes, e),
        }
    }
}

/// The kernel for one modulus size.
pub(crate) fn compute(kernel: Kernel, bits: u32, lanes: &[LaneIn<'_>]) -> Vec<LaneOut> {
    match kernel.for_bits(bits) {
        #[cfg(target_arch = "x86_64")]
        Kernel::Ifma if ifma::ifma_available() => lanes
            .chunks(8)
            .flat_map(|chunk| ifma(bits, chunk))
            .collect(),
        #[cfg(target_arch = "x86_64")]
        Kernel::Ifma256 if ifma::ifma256_available() => lanes
            .chunks(4)
            .flat_map(|chunk| ifma4(bits, chunk))
            .collect(),
        _ => match bits {
            2048 => arith::private_reference::<20, 40>(lanes),
            3072 => arith::private_reference::<30, 60>(lanes),
            _ => arith::private_reference::<40, 80>(lanes),
        },
    }
}

#[cfg(target_arch = "x86_64")]
#[expect(unsafe_code, reason = "calls the target_feature kernel")]
fn ifma(bits: u32, lanes: &[LaneIn<'_>]) -> Vec<LaneOut> {
    // SAFETY: `compute` checked that this CPU has AVX-512 F and IFMA.
    unsafe {
        match bits {
            2048 => ifma::private_ifma::<20, 40>(lanes),
            3072 => ifma::private_ifma::<30, 60>(lanes),
            _ => ifma::private_ifma::<40, 80>(lanes),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[expect(unsafe_code, reason = "calls the target_feature kernel")]
fn ifma4(bits: u32, lanes: &[LaneIn<'_>]) -> Vec<LaneOut> {
    assert_eq!(bits, 2048, "four lanes serve RSA-2048 only");
    // SAFETY: `compute` checked that this CPU has AVX-512 F, VL and IFMA.
    unsafe { ifma::private_ifma4::<20, 40>(lanes) }
}

#[cfg(target_arch = "x86_64")]
#[expect(unsafe_code, reason = "calls the target_feature kernel")]
fn check_ifma4(bits: u32, lanes: &[CheckIn<'_>], e: u64) -> Vec<bool> {
    assert_eq!(bits, 2048, "four lanes serve RSA-2048 only");
    // SAFETY: the caller checked that this CPU has AVX-512 F, VL and IFMA.
    unsafe { ifma::public_check_ifma4::<40>(lanes, e) }
}

#[cfg(test)]
mod tests;
