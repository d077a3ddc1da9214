//! Fuzzes the key-server frame decoder: `cd crates/keyless/fuzz && cargo +nightly fuzz run decode`.
//! The invariants are `sluice_keyless::fuzz::check_decode`'s.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sluice_keyless::fuzz::check_decode(data));
