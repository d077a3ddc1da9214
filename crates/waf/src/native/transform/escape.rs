//! Backslash escapes: `jsDecode`, `cssDecode` and `escapeSeqDecode`, each with
//! libmodsecurity 3.0.9's own rules for what an escape is and what a broken one becomes.

use super::decode::{digit, full_width, is_hex, x2c};
use super::text::is_space;

fn is_octal(b: u8) -> bool {
    (b'0'..=b'7').contains(&b)
}

/// The value of up to three octal digits starting at `input[start]` (at least one is
/// there), and how many were read. `cap_at_byte`: JavaScript's rule that a third digit
/// is not taken where it would make the value exceed 0o377.
fn octal(input: &[u8], start: usize, cap_at_byte: bool) -> (u32, usize) {
    let mut j = 0;
    while start + j < input.len() && j < 3 {
        j += 1;
        if !input.get(start + j).is_some_and(|&b| is_octal(b)) {
            break;
        }
    }
    if cap_at_byte && j == 3 && input[start] > b'3' {
        j = 2;
    }
    let v = input[start..start + j]
        .iter()
        .fold(0, |v, &d| v * 8 + u32::from(d - b'0'));
    (v, j)
}

/// The C escape a letter after a backslash names (`\n`), for both decoders.
fn c_escape(b: u8) -> Option<u8> {
    Some(match b {
        b'a' => 0x07,
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'v' => 0x0b,
        _ => return None,
    })
}

/// JavaScript escapes: `\uHHHH` (low byte, full-width ASCII mapped down), `\xHH`, octal
/// up to `\377`, the C letters; any other escaped character stands for itself, and a
/// backslash at the end stays.
pub(super) fn js_decode(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    let mut i = 0;
    while i < n {
        if input[i] != b'\\' {
            out.push(input[i]);
            i += 1;
        } else if i + 5 < n
            && input[i + 1] == b'u'
            && input[i + 2..i + 6].iter().all(|&h| is_hex(h))
        {
            let low = x2c(input[i + 4], input[i + 5]);
            out.push(full_width(low, input[i + 2], input[i + 3]));
            i += 6;
        } else if i + 3 < n && input[i + 1] == b'x' && is_hex(input[i + 2]) && is_hex(input[i + 3])
        {
            out.push(x2c(input[i + 2], input[i + 3]));
            i += 4;
        } else if i + 1 < n && is_octal(input[i + 1]) {
            let (v, j) = octal(input, i + 1, true);
            out.push(v as u8);
            i += 1 + j;
        } else if i + 1 < n {
            out.push(c_escape(input[i + 1]).unwrap_or(input[i + 1]));
            i += 2;
        } else {
            out.push(b'\\');
            i += 1;
        }
    }
}

/// ANSI C escapes: the C letters and `\\ \? \' \"`, `\xHH`, octal (up to three digits,
/// the value's low byte); any other escaped character stands for itself, a backslash at
/// the end stays.
pub(super) fn escape_seq_decode(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    let mut i = 0;
    while i < n {
        if input[i] != b'\\' || i + 1 == n {
            out.push(input[i]);
            i += 1;
            continue;
        }
        let next = input[i + 1];
        if let Some(c) =
            c_escape(next).or(matches!(next, b'\\' | b'?' | b'\'' | b'"').then_some(next))
        {
            out.push(c);
            i += 2;
        } else if matches!(next, b'x' | b'X') {
            if i + 3 < n && is_hex(input[i + 2]) && is_hex(input[i + 3]) {
                out.push(x2c(input[i + 2], input[i + 3]));
                i += 4;
            } else {
                out.push(next);
                i += 2;
            }
        } else if is_octal(next) {
            let (v, j) = octal(input, i + 1, false);
            out.push(v as u8);
            i += 1 + j;
        } else {
            out.push(next);
            i += 2;
        }
    }
}

/// CSS escapes: one to six hex digits of which only the last two count (with a
/// full-width check for four, and for five or six with leading zeros), one whitespace
/// after them swallowed; a backslash before a newline or at the end disappears, before
/// anything else it goes. The result ends at its first NUL, as libmodsecurity copies it
/// out as a C string.
pub(super) fn css_decode(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    let mut i = 0;
    while i < n {
        if input[i] != b'\\' {
            out.push(input[i]);
            i += 1;
            continue;
        }
        i += 1;
        if i == n {
            break;
        }
        let mut j = 0;
        while j < 6 && i + j < n && is_hex(input[i + j]) {
            j += 1;
        }
        if j == 0 {
            if input[i] != b'\n' {
                out.push(input[i]);
            }
            i += 1;
            continue;
        }
        let h = &input[i..i + j];
        out.push(if j == 1 {
            digit(h[0])
        } else {
            let low = x2c(h[j - 2], h[j - 1]);
            let wide = j == 4 || (j == 5 && h[0] == b'0') || (j == 6 && h[..2] == *b"00");
            if wide {
                full_width(low, h[j - 4], h[j - 3])
            } else {
                low
            }
        });
        if i + j < n && is_space(input[i + j]) {
            j += 1;
        }
        i += j;
    }
    if let Some(nul) = out.iter().position(|&b| b == 0) {
        out.truncate(nul);
    }
}
