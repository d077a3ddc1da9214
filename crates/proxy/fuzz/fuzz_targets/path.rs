//! Fuzzes the request-path normalizer: `cd crates/proxy/fuzz && cargo +nightly fuzz run path`.
//! The invariants are `sluice_proxy::fuzz::path`'s: idempotent, never above `/`, and every
//! other spelling of a normal form normalizes to it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sluice_proxy::fuzz::path(data));
