//! Fuzzes the key-server frame decoder: `cd crates/keyless/fuzz && cargo +nightly fuzz run decode`.
//!
//! Whatever the bytes, the decoder must not panic, must consume nothing unless it returns a
//! frame, and a frame it returns must re-encode to as many bytes as it consumed and decode
//! back to itself. The key
//! server feeds it straight from the network, so this is its whole attack surface before
//! the key lookup.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_keyless::protocol::Frame;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    loop {
        let before = buf.len();
        match Frame::decode(&mut buf) {
            Ok(Some(frame)) => {
                // The frame re-encodes to as many bytes as it used, and decodes back to itself
                // (not always to the same bytes: an unknown status code reads as `internal`).
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
});
