//! SecLang text as a list of directives: a name and its arguments, each with the file and
//! line it starts on, as ModSecurity v3 and Coraza read a configuration file.
//!
//! - A line whose first non-blank character is `#` is a comment, wherever it is.
//! - A line ending in `\` continues on the next; the next line's leading blanks are dropped
//!   (CRS indents its continuation lines).
//! - Arguments are separated by blanks; a `"`-quoted argument runs to the first `"` not
//!   preceded by `\` and keeps its inner text as written (`\"` stays two characters, which a
//!   regular expression reads as `"`; ModSecurity's scanner does the same).

use super::error::{LoadError, Origin};
use std::sync::Arc;

/// One directive as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Directive {
    pub(super) origin: Origin,
    /// As written (`SecRule`); matched without regard to case, as ModSecurity does.
    pub(super) name: String,
    pub(super) args: Vec<String>,
}

/// The directives of `text`, which came from `file`.
pub(super) fn split(file: &Arc<str>, text: &str) -> Result<Vec<Directive>, LoadError> {
    let mut out = Vec::new();
    let mut joined = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if joined.is_empty() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            start = i + 1;
        }
        match line.strip_suffix('\\') {
            Some(head) => joined.push_str(head),
            None => {
                joined.push_str(line);
                let origin = Origin {
                    file: file.clone(),
                    line: start,
                };
                out.push(directive(origin, &joined)?);
                joined.clear();
            }
        }
    }
    if !joined.is_empty() {
        let origin = Origin {
            file: file.clone(),
            line: start,
        };
        out.push(directive(origin, &joined)?);
    }
    Ok(out)
}

fn directive(origin: Origin, text: &str) -> Result<Directive, LoadError> {
    let mut args = arguments(text).map_err(|why| LoadError::at(&origin, "", why))?;
    let name = args.remove(0);
    Ok(Directive { origin, name, args })
}

/// The blank-separated words of `text`, quoted ones without their quotes.
fn arguments(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = closing_quote(quoted).ok_or_else(|| {
                format!(
                    "the argument `{}` has no closing `\"`; close it, or write `\\\"` for a quote inside it",
                    shorten(rest)
                )
            })?;
            out.push(quoted[..end].to_string());
            rest = &quoted[end + 1..];
            if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
                return Err(format!(
                    "`{}` follows a quoted argument without a blank; separate the arguments",
                    shorten(rest)
                ));
            }
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
        rest = rest.trim_start();
    }
    Ok(out)
}

/// The index of the first `"` in `s` not preceded by a `\`.
fn closing_quote(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    (0..bytes.len()).find(|&i| bytes[i] == b'"' && (i == 0 || bytes[i - 1] != b'\\'))
}

/// The start of `s`, for an error message.
pub(super) fn shorten(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
