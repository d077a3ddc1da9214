//! A rule's transformations (`t:lowercase,t:urlDecodeUni`): what a value goes through before
//! the operator sees it, ModSecurity v3's names.

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
            format!("unknown transformation `t:{name}`; the native engine implements ModSecurity v3's transformations except parity, sanitising and utf8 (docs/waf.md)")
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
