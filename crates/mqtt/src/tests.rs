//! The CONNECT reader against packets written by hand (each rule that refuses one), against
//! an existing codec (`mqttbytes`: what it writes reads back field for field, and every
//! mutation of a valid packet this crate accepts, it accepts too), and split at every byte.

use crate::{Fault, Parsed, Version, parse_connect};
use bytes::BytesMut;

const MAX: usize = 64 << 10;

fn string(s: &[u8]) -> Vec<u8> {
    let mut v = u16::try_from(s.len()).unwrap().to_be_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

fn varint(mut n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        v.push(b);
        if n == 0 {
            return v;
        }
    }
}

/// A CONNECT: fixed header, then `body`.
fn packet(body: &[u8]) -> Vec<u8> {
    let mut v = vec![0x10];
    v.extend(varint(body.len()));
    v.extend_from_slice(body);
    v
}

/// A CONNECT's body: protocol name and level, flags, keep alive 60, then `rest` (properties
/// and payload, as the test writes them).
fn body(name: &[u8], level: u8, flags: u8, rest: &[&[u8]]) -> Vec<u8> {
    let mut v = string(name);
    v.push(level);
    v.push(flags);
    v.extend_from_slice(&60u16.to_be_bytes());
    for r in rest {
        v.extend_from_slice(r);
    }
    v
}

fn parsed(bytes: &[u8]) -> crate::Connect<'_> {
    match parse_connect(bytes, MAX) {
        Ok(Parsed::Complete(c, n)) => {
            assert_eq!(n, bytes.len());
            c
        }
        other => panic!("{other:?}"),
    }
}

fn fault(bytes: &[u8]) -> (Fault, Option<Version>) {
    match parse_connect(bytes, MAX) {
        Err(r) => (r.fault, r.version),
        other => panic!("accepted: {other:?}"),
    }
}

#[test]
fn each_version_reads_with_its_fields() {
    let v311 = packet(&body(
        b"MQTT",
        4,
        0xC2 | 0x04 | 0x08 | 0x20,
        &[
            &string(b"dev-1"),
            &string(b"up/dev-1/last"),
            &string(b"gone"),
            &string(b"alice"),
            &string(b"\xff\x00secret"),
        ],
    ));
    let c = parsed(&v311);
    assert_eq!(c.version, Version::V311);
    assert_eq!(
        (c.client_id, c.keep_alive, c.clean_start),
        ("dev-1", 60, true)
    );
    assert_eq!(c.username, Some("alice"));
    assert_eq!(
        c.password,
        Some(&b"\xff\x00secret"[..]),
        "a password is bytes"
    );
    let will = c.will.unwrap();
    assert_eq!(
        (will.topic, will.payload, will.qos, will.retain),
        ("up/dev-1/last", &b"gone"[..], 1, true)
    );

    let v31 = packet(&body(b"MQIsdp", 3, 0x02, &[&string(b"old")]));
    assert_eq!(parsed(&v31).version, Version::V31);

    // MQTT 5: session expiry, receive maximum, a user property, an authentication method;
    // a will with a delay and a content type.
    let mut props = vec![0x11, 0, 0, 0x0e, 0x10, 0x21, 0, 16, 0x26];
    props.extend(string(b"region"));
    props.extend(string(b"eu"));
    props.push(0x15);
    props.extend(string(b"SCRAM-SHA-256"));
    let mut will_props = vec![0x18, 0, 0, 0, 5, 0x03];
    will_props.extend(string(b"text/plain"));
    let v5 = packet(&body(
        b"MQTT",
        5,
        0x04,
        &[
            &varint(props.len()),
            &props,
            &string(b"dev-5"),
            &varint(will_props.len()),
            &will_props,
            &string(b"t"),
            &string(b""),
        ],
    ));
    let c = parsed(&v5);
    assert_eq!((c.version, c.client_id), (Version::V5, "dev-5"));
    assert_eq!(c.properties.session_expiry, Some(3600));
    assert_eq!(c.properties.receive_maximum, Some(16));
    assert_eq!(c.properties.user_properties, [("region", "eu")]);
    assert_eq!(c.properties.authentication_method, Some("SCRAM-SHA-256"));
    assert_eq!(c.will.unwrap().topic, "t");
}

