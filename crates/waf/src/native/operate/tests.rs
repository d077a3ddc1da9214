//! The differential test: every operator on a corpus of (argument, value) cases, run by
//! libmodsecurity 3.0.9 (the oracle) and by [`Matcher::matches`], compared match for match,
//! and for `@rx`, `@pm`, `@detectSQLi` and `@detectXSS` with `capture`, TX.0, TX.1, ... too.
//!
//! Each case is one rule on its own query argument (`ARGS_GET:v17`, the value sent
//! percent-encoded so that any byte reaches it; an argument with macros reads
//! `%{ARGS_GET.a17}`, sent the same way). The native side loads the very same rule text
//! with the native loader and runs the rule's operator. A case with `capture` also has a
//! rule before it that deletes TX.0.., and rules after it that report each TX.n in hex
//! (`t:hexEncode` and `%{MATCHED_VAR}`). A transaction keeps at most `MAX_MESSAGES` match
//! records, so the cases go in batches whose rules could log fewer than that.

mod cases;

use super::Matcher;
use crate::engine::MAX_MESSAGES;
use crate::native::Kind;
use crate::native::load;
use crate::rules::{Piece, pieces};
use crate::tests::{get, route};
use crate::{MAX_DATA, Match, Rules, inspect};
use cases::{Arg, Case};
use sluice_config::{WafInline, WafRuleSet};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// The most match records one batch's rules could log (under `MAX_MESSAGES`).
const BUDGET: usize = 60;
const _: () = assert!(BUDGET < MAX_MESSAGES);

/// Rule ids a case may use: its rule, the reset before it and one report per TX.n.
const IDS_PER_CASE: usize = 20;

/// The longest captured string a report carries whole (hex and its marker under
/// `MAX_DATA`).
const MAX_CAPTURE: usize = (MAX_DATA - 2) / 2;

fn base_id(index: usize) -> usize {
    1_000_000 + index * IDS_PER_CASE
}

/// What a case's capture may set: TX.0..=TX.n, or nothing without `capture`.
fn groups(case: &Case) -> Option<usize> {
    if !case.capture {
        return None;
    }
    Some(match case.op {
        "rx" => match &case.arg {
            // Every group the pattern has (one that does not compile sets none).
            Arg::Literal(p) => {
                crate::native::pattern::pcre(p).map_or(0, |re| re.captures_len() - 1)
            }
            Arg::Macro(_) => 12,
        },
        _ => 0,
    })
}

/// How many match records a case's rules could log.
fn cost(case: &Case) -> usize {
    1 + groups(case).map_or(0, |n| n + 1)
}

/// The operator as the rule writes it.
fn operator(case: &Case, index: usize) -> String {
    match &case.arg {
        Arg::Literal(a) if a.is_empty() => format!("@{}", case.op),
        Arg::Literal(a) => format!("@{} {a}", case.op),
        Arg::Macro(_) => format!("@{} %{{ARGS_GET.a{index}}}", case.op),
    }
}

/// Every case's rules.
fn rules_text(cases: &[Case]) -> String {
    let mut text = String::new();
    for (index, case) in cases.iter().enumerate() {
        let id = base_id(index);
        let groups = groups(case);
        if let Some(n) = groups {
            let deletes: Vec<String> = (0..=n).map(|g| format!("setvar:!tx.{g}")).collect();
            let _ = writeln!(
                text,
                "SecAction \"id:{id},phase:1,pass,nolog,{}\"",
                deletes.join(",")
            );
        }
        let _ = writeln!(
            text,
            "SecRule ARGS_GET:v{index} \"{}\" \"id:{},phase:1,pass,log,msg:'m'{}\"",
            operator(case, index),
            id + 1,
            if groups.is_some() { ",capture" } else { "" },
        );
        for g in 0..=groups.unwrap_or(0) {
            if groups.is_none() {
                break;
            }
            let _ = writeln!(
                text,
                "SecRule TX:{g} \"@unconditionalMatch\" \"id:{},phase:1,pass,log,t:none,\
                 t:hexEncode,msg:'c',logdata:'x%{{MATCHED_VAR}}'\"",
                id + 2 + g,
            );
        }
    }
    text
}

