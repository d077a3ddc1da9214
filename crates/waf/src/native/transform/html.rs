//! `htmlEntityDecode`: numeric entities and the five named ones libmodsecurity 3.0.9
//! knows, with or without their `;`.

/// `&#NN;`, `&#xHH;` (the number's low byte; one too large for a C `long` gives 0xff) and
/// `&quot; &amp; &lt; &gt; &nbsp;` (names without regard to case, `&nbsp;` to 0xa0). The
/// `;` is optional. Any other `&` sequence is copied as it is.
pub(super) fn html_entity_decode(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len();
    let mut i = 0;
    while i < n {
        // The text up to the next `&` as it is, in one copy (byte by byte, this step was a
        // twelfth of a 10 KiB form POST's inspection).
        let Some(at) = memchr::memchr(b'&', &input[i..]) else {
            out.extend_from_slice(&input[i..]);
            return;
        };
        out.extend_from_slice(&input[i..i + at]);
        i += at;
        let (decoded, copy) = if i + 1 < n {
            entity(input, i + 1)
        } else {
            (None, 1)
        };
        if let Some((byte, end)) = decoded {
            out.push(byte);
            i = if input.get(end) == Some(&b';') {
                end + 1
            } else {
                end
            };
        } else {
            out.extend_from_slice(&input[i..i + copy]);
            i += copy;
        }
    }
}

/// The entity whose text starts at `input[j]` (after the `&`): its byte and where its
/// name or number ends, or else how many bytes (from the `&`) to copy as they are.
fn entity(input: &[u8], mut j: usize) -> (Option<(u8, usize)>, usize) {
    let n = input.len();
    let run = |from: usize, keep: fn(&u8) -> bool| {
        from + input[from..].iter().take_while(|b| keep(b)).count()
    };
    if input[j] != b'#' {
        let end = run(j, u8::is_ascii_alphanumeric);
        if end == j {
            return (None, 1);
        }
        let name = &input[j..end];
        let byte = [
            (&b"quot"[..], b'"'),
            (b"amp", b'&'),
            (b"lt", b'<'),
            (b"gt", b'>'),
            (b"nbsp", 0xa0),
        ]
        .iter()
        .find(|(known, _)| name.eq_ignore_ascii_case(known))
        .map(|&(_, b)| b);
        return match byte {
            Some(b) => (Some((b, end)), 0),
            None => (None, end - j + 1),
        };
    }
    if j + 1 >= n {
        return (None, 2);
    }
    j += 1;
    let (radix, copy) = if matches!(input[j], b'x' | b'X') {
        if j + 1 >= n {
            return (None, 3);
        }
        j += 1;
        (16, 3)
    } else {
        (10, 2)
    };
    let end = if radix == 16 {
        run(j, u8::is_ascii_hexdigit)
    } else {
        run(j, u8::is_ascii_digit)
    };
    if end == j {
        return (None, copy);
    }
    (Some((strtol_low_byte(&input[j..end], radix), end)), 0)
}

/// `(unsigned char) strtol(digits, NULL, radix)`: the low byte, or 0xff where the number
/// overflows and strtol gives `LONG_MAX`.
fn strtol_low_byte(digits: &[u8], radix: u32) -> u8 {
    let mut v: i64 = 0;
    for &d in digits {
        let digit = char::from(d).to_digit(radix).map_or(0, i64::from);
        match v
            .checked_mul(i64::from(radix))
            .and_then(|v| v.checked_add(digit))
        {
            Some(next) => v = next,
            None => return 0xff,
        }
    }
    v as u8
}
