//! A rule's operator (`"@rx ^a"`, `"!@within %{tx.allowed_methods}"`, `"^a"`): parsed and
//! checked at load, as ModSecurity v3 and Coraza read it.

use super::expand::{self, Expansion};
use std::net::IpAddr;
use std::path::Path;

/// An operator and its argument, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Operator {
    /// Which, with its argument.
    pub op: Op,
    /// `!@op`: the rule matches where the operator does not.
    pub negated: bool,
    /// As written, for the log (`@rx ^a`).
    pub text: String,
}

/// The operators the engine knows. A name not here is refused at load.
#[expect(
    missing_docs,
    reason = "each unexplained variant is the ModSecurity operator of the same name"
)]
#[derive(Debug, Clone)]
pub enum Op {
    /// A PCRE regular expression; literal ones are checked at load, ones with macros when
    /// expanded.
    Rx(Expansion),
    /// Any of these phrases, without regard to case (Aho-Corasick).
    Pm(Vec<String>),
    Eq(Expansion),
    Ge(Expansion),
    Gt(Expansion),
    Le(Expansion),
    Lt(Expansion),
    StrEq(Expansion),
    Contains(Expansion),
    BeginsWith(Expansion),
    EndsWith(Expansion),
    /// The value is one of the blank-separated words of the expanded argument (ModSecurity
    /// v3 searches the argument for the value as a substring; see the evaluator).
    Within(Expansion),
    ContainsWord(Expansion),
    /// Every byte in one of these inclusive ranges.
    ValidateByteRange(Vec<(u8, u8)>),
    ValidateUrlEncoding,
    ValidateUtf8Encoding,
    IpMatch(Vec<ipnet::IpNet>),
    DetectSqli,
    DetectXss,
    UnconditionalMatch,
    NoMatch,
    /// Without a geolocation database (`SecGeoLookupDb`, which the engine refuses) every
    /// lookup fails and the operator does not match, as in libmodsecurity.
    GeoLookup,
    /// `@rbl` of Project Honey Pot's HTTP:BL (a zone naming `httpbl.org`, as CRS 3.3's
    /// `REQUEST-910` asks) without `SecHttpBlKey`, which the engine refuses: the service
    /// answers only names that start with that key, so libmodsecurity does not match (for
    /// an IPv4 address it stops before asking DNS, "Missing RBL key"; for anything else it
    /// asks a name without the key, which the service does not answer). The engine does not
    /// match either, without asking. Other block lists, which do answer, are refused.
    HttpBlWithoutKey,
}

impl Op {
    /// The operator's argument when it has macros (expanded per transaction).
    pub(crate) fn macro_arg(&self) -> Option<&Expansion> {
        let e = match self {
            Op::Rx(e)
            | Op::Eq(e)
            | Op::Ge(e)
            | Op::Gt(e)
            | Op::Le(e)
            | Op::Lt(e)
            | Op::StrEq(e)
            | Op::Contains(e)
            | Op::BeginsWith(e)
            | Op::EndsWith(e)
            | Op::Within(e)
            | Op::ContainsWord(e) => e,
            _ => return None,
        };
        e.parts
            .iter()
            .any(|p| !matches!(p, expand::Part::Text(_)))
            .then_some(e)
    }
}

/// The operator in `text`; `dir` resolves `@pmFromFile`'s relative file names.
pub(super) fn parse(text: &str, dir: &Path) -> Result<Operator, String> {
    let (negated, body) = match text.strip_prefix('!') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let (name, arg) = match body.strip_prefix('@') {
        Some(b) => {
            let (n, a) = b.split_once([' ', '\t']).unwrap_or((b, ""));
            (n, a.trim())
        }
        // No `@`: the whole text is a regular expression.
        None => ("rx", body),
    };
    let op = op(name, arg, dir)?;
    Ok(Operator {
        op,
        negated,
        text: text.to_string(),
    })
}

