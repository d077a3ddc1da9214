//! The native engine beside libmodsecurity on arbitrary requests: what `crates/waf/fuzz`'s
//! `differential` target runs on libFuzzer's inputs, and the crate's tests on its saved
//! inputs. An input is a raw HTTP/1 request (request line, header fields, a blank line, the
//! body) after one byte that picks the rule set's settings; both engines inspect it on the
//! same Core Rule Set, and any difference in the rules that matched (in order) or in the
//! intervention is the fuzzer's crash, as is a panic in the native engine.
//!
//! The rules are Debian's CRS 3.3.4 (`scripts/test-deps` installs it) without
//! `REQUEST-910` (IP reputation: an HTTP:BL `@rbl` without a key, no match in either), or
//! the setup and rules under `$SLUICE_FUZZ_CRS` (`crs-setup.conf`, `rules/*.conf`, and
//! `setup.conf` if present: the layout `bench/crs` prepares for CRS 4).

use crate::facts::RequestFacts;
use crate::inspect::inspect;
use crate::native::{NativeRules, load};
use crate::rules::{Piece, pieces};
use crate::{Intervention, Match, Rules};
use bytes::Bytes;
use sluice_config::{RouteWaf, WafEngine, WafMode, WafRuleSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most input bytes one request reads (longer inputs are cut).
pub const MAX_INPUT: usize = 16 << 10;

/// Both engines on the same rules, for each of the settings an input can pick.
pub struct Differential {
    sets: Vec<(Arc<Rules>, NativeRules)>,
}

impl std::fmt::Debug for Differential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Differential")
            .field("sets", &self.sets.len())
            .finish()
    }
}

impl Default for Differential {
    fn default() -> Self {
        Self::new()
    }
}

impl Differential {
    /// CRS (see the module's doc) at paranoia level 4 detecting, where every rule runs, and
    /// at level 1 blocking, as a site runs it. Panics naming what is missing when the rules
    /// cannot be read or an engine refuses them.
    pub fn new() -> Self {
        let files = crs_files();
        let settings = [(WafMode::Detect, 4), (WafMode::Block, 1)];
        Self::of(
            settings
                .iter()
                .map(|&(mode, level)| pieces_of(&files, mode, level))
                .collect(),
        )
    }

    /// Both engines on each of `sets` (an input's first byte picks one).
    pub fn of(sets: Vec<Vec<Piece>>) -> Self {
        let sets = sets
            .iter()
            .map(|p| {
                let oracle = Rules::build(p).unwrap_or_else(|e| panic!("libmodsecurity: {e}"));
                let native = load(p)
                    .map_err(|e| e.to_string())
                    .and_then(|set| NativeRules::new(set).map_err(|e| e.to_string()))
                    .unwrap_or_else(|e| panic!("the native engine: {e}"));
                (Arc::new(oracle), native)
            })
            .collect();
        Differential { sets }
    }

    /// Inspects `data`'s request ([`request`]) with both engines of the settings its first
    /// byte picks; panics where they differ. What both gave (the rule ids in order, the
    /// intervention's status); `None` for an input that is no request.
    pub fn run(&self, data: &[u8]) -> Option<(Vec<u32>, Option<u16>)> {
        let (&pick, rest) = data.split_first()?;
        let request = request(&rest[..rest.len().min(MAX_INPUT)])?;
        if undefined_in_libmodsecurity(&request.body) || known_difference(&request.body) {
            return None;
        }
        let (oracle, native) = &self.sets[usize::from(pick) % self.sets.len()];
        let (v, _) = inspect(oracle, &request, false);
        let want = summary(&v.matches, v.intervention.as_ref());
        let o = native.inspect(&request);
        let got = summary(&o.matches, o.intervention.as_ref());
        assert!(
            want == got,
            "the engines differ on {request:?}: libmodsecurity {want:?}, native {got:?}"
        );
        Some(want)
    }
}

/// The rule ids a verdict lists, in order (Sluice's score rule left out), and the status of
/// its intervention: what the engines' differentials compare.
pub(crate) fn summary(
    matches: &[Match],
    intervention: Option<&Intervention>,
) -> (Vec<u32>, Option<u16>) {
    let ids = matches
        .iter()
        .map(|m| m.id)
        .filter(|&id| id != crate::matches::SCORE_RULE)
        .collect();
    (ids, intervention.map(|i| i.status))
}

