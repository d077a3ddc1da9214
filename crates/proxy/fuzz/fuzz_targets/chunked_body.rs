//! Fuzzes a chunked body, decoded whole and a byte at a time: `cd crates/proxy/fuzz && cargo +nightly fuzz run chunked_body`.
//! The invariants are the parser's own `check_invariants` (see `sluice_proxy::fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sluice_proxy::fuzz::chunked_body(data));