/// libmodsecurity's rule set for `cases`.
fn oracle(op: &str, text: &str) -> Arc<Rules> {
    let set = WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "oracle".into(),
        files: Vec::new(),
        rules: Some(WafInline {
            text: text.to_string(),
            file: "operate/tests.rs".into(),
            line: 1,
        }),
    };
    let rules = Rules::build(&pieces(&set, &route()))
        .unwrap_or_else(|e| panic!("libmodsecurity refuses the @{op} cases: {e}"));
    Arc::new(rules)
}

/// The native matchers for `cases`, from the same text through the native loader.
fn native(op: &str, text: &str, cases: &[Case]) -> Vec<Matcher> {
    let set = load(&[Piece::Text {
        origin: "operate/tests.rs".into(),
        text: text.to_string(),
    }])
    .unwrap_or_else(|e| panic!("the native loader refuses the @{op} cases: {e}"));
    let by_id: BTreeMap<u64, &crate::native::Operator> = set
        .rules
        .iter()
        .filter_map(|r| match &r.kind {
            Kind::Match { operator, .. } => Some((r.id()?, operator)),
            _ => None,
        })
        .collect();
    (0..cases.len())
        .map(|index| {
            let id = u64::try_from(base_id(index) + 1).unwrap();
            let operator = by_id[&id];
            assert!(!operator.negated);
            // Screened (`Matcher::screened`, a multiMatch rule's): the whole DFA answers
            // first where it can, so each `@rx` case checks it against libmodsecurity (the
            // plain matcher is PCRE2 alone, as the rules differentials check).
            Matcher::new(&operator.op)
                .unwrap_or_else(|e| panic!("{}: {e}", operator.text))
                .screened()
        })
        .collect()
}

/// One case's answer: whether the operator matched, and what TX.n it left (by n).
type Answer = (bool, BTreeMap<usize, Vec<u8>>);

/// libmodsecurity's answers for the cases `batch` (indices into `cases`), in one request.
fn ask_oracle(rules: &Arc<Rules>, cases: &[Case], batch: &[usize]) -> Vec<Answer> {
    let mut target = String::from("/t?");
    for &index in batch {
        let _ = write!(target, "v{index}=");
        encode(&mut target, &cases[index].value);
        if let Arg::Macro(arg) = &cases[index].arg {
            let _ = write!(target, "&a{index}=");
            encode(&mut target, arg);
        }
        target.push('&');
    }
    target.pop();
    let verdict = inspect(rules, &get(&target), false).0;
    assert!(
        verdict.matches.len() < MAX_MESSAGES,
        "some match records may have been dropped"
    );
    let mut answers: BTreeMap<usize, Answer> = BTreeMap::new();
    for m in verdict.matches {
        let n = m.id as usize - 1_000_000;
        let (index, offset) = (n / IDS_PER_CASE, n % IDS_PER_CASE);
        record(answers.entry(index).or_default(), offset, &m);
    }
    batch
        .iter()
        .map(|i| answers.remove(i).unwrap_or_default())
        .collect()
}

fn record(answer: &mut Answer, offset: usize, m: &Match) {
    match offset {
        1 => answer.0 = true,
        n => {
            let hex = m.data.strip_prefix('x').expect("a report's marker");
            assert!(
                hex.len() < MAX_DATA - 1,
                "a report came back cut: {:?}",
                m.data
            );
            answer.1.insert(n - 2, unhex(hex));
        }
    }
}

fn encode(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(out, "%{b:02X}");
    }
}

