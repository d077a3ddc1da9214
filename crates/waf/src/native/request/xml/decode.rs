//! The body's bytes as text, the way libxml2 picks their encoding: the first four bytes of
//! UCS-4 or of a UTF-16 `<?`, a byte order mark, else the XML declaration's `encoding`, else
//! UTF-8 (`xmlDetectCharEncoding`'s order).

/// What a body decodes to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decoded {
    /// Its text up to the first byte that is not in its encoding, and, for UTF-8, how many
    /// bytes were left from that one on (libxml2 reads UTF-8 itself, up to that byte, and
    /// fails there). Through a converter, an incomplete last character just ends the text:
    /// no error of its own, so a complete document before it is fine.
    Text(String, Option<usize>),
    /// libxml2 refuses the declared encoding before reading any element: a fatal error.
    Refused,
    /// The converter fails on a sequence not in the encoding (a UTF-16 high surrogate
    /// followed by anything but a low one; little-endian UCS-4's first unit). libxml2
    /// converts what it holds before it parses, and libmodsecurity's one parse call (the
    /// last, which ends the input) halts at the converter's error without parsing a byte
    /// nor marking the document ill-formed: no document and no error, wherever the
    /// sequence lies.
    Halted,
}

pub(super) fn decode(body: &[u8]) -> Decoded {
    match body.get(..4) {
        Some(b"\0\0\0<") => return ucs4_be(body),
        // Little-endian UCS-4 goes through iconv's big-endian one, whose first unit
        // (0x3C000000) is no character.
        Some(b"<\0\0\0") => return Decoded::Halted,
        // libxml2 has no converter for the two unusual byte orders, says so (a fatal error),
        // and reads the bytes as UTF-8, whose first NUL ends the document.
        Some(b"\0\0<\0" | b"\0<\0\0") => return Decoded::Refused,
        _ => {}
    }
    if let Some(rest) = body.strip_prefix(b"\xef\xbb\xbf") {
        return utf8(rest);
    }
    if let Some(rest) = body.strip_prefix(b"\xff\xfe") {
        return utf16(rest, u16::from_le_bytes);
    }
    if let Some(rest) = body.strip_prefix(b"\xfe\xff") {
        return utf16(rest, u16::from_be_bytes);
    }
    if body.starts_with(b"<\0?\0") {
        return utf16(body, u16::from_le_bytes);
    }
    if body.starts_with(b"\0<\0?") {
        return utf16(body, u16::from_be_bytes);
    }
    let Some((name, after)) = declared_encoding(body) else {
        return utf8(body);
    };
    let Some(name) = name.filter(|n| is_encoding_name(n)) else {
        // libxml2's `xmlParseEncName` stops at the first byte outside its grammar and finds
        // no closing quote there: a fatal error.
        return Decoded::Refused;
    };
    match name.to_ascii_lowercase().as_str() {
        "utf-8" | "utf8" => utf8(body),
        // libxml2's own converters (`xmlInitCharEncodingHandlers`), and two tables that read
        // as glibc's converters do.
        "us-ascii" | "ascii" => single_byte(body, |b| b.is_ascii().then_some(char::from(b))),
        // `latin-1` is ICU's name for it (glibc has no such alias; libxml2 asks ICU next).
        "iso-8859-1" | "latin-1" => single_byte(body, |b| Some(char::from(b))),
        "windows-1252" | "cp1252" => single_byte(body, cp1252),
        "iso-8859-15" | "latin-9" | "latin9" => single_byte(body, latin9),
        // UTF-16 and UTF-32 declared in an ASCII-compatible document: libxml2's mismatch
        // error, or iconv's garbage; UTF-7 converts in ways not followed here.
        n if n.starts_with("utf-") || n.starts_with("ucs") => Decoded::Refused,
        _ => converted(body, after, name),
    }
}

/// The body through glibc's converter for `name`, from `after` (the byte after the
/// declaration's closing quote: libxml2 switches its input there, the bytes before read as
/// UTF-8). A name glibc does not know is refused (libxml2 would ask ICU next). A sequence
/// not in the encoding ends the text there (the converter fails each later time libxml2
/// asks it, silently), except as the first character converted: then switching the input
/// fails at once, a fatal error.
fn converted(body: &[u8], after: usize, name: &str) -> Decoded {
    let Ok(head) = std::str::from_utf8(&body[..after]) else {
        return Decoded::Refused;
    };
    match super::iconv::to_utf8(name, &body[after..]) {
        None => Decoded::Refused,
        Some((rest, super::iconv::Stop::Invalid(0))) if rest.is_empty() => Decoded::Refused,
        Some((rest, _)) => Decoded::Text(format!("{head}{rest}"), None),
    }
}

