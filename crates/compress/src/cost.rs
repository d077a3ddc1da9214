//! What compressing a byte costs inline on this machine, for the dashboard's "CPU saved":
//! each chunk an engine compressed off the event loop is credited with its input length
//! times the per-byte cost of its encoding. The figures are measured by
//! `calibrate` (`calibration.rs`) and kept here, a leaf that the chunk
//! jobs read.

use crate::codec::Encoding;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

/// Nanoseconds per input byte, by [`key`].
static COSTS: LazyLock<RwLock<HashMap<u64, f64>>> = LazyLock::new(Default::default);

fn key(e: &Encoding) -> u64 {
    e.codec as u64
        | u64::from(e.level) << 8
        | (e.backend as u64) << 16
        | u64::from(e.dictionary) << 24
}

/// The measured inline cost of one input byte of `encoding`, in nanoseconds.
pub fn per_byte_ns(encoding: &Encoding) -> Option<f64> {
    COSTS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key(encoding))
        .copied()
}

/// Keeps the measured cost of `encoding` (the first measurement stays).
pub(crate) fn record(encoding: &Encoding, ns_per_byte: f64) {
    COSTS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key(encoding))
        .or_insert(ns_per_byte);
}
