//! The body's bytes as text, the way libxml2 picks their encoding: a byte order mark, the
//! first bytes of a UTF-16 `<?`, else the XML declaration's `encoding`, else UTF-8.

/// What a body decodes to: its text up to the first byte that is not in its encoding, and,
/// for UTF-8, how many bytes were left from that one on (libxml2 reads UTF-8 itself, up to
/// that byte, and fails there). Any other encoding goes through a converter, whose failure
/// just ends the input: no error of its own, so a complete document before it is fine.
/// None when libxml2 refuses the declared encoding before reading any element.
pub(super) type Decoded = Option<(String, Option<usize>)>;

/// Encodings libxml2 reads (through iconv) but this does not tell apart from ISO-8859-1:
/// their ASCII reads the same, other characters do not.
const LIKE_LATIN1: &[&str] = &[
    "iso-8859-",
    "iso8859-",
    "iso_8859-",
    "latin",
    "windows-",
    "cp",
    "ibm",
    "koi8",
    "mac",
    "shift_jis",
    "sjis",
    "euc-",
    "big5",
    "gb",
    "tis-620",
    "ebcdic",
];

pub(super) fn decode(body: &[u8]) -> Decoded {
    if let Some(rest) = body.strip_prefix(b"\xef\xbb\xbf") {
        return Some(utf8(rest));
    }
    if let Some(rest) = body.strip_prefix(b"\xff\xfe") {
        return Some(utf16(rest, u16::from_le_bytes));
    }
    if let Some(rest) = body.strip_prefix(b"\xfe\xff") {
        return Some(utf16(rest, u16::from_be_bytes));
    }
    if body.starts_with(b"<\0?\0") {
        return Some(utf16(body, u16::from_le_bytes));
    }
    if body.starts_with(b"\0<\0?") {
        return Some(utf16(body, u16::from_be_bytes));
    }
    let Some(name) = declared_encoding(body) else {
        return Some(utf8(body));
    };
    Some(match name.as_str() {
        "utf-8" | "utf8" => utf8(body),
        "us-ascii" | "ascii" => single_byte(body, |b| b.is_ascii().then_some(char::from(b))),
        "windows-1252" | "cp1252" => single_byte(body, cp1252),
        "iso-8859-15" | "latin-9" | "latin9" => single_byte(body, latin9),
        n if n.starts_with("utf-") || n.starts_with("ucs") => return None,
        n if LIKE_LATIN1.iter().any(|p| n.starts_with(p)) => {
            single_byte(body, |b| Some(char::from(b)))
        }
        _ => return None,
    })
}

fn utf8(body: &[u8]) -> (String, Option<usize>) {
    match std::str::from_utf8(body) {
        Ok(s) => (s.to_string(), None),
        Err(e) => {
            let i = e.valid_up_to();
            (
                String::from_utf8_lossy(&body[..i]).into_owned(),
                Some(body.len() - i),
            )
        }
    }
}

/// UTF-16 to the first unpaired surrogate; an odd last byte is left unread.
fn utf16(body: &[u8], unit: fn([u8; 2]) -> u16) -> (String, Option<usize>) {
    let units = body.chunks_exact(2).map(|p| unit([p[0], p[1]]));
    let text = char::decode_utf16(units).map_while(Result::ok).collect();
    (text, None)
}

/// A single-byte encoding through `map`, to the first byte it does not define.
fn single_byte(body: &[u8], map: fn(u8) -> Option<char>) -> (String, Option<usize>) {
    (body.iter().map_while(|&b| map(b)).collect(), None)
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

/// The `encoding` of an XML declaration at the start, lowercased.
fn declared_encoding(body: &[u8]) -> Option<String> {
    let end = body.iter().position(|&b| b == b'>')?;
    let decl = String::from_utf8_lossy(&body[..end]);
    let rest = decl.strip_prefix("<?xml")?;
    let at = rest.find("encoding")?;
    let rest = rest[at + 8..].trim_start().strip_prefix('=')?.trim_start();
    let q = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = rest[1..].split(q).next()?;
    Some(value.to_ascii_lowercase())
}
