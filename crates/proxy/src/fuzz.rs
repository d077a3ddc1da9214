//! Fuzz entry points: each takes arbitrary bytes and panics only when an invariant the
//! proxy relies on breaks. `crates/proxy/fuzz` runs them under libFuzzer. The HTTP/1.1
//! parsers' entries live beside the parsers (`http1/fuzz.rs`); the path normalizer's is
//! here, so that neither module reaches into the other.
//!
//! Built only with the `fuzzing` feature: not part of the gateway's API.

pub use crate::http1::fuzz::{chunked_body, request_head, response_head};

/// Request paths: the normalizer's invariants (`request::path::check_invariants`) over a
/// path and the bytes that choose another spelling of it. The input is split at its first
/// NUL: the path before, the spelling's choices after.
pub fn path(data: &[u8]) {
    let (path, spell) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    // Request paths reach the normalizer as `str` (`http::Uri` holds UTF-8).
    if let Ok(path) = std::str::from_utf8(path) {
        crate::request::path::check_invariants(path, spell);
    }
}
