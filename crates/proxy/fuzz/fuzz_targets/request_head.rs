//! Fuzzes request heads, pipelined one after another: `cd crates/proxy/fuzz && cargo +nightly fuzz run request_head`.
//! The invariants are the parser's own `check_invariants` (see `sluice_proxy::fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sluice_proxy::fuzz::request_head(data));
