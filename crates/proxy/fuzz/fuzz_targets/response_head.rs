//! Fuzzes a response head and its framing: `cd crates/proxy/fuzz && cargo +nightly fuzz run response_head`.
//! The invariants are the parser's own `check_invariants` (see `sluice_proxy::fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sluice_proxy::fuzz::response_head(data));
