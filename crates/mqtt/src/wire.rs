//! MQTT's data representations (MQTT 5.0 §1.5, the same in 3.1.1 §1.5): big-endian
//! integers, Variable Byte Integers, length-prefixed UTF-8 strings and binary data, read from
//! a packet whose length is already known to be in the buffer, so running short is always a
//! malformed packet, never a wait for more bytes.

use crate::refusal::Fault;

/// The bytes of one packet's body, read front to back.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Fault> {
        if self.left() < n {
            return Err(Fault::Malformed(what));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, Fault> {
        Ok(self.take(1, what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, Fault> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, Fault> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Binary Data: a two-byte length, then that many bytes.
    pub(crate) fn binary(&mut self, what: &'static str) -> Result<&'a [u8], Fault> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }

    /// A UTF-8 Encoded String: well-formed UTF-8 without U+0000 (MQTT-1.5.4-1, -2); a
    /// surrogate's encoding is not well-formed UTF-8, so `from_utf8` refuses it.
    pub(crate) fn string(&mut self, what: &'static str) -> Result<&'a str, Fault> {
        let b = self.binary(what)?;
        let s = std::str::from_utf8(b).map_err(|_| Fault::Malformed(what))?;
        if s.contains('\0') {
            return Err(Fault::Malformed(what));
        }
        Ok(s)
    }

    /// A Variable Byte Integer, within this packet.
    pub(crate) fn varint(&mut self, what: &'static str) -> Result<u32, Fault> {
        match varint(&self.bytes[self.at..]) {
            Varint::Value(v, n) => {
                self.at += n;
                Ok(v)
            }
            Varint::Short | Varint::Bad => Err(Fault::Malformed(what)),
        }
    }
}

/// What the start of a buffer holds as a Variable Byte Integer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Varint {
    /// The value and the bytes it took.
    Value(u32, usize),
    /// The buffer ends inside it.
    Short,
    /// Five bytes or more, or a longer encoding than the value needs (MQTT 5.0 §1.5.5: the
    /// minimum number of bytes).
    Bad,
}

/// Reads a Variable Byte Integer (1 to 4 bytes, 7 bits each, least significant first).
pub(crate) fn varint(bytes: &[u8]) -> Varint {
    let mut value = 0u32;
    for (i, &b) in bytes.iter().enumerate().take(4) {
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            // A last byte of 0 after others means a shorter encoding existed.
            if i > 0 && b == 0 {
                return Varint::Bad;
            }
            return Varint::Value(value, i + 1);
        }
    }
    if bytes.len() >= 4 {
        Varint::Bad
    } else {
        Varint::Short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_byte_integers_read_as_the_standard_lists_them() {
        // MQTT 5.0 §1.5.5's table: the smallest and largest values of each length.
        assert_eq!(varint(&[0x00]), Varint::Value(0, 1));
        assert_eq!(varint(&[0x7f]), Varint::Value(127, 1));
        assert_eq!(varint(&[0x80, 0x01]), Varint::Value(128, 2));
        assert_eq!(varint(&[0xff, 0x7f]), Varint::Value(16_383, 2));
        assert_eq!(varint(&[0x80, 0x80, 0x01]), Varint::Value(16_384, 3));
        assert_eq!(
            varint(&[0xff, 0xff, 0xff, 0x7f]),
            Varint::Value(268_435_455, 4)
        );
        assert_eq!(varint(&[0x80, 0x80]), Varint::Short);
        assert_eq!(varint(&[]), Varint::Short);
        assert_eq!(
            varint(&[0xff, 0xff, 0xff, 0xff, 0x01]),
            Varint::Bad,
            "five bytes"
        );
        assert_eq!(varint(&[0x80, 0x00]), Varint::Bad, "0 in two bytes");
    }

    #[test]
    fn strings_must_be_utf8_without_nul_and_fit_the_packet() {
        assert_eq!(Reader::new(b"\x00\x03abc").string("s"), Ok("abc"));
        assert!(Reader::new(b"\x00\x04abc").string("s").is_err(), "short");
        assert!(
            Reader::new(b"\x00\x03a\x00c").string("s").is_err(),
            "U+0000"
        );
        assert!(
            Reader::new(b"\x00\x03\xed\xa0\x80").string("s").is_err(),
            "a surrogate"
        );
        assert!(
            Reader::new(b"\x00\x02\xc3\x28").string("s").is_err(),
            "not UTF-8"
        );
        assert_eq!(Reader::new(b"\x00\x00").string("s"), Ok(""));
    }
}
