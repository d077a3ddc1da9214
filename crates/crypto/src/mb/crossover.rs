//! Whether a partial batch is cheaper on the kernel or one job at a time in software.
//!
//! A batch costs the kernel the same time whether one lane is used or all of them, so a
//! batch of `n` jobs is worth computing together only when `n` software operations would
//! take longer than one batch. Where that line falls is the CPU's: on AMD Zen 4 a batch of
//! eight RSA-2048 took about 2.4 ms and one aws-lc signature 0.3 ms (software wins below
//! eight); on an Intel Xeon with two 512-bit IFMA ports a batch took 0.98 ms and aws-lc, on
//! its own IFMA code, 0.31 ms (the kernel wins from four). A fixed `min_batch` of eight left
//! a fifth of a handshake storm's signatures in software on the Intel host, at three times
//! the kernel's cost each.
//!
//! So both are measured on this machine, once per kind of key per process, when the first
//! key of the kind is loaded (off the event loop, [`crate::calibrate`], beside the inline cost):
//! the fastest of a few full batches on each IFMA kernel the CPU has. An operator's
//! `mb_min_batch` overrides the measurement.

use super::Kernel;
use crate::KeyJob;
use sluice_offload::Job as _;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;

/// A full batch's time by [`sluice_offload::Job::batch_key`] and kernel.
static BATCH_COSTS: LazyLock<RwLock<HashMap<(u64, Kernel), Duration>>> =
    LazyLock::new(Default::default);

/// Batches timed per kernel (the first also makes the key's blinding pairs).
const RUNS: usize = 3;

/// Times a full batch of `job`'s kind on each IFMA kernel this CPU has, unless known. Jobs
/// the engine cannot take (not RSA 2048-4096, or a key without mb limbs) are left out.
pub(crate) fn calibrate(job: &KeyJob) {
    let class = job.batch_key();
    let Ok(bits) = u32::try_from(class) else {
        return;
    };
    if !matches!(bits, 2048 | 3072 | 4096) || job.mb_key().is_none() {
        return;
    }
    for kernel in [Kernel::detect_lanes(8), Kernel::detect_lanes(4)]
        .into_iter()
        .flatten()
    {
        let kernel = kernel.for_bits(bits);
        if batch_cost(class, kernel).is_some() {
            continue;
        }
        let jobs = vec![job.clone(); kernel.lanes(bits)];
        let Some(best) = crate::calibration::fastest(RUNS, || {
            super::run_batch(kernel, None, &jobs)
                .iter()
                .all(Result::is_ok)
        }) else {
            return;
        };
        BATCH_COSTS
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((class, kernel), best);
    }
}

/// The measured time of a full batch of `class` on `kernel`, if measured.
pub(crate) fn batch_cost(class: u64, kernel: Kernel) -> Option<Duration> {
    BATCH_COSTS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(class, kernel))
        .copied()
}

/// Sets a full batch's time (tests of the decision).
#[cfg(test)]
pub(crate) fn set_for_test(class: u64, kernel: Kernel, cost: Duration) {
    BATCH_COSTS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert((class, kernel), cost);
}

/// Whether `n` queued jobs of `class` go to `kernel` together (or one at a time to the
/// software primitive). `fixed`: the operator's `mb_min_batch`.
pub(crate) fn on_kernel(kernel: Kernel, fixed: Option<usize>, class: u64, n: usize) -> bool {
    let bits = u32::try_from(class).unwrap_or(0);
    let kernel = kernel.for_bits(bits);
    let lanes = kernel.lanes(bits);
    if n >= lanes {
        // Full: no cost to look up.
        return true;
    }
    match fixed {
        Some(min) => n >= min.min(lanes),
        None => cheaper_on_kernel(
            n,
            lanes,
            crate::cost::inline_cost(class),
            batch_cost(class, kernel),
        ),
    }
}

/// The rule: a full batch always; a partial one when `n` software operations (`one` each)
/// would take longer than a batch. Unmeasured, only a full batch (the safe side: software
/// never makes a lone handshake wait for a batch's computation).
fn cheaper_on_kernel(
    n: usize,
    lanes: usize,
    one: Option<Duration>,
    batch: Option<Duration>,
) -> bool {
    if n >= lanes {
        return true;
    }
    match (one, batch) {
        (Some(one), Some(batch)) => n > 1 && one * n as u32 > batch,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_partial_batch_goes_to_the_kernel_only_where_software_would_take_longer() {
        // The Intel host: a batch of eight 977 µs, one software signature 312 µs.
        let (one, batch) = (Some(312 * US), Some(977 * US));
        let chosen: Vec<bool> = (1..=8)
            .map(|n| cheaper_on_kernel(n, 8, one, batch))
            .collect();
        assert_eq!(
            chosen,
            [false, false, false, true, true, true, true, true],
            "from four jobs on: 4 x 312 > 977"
        );
        // AMD Zen 4: 2.4 ms against 0.3 ms: software below eight.
        let (one, batch) = (Some(300 * US), Some(2_400 * US));
        assert!(!cheaper_on_kernel(7, 8, one, batch));
        assert!(cheaper_on_kernel(8, 8, one, batch));
        // Four lanes: full at four.
        assert!(cheaper_on_kernel(4, 4, one, batch));
    }

    #[test]
    fn unmeasured_costs_leave_partial_batches_to_software() {
        for (one, batch) in [(None, Some(US)), (Some(US * 1000), None), (None, None)] {
            assert!(!cheaper_on_kernel(7, 8, one, batch), "{one:?} {batch:?}");
            assert!(cheaper_on_kernel(8, 8, one, batch), "a full batch always");
        }
        // A lone job never waits for a batch, however slow software is.
        assert!(!cheaper_on_kernel(1, 8, Some(US * 1000), Some(US)));
    }

    #[test]
    fn an_operators_min_batch_is_obeyed_and_capped_at_the_lanes() {
        let k = Kernel::Reference;
        assert!(!on_kernel(k, Some(3), 2048, 2));
        assert!(on_kernel(k, Some(3), 2048, 3));
        assert!(
            on_kernel(k, Some(64), 2048, 8),
            "never more than a full batch"
        );
        assert!(!on_kernel(k, Some(64), 2048, 7));
    }
}
