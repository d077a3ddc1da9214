//! Base64 as libmodsecurity 3.0.9 does it: `base64Encode` and `base64Decode` through its
//! bundled mbedTLS (strict: a value it rejects decodes to nothing), `base64DecodeExt`
//! through its own forgiving decoder.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A base64 character's value, 64 for `=`, [`INVALID`] for anything else.
fn value(b: u8) -> u8 {
    match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        b'=' => 64,
        _ => INVALID,
    }
}

const INVALID: u8 = 127;

/// Standard base64 with `=` padding.
pub(super) fn encode(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let x = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[((x >> (18 - 6 * k)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

/// mbedTLS's decoder on the value up to its first NUL. It refuses (and the result is
/// empty) a character outside the alphabet, a space followed by more on the same line, a
/// third `=`, and data after `=`; it skips line breaks and trailing spaces. A last group
/// of fewer than four characters is dropped.
pub(super) fn decode(input: &[u8], out: &mut Vec<u8>) {
    let src = input
        .iter()
        .position(|&b| b == 0)
        .map_or(input, |nul| &input[..nul]);
    if !mbedtls_accepts(src) {
        return;
    }
    let (mut pads, mut n, mut x) = (3u32, 0, 0u32);
    for &b in src {
        if matches!(b, b'\r' | b'\n' | b' ') {
            continue;
        }
        let v = value(b);
        pads -= u32::from(v == 64);
        x = (x << 6) | u32::from(v & 0x3f);
        n += 1;
        if n == 4 {
            n = 0;
            let bytes = [(x >> 16) as u8, (x >> 8) as u8, x as u8];
            out.extend_from_slice(&bytes[..pads as usize]);
        }
    }
}

/// mbedTLS's first pass: whether it decodes `src` at all.
fn mbedtls_accepts(src: &[u8]) -> bool {
    let (mut i, mut pads) = (0, 0);
    while i < src.len() {
        let mut spaces = 0;
        while i < src.len() && src[i] == b' ' {
            i += 1;
            spaces += 1;
        }
        if i == src.len() {
            break;
        }
        let b = src[i];
        i += 1;
        if b == b'\n' || (b == b'\r' && src.get(i) == Some(&b'\n')) {
            continue;
        }
        if spaces != 0 {
            return false;
        }
        if b == b'=' {
            pads += 1;
            if pads > 2 {
                return false;
            }
        }
        let v = value(b);
        if v == INVALID || (v < 64 && pads != 0) {
            return false;
        }
    }
    true
}

/// libmodsecurity's forgiving decoder (`decode_forgiven`): anything outside the alphabet
/// is skipped, NULs included. The result is empty where a lone `=` follows a group's
/// single character, or where the value ends, after such a character, on `=` or on `9`
/// (it compares the last character's *value*, 61 for `9`, with the code of `=`, also 61).
pub(super) fn decode_ext(input: &[u8], out: &mut Vec<u8>) {
    let mut i = 0usize;
    let mut last: i32 = 0;
    let mut acc = 0u8;
    for (pos, &b) in input.iter().enumerate() {
        if b == b'=' {
            let next = input.get(pos + 1).copied().unwrap_or(0);
            if next != b'=' && i % 4 == 1 {
                out.clear();
                return;
            }
            last = i32::from(b'=');
            continue;
        }
        let v = value(b);
        if v >= 64 {
            last = -1;
            continue;
        }
        last = i32::from(v);
        match i % 4 {
            0 => acc = v << 2,
            1 => {
                out.push(acc | (v >> 4));
                acc = (v & 0x0f) << 4;
            }
            2 => {
                out.push(acc | (v >> 2));
                acc = (v & 0x03) << 6;
            }
            _ => out.push(acc | v),
        }
        i += 1;
    }
    if last == i32::from(b'=') && i % 4 == 1 {
        out.clear();
    }
}