fn unhex(hex: &str) -> Vec<u8> {
    hex.as_bytes()
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// The native answer for one case.
fn ask_native(matcher: &Matcher, case: &Case) -> Answer {
    let arg = match &case.arg {
        Arg::Macro(a) => Some(a.as_slice()),
        Arg::Literal(_) => None,
    };
    let mut captured = vec![b"stale".to_vec()];
    let hit = matcher.matches(&case.value, arg, case.capture.then_some(&mut captured));
    let tx = if case.capture {
        captured.into_iter().enumerate().collect()
    } else {
        BTreeMap::new()
    };
    (hit, tx)
}

/// Consecutive runs of cases whose rules could log at most [`BUDGET`] records together.
fn batches(cases: &[Case]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![Vec::new()];
    let mut spent = 0;
    for (index, case) in cases.iter().enumerate() {
        let c = cost(case);
        assert!(c <= BUDGET, "one case could log {c} records");
        if spent + c > BUDGET {
            out.push(Vec::new());
            spent = 0;
        }
        out.last_mut().unwrap().push(index);
        spent += c;
    }
    out
}

/// A value as Rust writes a byte string, for the failure message.
fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

fn show_tx(tx: &BTreeMap<usize, Vec<u8>>) -> String {
    let parts: Vec<String> = tx
        .iter()
        .map(|(n, v)| format!("TX.{n}=b\"{}\"", show(v)))
        .collect();
    format!("[{}]", parts.join(" "))
}

/// Runs one operator's cases through both engines: the number compared and a line for each
/// mismatch.
fn compare(op: &str, cases: &[Case]) -> (usize, Vec<String>) {
    for case in cases.iter().filter(|c| c.capture) {
        assert!(
            case.value.len() <= MAX_CAPTURE,
            "a captured value longer than a report carries"
        );
    }
    let text = rules_text(cases);
    let rules = oracle(op, &text);
    let matchers = native(op, &text, cases);
    let mut mismatches = Vec::new();
    for batch in batches(cases) {
        let theirs = ask_oracle(&rules, cases, &batch);
        for (&index, theirs) in batch.iter().zip(theirs) {
            let case = &cases[index];
            let ours = ask_native(&matchers[index], case);
            let agrees = if case.unset_group {
                cases::unset_groups_differ(&theirs, &ours)
            } else {
                ours == theirs
            };
            if !agrees {
                let expanded = match &case.arg {
                    Arg::Macro(a) => format!(" (argument b\"{}\")", show(a)),
                    Arg::Literal(_) => String::new(),
                };
                mismatches.push(format!(
                    "{}{expanded} on b\"{}\": libmodsecurity {} {}, native {} {}{}",
                    operator(case, index),
                    show(&case.value),
                    theirs.0,
                    show_tx(&theirs.1),
                    ours.0,
                    show_tx(&ours.1),
                    if case.unset_group {
                        " (expected: TX.n the same but for groups that took no part)"
                    } else {
                        ""
                    },
                ));
            }
        }
    }
    (cases.len(), mismatches)
}

#[test]
fn every_operator_answers_as_libmodsecurity_does() {
    let mut compared = BTreeMap::new();
    let mut mismatches = Vec::new();
    for (op, cases) in cases::all() {
        let (n, m) = compare(op, &cases);
        compared.insert(op, n);
        mismatches.extend(m);
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from libmodsecurity 3.0.9:\n{}",
        mismatches.len(),
        compared.values().sum::<usize>(),
        mismatches.join("\n")
    );
    for op in cases::OPERATORS {
        assert!(compared[op] > 0, "no cases for @{op}");
    }
    eprintln!("cases per operator: {compared:?}");
}

/// A matcher for `text` (`@pm a b`), through the native loader's operator parser.
fn matcher(text: &str) -> Matcher {
    let operator = crate::native::operator::parse(text, std::path::Path::new("."))
        .expect("the operator parses");
    Matcher::new(&operator.op).expect("the operator compiles")
}

/// The quirks the differential is there to hold in place, each of which some case above
/// reaches: were one lost, the native engine would answer as a textbook operator does and
/// the comparison with libmodsecurity would fail.
#[test]
fn the_cases_reach_libmodsecurity_quirks() {
    let mut tx = Vec::new();
    // @pm's failure links: `cd` in `abcd` is not found with `abcx` and `bz` beside it.
    assert!(!matcher("@pm abcx bz cd").matches(b"abcd", None, None));
    assert!(matcher("@pm cd").matches(b"abcd", None, None));
    // @pm's TX.0: the node's text, here the prefix `abc` of `abcd`, not the phrase `bc`.
    assert!(matcher("@pm bc abcd").matches(b"abcx", None, Some(&mut tx)));
    assert_eq!(tx, [b"abc".to_vec()]);
    // @rx stores past TX.9.
    let twelve = matcher("@rx (a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)(l)");
    assert!(twelve.matches(b"abcdefghijkl", None, Some(&mut tx)));
    assert_eq!(tx.len(), 13);
    // @within with an empty value; @containsWord's digits are not letters.
    assert!(matcher("@within GET").matches(b"", None, None));
    assert!(matcher("@containsWord word").matches(b"1word1", None, None));
    // @eq reads with stoi (out of int: 0), @gt with atoll (saturating).
    assert!(matcher("@eq 0").matches(b"2147483648", None, None));
    assert!(matcher("@gt 9223372036854775806").matches(b"99999999999999999999", None, None));
}

/// A value deep enough to exhaust the JIT's stack, which libmodsecurity then matches with
/// the interpreter (`searchOneMatch`): the JIT alone would say no match.
#[test]
fn the_jit_stack_running_out_falls_back_to_the_interpreter() {
    let deep = b"ab".repeat(20_000);
    let jit = crate::native::pattern::pcre("^(a|b)*$").unwrap();
    let err = jit.is_match(&deep).expect_err("the JIT's stack runs out");
    assert_eq!(err.code(), -46, "{err}");
    assert!(matcher("@rx ^(a|b)*$").matches(&deep, None, None));
}

/// `@pm`'s first look takes one automaton for a value with an ASCII capital and another
/// (the phrases lowercased, with case) for one without: either way a phrase is found
/// without regard to case, wherever the capital stands (a long value's last block too).
#[test]
fn a_phrase_is_found_in_any_case_whichever_first_look_answers() {
    let pm = matcher("@pm AppleWebKit eTc/PaSsWd");
    for value in [
        "applewebkit",
        "APPLEWEBKIT",
        "x applewebkit",
        "/etc/passwd",
        "/ETC/passwd",
    ] {
        assert!(pm.matches(value.as_bytes(), None, None), "{value}");
    }
    let mut long = "a".repeat(200).into_bytes();
    long.extend_from_slice(b"etc/passwd");
    assert!(pm.matches(&long, None, None));
    long.push(b'Z');
    assert!(pm.matches(&long, None, None), "a capital in the last block");
    assert!(!pm.matches(b"apple webkit", None, None));
}

/// Numbers as `strtol` reads them, by the digits-alone shortcut and by the whole reading
/// alike: leading zeros, the longest run the shortcut takes, and past `u64`.
#[test]
fn numbers_are_read_as_strtol_reads_them() {
    let max = i128::from(u64::MAX);
    for (s, n) in [
        ("0", Some(0)),
        ("007", Some(7)),
        ("999999999999999999", Some(999_999_999_999_999_999)),
        ("9999999999999999999", Some(9_999_999_999_999_999_999)),
        ("18446744073709551615", Some(max)),
        ("18446744073709551616", Some(max + 1)),
        (" \t-12x", Some(-12)),
        ("+5", Some(5)),
        ("1\u{0}2", Some(1)),
        ("", None),
        ("x1", None),
        ("-", None),
    ] {
        assert_eq!(super::leading_number(s.as_bytes()), n, "{s:?}");
    }
}
