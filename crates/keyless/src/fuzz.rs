//! The key-server frame decoder's invariants, for `crates/keyless/fuzz` (libFuzzer) and for
//! the saved inputs replayed in every `cargo test`: whatever the bytes, the decoder must not
//! panic, must consume nothing unless it returns a frame, and a frame it returns must
//! re-encode to as many bytes as it consumed and decode back to itself. The key server feeds
//! it straight from the network, so this is its whole attack surface before the key lookup.
//!
//! Built only for tests and with the `fuzzing` feature: not part of the crate's API.

use crate::protocol::Frame;
use bytes::BytesMut;

/// Decodes every frame of `data`, panicking where an invariant breaks.
pub fn check_decode(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    loop {
        let before = buf.len();
        match Frame::decode(&mut buf) {
            Ok(Some(frame)) => {
                // Not always to the same bytes: an unknown status code reads as `internal`.
                let used = before - buf.len();
                let mut again = frame.to_bytes();
                assert_eq!(again.len(), used);
                assert_eq!(Frame::decode(&mut again), Ok(Some(frame)));
                assert!(again.is_empty());
            }
            Ok(None) => {
                assert_eq!(buf.len(), before);
                break;
            }
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The saved inputs (`fuzz/seeds/decode/`: good frames, cut ones, bad headers, and what a
    /// fuzzer found worth keeping) keep the invariants.
    #[test]
    fn saved_inputs_keep_the_decoders_invariants() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/decode");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let input = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| super::check_decode(&input));
            assert!(outcome.is_ok(), "{} breaks an invariant", path.display());
            n += 1;
        }
        assert!(
            n >= 10,
            "{} holds {n} inputs; the seeds are missing",
            dir.display()
        );
    }
}