#[test]
fn a_connect_split_anywhere_waits_for_the_rest_and_what_follows_is_left() {
    let mut bytes = packet(&body(b"MQTT", 4, 0x02, &[&string(b"split")]));
    let len = bytes.len();
    for cut in 0..len {
        assert_eq!(
            parse_connect(&bytes[..cut], MAX),
            Ok(Parsed::Incomplete),
            "cut at {cut}"
        );
    }
    // A PINGREQ right behind it: the CONNECT's length says where it ends.
    bytes.extend_from_slice(&[0xC0, 0x00]);
    match parse_connect(&bytes, MAX) {
        Ok(Parsed::Complete(c, n)) => assert_eq!((c.client_id, n), ("split", len)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn too_large_is_refused_from_the_declared_length_before_it_arrives() {
    let big = packet(&body(b"MQTT", 4, 0x02, &[&string(&[b'a'; 2000])]));
    let refused = parse_connect(&big[..4], 1000).map_err(|r| r.fault);
    assert_eq!(refused, Err(Fault::TooLarge), "declared, not yet sent");
    assert!(matches!(
        parse_connect(&big, big.len()),
        Ok(Parsed::Complete(..))
    ));
    assert!(parse_connect(&big, big.len() - 1).is_err());
}

#[test]
fn every_rule_refuses_with_its_fault_and_the_version_it_got_to() {
    let id = string(b"x");
    let v5 = |flags: u8, props: &[u8], rest: &[&[u8]]| {
        let mut parts: Vec<&[u8]> = Vec::new();
        let len = varint(props.len());
        parts.push(&len);
        parts.push(props);
        parts.extend_from_slice(rest);
        packet(&body(b"MQTT", 5, flags, &parts))
    };
    let malformed = |b: &[u8]| matches!(fault(b).0, Fault::Malformed(_));
    let protocol_error = |b: &[u8]| matches!(fault(b).0, Fault::ProtocolError(_));
    // Not a CONNECT: an HTTP request, a PUBLISH first.
    assert_eq!(fault(b"GET / HTTP/1.1\r\n").0, Fault::NotConnect);
    assert_eq!(fault(&[0x30, 0x00]).0, Fault::NotConnect);
    // A TLS ClientHello to a cleartext listener: 0x16 has a CONNECT's high nibble, but it is
    // not MQTT at all.
    assert_eq!(fault(&[0x16, 0x03, 0x01, 0x02, 0x00]).0, Fault::NotConnect);
    assert!(malformed(&[0x11, 0x00]), "CONNECT's reserved header flags");
    assert!(
        malformed(&[0x10, 0x80, 0x80, 0x80, 0x80, 0x01]),
        "a 5-byte length"
    );
    assert!(malformed(&[0x10, 0x80, 0x00]), "a non-minimal length");
    // Protocol name and level.
    assert!(
        malformed(&packet(&body(b"mqtt", 4, 2, &[&id]))),
        "the name's case"
    );
    assert!(malformed(&packet(&body(b"HTTP", 4, 2, &[&id]))));
    assert_eq!(
        fault(&packet(&body(b"MQTT", 3, 2, &[&id]))),
        (Fault::UnsupportedVersion, Some(Version::V311)),
        "answered with 3.1.1's CONNACK 0x01"
    );
    assert_eq!(
        fault(&packet(&body(b"MQTT", 6, 2, &[&id]))).0,
        Fault::UnsupportedVersion
    );
    // Flags.
    let flags = |f: u8| packet(&body(b"MQTT", 4, f, &[&id]));
    assert_eq!(
        fault(&flags(0x03)),
        (
            Fault::Malformed("reserved connect flag"),
            Some(Version::V311)
        )
    );
    assert!(malformed(&flags(0x02 | 0x08)), "will QoS without a will");
    assert!(malformed(&flags(0x02 | 0x20)), "will retain without a will");
    assert!(
        malformed(&packet(&body(
            b"MQTT",
            4,
            0x1e,
            &[&id, &string(b"t"), &string(b"m")]
        ))),
        "will QoS 3"
    );
    assert!(
        malformed(&packet(&body(b"MQTT", 4, 0x42, &[&id, &string(b"pw")]))),
        "3.1.1: a password without a user name"
    );
    // ... which MQTT 5 allows.
    assert!(matches!(
        parse_connect(&v5(0x42, &[], &[&id, &string(b"pw")]), MAX),
        Ok(Parsed::Complete(..))
    ));
    // The client identifier.
    let empty = string(b"");
    assert_eq!(
        fault(&packet(&body(b"MQTT", 4, 0x00, &[&empty]))).0,
        Fault::ClientIdNotValid
    );
    assert!(matches!(
        parse_connect(&packet(&body(b"MQTT", 4, 0x02, &[&empty])), MAX),
        Ok(Parsed::Complete(..))
    ));
    assert_eq!(
        fault(&packet(&body(b"MQIsdp", 3, 0x02, &[&empty]))).0,
        Fault::ClientIdNotValid
    );
    assert!(malformed(&packet(&body(
        b"MQTT",
        4,
        2,
        &[&string(b"a\0b")]
    ))));
    assert!(malformed(&packet(&body(
        b"MQTT",
        4,
        2,
        &[&string(b"\xc3\x28")]
    ))));
    // The will topic.
    for topic in [&b"a/#"[..], b"a/+/b", b""] {
        assert!(malformed(&packet(&body(
            b"MQTT",
            4,
            0x06,
            &[&id, &string(topic), &string(b"m")]
        ))));
    }
    // Leftover or missing bytes.
    let mut long = body(b"MQTT", 4, 2, &[&id]);
    long.push(0);
    assert!(malformed(&packet(&long)), "a byte after the last field");
    assert!(
        malformed(&packet(&body(b"MQTT", 4, 0x82, &[&id]))),
        "a user name flag, no user name"
    );
    // MQTT 5 properties.
    assert!(
        protocol_error(&v5(2, &[0x21, 0, 0], &[&id])),
        "receive maximum 0"
    );
    assert!(
        protocol_error(&v5(2, &[0x27, 0, 0, 0, 0], &[&id])),
        "maximum packet size 0"
    );
    assert!(
        protocol_error(&v5(2, &[0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 2], &[&id])),
        "twice"
    );
    assert!(
        protocol_error(&v5(2, &[0x17, 2], &[&id])),
        "request problem information 2"
    );
    assert!(
        protocol_error(&v5(2, &[0x16, 0, 1, 7], &[&id])),
        "auth data without a method"
    );
    assert!(
        malformed(&v5(2, &[0x01, 0], &[&id])),
        "a will property among CONNECT's"
    );
    assert!(
        malformed(&v5(2, &[0x21, 0], &[&id])),
        "a property cut short"
    );
    assert_eq!(
        fault(&v5(2, &[0x21, 0, 0], &[&id])).1,
        Some(Version::V5),
        "the refusal knows the version: a CONNACK can say why"
    );
    assert!(
        protocol_error(&v5(
            0x06,
            &[],
            &[&id, &[3, 0x01, 1, 0x01], &string(b"t"), &string(b"m")]
        )),
        "a will property twice"
    );
}

/// A small deterministic generator (xorshift64*): the tests' randomness is repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn word(&mut self, max: u64) -> String {
        (0..self.below(max + 1))
            .map(|_| char::from(b'a' + self.below(26) as u8))
            .collect()
    }
}

/// A random CONNECT as `mqttbytes` writes it, 3.1.1 or 5.
fn random_connect(rng: &mut Rng) -> Vec<u8> {
    use mqttbytes::QoS;
    let qos = |n| match n {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    };
    let id = format!("dev-{}", rng.word(12));
    let mut out = BytesMut::new();
    if rng.below(2) == 0 {
        let mut c = mqttbytes::v4::Connect::new(id);
        c.keep_alive = rng.below(1000) as u16;
        if rng.below(2) == 0 {
            // (mqttbytes leaves an empty user name's flag out and keeps the password's:
            // 3.1.1 forbids that, MQTT-3.1.2-22, so names here are never empty.)
            c.set_login(format!("u{}", rng.word(8)), rng.word(8));
        }
        if rng.below(2) == 0 {
            c.last_will = Some(mqttbytes::v4::LastWill::new(
                format!("w/{}", rng.word(6)),
                rng.word(20),
                qos(rng.below(3)),
                rng.below(2) == 0,
            ));
        }
        c.write(&mut out).unwrap();
    } else {
        let mut c = mqttbytes::v5::Connect::new(id);
        c.keep_alive = rng.below(1000) as u16;
        if rng.below(2) == 0 {
            c.properties = Some(mqttbytes::v5::ConnectProperties {
                session_expiry_interval: Some(rng.below(100_000) as u32),
                receive_maximum: Some(1 + rng.below(100) as u16),
                max_packet_size: Some(1 + rng.below(1 << 20) as u32),
                topic_alias_max: Some(rng.below(10) as u16),
                request_response_info: Some(rng.below(2) as u8),
                request_problem_info: Some(rng.below(2) as u8),
                user_properties: vec![(rng.word(5), rng.word(5))],
                authentication_method: None,
                authentication_data: None,
            });
        }
        if rng.below(2) == 0 {
            c.login = Some(mqttbytes::v5::Login::new(
                format!("u{}", rng.word(8)),
                rng.word(8),
            ));
        }
        c.write(&mut out).unwrap();
    }
    out.to_vec()
}

/// What `mqttbytes` reads from `bytes`: the client identifier, or `None` where it refuses.
fn theirs(bytes: &[u8], version: Version) -> Option<String> {
    let mut b = BytesMut::from(bytes);
    match version {
        Version::V311 => match mqttbytes::v4::read(&mut b, MAX) {
            Ok(mqttbytes::v4::Packet::Connect(c)) => Some(c.client_id),
            _ => None,
        },
        Version::V5 => match mqttbytes::v5::read(&mut b, MAX) {
            Ok(mqttbytes::v5::Packet::Connect(c)) => Some(c.client_id),
            _ => None,
        },
        Version::V31 => unreachable!("mqttbytes writes 3.1.1 and 5 only"),
    }
}

#[test]
fn what_an_existing_codec_writes_reads_back_field_for_field() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for _ in 0..2000 {
        let bytes = random_connect(&mut rng);
        let c = parsed(&bytes);
        assert_eq!(
            theirs(&bytes, c.version).as_deref(),
            Some(c.client_id),
            "{bytes:02x?}"
        );
    }
}

