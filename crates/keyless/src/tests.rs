use crate::protocol::{Frame, HEADER, MAX_BODY, Message, Op, ProtocolError, Status};
use bytes::BytesMut;
use proptest::prelude::*;

fn roundtrip(f: &Frame) -> Frame {
    let mut b = f.to_bytes();
    let back = Frame::decode(&mut b).unwrap().expect("a whole frame");
    assert!(b.is_empty(), "the frame consumed exactly its bytes");
    back
}

#[test]
fn every_message_survives_encoding() {
    let id = [7u8; 32];
    for f in [
        Frame::sign(1, id, 0x0804, b"hello"),
        Frame::sign(2, id, 0x0403, b""),
        Frame::decrypt(3, id, &[9; 256]),
        Frame::ping(u32::MAX, b"sluice"),
        Frame::response(5, Op::Sign, Status::Ok, &b"sig"[..]),
        Frame::response(6, Op::Decrypt, Status::UnknownKey, &b"no such key"[..]),
        Frame::response(7, Op::Ping, Status::Ok, &b""[..]),
    ] {
        assert_eq!(roundtrip(&f), f);
    }
}

#[test]
fn partial_frames_wait_for_more_bytes_and_consume_nothing() {
    let bytes = Frame::sign(42, [1; 32], 0x0804, b"message").to_bytes();
    for cut in 0..bytes.len() {
        let mut b = BytesMut::from(&bytes[..cut]);
        assert_eq!(Frame::decode(&mut b), Ok(None), "cut at {cut}");
        assert_eq!(b.len(), cut);
    }
    // Two frames back to back come out one at a time.
    let mut b = bytes.clone();
    b.extend_from_slice(&Frame::ping(43, b"x").to_bytes());
    assert_eq!(Frame::decode(&mut b).unwrap().unwrap().id, 42);
    assert_eq!(Frame::decode(&mut b).unwrap().unwrap().id, 43);
    assert_eq!(Frame::decode(&mut b), Ok(None));
}

#[test]
fn malformed_headers_are_refused_before_their_body_arrives() {
    let header = |v: u8, op: u8, status: u16, len: u32| {
        let mut h = vec![v, op];
        h.extend_from_slice(&status.to_be_bytes());
        h.extend_from_slice(&9u32.to_be_bytes());
        h.extend_from_slice(&len.to_be_bytes());
        BytesMut::from(&h[..])
    };
    assert_eq!(
        Frame::decode(&mut header(2, 1, 0, 40)),
        Err(ProtocolError::BadVersion(2))
    );
    assert_eq!(
        Frame::decode(&mut header(1, 9, 0, 0)),
        Err(ProtocolError::UnknownOpcode(9))
    );
    assert_eq!(
        Frame::decode(&mut header(1, 1, 0, MAX_BODY as u32 + 1)),
        Err(ProtocolError::TooLong(MAX_BODY as u32 + 1))
    );
    assert_eq!(
        Frame::decode(&mut header(1, 1, 3, 40)),
        Err(ProtocolError::StatusInRequest)
    );
    let mut short = header(1, 1, 0, 10);
    short.extend_from_slice(&[0; 10]);
    assert_eq!(
        Frame::decode(&mut short),
        Err(ProtocolError::ShortBody {
            op: Op::Sign,
            len: 10
        })
    );
    let mut long_ping = header(1, 3, 0, 2000);
    long_ping.extend_from_slice(&[0; 2000]);
    assert_eq!(
        Frame::decode(&mut long_ping),
        Err(ProtocolError::LongPing(2000))
    );
}

#[test]
fn unknown_status_codes_read_as_internal() {
    let mut b = Frame::response(1, Op::Sign, Status::Ok, &b""[..]).to_bytes();
    b[2] = 0x12;
    let f = Frame::decode(&mut b).unwrap().unwrap();
    assert!(matches!(
        f.message,
        Message::Response {
            status: Status::Internal,
            ..
        }
    ));
}

proptest! {
    /// The decoder never panics, never consumes bytes it does not return as a frame, and what
    /// it returns re-encodes to as many bytes as it consumed and decodes back to itself (the
    /// same properties as the `cargo fuzz` target in `fuzz/`). Valid headers are made likely:
    /// version 1 and a small length.
    #[test]
    fn decoder_is_total_and_exact(
        op in prop_oneof![Just(1u8), Just(2), Just(3), Just(0x81), Just(0x82), Just(0x83), any::<u8>()],
        status in prop_oneof![Just(0u16), any::<u16>()],
        len in 0u32..80,
        tail in proptest::collection::vec(any::<u8>(), 0..100),
        raw in proptest::collection::vec(any::<u8>(), 0..40),
        use_raw in any::<bool>(),
    ) {
        let bytes = if use_raw {
            raw
        } else {
            let mut v = vec![1, op];
            v.extend_from_slice(&status.to_be_bytes());
            v.extend_from_slice(&7u32.to_be_bytes());
            v.extend_from_slice(&len.to_be_bytes());
            v.extend_from_slice(&tail);
            v
        };
        let mut b = BytesMut::from(&bytes[..]);
        match Frame::decode(&mut b) {
            Ok(Some(f)) => {
                let used = bytes.len() - b.len();
                prop_assert!(used >= HEADER);
                let mut again = f.to_bytes();
                prop_assert_eq!(again.len(), used);
                prop_assert_eq!(Frame::decode(&mut again), Ok(Some(f)));
            }
            Ok(None) => prop_assert_eq!(b.len(), bytes.len()),
            Err(_) => {}
        }
    }

    #[test]
    fn requests_roundtrip(id in any::<u32>(), key in any::<[u8; 32]>(), scheme in any::<u16>(),
                          body in proptest::collection::vec(any::<u8>(), 1..2000)) {
        let s = Frame::sign(id, key, scheme, &body);
        prop_assert_eq!(roundtrip(&s), s);
        let d = Frame::decrypt(id, key, &body);
        prop_assert_eq!(roundtrip(&d), d);
    }
}
