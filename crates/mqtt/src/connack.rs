//! The broker's answer to an admitted MQTT 5 CONNECT, read for one property: Server Keep
//! Alive (5.0 §3.2.2.3.14). A broker that sends it overrides the keep alive the client asked
//! for, and the client MUST use the broker's value (MQTT-3.2.2-21); a gateway that kept
//! timing the connection by the client's own value would close a conformant client.
//!
//! Everything else is skipped, not judged: the broker's bytes go to the client as they are.

use crate::wire::{Reader, Varint, varint};

/// What the start of the broker's bytes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerReply {
    /// Not a whole packet yet.
    Incomplete,
    /// A CONNACK of `len` bytes, and the Server Keep Alive (seconds) where it has one.
    Connack {
        /// The packet's length, fixed header included.
        len: usize,
        /// Server Keep Alive, seconds (0: none).
        server_keep_alive: Option<u16>,
    },
    /// Another packet (an AUTH of enhanced authentication) or bytes that do not parse: the
    /// client is left to judge them.
    Other,
}

/// Reads the broker's first packet, expecting an MQTT 5 CONNACK.
pub fn read_connack(bytes: &[u8]) -> BrokerReply {
    let Some(&first) = bytes.first() else {
        return BrokerReply::Incomplete;
    };
    if first != 0x20 {
        return BrokerReply::Other;
    }
    let (remaining, header) = match varint(&bytes[1..]) {
        Varint::Value(v, n) => (v as usize, 1 + n),
        Varint::Short => return BrokerReply::Incomplete,
        Varint::Bad => return BrokerReply::Other,
    };
    let len = header + remaining;
    if bytes.len() < len {
        return BrokerReply::Incomplete;
    }
    match server_keep_alive(&bytes[header..len]) {
        Some(server_keep_alive) => BrokerReply::Connack {
            len,
            server_keep_alive,
        },
        None => BrokerReply::Other,
    }
}

/// The CONNACK body's Server Keep Alive; `None` where the body does not parse.
fn server_keep_alive(body: &[u8]) -> Option<Option<u16>> {
    let mut r = Reader::new(body);
    r.u8("acknowledge flags").ok()?;
    r.u8("reason code").ok()?;
    if r.left() == 0 {
        // A 3.x-shaped CONNACK: no properties.
        return Some(None);
    }
    let len = r.varint("properties").ok()?;
    let mut p = Reader::new(r.take(len as usize, "properties").ok()?);
    let mut keep_alive = None;
    while p.left() > 0 {
        // 5.0 §3.2.2.3: each CONNACK property's type decides how far to skip.
        match p.u8("property id").ok()? {
            0x13 => keep_alive = Some(p.u16("server keep alive").ok()?),
            0x24 | 0x25 | 0x28 | 0x29 | 0x2A => {
                p.u8("byte property").ok()?;
            }
            0x21 | 0x22 => {
                p.u16("two-byte property").ok()?;
            }
            0x11 | 0x27 => {
                p.u32("four-byte property").ok()?;
            }
            0x12 | 0x1F | 0x1A | 0x1C | 0x15 => {
                p.binary("string property").ok()?;
            }
            0x16 => {
                p.binary("authentication data").ok()?;
            }
            0x26 => {
                p.binary("user property").ok()?;
                p.binary("user property").ok()?;
            }
            _ => return None,
        }
    }
    Some(keep_alive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_keep_alive_is_read_among_the_other_properties() {
        // Session present 0, success; properties: an assigned identifier, receive maximum,
        // a user property, then Server Keep Alive 120.
        let mut props = vec![0x12, 0, 3, b'a', b'b', b'c', 0x21, 0, 10];
        props.extend([0x26, 0, 1, b'k', 0, 1, b'v', 0x13, 0, 120]);
        let mut p = vec![0x20, (3 + props.len()) as u8, 0, 0, props.len() as u8];
        p.extend(&props);
        let whole = p.len();
        p.extend([0x30, 0]); // what the broker sent behind it
        assert_eq!(
            read_connack(&p),
            BrokerReply::Connack {
                len: whole,
                server_keep_alive: Some(120)
            }
        );
        for cut in 0..whole {
            assert_eq!(read_connack(&p[..cut]), BrokerReply::Incomplete, "{cut}");
        }
    }

    #[test]
    fn a_connack_without_it_or_another_packet_changes_nothing() {
        let none = BrokerReply::Connack {
            len: 5,
            server_keep_alive: None,
        };
        assert_eq!(read_connack(&[0x20, 3, 0, 0, 0]), none);
        assert_eq!(
            read_connack(&[0x20, 2, 0, 0]),
            BrokerReply::Connack {
                len: 4,
                server_keep_alive: None
            },
            "3.1.1's"
        );
        assert_eq!(read_connack(&[0xF0, 0]), BrokerReply::Other, "AUTH");
        assert_eq!(
            read_connack(&[0x20, 4, 0, 0, 1, 0x7F]),
            BrokerReply::Other,
            "unknown property"
        );
    }
}
