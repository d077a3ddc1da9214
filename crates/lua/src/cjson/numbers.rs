//! C's `strtoll` (base 10) and glibc's `strtod` on a C string, as lua-cjson's number
//! tokens use them: where they stop decides the next token, and what `strtod` accepts
//! beyond JSON (hex floats, `inf`, `infinity`, `nan`, `nan(...)`, leading `+` and zeros)
//! is what `decode_invalid_numbers` lets through. Each returns the value and the index just
//! past what it read; that index is `start` when it read nothing. A NUL byte, or the end of
//! `data`, ends the text.

/// The byte at `i`, 0 past the end.
fn at(data: &[u8], i: usize) -> u8 {
    data.get(i).copied().unwrap_or(0)
}

/// Whether `data` at `i` starts with ASCII `word` (lower case), in either case.
fn starts_with_ci(data: &[u8], i: usize, word: &[u8]) -> bool {
    word.iter()
        .enumerate()
        .all(|(k, &w)| at(data, i + k).to_ascii_lowercase() == w)
}

/// Past an optional sign: the index, and whether it was `-`.
fn sign(data: &[u8], i: usize) -> (usize, bool) {
    match at(data, i) {
        b'-' => (i + 1, true),
        b'+' => (i + 1, false),
        _ => (i, false),
    }
}

fn digits_end(data: &[u8], mut i: usize) -> usize {
    while at(data, i).is_ascii_digit() {
        i += 1;
    }
    i
}

/// `strtoll(s, &end, 10)`: out of range is clamped (`LLONG_MAX`, `LLONG_MIN`) with every
/// digit read.
pub(super) fn strtoll(data: &[u8], start: usize) -> (i64, usize) {
    let (p, negative) = sign(data, start);
    let end = digits_end(data, p);
    if end == p {
        return (0, start);
    }
    let mut acc: u64 = 0;
    let mut overflow = false;
    for &d in &data[p..end] {
        match acc
            .checked_mul(10)
            .and_then(|a| a.checked_add(u64::from(d - b'0')))
        {
            Some(a) => acc = a,
            None => overflow = true,
        }
    }
    let value = match (negative, i64::try_from(acc)) {
        _ if overflow => None,
        (false, Ok(v)) => Some(v),
        (true, Ok(v)) => Some(-v),
        (true, Err(_)) if acc == 1 << 63 => Some(i64::MIN),
        _ => None,
    };
    let clamped = if negative { i64::MIN } else { i64::MAX };
    (value.unwrap_or(clamped), end)
}

/// glibc's `strtod` (in the C locale).
pub(super) fn strtod(data: &[u8], start: usize) -> (f64, usize) {
    let (p, negative) = sign(data, start);
    let signed = |v: f64| if negative { -v } else { v };
    if starts_with_ci(data, p, b"inf") {
        let end = if starts_with_ci(data, p + 3, b"inity") {
            p + 8
        } else {
            p + 3
        };
        return (signed(f64::INFINITY), end);
    }
    if starts_with_ci(data, p, b"nan") {
        return (signed(f64::NAN), nan_end(data, p + 3));
    }
    let hex_digit = |i: usize| at(data, i).is_ascii_hexdigit();
    if at(data, p) == b'0'
        && at(data, p + 1) | 0x20 == b'x'
        && (hex_digit(p + 2) || (at(data, p + 2) == b'.' && hex_digit(p + 3)))
    {
        let (v, end) = hex_float(data, p + 2);
        return (signed(v), end);
    }
    let int_end = digits_end(data, p);
    let mut end = int_end;
    if at(data, end) == b'.' {
        end = digits_end(data, end + 1);
    }
    if end - p == usize::from(end > int_end) {
        // No digit at all ("-", ".", "-.e1").
        return (0.0, start);
    }
    if matches!(at(data, end), b'e' | b'E') {
        let (q, _) = sign(data, end + 1);
        let exp_end = digits_end(data, q);
        if exp_end > q {
            end = exp_end;
        }
    }
    let text = std::str::from_utf8(&data[start..end]).unwrap_or("0");
    (text.parse::<f64>().unwrap_or(0.0), end)
}

