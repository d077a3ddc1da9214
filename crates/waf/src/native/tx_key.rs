//! A TX key made from a request's bytes, kept as text without losing a byte.
//!
//! libmodsecurity's TX keys are bytes. Sluice's are `String`s (looked up by hash, walked in
//! key order), and most are the rules' own text. A key expanded from a request
//! (`setvar:'tx.paramcounter_%{MATCHED_VAR_NAME}=+1'`, CRS's parameter-pollution counter)
//! can hold bytes that are not UTF-8; made text with U+FFFD for each bad sequence, two
//! argument names (`\xd4` and `\xc3`) became one key, and CRS counted one name twice (found
//! by crates/waf/fuzz). Here each byte outside UTF-8 becomes a character of its own, and so
//! does each byte of a character from that same range, so that distinct bytes stay distinct
//! keys and [`bytes`] gives the key's bytes back exactly.

use std::borrow::Cow;

/// The first of the 256 characters that stand for one byte each (U+10FF00..=U+10FFFF, the
/// end of the last private use plane: no text a rule set writes holds them).
const ESCAPE: u32 = 0x10_FF00;

/// `raw` as a TX key: borrowed where it is UTF-8 without an escaping character.
pub(crate) fn text(raw: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(raw) {
        Ok(s) if !has_escapes(s) => Cow::Borrowed(s),
        _ => Cow::Owned(escape(raw)),
    }
}

/// The bytes a key stands for ([`text`]'s inverse): borrowed where it holds no escape.
pub(crate) fn bytes(key: &str) -> Cow<'_, [u8]> {
    if !has_escapes(key) {
        return Cow::Borrowed(key.as_bytes());
    }
    let mut out = Vec::with_capacity(key.len());
    for c in key.chars() {
        match escaped_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    Cow::Owned(out)
}

/// Whether `s` holds an escaping character (an ASCII key, nearly every one, holds none).
fn has_escapes(s: &str) -> bool {
    !s.is_ascii() && s.chars().any(|c| escaped_byte(c).is_some())
}

fn escape(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            if escaped_byte(c).is_some() {
                c.encode_utf8(&mut [0; 4])
                    .bytes()
                    .for_each(|b| out.push(escaping(b)));
            } else {
                out.push(c);
            }
        }
        chunk.invalid().iter().for_each(|&b| out.push(escaping(b)));
    }
    out
}

/// The character that stands for `b`.
fn escaping(b: u8) -> char {
    char::from_u32(ESCAPE + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte `c` stands for, if it is one of the escaping characters.
fn escaped_byte(c: char) -> Option<u8> {
    u32::from(c)
        .checked_sub(ESCAPE)
        .and_then(|b| u8::try_from(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_bytes_stay_distinct_keys_and_come_back_exactly() {
        let raws: &[&[u8]] = &[
            b"paramcounter_args_names:page",
            b"paramcounter_args_names:\xd4",
            b"paramcounter_args_names:\xc3",
            b"paramcounter_args_names:\xc3\xa9",
            b"paramcounter_args_names:\xef\xbf\xbd",
            b"\xf4\x8f\xbf\x94",
            b"\xd4\xf4\x8f\xbf",
            b"\xff",
            b"",
        ];
        let keys: Vec<Cow<'_, str>> = raws.iter().map(|r| text(r)).collect();
        for (i, (raw, key)) in raws.iter().zip(&keys).enumerate() {
            assert_eq!(&*bytes(key), *raw, "{i}: {key:?}");
            for (j, other) in keys.iter().enumerate().skip(i + 1) {
                assert_ne!(key, other, "{i} and {j} are one key");
            }
        }
        // UTF-8 without escapes is the key itself, borrowed.
        assert!(matches!(
            text(b"anomaly_score"),
            Cow::Borrowed("anomaly_score")
        ));
        assert!(matches!(text("é".as_bytes()), Cow::Borrowed("é")));
        assert!(matches!(
            bytes("anomaly_score"),
            Cow::Borrowed(b"anomaly_score")
        ));
        // U+FFFD, what a lossy conversion made of both bad names, is not what either is.
        assert_ne!(&*keys[1], "paramcounter_args_names:\u{fffd}");
    }
}