/// libxml2's `EncName`: `[A-Za-z] ([A-Za-z0-9._] | '-')*`.
fn is_encoding_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn utf8(body: &[u8]) -> Decoded {
    match std::str::from_utf8(body) {
        Ok(s) => Decoded::Text(s.to_string(), None),
        Err(e) => {
            let i = e.valid_up_to();
            Decoded::Text(
                String::from_utf8_lossy(&body[..i]).into_owned(),
                Some(body.len() - i),
            )
        }
    }
}

/// UTF-16 as libxml2's own converter reads it (`UTF16LEToUTF8`): a pair of surrogates is
/// one character; a high surrogate that is the last unit, or an odd last byte, is an
/// incomplete character that ends the text; a high surrogate followed by another unit
/// halts the parser ([`Decoded::Halted`]); a low surrogate alone is converted as if it
/// were a character, which the parser then finds not allowed, as it finds U+FFFE (the
/// same path in libxml2's `xmlCurrentChar`: a three-byte sequence out of the allowed range).
fn utf16(body: &[u8], unit: fn([u8; 2]) -> u16) -> Decoded {
    let mut units = body.chunks_exact(2).map(|p| unit([p[0], p[1]]));
    let mut text = String::new();
    while let Some(u) = units.next() {
        let c = match u {
            0xD800..=0xDBFF => match units.next() {
                None => break,
                Some(low @ 0xDC00..=0xDFFF) => {
                    0x10000 + ((u32::from(u) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                }
                Some(_) => return Decoded::Halted,
            },
            0xDC00..=0xDFFF => u32::from(NOT_A_CHAR),
            _ => u32::from(u),
        };
        text.push(char::from_u32(c).unwrap_or(NOT_A_CHAR));
    }
    Decoded::Text(text, None)
}

/// Big-endian UCS-4 through iconv ("UCS-4"): a unit that is no Unicode scalar value, or an
/// incomplete last unit, fails the document before it is read ([`Decoded::Refused`]: where
/// libxml2's own UTF-16 converter halts, iconv's error is a fatal one).
fn ucs4_be(body: &[u8]) -> Decoded {
    if !body.len().is_multiple_of(4) {
        return Decoded::Refused;
    }
    let mut text = String::new();
    for u in body.chunks_exact(4) {
        match char::from_u32(u32::from_be_bytes([u[0], u[1], u[2], u[3]])) {
            Some(c) => text.push(c),
            None => return Decoded::Refused,
        }
    }
    Decoded::Text(text, None)
}

/// A character XML does not allow, which the parser treats as libxml2 treats any
/// multi-byte character out of the allowed range: what a lone low surrogate stands for.
const NOT_A_CHAR: char = '\u{FFFE}';

/// A single-byte encoding through `map`, to the first byte it does not define.
fn single_byte(body: &[u8], map: fn(u8) -> Option<char>) -> Decoded {
    Decoded::Text(body.iter().map_while(|&b| map(b)).collect(), None)
}

fn cp1252(b: u8) -> Option<char> {
    const HIGH: [char; 32] = [
        '€', '\0', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\0', 'Ž', '\0', '\0',
        '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\0', 'ž', 'Ÿ',
    ];
    match b {
        0x80..=0x9f => Some(HIGH[usize::from(b - 0x80)]).filter(|c| *c != '\0'),
        _ => Some(char::from(b)),
    }
}

fn latin9(b: u8) -> Option<char> {
    Some(match b {
        0xa4 => '€',
        0xa6 => 'Š',
        0xa8 => 'š',
        0xb4 => 'Ž',
        0xb8 => 'ž',
        0xbc => 'Œ',
        0xbd => 'œ',
        0xbe => 'Ÿ',
        _ => char::from(b),
    })
}

/// The `encoding` of an XML declaration at the start, as written (`None` where it is not
/// UTF-8 text), and the offset of the byte after its closing quote.
fn declared_encoding(body: &[u8]) -> Option<(Option<&str>, usize)> {
    let end = body.iter().position(|&b| b == b'>')?;
    let decl = body[..end].strip_prefix(b"<?xml")?;
    let at = decl.windows(8).position(|w| w == b"encoding")? + 5 + 8;
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let skip = |from: usize| from + body[from..end].iter().take_while(|b| blank(b)).count();
    let eq = skip(at);
    if body.get(eq) != Some(&b'=') {
        return None;
    }
    let open = skip(eq + 1);
    let q = *body.get(open).filter(|q| matches!(q, b'"' | b'\''))?;
    // Without a closing quote before the `>`, the value runs to it.
    let close = body[open + 1..end]
        .iter()
        .position(|&b| b == q)
        .map_or(end, |len| open + 1 + len);
    let value = std::str::from_utf8(&body[open + 1..close]).ok();
    Some((value, (close + 1).min(body.len())))
}
