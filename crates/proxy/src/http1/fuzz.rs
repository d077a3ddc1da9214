//! Fuzz entry points for the HTTP/1.1 parsers (re-exported by the crate's `fuzz`): what the
//! network feeds them before anything else looks at the bytes. Each takes arbitrary bytes
//! and panics only when an invariant the proxy relies on breaks (see each parser's
//! `check_invariants`). `crates/proxy/fuzz` runs them under libFuzzer
//! (`cd crates/proxy/fuzz && cargo +nightly fuzz run request_head`); every test run tries
//! them on deterministic mutations of seeds (the parsers' "fuzz smoke" tests;
//! `SLUICE_FUZZ_ITERATIONS` for a longer run).
//!
//! Built only with the `fuzzing` feature: not part of the gateway's API.

/// Request heads, pipelined one after another (`http1/head.rs`).
pub fn request_head(data: &[u8]) {
    super::head::check_invariants(data);
}

/// A response head and its framing (`http1/client.rs`).
pub fn response_head(data: &[u8]) {
    super::client::check_invariants(data);
}

/// A chunked body, decoded whole and a byte at a time (`http1/decode.rs`).
pub fn chunked_body(data: &[u8]) {
    super::decode::check_invariants(data);
}
