//! A rule's transformations (`t:lowercase,t:urlDecodeUni`): what a value goes through before
//! the operator sees it, ModSecurity v3's names, and what each does to a value: byte for byte
//! what libmodsecurity 3.0.9 does, quirks included, which `transform/tests.rs` checks
//! against libmodsecurity itself.

mod base64;
mod comment;
mod decode;
mod escape;
mod html;
mod path;
#[cfg(all(test, feature = "modsecurity"))]
mod tests;
mod text;

/// The transformations the engine knows. A name not here is refused at load.
#[expect(
    missing_docs,
    reason = "each variant is the ModSecurity transformation of the same name (NAMES)"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transform {
    Base64Decode,
    Base64DecodeExt,
    Base64Encode,
    CmdLine,
    CompressWhitespace,
    CssDecode,
    EscapeSeqDecode,
    HexDecode,
    HexEncode,
    HtmlEntityDecode,
    JsDecode,
    Length,
    Lowercase,
    Md5,
    NormalizePath,
    NormalizePathWin,
    RemoveComments,
    RemoveCommentsChar,
    RemoveNulls,
    RemoveWhitespace,
    ReplaceComments,
    ReplaceNulls,
    Sha1,
    SqlHexDecode,
    Trim,
    TrimLeft,
    TrimRight,
    Uppercase,
    UrlDecode,
    UrlDecodeUni,
    UrlEncode,
    Utf8ToUnicode,
}

/// Each name as rules write it (matched without regard to case); `normalisePath` and
/// `normalisePathWin` are ModSecurity's other spellings.
const NAMES: &[(&str, Transform)] = &[
    ("base64Decode", Transform::Base64Decode),
    ("base64DecodeExt", Transform::Base64DecodeExt),
    ("base64Encode", Transform::Base64Encode),
    ("cmdLine", Transform::CmdLine),
    ("compressWhitespace", Transform::CompressWhitespace),
    ("cssDecode", Transform::CssDecode),
    ("escapeSeqDecode", Transform::EscapeSeqDecode),
    ("hexDecode", Transform::HexDecode),
    ("hexEncode", Transform::HexEncode),
    ("htmlEntityDecode", Transform::HtmlEntityDecode),
    ("jsDecode", Transform::JsDecode),
    ("length", Transform::Length),
    ("lowercase", Transform::Lowercase),
    ("md5", Transform::Md5),
    ("normalizePath", Transform::NormalizePath),
    ("normalisePath", Transform::NormalizePath),
    ("normalizePathWin", Transform::NormalizePathWin),
    ("normalisePathWin", Transform::NormalizePathWin),
    ("removeComments", Transform::RemoveComments),
    ("removeCommentsChar", Transform::RemoveCommentsChar),
    ("removeNulls", Transform::RemoveNulls),
    ("removeWhitespace", Transform::RemoveWhitespace),
    ("replaceComments", Transform::ReplaceComments),
    ("replaceNulls", Transform::ReplaceNulls),
    ("sha1", Transform::Sha1),
    ("sqlHexDecode", Transform::SqlHexDecode),
    ("trim", Transform::Trim),
    ("trimLeft", Transform::TrimLeft),
    ("trimRight", Transform::TrimRight),
    ("uppercase", Transform::Uppercase),
    ("urlDecode", Transform::UrlDecode),
    ("urlDecodeUni", Transform::UrlDecodeUni),
    ("urlEncode", Transform::UrlEncode),
    ("utf8toUnicode", Transform::Utf8ToUnicode),
];

/// What `t:NAME` adds to a rule's chain of transformations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `t:none`: the chain so far (the defaults' included) is dropped.
    Reset,
    /// `t:NAME`: appended to the chain.
    Apply(Transform),
}

/// `t:`'s argument.
pub(super) fn parse(name: &str) -> Result<Step, String> {
    if name.eq_ignore_ascii_case("none") {
        return Ok(Step::Reset);
    }
    NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, t)| Step::Apply(t))
        .ok_or_else(|| {
            format!("unknown transformation `t:{name}`; the native engine implements ModSecurity v3's transformations except parity, sanitising and utf8 (docs/waf.md); for one of those, use `engine = \"modsecurity\"` for this rule set")
        })
}

