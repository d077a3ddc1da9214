//! The native engine beside libmodsecurity on requests nobody here wrote: every stage of the
//! Core Rule Set 4.22 regression tests (go-ftw's YAML files, from the Go module bench/crs
//! uses), both engines loading the same pieces (Sluice's settings, CRS's setup and rules),
//! compared on the rules that matched and logged, in order, and on the intervention.

use crate::facts::{RequestFacts, ResponseFacts};
use crate::fuzzing::{route, summary};
use crate::inspect::{inspect, inspect_response};
use crate::native::session::inspect_native;
use crate::native::{NativeRules, load};
use crate::rules::{Piece, pieces};
use crate::{Rules, Verdict};
use bytes::Bytes;
use sluice_config::{WafMode, WafRuleSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One request of a regression test.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) request: RequestFacts,
}

/// CRS 4.22's module directory (rules and tests).
pub(crate) fn crs4() -> PathBuf {
    crate::native::crs_module::dir().to_path_buf()
}

/// The CRS regression setup's variables (bench/crs.py's, go-ftw's and Coraza's values).
const SETUP: &str = r#"SecAction "id:900005,phase:1,nolog,pass,t:none,setvar:tx.crs_validate_utf8_encoding=1,setvar:tx.arg_name_length=100,setvar:tx.arg_length=400,setvar:tx.total_arg_length=64000,setvar:tx.max_num_args=255,setvar:tx.max_file_size=64100,setvar:tx.combined_file_sizes=65535"
"#;

/// CRS 4.22's setup and rules copied where libmodsecurity reads them as bench/crs does: out
/// of the module cache (its parser cuts an `Include` path at the `@` of `v4@v4.22.0`), with
/// a blank line after each directive (the module's files have none, and libmodsecurity
/// 3.0.9 then reads a chained rule without actions into the next line).
pub(crate) fn prepared_crs() -> tempfile::TempDir {
    let module = crs4().join("rules");
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("rules")).unwrap();
    for f in std::fs::read_dir(module.join("@owasp_crs"))
        .unwrap()
        .filter_map(Result::ok)
    {
        let text = std::fs::read_to_string(f.path()).unwrap();
        let text = if f.path().extension().is_some_and(|e| e == "conf") {
            text.lines()
                .map(|l| {
                    if l.ends_with('\\') {
                        format!("{l}\n")
                    } else {
                        format!("{l}\n\n")
                    }
                })
                .collect()
        } else {
            text
        };
        std::fs::write(d.path().join("rules").join(f.file_name()), text).unwrap();
    }
    std::fs::copy(
        module.join("@crs-setup.conf.example"),
        d.path().join("crs-setup.conf"),
    )
    .unwrap();
    std::fs::write(d.path().join("setup.conf"), SETUP).unwrap();
    d
}

/// Sluice's pieces for the prepared CRS 4.22 on a route.
pub(crate) fn crs_pieces(crs: &Path, mode: WafMode, paranoia_level: u8) -> Vec<Piece> {
    crs_pieces_inspecting(crs, mode, paranoia_level, false)
}

fn crs_pieces_inspecting(
    crs: &Path,
    mode: WafMode,
    paranoia_level: u8,
    inspect_response: bool,
) -> Vec<Piece> {
    let set = WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "crs".into(),
        files: vec![
            crs.join("setup.conf"),
            crs.join("crs-setup.conf"),
            crs.join("rules/*.conf"),
        ],
        rules: None,
    };
    pieces(&set, &route(mode, paranoia_level, inspect_response))
}

/// Every stage input of the YAML tests under `dir` that is a plain request (method, URI,
/// headers, body; no raw `encoded_request`).
pub(crate) fn cases(dir: &Path) -> Vec<Case> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = glob::glob(&dir.join("**/*.yaml").to_string_lossy())
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let Ok(doc) = serde_yaml::from_str::<serde_yaml::Value>(&text) else {
            continue;
        };
        let Some(tests) = doc.get("tests").and_then(|t| t.as_sequence()) else {
            continue;
        };
        for test in tests {
            let id = test
                .get("test_id")
                .and_then(serde_yaml::Value::as_u64)
                .unwrap_or(0);
            let stages = test
                .get("stages")
                .and_then(|s| s.as_sequence())
                .cloned()
                .unwrap_or_default();
            for (k, stage) in stages.iter().enumerate() {
                let Some(input) = stage.get("input") else {
                    continue;
                };
                if let Some(request) = facts(input) {
                    let stem = f.file_stem().unwrap().to_string_lossy();
                    out.push(Case {
                        name: format!("{stem}-{id}/{k}"),
                        request,
                    });
                }
            }
        }
    }
    out
}

