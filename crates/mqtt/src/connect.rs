//! A CONNECT packet (MQTT 3.1, 3.1.1 §3.1 and 5.0 §3.1), read from the start of a
//! connection's bytes as they arrive.
//!
//! Strict where the standards say MUST, and never laxer than HAProxy's `mqtt_is_valid`
//! except where a standard allows what it refuses (MQTT 3.1's `MQIsdp`; an empty client
//! identifier, which 3.1.1 allows with a clean session and 5 always): the protocol name's
//! case, the reserved flag, the will flags without a will, a password without a user name
//! (3.x), will QoS 3, properties repeated or out of range, unknown property ids, strings that
//! are not UTF-8 or hold U+0000, a wildcard in the will topic, non-minimal Variable Byte
//! Integers, and a remaining length that the fields do not fill exactly.

use crate::refusal::{Fault, Refusal};
use crate::version::Version;
use crate::wire::{Reader, Varint, varint};

/// A client's will (its last message, published if it goes away).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will<'a> {
    /// The topic it goes to (no wildcards).
    pub topic: &'a str,
    /// The message.
    pub payload: &'a [u8],
    /// Its QoS, 0 to 2.
    pub qos: u8,
    /// Whether it is retained.
    pub retain: bool,
}

/// The CONNECT properties Sluice reads (MQTT 5; absent in 3.x). Others are checked and
/// passed on to the broker untouched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties<'a> {
    /// Session Expiry Interval (seconds).
    pub session_expiry: Option<u32>,
    /// Receive Maximum.
    pub receive_maximum: Option<u16>,
    /// Maximum Packet Size.
    pub maximum_packet_size: Option<u32>,
    /// Authentication Method (enhanced authentication).
    pub authentication_method: Option<&'a str>,
    /// User Properties, in order.
    pub user_properties: Vec<(&'a str, &'a str)>,
}

/// A CONNECT, borrowed from the bytes it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect<'a> {
    /// The protocol version.
    pub version: Version,
    /// Clean Session (3.x) or Clean Start (5).
    pub clean_start: bool,
    /// Keep Alive, seconds (0: none).
    pub keep_alive: u16,
    /// The client identifier (may be empty: the broker assigns one).
    pub client_id: &'a str,
    /// The user name, where one was sent.
    pub username: Option<&'a str>,
    /// The password, where one was sent.
    pub password: Option<&'a [u8]>,
    /// The will, where one was sent.
    pub will: Option<Will<'a>>,
    /// MQTT 5's properties.
    pub properties: Properties<'a>,
}

/// What the start of a connection's bytes holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Not the whole CONNECT yet: read more (within the listener's size and time limits).
    Incomplete,
    /// A CONNECT and its length in bytes (what follows it is the client's next packets).
    Complete(Connect<'a>, usize),
}

/// The CONNECT at the start of `bytes`, or [`Parsed::Incomplete`]; refused when it is not
/// one, is malformed, or is (or declares itself) larger than `max_len` bytes.
pub fn parse_connect(bytes: &[u8], max_len: usize) -> Result<Parsed<'_>, Refusal> {
    let refuse = |fault| Refusal {
        fault,
        version: None,
    };
    let Some(&first) = bytes.first() else {
        return Ok(Parsed::Incomplete);
    };
    // 0x16 is a TLS record's first byte (a ClientHello sent to a cleartext listener): its
    // high nibble is a CONNECT's, but it is not MQTT at all, so it is `NotConnect`, not a
    // CONNECT with bad flags.
    if first >> 4 != 1 || first == TLS_HANDSHAKE {
        return Err(refuse(Fault::NotConnect));
    }
    if first & 0x0f != 0 {
        // MQTT-2.1.3-1 (3.1.1), §2.1.3 (5): a CONNECT's flags are reserved, 0.
        return Err(refuse(Fault::Malformed("fixed header flags")));
    }
    let (remaining, header) = match varint(&bytes[1..]) {
        Varint::Value(v, n) => (v as usize, 1 + n),
        Varint::Short => return Ok(Parsed::Incomplete),
        Varint::Bad => return Err(refuse(Fault::Malformed("remaining length"))),
    };
    let total = header + remaining;
    if total > max_len {
        return Err(refuse(Fault::TooLarge));
    }
    if bytes.len() < total {
        return Ok(Parsed::Incomplete);
    }
    let mut body = Reader::new(&bytes[header..total]);
    let version = protocol(&mut body).map_err(|fault| Refusal {
        fault,
        // A level this reader does not know is answered in 3.1.1's CONNACK, 0x01 (MQTT
        // 3.1.2-2), as mosquitto answers it.
        version: (fault == Fault::UnsupportedVersion).then_some(Version::V311),
    })?;
    let connect = fields(&mut body, version).map_err(|fault| Refusal {
        fault,
        version: Some(version),
    })?;
    Ok(Parsed::Complete(connect, total))
}