fn op(name: &str, arg: &str, dir: &Path) -> Result<Op, String> {
    let macro_arg = || expand::parse(arg);
    Ok(match name.to_ascii_lowercase().as_str() {
        "rx" => {
            let pattern = macro_arg()?;
            if let Some(p) = pattern.literal() {
                check_regex(p)?;
            }
            Op::Rx(pattern)
        }
        "pm" => Op::Pm(phrases(arg)?),
        "pmfromfile" | "pmf" => Op::Pm(phrases_from_files(arg, dir)?),
        "eq" => Op::Eq(macro_arg()?),
        "ge" => Op::Ge(macro_arg()?),
        "gt" => Op::Gt(macro_arg()?),
        "le" => Op::Le(macro_arg()?),
        "lt" => Op::Lt(macro_arg()?),
        "streq" => Op::StrEq(macro_arg()?),
        "contains" => Op::Contains(macro_arg()?),
        "beginswith" => Op::BeginsWith(macro_arg()?),
        "endswith" => Op::EndsWith(macro_arg()?),
        "within" => Op::Within(macro_arg()?),
        "containsword" => Op::ContainsWord(macro_arg()?),
        "validatebyterange" => Op::ValidateByteRange(byte_ranges(arg)?),
        "validateurlencoding" => Op::ValidateUrlEncoding,
        "validateutf8encoding" => Op::ValidateUtf8Encoding,
        "ipmatch" => Op::IpMatch(networks(arg)?),
        "detectsqli" => Op::DetectSqli,
        "detectxss" => Op::DetectXss,
        "unconditionalmatch" => Op::UnconditionalMatch,
        "nomatch" => Op::NoMatch,
        "geolookup" => Op::GeoLookup,
        "rbl" if arg.contains("httpbl.org") => Op::HttpBlWithoutKey,
        _ => {
            return Err(format!(
                "the native engine does not implement the operator `@{name}`; use `engine = \"modsecurity\"` for this rule set, or remove the rule (docs/waf.md lists the operators)"
            ));
        }
    })
}

/// A regular expression PCRE2 compiles as libmodsecurity compiles it.
fn check_regex(pattern: &str) -> Result<(), String> {
    super::pattern::pcre(pattern).map(drop)
}

fn phrases(arg: &str) -> Result<Vec<String>, String> {
    let out: Vec<String> = arg.split_whitespace().map(str::to_string).collect();
    if out.is_empty() {
        return Err("@pm needs at least one phrase".into());
    }
    Ok(out)
}

/// `@pmFromFile a.data b.data`: each file's lines, blank lines and `#` comments left out.
fn phrases_from_files(arg: &str, dir: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in arg.split_whitespace() {
        if name.starts_with("http://") || name.starts_with("https://") {
            return Err(format!(
                "@pmFromFile {name}: the native engine reads phrases from local files only; use `engine = \"modsecurity\"` for this rule set, or download the file"
            ));
        }
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("@pmFromFile cannot read {}: {e}", path.display()))?;
        out.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string),
        );
    }
    if out.is_empty() {
        return Err(format!("@pmFromFile {arg}: no phrases in the file(s)"));
    }
    Ok(out)
}

/// `9,10,13,32-126`.
fn byte_ranges(arg: &str) -> Result<Vec<(u8, u8)>, String> {
    let byte = |s: &str| {
        s.trim()
            .parse::<u8>()
            .map_err(|_| format!("@validateByteRange: `{s}` is not a byte (0-255)"))
    };
    arg.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (byte(a)?, byte(b)?);
                if a > b {
                    return Err(format!(
                        "@validateByteRange: the range {a}-{b} is backwards"
                    ));
                }
                Ok((a, b))
            }
            None => byte(part).map(|b| (b, b)),
        })
        .collect()
}

/// `127.0.0.1,::1,10.0.0.0/8`.
fn networks(arg: &str) -> Result<Vec<ipnet::IpNet>, String> {
    arg.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("@ipMatch: `{s}` is not an address or network"))
        })
        .collect()
}