/// Past `nan`: glibc also reads `nan(chars)`, chars letters, digits and `_`.
fn nan_end(data: &[u8], after: usize) -> usize {
    if at(data, after) != b'(' {
        return after;
    }
    let mut i = after + 1;
    while at(data, i).is_ascii_alphanumeric() || at(data, i) == b'_' {
        i += 1;
    }
    if at(data, i) == b')' { i + 1 } else { after }
}

/// A hex float's digits after `0x`: `h*[.h*][p[+-]d+]`, rounded to nearest.
fn hex_float(data: &[u8], mut i: usize) -> (f64, usize) {
    let mut mantissa: u64 = 0;
    let mut exp: i64 = 0;
    let mut sticky = false;
    let mut fraction = false;
    loop {
        let c = at(data, i);
        if c == b'.' && !fraction {
            fraction = true;
        } else if let Some(d) = char::from(c).to_digit(16) {
            if mantissa >> 60 == 0 {
                mantissa = (mantissa << 4) | u64::from(d);
                exp -= if fraction { 4 } else { 0 };
            } else {
                // Past 60 bits a digit only says whether the rest is zero.
                sticky |= d != 0;
                exp += if fraction { 0 } else { 4 };
            }
        } else {
            break;
        }
        i += 1;
    }
    if at(data, i) | 0x20 == b'p' {
        let (q, negative) = sign(data, i + 1);
        let end = digits_end(data, q);
        if end > q {
            let e = data[q..end].iter().fold(0i64, |acc, &d| {
                acc.saturating_mul(10).saturating_add(i64::from(d - b'0'))
            });
            exp = exp.saturating_add(if negative { -e } else { e });
            i = end;
        }
    }
    // With 60 bits kept the sticky bit sits below the rounding point: it breaks ties.
    let m = (mantissa | u64::from(sticky)) as f64;
    (scale(m, exp), i)
}

/// `m * 2^exp`, in steps that stay within a double's exponent range.
fn scale(mut m: f64, mut exp: i64) -> f64 {
    while exp > 1000 && m.is_finite() && m != 0.0 {
        m *= 2f64.powi(1000);
        exp -= 1000;
    }
    while exp < -1000 && m != 0.0 {
        m *= 2f64.powi(-1000);
        exp += 1000;
    }
    let e = i32::try_from(exp.clamp(-1100, 1100)).unwrap_or(0);
    m * 2f64.powi(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtod_reads_what_glibc_reads() {
        let cases: &[(&str, f64, usize)] = &[
            ("0x6.ffp1", 13.9921875, 8),
            ("0x10", 16.0, 4),
            ("0xg", 0.0, 1),
            ("-0x.8", -0.5, 5),
            ("1.5e3x", 1500.0, 5),
            ("1e", 1.0, 1),
            ("1e+", 1.0, 1),
            ("0.4eg10", 0.4, 3),
            ("00.33", 0.33, 5),
            ("-.5", -0.5, 3),
            ("Infrared", f64::INFINITY, 3),
            ("-Infinity", f64::NEG_INFINITY, 9),
            ("1e400", f64::INFINITY, 5),
        ];
        for &(s, v, end) in cases {
            assert_eq!(strtod(s.as_bytes(), 0), (v, end), "{s}");
        }
        for s in ["-", "+", ".", "-.e1", "-v", "-+12", ""] {
            assert_eq!(strtod(s.as_bytes(), 0), (0.0, 0), "{s}");
        }
        let (v, end) = strtod(b"nan(12_a)x", 0);
        assert!(v.is_nan() && end == 9);
        let (v, end) = strtod(b"NaN(", 0);
        assert!(v.is_nan() && end == 3);
    }

    #[test]
    fn strtoll_clamps() {
        assert_eq!(strtoll(b"123abc", 0), (123, 3));
        assert_eq!(strtoll(b"-0", 0), (0, 2));
        assert_eq!(strtoll(b"+7", 0), (7, 2));
        assert_eq!(strtoll(b"99999999999999999999", 0), (i64::MAX, 20));
        assert_eq!(strtoll(b"-9223372036854775808", 0), (i64::MIN, 20));
        assert_eq!(strtoll(b"-99999999999999999999", 0), (i64::MIN, 21));
        assert_eq!(strtoll(b"-x", 0), (0, 0));
    }
}