fn facts(input: &serde_yaml::Value) -> Option<RequestFacts> {
    if input.get("encoded_request").is_some() || input.get("raw_request").is_some() {
        return None;
    }
    let s = |k: &str| {
        input
            .get(k)
            .and_then(serde_yaml::Value::as_str)
            .map(str::to_string)
    };
    let method = s("method").unwrap_or_else(|| "GET".into());
    let method = http::Method::from_bytes(method.as_bytes()).ok()?;
    let target = s("uri").unwrap_or_else(|| "/".into());
    let version = match s("version").as_deref() {
        Some("HTTP/1.0") => "1.0",
        _ => "1.1",
    };
    let mut headers = http::HeaderMap::new();
    if let Some(map) = input.get("headers").and_then(|h| h.as_mapping()) {
        for (k, v) in map {
            let name = http::HeaderName::from_bytes(k.as_str()?.as_bytes()).ok()?;
            let value = match v {
                serde_yaml::Value::String(s) => s.clone(),
                other => serde_yaml::to_string(other).ok()?.trim().to_string(),
            };
            headers.append(name, http::HeaderValue::from_bytes(value.as_bytes()).ok()?);
        }
    }
    let body = s("data").unwrap_or_default();
    Some(RequestFacts {
        client: "192.0.2.7:40000".parse().unwrap(),
        server: "127.0.0.1:80".parse().unwrap(),
        method,
        target,
        version,
        headers,
        body: Bytes::from(body),
        id: "0".into(),
    })
}

/// Each case's disagreement between the engines, if any, and by rule: how often each rule
/// id was reported by one engine only (`+id`: libmodsecurity only, `-id`: native only).
pub(crate) fn differences(
    cases: &[Case],
    pieces: &[Piece],
) -> (Vec<String>, Vec<(String, usize)>, usize) {
    let oracle = Arc::new(Rules::build(pieces).expect("libmodsecurity loads CRS"));
    let native = NativeRules::new(load(pieces).expect("the native engine loads CRS")).unwrap();
    let mut out = Vec::new();
    let mut by_rule = std::collections::BTreeMap::<String, usize>::new();
    let mut blocked = 0;
    for c in cases {
        let (v, _): (Verdict, _) = inspect(&oracle, &c.request, false);
        let want = summary(&v.matches, v.intervention.as_ref());
        blocked += usize::from(v.intervention.is_some());
        let o = native.inspect(&c.request);
        let got = summary(&o.matches, o.intervention.as_ref());
        if want != got {
            for id in want.0.iter().filter(|i| !got.0.contains(i)) {
                *by_rule.entry(format!("+{id}")).or_default() += 1;
            }
            for id in got.0.iter().filter(|i| !want.0.contains(i)) {
                *by_rule.entry(format!("-{id}")).or_default() += 1;
            }
            out.push(format!(
                "{}: libmodsecurity {want:?}, native {got:?}",
                c.name
            ));
        }
    }
    let mut by_rule: Vec<(String, usize)> = by_rule.into_iter().collect();
    by_rule.sort_by_key(|r| std::cmp::Reverse(r.1));
    (out, by_rule, blocked)
}

/// Fails listing the first differences and the rules behind them, if any of `n` differ.
pub(crate) fn assert_agree(diffs: &[String], by_rule: &[(String, usize)], n: usize) {
    assert!(
        diffs.is_empty(),
        "{} of {n} differ; by rule {:?}\n{}",
        diffs.len(),
        &by_rule[..by_rule.len().min(40)],
        diffs[..diffs.len().min(40)].join("\n")
    );
}

/// Runs `cases` through both engines on CRS v4 at paranoia level 4, detecting (every rule
/// evaluated), and fails unless each gives the same rules and intervention; `what` names
/// the cases in the count it prints.
pub(crate) fn assert_agree_at_pl4(cases: &[Case], what: &str) {
    let crs = prepared_crs();
    let pieces = crs_pieces(crs.path(), WafMode::Detect, 4);
    let (diffs, by_rule, _) = differences(cases, &pieces);
    eprintln!(
        "{} of {} {what} agree",
        cases.len() - diffs.len(),
        cases.len()
    );
    assert_agree(&diffs, &by_rule, cases.len());
}

#[test]
fn crs_regression_requests_give_libmodsecurity_s_verdicts() {
    let dir = crs4().join("tests");
    let cases = cases(&dir);
    assert!(cases.len() > 4000, "{} cases", cases.len());
    assert_agree_at_pl4(&cases, "requests");
}

/// The same requests blocking at paranoia level 1, as a site runs CRS: the same
/// interventions (status) and the same rules up to the one that denied.
#[test]
fn crs_regression_requests_are_blocked_as_libmodsecurity_blocks_them() {
    let cases = cases(&crs4().join("tests"));
    let crs = prepared_crs();
    let pieces = crs_pieces(crs.path(), WafMode::Block, 1);
    let (diffs, by_rule, blocked) = differences(&cases, &pieces);
    // Most of CRS's test requests are attacks that paranoia level 1 blocks.
    assert!(blocked > 1500, "libmodsecurity blocked only {blocked}");
    assert_agree(&diffs, &by_rule, cases.len());
}

