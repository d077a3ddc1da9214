//! Fuzzes the CONNECT reader: `cd crates/mqtt/fuzz && cargo +nightly fuzz run connect`.
//!
//! Invariants: it never panics; a CONNECT it reads is exactly the bytes its length says
//! (the same CONNECT read from those bytes alone, every shorter prefix incomplete or
//! refused only for its declared size); a refusal's CONNACK is a CONNACK.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_mqtt::{Parsed, parse_connect};

fuzz_target!(|data: &[u8]| {
    let max = 1 << 16;
    match parse_connect(data, max) {
        Ok(Parsed::Complete(c, n)) => {
            assert!(n <= data.len() && n >= 2);
            assert_eq!(parse_connect(&data[..n], max), Ok(Parsed::Complete(c.clone(), n)));
            for cut in [0, 1, n / 2, n - 1] {
                assert_eq!(parse_connect(&data[..cut], max), Ok(Parsed::Incomplete), "prefix {cut}");
            }
            // Anything after it is the client's next packet, not the CONNECT's.
            let mut more = data[..n].to_vec();
            more.extend_from_slice(b"\xc0\x00");
            assert_eq!(parse_connect(&more, max), Ok(Parsed::Complete(c, n)));
        }
        Ok(Parsed::Incomplete) => {}
        Err(refusal) => {
            if let Some(connack) = refusal.connack() {
                assert_eq!(connack[0], 0x20);
                assert_eq!(usize::from(connack[1]) + 2, connack.len());
            }
        }
    }
});