/// `data` as a request, as a gateway would hand it to the engines: `METHOD TARGET` (a
/// version after them is read and dropped), header fields until a blank line (lines end in
/// LF, CR before it dropped), the rest the body. A header line without `:`, or with a name
/// or value the `http` crate refuses, is dropped (a gateway refuses such a request whole;
/// dropping the line keeps the rest of the input worth inspecting). `None` where the method
/// is not a token or the target holds a byte other than visible ASCII (a request an HTTP/1
/// parser refuses before any rule).
pub fn request(data: &[u8]) -> Option<RequestFacts> {
    let mut lines = data.split(|&b| b == b'\n');
    let line = lines.next()?;
    let mut read = line.len() + 1;
    let first = trim_cr(line);
    let mut words = first.split(|&b| b == b' ');
    let method = http::Method::from_bytes(words.next()?).ok()?;
    let target = words.next().filter(|t| !t.is_empty()).unwrap_or(b"/");
    if !target.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return None;
    }
    let mut headers = http::HeaderMap::new();
    for line in lines.by_ref() {
        read += line.len() + 1;
        let line = trim_cr(line);
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(&line[..colon]),
            http::HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    Some(RequestFacts {
        client: "192.0.2.7:40000".parse().ok()?,
        server: "127.0.0.1:80".parse().ok()?,
        method,
        target: String::from_utf8(target.to_vec()).ok()?,
        version: "1.1",
        headers,
        body: Bytes::copy_from_slice(data.get(read..).unwrap_or_default()),
        id: "0".into(),
    })
}

/// Whether a line of `body` is a Content-Disposition that leaves a quoted value open
/// (`filename="a.txt`): libmodsecurity 3.0.9's `parse_content_disposition` then steps over
/// its string's terminator and reads the heap beyond, which decides (the header refused, or
/// the value taken), so no engine can give its answer every time. The native engine refuses
/// the header (docs/waf.md). Such inputs are left out; so, to be sure, is any line that
/// merely looks like one (the body need not be multipart).
fn undefined_in_libmodsecurity(body: &[u8]) -> bool {
    body.split(|&b| b == b'\n').any(|line| {
        let name = b"content-disposition";
        line.get(..name.len())
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
            && leaves_a_quote_open(line)
    })
}

/// Whether `body` begins with the four bytes by which libxml2 takes a document for EBCDIC
/// (`<?xm` in it): the native XML reader reads such a body as UTF-8 and refuses it, a
/// difference `xml/tests.rs` lists (`KNOWN`) and docs/waf.md names.
fn known_difference(body: &[u8]) -> bool {
    body.starts_with(b"\x4c\x6f\xa7\x94")
}

/// Whether a quoted parameter value of `line` (one opened by `"` or `'` after `=` and
/// blanks) has no closing quote, `\` escaping the quote and itself.
fn leaves_a_quote_open(line: &[u8]) -> bool {
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'=' {
            i += 1;
            continue;
        }
        i += 1;
        while matches!(line.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        let Some(&quote) = line.get(i).filter(|&&q| q == b'"' || q == b'\'') else {
            continue;
        };
        i += 1;
        loop {
            match line.get(i) {
                None => return true,
                Some(b'\\') if matches!(line.get(i + 1), Some(&c) if c == quote || c == b'\\') => {
                    i += 2;
                }
                Some(&c) if c == quote => break,
                Some(_) => i += 1,
            }
        }
        i += 1;
    }
    false
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The rule files: `$SLUICE_FUZZ_CRS`'s, or Debian's CRS 3.3.4 without `REQUEST-910`.
fn crs_files() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("SLUICE_FUZZ_CRS") {
        let dir = PathBuf::from(dir);
        let setup = dir.join("setup.conf");
        let mut files: Vec<PathBuf> = setup.exists().then_some(setup).into_iter().collect();
        files.extend([dir.join("crs-setup.conf"), dir.join("rules/*.conf")]);
        return files;
    }
    let rules = Path::new("/usr/share/modsecurity-crs/rules");
    let mut files = vec![PathBuf::from("/etc/modsecurity/crs/crs-setup.conf")];
    let mut listed: Vec<PathBuf> = std::fs::read_dir(rules)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; scripts/test-deps installs Debian's modsecurity-crs",
                rules.display()
            )
        })
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".conf") && !name.starts_with("REQUEST-910")
        })
        .collect();
    listed.sort();
    files.extend(listed);
    files
}

/// Sluice's pieces for `files` on a route with `mode` at `level`.
fn pieces_of(files: &[PathBuf], mode: WafMode, level: u8) -> Vec<Piece> {
    let set = WafRuleSet {
        engine: WafEngine::ModSecurity,
        name: "crs".into(),
        files: files.to_vec(),
        rules: None,
    };
    pieces(&set, &route(mode, level, false))
}

/// A route of the differentials: CRS's rule set `crs` in `mode` at `level`, the default
/// thresholds and limits, responses inspected where `inspect_response` says.
pub(crate) fn route(mode: WafMode, level: u8, inspect_response: bool) -> RouteWaf {
    RouteWaf {
        mode,
        paranoia_level: level,
        inspect_response,
        ..RouteWaf::new("crs")
    }
}

#[cfg(test)]
mod tests;
