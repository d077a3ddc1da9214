//! The percent and hex decoders: `urlDecode`, `urlDecodeUni`, `hexDecode` and
//! `sqlHexDecode`.

/// libmodsecurity's `x2c`: two hex digits to a byte, computed without checking that they
/// are digits (so `hexDecode` turns any pair into some byte, as libmodsecurity does).
pub(super) fn x2c(hi: u8, lo: u8) -> u8 {
    digit(hi).wrapping_mul(16).wrapping_add(digit(lo))
}

/// One hex digit's value by libmodsecurity's arithmetic (`xsingle2c`), wrapping on bytes
/// that are not digits.
pub(super) fn digit(b: u8) -> u8 {
    if b >= b'A' {
        (b & 0xdf).wrapping_sub(b'A').wrapping_add(10)
    } else {
        b.wrapping_sub(b'0')
    }
}

/// Full-width ASCII (U+FF01-U+FF5E) written `%uff41` or `\uff41` decodes to the ASCII
/// byte: the low byte plus 0x20 (libmodsecurity's rule, shared by `urlDecodeUni`,
/// `jsDecode` and `cssDecode`).
pub(super) fn full_width(low: u8, hi1: u8, hi2: u8) -> u8 {
    if low > 0 && low < 0x5f && matches!(hi1, b'f' | b'F') && matches!(hi2, b'f' | b'F') {
        low + 0x20
    } else {
        low
    }
}

/// `%xx` decoded where both are hex digits, `+` to a space; anything else stays.
pub(super) fn url_decode(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    let mut i = 0;
    while i < n {
        let b = input[i];
        if b == b'%' && i + 2 < n && is_hex(input[i + 1]) && is_hex(input[i + 2]) {
            out.push(x2c(input[i + 1], input[i + 2]));
            i += 3;
        } else {
            out.push(if b == b'+' { b' ' } else { b });
            i += 1;
        }
    }
}

/// `urlDecode` plus IIS's `%uXXXX`, of which only the low byte is kept (full-width ASCII
/// mapped down). No `SecUnicodeMapFile` is read. An incomplete `%u` keeps both its
/// characters and decoding resumes after them.
pub(super) fn url_decode_uni(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    let mut i = 0;
    while i < n {
        let b = input[i];
        if b == b'%' && i + 1 < n && matches!(input[i + 1], b'u' | b'U') {
            if i + 5 < n && input[i + 2..i + 6].iter().all(|&h| is_hex(h)) {
                let low = x2c(input[i + 4], input[i + 5]);
                out.push(full_width(low, input[i + 2], input[i + 3]));
                i += 6;
            } else {
                out.extend_from_slice(&input[i..i + 2]);
                i += 2;
            }
        } else if b == b'%' && i + 2 < n && is_hex(input[i + 1]) && is_hex(input[i + 2]) {
            out.push(x2c(input[i + 1], input[i + 2]));
            i += 3;
        } else {
            out.push(if b == b'+' { b' ' } else { b });
            i += 1;
        }
    }
}

/// Each pair of bytes to one, whatever they are; an odd last byte is dropped.
pub(super) fn hex_decode(input: &[u8], out: &mut Vec<u8>) {
    out.extend(input.chunks_exact(2).map(|p| x2c(p[0], p[1])));
}

/// MySQL's `0xHEX` literals decoded in place, as libmodsecurity 3.0.9's loop does it,
/// off-by-one included: the value's last byte is never looked at on its own (it is
/// dropped unless a hex run reaches it or ends just before it), and the result ends at
/// the first NUL, written or decoded.
pub(super) fn sql_hex_decode(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    // Past the end reads as the NUL that terminates libmodsecurity's copy.
    let at = |i: usize| input.get(i).copied().unwrap_or(0);
    // `i` is where the C loop's read pointer is; its counter is always `i + 1` when
    // the condition is tested, so `count < len` is `i + 1 < n`.
    let mut i = 0;
    while i + 1 < n && at(i) != 0 {
        if at(i) == b'0'
            && matches!(at(i + 1), b'x' | b'X')
            && is_hex(at(i + 2))
            && is_hex(at(i + 3))
        {
            i += 2;
            while is_hex(at(i)) && is_hex(at(i + 1)) {
                out.push(x2c(at(i), at(i + 1)));
                i += 2;
            }
        }
        // The loop's increment copies one byte, even the terminating NUL.
        out.push(at(i));
        i += 1;
    }
    if let Some(nul) = out.iter().position(|&b| b == 0) {
        out.truncate(nul);
    }
}

/// C's `VALID_HEX` / `isxdigit`.
pub(super) fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}