impl Transform {
    /// Its name as rules write it.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|&&(_, t)| t == self)
            .map_or("?", |(n, _)| n)
    }
}

impl Transform {
    /// Whether `input` comes through unchanged, known without running the step: no byte it
    /// acts on is there (most values hold no `%`, `\`, `&` or capital). The memo then
    /// records the step as changing nothing, with neither a copy nor a comparison. False
    /// where it is not known so.
    pub(crate) fn leaves(self, input: &[u8]) -> bool {
        // A value of one `.` is a path's own segment, and resolves to nothing.
        if input == b"." && matches!(self, Transform::NormalizePath | Transform::NormalizePathWin) {
            return false;
        }
        self.holds_acted_on(input) == Some(false)
    }

    /// Whether `input` holds a byte the step acts on ([`Transform::acts_on`]'s set), by
    /// the fastest search for each set: memchr for one or two bytes, a block-wise test
    /// that compiles to vector code for the ranges. `None` for the steps not known so.
    /// (Through `acts_on`'s function pointer, one call per byte, this was a twelfth of a
    /// 10 KiB POST's time: its transformed values are asked step by step.)
    fn holds_acted_on(self, input: &[u8]) -> Option<bool> {
        use memchr::{memchr, memchr2};
        Some(match self {
            Transform::Lowercase => any_byte(input, |b| b.is_ascii_uppercase()),
            Transform::Uppercase => any_byte(input, |b| b.is_ascii_lowercase()),
            Transform::UrlDecode | Transform::UrlDecodeUni => memchr2(b'%', b'+', input).is_some(),
            Transform::JsDecode | Transform::EscapeSeqDecode => memchr(b'\\', input).is_some(),
            Transform::CssDecode => memchr2(b'\\', 0, input).is_some(),
            Transform::HtmlEntityDecode => memchr(b'&', input).is_some(),
            Transform::NormalizePath => memchr(b'/', input).is_some(),
            Transform::NormalizePathWin => memchr2(b'/', b'\\', input).is_some(),
            Transform::RemoveNulls | Transform::ReplaceNulls => memchr(0, input).is_some(),
            Transform::Utf8ToUnicode => any_byte(input, |b| (b == 0) | (b >= 0x80)),
            _ => return None,
        })
    }

    /// [`Transform::leaves`] for a value of more than one byte known by the bytes it holds:
    /// a long value is summarized once, and each step asked of the summary.
    pub(crate) fn leaves_held(self, held: Held) -> bool {
        self.acts_on().is_some_and(|hit| !held.any(hit))
    }

    /// The bytes the step acts on: a value that holds none of them comes through as it is.
    /// `None` for the steps not known so.
    fn acts_on(self) -> Option<fn(u8) -> bool> {
        Some(match self {
            Transform::Lowercase => |b: u8| b.is_ascii_uppercase(),
            Transform::Uppercase => |b: u8| b.is_ascii_lowercase(),
            Transform::UrlDecode | Transform::UrlDecodeUni => |b| (b == b'%') | (b == b'+'),
            Transform::JsDecode | Transform::EscapeSeqDecode => |b| b == b'\\',
            // libmodsecurity's cssDecode stops at a NUL, as a C string does.
            Transform::CssDecode => |b| (b == b'\\') | (b == 0),
            Transform::HtmlEntityDecode => |b| b == b'&',
            Transform::NormalizePath => |b| b == b'/',
            Transform::NormalizePathWin => |b| (b == b'/') | (b == b'\\'),
            Transform::RemoveNulls | Transform::ReplaceNulls => |b| b == 0,
            // An ASCII byte is itself, but a NUL is dropped.
            Transform::Utf8ToUnicode => |b| (b == 0) | (b >= 0x80),
            _ => return None,
        })
    }