/// The response CRS's backend (albedo) gives `request`: for `POST /reflect`, the status,
/// headers and body its JSON asks for (Go's `text/plain; charset=utf-8` where it names no
/// type); for any other request a small HTML page.
fn response_to(request: &RequestFacts) -> ResponseFacts {
    let mut headers = http::HeaderMap::new();
    let (mut status, mut body) = (200, b"<html><body>ok</body></html>".to_vec());
    let reflect: Option<serde_json::Value> = request
        .target
        .starts_with("/reflect")
        .then(|| serde_json::from_slice(&request.body).ok())
        .flatten();
    match &reflect {
        Some(json) => {
            status = json["status"].as_u64().map_or(200, |s| s as u16);
            body = match (json["body"].as_str(), json["encodedBody"].as_str()) {
                (Some(b), _) => b.as_bytes().to_vec(),
                (None, Some(e)) => {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .decode(e)
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            };
            for (k, v) in json["headers"].as_object().into_iter().flatten() {
                if let (Ok(k), Some(Ok(v))) = (
                    http::HeaderName::from_bytes(k.as_bytes()),
                    v.as_str().map(http::HeaderValue::from_str),
                ) {
                    headers.append(k, v);
                }
            }
            if !headers.contains_key(http::header::CONTENT_TYPE) {
                headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
            }
        }
        None => {
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/html"),
            );
        }
    }
    headers.insert(http::header::CONTENT_LENGTH, body.len().into());
    ResponseFacts {
        status,
        protocol: "HTTP 1.1",
        headers,
        body: Bytes::from(body),
        body_limit: 512 << 10,
    }
}

/// Every CRS regression request that reaches its backend, then its response (phases 3 and
/// 4, CRS's RESPONSE-95x data-leak rules and the outbound blocking evaluation) on both
/// engines: the same rules and the same intervention for the response, with the request's
/// TX carried over.
#[test]
fn crs_regression_responses_give_libmodsecurity_s_verdicts() {
    let cases = cases(&crs4().join("tests"));
    let crs = prepared_crs();
    for (mode, level) in [(WafMode::Detect, 4), (WafMode::Block, 1)] {
        let pieces = crs_pieces_inspecting(crs.path(), mode, level, true);
        let oracle = Arc::new(Rules::build(&pieces).expect("libmodsecurity loads CRS"));
        let native = Arc::new(NativeRules::new(load(&pieces).expect("native loads CRS")).unwrap());
        let (mut diffs, mut compared, mut matched) = (Vec::new(), 0, 0);
        // Every request that asks for a response of its own, and one in five of the others
        // (the whole suite is already compared request by request above).
        let some = cases
            .iter()
            .enumerate()
            .filter(|(i, c)| c.request.target.starts_with("/reflect") || i % 5 == 0);
        for (_, c) in some {
            let (_, want) = inspect(&oracle, &c.request, true);
            let (_, got) = inspect_native(&native, &c.request, true);
            let (Some(mut want), Some(mut got)) = (want, got) else {
                continue;
            };
            let response = response_to(&c.request);
            let w = inspect_response(&mut want, &response);
            let g = inspect_response(&mut got, &response);
            let (w, g) = (
                summary(&w.matches, w.intervention.as_ref()),
                summary(&g.matches, g.intervention.as_ref()),
            );
            compared += 1;
            matched += usize::from(!w.0.is_empty());
            if w != g {
                diffs.push(format!("{}: libmodsecurity {w:?}, native {g:?}", c.name));
            }
        }
        eprintln!(
            "{mode:?} PL{level}: {compared} responses, {matched} matched, {} differ",
            diffs.len()
        );
        assert!(
            compared > 300 && matched > 30,
            "{compared} compared, {matched} matched"
        );
        assert!(
            diffs.is_empty(),
            "{mode:?} PL{level}: {} of {compared} responses differ\n{}",
            diffs.len(),
            diffs[..diffs.len().min(40)].join("\n")
        );
    }
}

/// Debian's CRS 3.3.4 as Sluice's documentation loads it, `REQUEST-910` included (its
/// `@rbl` asks HTTP:BL without a key, and the IP collection): one in four of CRS 4.22's
/// regression requests through both engines at paranoia level 2, blocking, the same rules
/// and interventions.
#[test]
fn debian_crs_3_with_its_ip_reputation_file_gives_libmodsecurity_s_verdicts() {
    let set = sluice_config::WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "crs".into(),
        files: crate::tests::CRS.iter().map(PathBuf::from).collect(),
        rules: None,
    };
    let pieces = pieces(&set, &route(WafMode::Block, 2, false));
    let cases: Vec<Case> = cases(&crs4().join("tests"))
        .into_iter()
        .step_by(4)
        .collect();
    assert!(cases.len() > 1000, "{} cases", cases.len());
    let (diffs, by_rule, blocked) = differences(&cases, &pieces);
    assert!(blocked > 300, "libmodsecurity blocked only {blocked}");
    assert_agree(&diffs, &by_rule, cases.len());
}