/// Every mutation of a valid CONNECT that this crate accepts, `mqttbytes` accepts too, with
/// the same client identifier: the reader is never laxer than an existing codec (which reads
/// a password as UTF-8 where MQTT says bytes: such mutations are left out).
#[test]
fn no_mutation_this_crate_accepts_is_refused_by_the_existing_codec() {
    let mut rng = Rng(0x0dd_f00d_5eed_0002);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..3000 {
        let mut bytes = random_connect(&mut rng);
        for _ in 0..=rng.below(3) {
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] = match rng.below(3) {
                0 => rng.next() as u8,
                1 => bytes[at] ^ (1 << rng.below(8)),
                _ => [0x00, 0x7f, 0x80, 0xff][rng.below(4) as usize],
            };
        }
        match parse_connect(&bytes, MAX) {
            Ok(Parsed::Complete(c, n)) => {
                if c.password.is_some_and(|p| std::str::from_utf8(p).is_err()) {
                    continue;
                }
                accepted += 1;
                assert_eq!(
                    theirs(&bytes[..n], c.version).as_deref(),
                    Some(c.client_id),
                    "accepted here, refused by mqttbytes: {bytes:02x?}"
                );
            }
            Ok(Parsed::Incomplete) | Err(_) => refused += 1,
        }
    }
    assert!(
        accepted > 100 && refused > 100,
        "{accepted} accepted, {refused} refused"
    );
}