/// The protocol name and level (MQTT-3.1.2-1, -2): `MQTT` 4 or 5, `MQIsdp` 3, each
/// spelled exactly so.
fn protocol(body: &mut Reader<'_>) -> Result<Version, Fault> {
    let name = body.binary("protocol name")?;
    let level = body.u8("protocol level")?;
    match (name, level) {
        (b"MQTT", 4) => Ok(Version::V311),
        (b"MQTT", 5) => Ok(Version::V5),
        (b"MQIsdp", 3) => Ok(Version::V31),
        (b"MQTT" | b"MQIsdp", _) => Err(Fault::UnsupportedVersion),
        _ => Err(Fault::Malformed("protocol name")),
    }
}

/// The first byte of a TLS handshake record (RFC 8446 §5.1, `ContentType.handshake`).
const TLS_HANDSHAKE: u8 = 0x16;

const USERNAME: u8 = 0x80;
const PASSWORD: u8 = 0x40;
const WILL_RETAIN: u8 = 0x20;
const WILL_QOS: u8 = 0x18;
const WILL: u8 = 0x04;
const CLEAN: u8 = 0x02;
const RESERVED: u8 = 0x01;

/// The rest of the variable header and the payload, after the protocol level.
fn fields<'a>(body: &mut Reader<'a>, version: Version) -> Result<Connect<'a>, Fault> {
    let flags = body.u8("connect flags")?;
    check_flags(flags, version)?;
    let keep_alive = body.u16("keep alive")?;
    let properties = if version == Version::V5 {
        connect_properties(body)?
    } else {
        Properties::default()
    };
    let client_id = body.string("client identifier")?;
    if client_id.is_empty() {
        // 3.1: 1 to 23 characters; 3.1.1: empty only with a clean session (MQTT-3.1.3-7, -8);
        // 5: empty is always allowed (the server assigns one).
        let allowed = match version {
            Version::V31 => false,
            Version::V311 => flags & CLEAN != 0,
            Version::V5 => true,
        };
        if !allowed {
            return Err(Fault::ClientIdNotValid);
        }
    }
    let will = if flags & WILL != 0 {
        if version == Version::V5 {
            will_properties(body)?;
        }
        let topic = body.string("will topic")?;
        if topic.is_empty() || topic.contains(['#', '+']) {
            return Err(Fault::Malformed("will topic"));
        }
        let payload = body.binary("will payload")?;
        Some(Will {
            topic,
            payload,
            qos: (flags & WILL_QOS) >> 3,
            retain: flags & WILL_RETAIN != 0,
        })
    } else {
        None
    };
    let username = if flags & USERNAME != 0 {
        Some(body.string("user name")?)
    } else {
        None
    };
    let password = if flags & PASSWORD != 0 {
        Some(body.binary("password")?)
    } else {
        None
    };
    if body.left() != 0 {
        return Err(Fault::Malformed("bytes after the last field"));
    }
    Ok(Connect {
        version,
        clean_start: flags & CLEAN != 0,
        keep_alive,
        client_id,
        username,
        password,
        will,
        properties,
    })
}

