//! What a private-key operation costs inline on this machine, for the dashboard's "CPU
//! saved": each offloaded job is credited with what it would have cost the event loop.
//!
//! The figures are measured by `calibration` and kept here, a leaf that the jobs read.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;

/// Inline cost by [`sluice_offload::Job::batch_key`] (the kind and size of the key).
static COSTS: LazyLock<RwLock<HashMap<u64, Duration>>> = LazyLock::new(Default::default);

/// Sets the inline cost of `class` (tests of decisions that depend on it).
#[cfg(test)]
pub(crate) fn set_for_test(class: u64, cost: Duration) {
    COSTS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(class, cost);
}

/// The measured inline cost of a job of `class`, if its kind was calibrated.
pub fn inline_cost(class: u64) -> Option<Duration> {
    COSTS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&class)
        .copied()
}

/// Keeps the measured inline cost of `class`.
pub(crate) fn record(class: u64, cost: Duration) {
    COSTS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(class, cost);
}
