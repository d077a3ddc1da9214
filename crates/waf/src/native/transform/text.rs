//! The transformations that read a value byte by byte and keep no state beyond the last
//! byte (case, whitespace, NULs, `cmdLine`), and those that re-encode it whole (`length`,
//! `hexEncode`, `urlEncode`, `utf8toUnicode`, the digests).

/// C's `isspace` in the "C" locale, which libmodsecurity runs in: Rust's
/// `is_ascii_whitespace` leaves out the vertical tab (0x0b), which C counts.
pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t'..=b'\r')
}

/// Lowercase hex digits, as libmodsecurity prints bytes (`c2x`, `%x`).
const HEX: &[u8; 16] = b"0123456789abcdef";

pub(super) fn lowercase(input: &[u8], out: &mut Vec<u8>) {
    out.extend(input.iter().map(u8::to_ascii_lowercase));
}

pub(super) fn uppercase(input: &[u8], out: &mut Vec<u8>) {
    out.extend(input.iter().map(u8::to_ascii_uppercase));
}

/// Each run of whitespace becomes one space.
pub(super) fn compress_whitespace(input: &[u8], out: &mut Vec<u8>) {
    let mut in_space = false;
    for &b in input {
        if !is_space(b) {
            out.push(b);
            in_space = false;
        } else if !in_space {
            out.push(b' ');
            in_space = true;
        }
    }
}

/// Whitespace goes, and so do 0xa0 and 0xc2 on their own: libmodsecurity's idea of a
/// non-breaking space (Latin-1's, and the lead byte of UTF-8's), wherever they occur.
pub(super) fn remove_whitespace(input: &[u8], out: &mut Vec<u8>) {
    out.extend(
        input
            .iter()
            .filter(|&&b| !is_space(b) && b != 0xa0 && b != 0xc2),
    );
}

pub(super) fn remove_nulls(input: &[u8], out: &mut Vec<u8>) {
    out.extend(input.iter().filter(|&&b| b != 0));
}

pub(super) fn replace_nulls(input: &[u8], out: &mut Vec<u8>) {
    out.extend(input.iter().map(|&b| if b == 0 { b' ' } else { b }));
}

/// `trim`, `trimLeft` and `trimRight`: C whitespace off either end.
pub(super) fn trim(input: &[u8], left: bool, right: bool, out: &mut Vec<u8>) {
    let mut s = input;
    if left {
        let start = s.iter().position(|&b| !is_space(b)).unwrap_or(s.len());
        s = &s[start..];
    }
    if right {
        let end = s.iter().rposition(|&b| !is_space(b)).map_or(0, |p| p + 1);
        s = &s[..end];
    }
    out.extend_from_slice(s);
}

/// Windows and Unix shell obfuscation undone: quotes, backslashes and carets dropped,
/// separators folded to one space (none before `/` or `(`), letters lowercased.
pub(super) fn cmd_line(input: &[u8], out: &mut Vec<u8>) {
    let mut space = false;
    for &b in input {
        match CMD_LINE[usize::from(b)] {
            CmdLine::Dropped => {}
            CmdLine::Space => {
                if !space {
                    out.push(b' ');
                    space = true;
                }
            }
            CmdLine::Opening => {
                if space {
                    out.pop();
                }
                space = false;
                out.push(b);
            }
            CmdLine::Kept => {
                out.push(b.to_ascii_lowercase());
                space = false;
            }
        }
    }
}

/// What `cmdLine` does with a byte.
#[derive(Clone, Copy)]
enum CmdLine {
    /// `"`, `'`, `\`, `^`: dropped.
    Dropped,
    /// Space, `,`, `;`, tab, CR, LF: one space for a run of them.
    Space,
    /// `/`, `(`: kept, and a space before it dropped.
    Opening,
    /// Anything else: kept, lower-cased.
    Kept,
}

/// [`CmdLine`] by byte: one lookup where a match of ten arms was a chain of compares on
/// the long values CRS's command-injection rules read (3% of a 10 KiB form POST).
const CMD_LINE: [CmdLine; 256] = {
    let mut t = [CmdLine::Kept; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = match i as u8 {
            b'"' | b'\'' | b'\\' | b'^' => CmdLine::Dropped,
            b' ' | b',' | b';' | b'\t' | b'\r' | b'\n' => CmdLine::Space,
            b'/' | b'(' => CmdLine::Opening,
            _ => CmdLine::Kept,
        };
        i += 1;
    }
    t
};