/// The Connect Flags' rules (MQTT-3.1.2-3, -11, -13, -14, -15, -22; 5.0 §3.1.2.3-§3.1.2.9).
fn check_flags(flags: u8, version: Version) -> Result<(), Fault> {
    if flags & RESERVED != 0 {
        return Err(Fault::Malformed("reserved connect flag"));
    }
    if flags & WILL == 0 && flags & (WILL_QOS | WILL_RETAIN) != 0 {
        return Err(Fault::Malformed("will QoS or retain without a will"));
    }
    if (flags & WILL_QOS) >> 3 == 3 {
        return Err(Fault::Malformed("will QoS 3"));
    }
    if version != Version::V5 && flags & PASSWORD != 0 && flags & USERNAME == 0 {
        return Err(Fault::Malformed("a password without a user name"));
    }
    Ok(())
}

/// The bytes of a property list: its Variable Byte Integer length, then that many bytes.
fn property_list<'a>(body: &mut Reader<'a>, what: &'static str) -> Result<Reader<'a>, Fault> {
    let len = body.varint(what)?;
    Ok(Reader::new(body.take(len as usize, what)?))
}

/// Marks property `id` seen; a second one is a protocol error (§2.2.2.2).
fn once(seen: &mut u64, id: u8) -> Result<(), Fault> {
    let bit = 1u64 << (id & 63);
    if *seen & bit != 0 {
        return Err(Fault::ProtocolError("a property sent twice"));
    }
    *seen |= bit;
    Ok(())
}

/// A byte property that may only be 0 or 1.
fn flag(p: &mut Reader<'_>, what: &'static str) -> Result<u8, Fault> {
    let v = p.u8(what)?;
    if v > 1 {
        return Err(Fault::ProtocolError(what));
    }
    Ok(v)
}

/// CONNECT's properties (5.0 §3.1.2.11).
fn connect_properties<'a>(body: &mut Reader<'a>) -> Result<Properties<'a>, Fault> {
    let mut p = property_list(body, "properties")?;
    let mut out = Properties::default();
    let mut seen = 0u64;
    let mut auth_data = false;
    while p.left() > 0 {
        let id = p.u8("property id")?;
        if id != 0x26 {
            once(&mut seen, id)?;
        }
        match id {
            0x11 => out.session_expiry = Some(p.u32("session expiry interval")?),
            0x21 => match p.u16("receive maximum")? {
                0 => return Err(Fault::ProtocolError("receive maximum 0")),
                n => out.receive_maximum = Some(n),
            },
            0x27 => match p.u32("maximum packet size")? {
                0 => return Err(Fault::ProtocolError("maximum packet size 0")),
                n => out.maximum_packet_size = Some(n),
            },
            0x22 => {
                p.u16("topic alias maximum")?;
            }
            0x19 => {
                flag(&mut p, "request response information above 1")?;
            }
            0x17 => {
                flag(&mut p, "request problem information above 1")?;
            }
            0x26 => {
                let name = p.string("user property")?;
                let value = p.string("user property")?;
                out.user_properties.push((name, value));
            }
            0x15 => out.authentication_method = Some(p.string("authentication method")?),
            0x16 => {
                p.binary("authentication data")?;
                auth_data = true;
            }
            _ => return Err(Fault::Malformed("unknown CONNECT property")),
        }
    }
    if auth_data && out.authentication_method.is_none() {
        return Err(Fault::ProtocolError("authentication data without a method"));
    }
    Ok(out)
}

/// The will's properties (5.0 §3.1.3.2): checked, not kept.
fn will_properties(body: &mut Reader<'_>) -> Result<(), Fault> {
    let mut p = property_list(body, "will properties")?;
    let mut seen = 0u64;
    while p.left() > 0 {
        let id = p.u8("will property id")?;
        if id != 0x26 {
            once(&mut seen, id)?;
        }
        match id {
            0x18 | 0x02 => {
                p.u32("will delay or message expiry interval")?;
            }
            0x01 => {
                flag(&mut p, "payload format indicator above 1")?;
            }
            0x03 | 0x08 => {
                p.string("will content type or response topic")?;
            }
            0x09 => {
                p.binary("will correlation data")?;
            }
            0x26 => {
                p.string("will user property")?;
                p.string("will user property")?;
            }
            _ => return Err(Fault::Malformed("unknown will property")),
        }
    }
    Ok(())
}