    /// Writes the transformed `input` into `out` (cleared first), so that a rule's chain
    /// reuses two buffers for every value it sees. Values are bytes, not text: every
    /// transformation takes any input, as libmodsecurity's do.
    pub(crate) fn apply(self, input: &[u8], out: &mut Vec<u8>) {
        super::profile::transform(|| self.name(), || self.run(input, out));
    }

    /// [`Transform::apply`]'s work.
    fn run(self, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        // Room for an output as long as the input, once, where a step's output grows a
        // byte at a time (a digest or a length is short: no room kept for it).
        if !matches!(self, Transform::Length | Transform::Md5 | Transform::Sha1) {
            out.reserve(input.len());
        }
        match self {
            Transform::Base64Decode => base64::decode(input, out),
            Transform::Base64DecodeExt => base64::decode_ext(input, out),
            Transform::Base64Encode => base64::encode(input, out),
            Transform::CmdLine => text::cmd_line(input, out),
            Transform::CompressWhitespace => text::compress_whitespace(input, out),
            Transform::CssDecode => escape::css_decode(input, out),
            Transform::EscapeSeqDecode => escape::escape_seq_decode(input, out),
            Transform::HexDecode => decode::hex_decode(input, out),
            Transform::HexEncode => text::hex_encode(input, out),
            Transform::HtmlEntityDecode => html::html_entity_decode(input, out),
            Transform::JsDecode => escape::js_decode(input, out),
            Transform::Length => text::length(input, out),
            Transform::Lowercase => text::lowercase(input, out),
            Transform::Md5 => text::md5(input, out),
            Transform::NormalizePath => path::normalize_path(input, false, out),
            Transform::NormalizePathWin => path::normalize_path(input, true, out),
            Transform::RemoveComments => comment::remove_comments(input, out),
            Transform::RemoveCommentsChar => comment::remove_comments_char(input, out),
            Transform::RemoveNulls => text::remove_nulls(input, out),
            Transform::RemoveWhitespace => text::remove_whitespace(input, out),
            Transform::ReplaceComments => comment::replace_comments(input, out),
            Transform::ReplaceNulls => text::replace_nulls(input, out),
            Transform::Sha1 => text::sha1(input, out),
            Transform::SqlHexDecode => decode::sql_hex_decode(input, out),
            Transform::Trim => text::trim(input, true, true, out),
            Transform::TrimLeft => text::trim(input, true, false, out),
            Transform::TrimRight => text::trim(input, false, true, out),
            Transform::Uppercase => text::uppercase(input, out),
            Transform::UrlDecode => decode::url_decode(input, out),
            Transform::UrlDecodeUni => decode::url_decode_uni(input, out),
            Transform::UrlEncode => text::url_encode(input, out),
            Transform::Utf8ToUnicode => text::utf8_to_unicode(input, out),
        }
    }
}

/// The set of bytes a value holds, a bit each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held([u64; 4]);

impl Held {
    pub(crate) fn of(value: &[u8]) -> Held {
        let mut set = [0u64; 4];
        for &b in value {
            set[usize::from(b >> 6)] |= 1 << (b & 63);
        }
        Held(set)
    }

    /// Whether `hit` holds for a byte of the set: each byte held asked (a value holds a few
    /// dozen distinct bytes, not 256).
    fn any(self, hit: fn(u8) -> bool) -> bool {
        (0u8..4).zip(self.0).any(|(word, mut bits)| {
            while bits != 0 {
                // (`bits` is not 0: fewer than 64 trailing zeros, a byte's low six bits.)
                let low = bits.trailing_zeros() as u8;
                if hit((word << 6) | low) {
                    return true;
                }
                bits &= bits - 1;
            }
            false
        })
    }
}

/// Whether `hit` holds for a byte of `input`: tested a block at a time with no early exit
/// inside a block, which the compiler turns into vector code (a byte-by-byte `any` was an
/// eighth of a 10 KiB POST's time).
pub(crate) fn any_byte(input: &[u8], hit: impl Fn(u8) -> bool) -> bool {
    input
        .chunks(64)
        .any(|block| block.iter().fold(false, |found, &b| found | hit(b)))
}
