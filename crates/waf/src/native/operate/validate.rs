//! `@validateByteRange`, `@validateUrlEncoding` and `@validateUtf8Encoding`: each matches
//! when the value is NOT valid, as libmodsecurity 3.0.9 decides validity.

/// The bytes `@validateByteRange` allows, one bit each.
#[derive(Debug, Clone)]
pub(super) struct ByteTable([u64; 4]);

impl ByteTable {
    pub(super) fn new(ranges: &[(u8, u8)]) -> ByteTable {
        let mut bits = [0u64; 4];
        for &(lo, hi) in ranges {
            for b in lo..=hi {
                bits[usize::from(b >> 6)] |= 1 << (b & 63);
            }
        }
        ByteTable(bits)
    }

    /// Whether some byte of `value` is outside every range (an empty value has none).
    pub(super) fn any_outside(&self, value: &[u8]) -> bool {
        value
            .iter()
            .any(|&b| self.0[usize::from(b >> 6)] & (1 << (b & 63)) == 0)
    }
}

/// Whether `value` has a `%` not followed by two hex digits (an empty value is valid; the
/// rest of the value need not be URL-encoded at all).
pub(super) fn bad_url_encoding(value: &[u8]) -> bool {
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%' {
            match value.get(i + 1..i + 3) {
                Some([a, b]) if a.is_ascii_hexdigit() && b.is_ascii_hexdigit() => i += 3,
                _ => return true,
            }
        } else {
            i += 1;
        }
    }
    false
}

/// Whether `value` is not UTF-8 as RFC 3629 has it (libmodsecurity's
/// `detect_utf8_character`): a truncated or malformed sequence, an overlong form, a
/// surrogate, or a lead byte for a code point above U+10FFFF.
pub(super) fn bad_utf8(value: &[u8]) -> bool {
    let mut i = 0;
    while i < value.len() {
        match char_len(&value[i..]) {
            Some(n) => i += n,
            None => return true,
        }
    }
    false
}

/// The length of the valid character at the start of `s`, or `None`.
fn char_len(s: &[u8]) -> Option<usize> {
    let c = u32::from(s[0]);
    let cont = |i: usize| s.get(i).is_some_and(|&b| b & 0xC0 == 0x80);
    let (len, d) = if c & 0x80 == 0 {
        return Some(1);
    } else if c & 0xE0 == 0xC0 {
        if s.len() < 2 || !cont(1) {
            return None;
        }
        (2, ((c & 0x1F) << 6) | (u32::from(s[1]) & 0x3F))
    } else if c & 0xF0 == 0xE0 {
        if s.len() < 3 || !cont(1) || !cont(2) {
            return None;
        }
        let d = ((c & 0x0F) << 12) | ((u32::from(s[1]) & 0x3F) << 6) | (u32::from(s[2]) & 0x3F);
        (3, d)
    } else if c & 0xF8 == 0xF0 {
        if c >= 0xF5 || s.len() < 4 || !cont(1) || !cont(2) || !cont(3) {
            return None;
        }
        let d = ((c & 0x07) << 18)
            | ((u32::from(s[1]) & 0x3F) << 12)
            | ((u32::from(s[2]) & 0x3F) << 6)
            | (u32::from(s[3]) & 0x3F);
        (4, d)
    } else {
        return None;
    };
    let overlong = match len {
        2 => d < 0x80,
        3 => d < 0x800,
        _ => d < 0x1_0000,
    };
    if (0xD800..=0xDFFF).contains(&d) || overlong {
        return None;
    }
    Some(len)
}
