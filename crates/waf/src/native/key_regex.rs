//! The regular expression of a `VAR:/regex/` selector or a `!VAR:/regex/` exclusion, asked
//! of collection keys as libmodsecurity asks it (PCRE, caseless, `.` matching a newline,
//! multiline): once per key each time a rule reads the target. CRS 3.3's 920450 and
//! 922110 walk TX's hundred-odd keys so on every request, and PCRE2's calls on short keys
//! (about 700 instructions each) were 7% of a benign GET's instructions. Where the pattern
//! translator (`pattern/translate.rs`) gives an exact equivalent, a regex-automata regex
//! answers (about 370 a key); PCRE2 answers the others, and a key ending in a newline
//! where the pattern has a `^` (the translation's one known difference).

use super::pattern::translate::translate;
use pcre2::bytes::{Regex as Pcre, RegexBuilder};
use regex_automata::meta::Regex;
use regex_automata::util::syntax;

/// A key pattern, compiled once per thread and pattern ([`with_key_regex`]).
#[derive(Debug)]
pub(crate) struct KeyRegex {
    pcre: Pcre,
    /// The exact translation and whether it has a `^`.
    fast: Option<(Regex, bool)>,
}

impl KeyRegex {
    /// `re` compiled; `None` where PCRE2 refuses it (libmodsecurity then selects nothing).
    fn new(re: &str) -> Option<KeyRegex> {
        let pcre = RegexBuilder::new()
            .caseless(true)
            .dotall(true)
            .multi_line(true)
            .build(re)
            .ok()?;
        let fast = translate(&format!("(?i){re}"))
            .filter(|t| t.exact)
            .and_then(|t| {
                let syntax = syntax::Config::new()
                    .unicode(false)
                    .utf8(false)
                    .dot_matches_new_line(true)
                    .multi_line(true);
                // No prefilter: keys are short, and its start on each cost more than the
                // automaton's walk of the key (a whole DFA's unanchored search cost more
                // still).
                let regex = Regex::builder()
                    .configure(Regex::config().auto_prefilter(false))
                    .syntax(syntax)
                    .build(&t.pattern)
                    .ok()?;
                Some((regex, t.caret))
            });
        Some(KeyRegex { pcre, fast })
    }

    /// Whether the pattern matches somewhere in `key` (a PCRE2 error is no match, as in
    /// libmodsecurity).
    pub(crate) fn is_match(&self, key: &[u8]) -> bool {
        match &self.fast {
            Some((regex, caret)) if !(*caret && key.last() == Some(&b'\n')) => regex.is_match(key),
            _ => self.pcre.is_match(key).unwrap_or(false),
        }
    }
}

/// Calls `f` with `re` compiled (`None` where it does not compile), from this thread's
/// cache of the patterns it met.
pub(crate) fn with_key_regex<T>(re: &str, f: impl FnOnce(Option<&KeyRegex>) -> T) -> T {
    use std::cell::RefCell;
    thread_local! {
        static CACHE: RefCell<rustc_hash::FxHashMap<String, Option<KeyRegex>>> =
            RefCell::default();
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(r) = c.get(re) {
            return f(r.as_ref());
        }
        let r = c.entry(re.to_string()).or_insert_with(|| KeyRegex::new(re));
        f(r.as_ref())
    })
}

#[cfg(test)]
mod tests {
    use super::KeyRegex;

    /// The fast path answers as PCRE2 does on keys that differ in case, sit at the
    /// start, the middle or after a newline, and end in one; each pattern here has an
    /// exact translation, so the test fails if the fast path is not taken or answers
    /// otherwise.
    #[test]
    fn key_patterns_answer_as_pcre2_does() {
        let keys: &[&[u8]] = &[
            b"header_name_host",
            b"HEADER_NAME_Accept",
            b"x_header_name_",
            b"multipart_headers_content_types_1",
            b"MULTIPART_HEADERS_CONTENT_TYPES",
            b"a\nheader_name_b",
            b"header_name_\n",
            b"__utma",
            b"utm",
            b"",
            b"\xff\xfeheader_name_",
        ];
        for re in [
            "^header_name_",
            "MULTIPART_HEADERS_CONTENT_TYPES_*",
            "__utm",
            "^(?:foo|bar)$",
            "name_$",
        ] {
            let k = KeyRegex::new(re).expect("compiles");
            assert!(k.fast.is_some(), "{re}: an exact translation");
            for key in keys {
                let pcre = k.pcre.is_match(key).unwrap();
                assert_eq!(
                    k.is_match(key),
                    pcre,
                    "{re} on {:?}",
                    String::from_utf8_lossy(key)
                );
            }
        }
        assert!(KeyRegex::new("(").is_none(), "PCRE2 refuses it");
        let k = KeyRegex::new("^header_name_").unwrap();
        assert!(k.is_match(b"Header_Name_host") && !k.is_match(b"xheader_name_"));
    }
}