/// The value's length in bytes, as decimal text.
pub(super) fn length(input: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(input.len()).as_bytes());
}

pub(super) fn hex_encode(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(input.len() * 2);
    for &b in input {
        out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    }
}

/// Form encoding as libmodsecurity writes it: only `*` and ASCII letters and digits stay,
/// a space becomes `+`, everything else `%xx` in lowercase.
pub(super) fn url_encode(input: &[u8], out: &mut Vec<u8>) {
    for &b in input {
        if b == b' ' {
            out.push(b'+');
        } else if b == b'*' || b.is_ascii_alphanumeric() {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// The raw 16-byte digest (rules compare it after `t:hexEncode` or `t:base64Encode`).
pub(super) fn md5(input: &[u8], out: &mut Vec<u8>) {
    use boring::hash::{MessageDigest, hash};
    // An allocation failure inside BoringSSL is the only way this fails.
    let digest = hash(MessageDigest::md5(), input).expect("BoringSSL computes an MD5 digest");
    out.extend_from_slice(&digest);
}

/// The raw 20-byte digest.
pub(super) fn sha1(input: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&boring::sha::sha1(input));
}

/// Each valid UTF-8 sequence becomes `%uXXXX` (lowercase, at least four digits, more for
/// code points above U+FFFF); ASCII stays, a NUL disappears. libmodsecurity 3.0.9's
/// quirks are kept: a lead byte whose continuation is missing or wrong disappears, a stray
/// continuation byte or 0xf8-0xff stays as is, and the lead byte is written again (raw)
/// after an overlong form, after a surrogate, and before a sequence led by 0xf5-0xf7.
pub(super) fn utf8_to_unicode(input: &[u8], out: &mut Vec<u8>) {
    // Past the end reads as the NUL that terminates libmodsecurity's copy.
    let at = |i: usize| input.get(i).copied().unwrap_or(0);
    let continues = |i: usize| at(i) & 0xc0 == 0x80;
    let mut i = 0;
    while i < input.len() {
        let c = input[i];
        let (len, d) = if c & 0x80 == 0 {
            // A NUL is written without moving on, so the next byte overwrites it.
            if c != 0 {
                out.push(c);
            }
            (1, 0)
        } else if c & 0xe0 == 0xc0 {
            if !continues(i + 1) {
                (1, 0)
            } else {
                (2, (u32::from(c & 0x1f) << 6) | u32::from(at(i + 1) & 0x3f))
            }
        } else if c & 0xf0 == 0xe0 {
            if !continues(i + 1) || !continues(i + 2) {
                (1, 0)
            } else {
                let d = (u32::from(c & 0x0f) << 12)
                    | (u32::from(at(i + 1) & 0x3f) << 6)
                    | u32::from(at(i + 2) & 0x3f);
                (3, d)
            }
        } else if c & 0xf8 == 0xf0 {
            if c >= 0xf5 {
                out.push(c);
            }
            if !continues(i + 1) || !continues(i + 2) || !continues(i + 3) {
                (1, 0)
            } else {
                let d = (u32::from(c & 0x07) << 18)
                    | (u32::from(at(i + 1) & 0x3f) << 12)
                    | (u32::from(at(i + 2) & 0x3f) << 6)
                    | u32::from(at(i + 3) & 0x3f);
                (4, d)
            }
        } else {
            out.push(c);
            (1, 0)
        };
        if len > 1 {
            push_code_point(d, out);
        }
        if (0xd800..=0xdfff).contains(&d) {
            out.push(c);
        }
        let shortest = match len {
            4 => 0x1_0000,
            3 => 0x800,
            2 => 0x80,
            _ => 0,
        };
        if d < shortest {
            out.push(c);
        }
        i += len;
    }
}

/// `%u` and the code point in lowercase hex, zero-padded to four digits.
fn push_code_point(d: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(b"%u");
    let digits = (32 - d.leading_zeros()).div_ceil(4).max(4);
    for k in (0..digits).rev() {
        out.push(HEX[((d >> (4 * k)) & 15) as usize]);
    }
}
