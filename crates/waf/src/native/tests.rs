//! Loading: the Core Rule Set as Sluice loads it (Debian's 3.3.4, and CRS 4.22 from the Go
//! module bench/crs uses), and each kind of refusal with its file and line.

use super::action::{Ctl, Disruptive, Effect, SetOp};
use super::expand::Part;
use super::operator::Op;
use super::ruleset::{Kind, Rule};
use super::transform::{Step, Transform};
use super::variable::{Selector, Var};
use super::{LoadError, RuleSet, load};
use crate::rules::{Piece, pieces};
use sluice_config::{RouteWaf, WafRuleSet};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn route() -> RouteWaf {
    RouteWaf {
        inspect_response: true,
        response_mime_types: vec!["text/html".into()],
        ..RouteWaf::new("crs")
    }
}

/// What Sluice loads for `files` on a route: its settings, the files, its tail.
fn load_files(files: &[PathBuf]) -> Result<RuleSet, LoadError> {
    let set = WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "crs".into(),
        files: files.to_vec(),
        rules: None,
    };
    load(&pieces(&set, &route()))
}

fn text(rules: &str) -> Result<RuleSet, LoadError> {
    load(&[Piece::Text {
        origin: "test.conf".into(),
        text: rules.into(),
    }])
}

fn refused(rules: &str) -> LoadError {
    text(rules).expect_err("the rules should be refused")
}

fn rule(set: &RuleSet, id: u64) -> &Rule {
    set.rules
        .iter()
        .find(|r| r.id() == Some(id))
        .unwrap_or_else(|| panic!("rule {id} not loaded"))
}

/// Every `id:N` written in the rule files (comment lines left out): what a loader that
/// dropped no rule must have, found without the loader's parser.
fn ids_in(files: &[PathBuf]) -> BTreeSet<u64> {
    let mut ids = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            for (i, _) in line.match_indices("id:") {
                let before = line[..i].chars().last();
                if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
                    continue;
                }
                let digits: String = line[i + 3..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if let Ok(n) = digits.parse() {
                    ids.insert(n);
                }
            }
        }
    }
    ids
}

fn loaded_ids(set: &RuleSet) -> BTreeSet<u64> {
    set.rules.iter().filter_map(Rule::id).collect()
}

fn sorted_glob(pattern: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = glob::glob(pattern)
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    v.sort();
    v
}

/// Debian's CRS 3.3.4 as Sluice's documentation loads it, `REQUEST-910` (IP reputation,
/// whose `@rbl` asks HTTP:BL without a key) included: every rule written is loaded.
#[test]
fn debian_crs_3_loads_every_rule() {
    let setup = PathBuf::from("/etc/modsecurity/crs/crs-setup.conf");
    let rules = sorted_glob("/usr/share/modsecurity-crs/rules/*.conf");
    assert!(
        rules.len() > 20,
        "modsecurity-crs is not installed (scripts/test-deps)"
    );
    assert!(rules.iter().any(|p| p.to_string_lossy().contains("-910-")));
    let files: Vec<PathBuf> = std::iter::once(setup)
        .chain(rules.iter().cloned())
        .collect();
    let set = load_files(&files).unwrap_or_else(|e| panic!("{e}"));
    let expected = ids_in(&files);
    let loaded = loaded_ids(&set);
    let missing: Vec<_> = expected.difference(&loaded).collect();
    // Sluice's own settings add rules 200000-200003, 880001 and its score rule.
    assert!(
        missing.is_empty(),
        "ids written but not loaded: {missing:?}"
    );
    assert!(loaded.len() > 500, "{}", loaded.len());
}

/// CRS 4.22's rules directory in the Go module cache (bench/crs downloads the same module).
fn crs4() -> PathBuf {
    super::crs_module::dir().join("rules")
}

#[test]
fn crs_4_loads_every_rule() {
    let dir = crs4();
    let setup = dir.join("@crs-setup.conf.example");
    let rules = sorted_glob(&dir.join("@owasp_crs/*.conf").to_string_lossy());
    assert!(rules.len() > 20);
    let files: Vec<PathBuf> = std::iter::once(setup).chain(rules).collect();
    let set = load_files(&files).unwrap_or_else(|e| panic!("{e}"));
    let expected = ids_in(&files);
    let loaded = loaded_ids(&set);
    let missing: Vec<_> = expected.difference(&loaded).collect();
    assert!(
        missing.is_empty(),
        "ids written but not loaded: {missing:?}"
    );

    // One rule read in full: 942100, libinjection on cookies, arguments and XML.
    let r = rule(&set, 942100);
    let Kind::Match { targets, operator } = &r.kind else {
        panic!("942100 is a SecRule")
    };
    assert!(matches!(operator.op, Op::DetectSqli) && !operator.negated);
    let names: Vec<_> = targets.iter().map(|t| (t.var, t.exclude)).collect();
    assert!(names.contains(&(Var::RequestCookies, false)));
    assert!(
        targets
            .iter()
            .any(|t| t.var == Var::RequestHeaders
                && t.selector == Selector::Key("User-Agent".into()))
    );
    assert!(
        targets
            .iter()
            .any(|t| t.var == Var::Xml && t.selector == Selector::XPath("/*".into()))
    );
    assert_eq!(r.phase(), 2);
    assert_eq!(r.actions.disruptive, Some(Disruptive::Block));
    assert_eq!(r.actions.transforms.first(), Some(&Step::Reset));
    assert!(
        r.actions
            .transforms
            .contains(&Step::Apply(Transform::UrlDecodeUni))
    );
    assert!(r.actions.capture || r.actions.multi_match || !r.actions.effects.is_empty());
    assert!(r.actions.effects.iter().any(|e| matches!(e,
        Effect::SetVar(s) if s.var == Var::Tx && matches!(&s.op, SetOp::Add(_)))));

    // The set's path by phase reaches the blocking evaluation's marker.
    let markers: Vec<_> = set
        .phase(2)
        .filter_map(|r| match &r.kind {
            Kind::Marker(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        markers.contains(&"BEGIN-REQUEST-BLOCKING-EVAL"),
        "{markers:?}"
    );
    // Chains: 920180 in v4 has its chained rules under it, not as rules of their own.
    assert!(set.rules.iter().any(|r| r.chain.len() >= 2));
}

#[test]
fn sluice_settings_and_exclusions_are_read() {
    let set = text(
        "SecRuleEngine DetectionOnly\n\
         SecRequestBodyAccess On\n\
         SecRequestBodyLimit 1000\n\
         SecDefaultAction \"phase:2,log,auditlog,pass\"\n\
         SecRule ARGS \"@rx a\" \"id:1,phase:2,deny,status:403\"\n\
         SecRuleRemoveById 2-3 7\n\
         SecRuleUpdateTargetById 1 \"!ARGS:pwd\"\n\
         SecRule ARGS \"@rx b\" \"id:2,tag:x\"\n",
    )
    .unwrap();
    assert_eq!(set.settings.engine, super::action::Engine::DetectionOnly);
    assert!(set.settings.request_body_access);
    assert_eq!(set.settings.request_body_limit, 1000);
    assert_eq!(
        set.settings.defaults[1].as_ref().unwrap().disruptive,
        Some(Disruptive::Pass)
    );
    assert_eq!(set.exclusions.removed_ids, vec![(2, 3), (7, 7)]);
    let ((ids, t),) = (set.exclusions.targets_by_id[0].clone(),);
    assert_eq!((ids, t.var, t.exclude), ((1, 1), Var::Args, true));
    assert_eq!(t.selector, Selector::Key("pwd".into()));
    // Removed wherever it was written: rule 2 comes after the removal.
    assert_eq!(
        set.phase(2).filter_map(Rule::id).collect::<Vec<_>>(),
        vec![1]
    );
}

#[test]
fn syntax_as_crs_writes_it() {
    let set = text(concat!(
        "# a comment\n",
        "SecRule REQUEST_COOKIES|!REQUEST_COOKIES:/__utm/|ARGS:'/^a|b$/'|&TX:x|ARGS_NAMES \\\n",
        "    \"@rx (?i)\\\"x\\\"\" \\\n",
        "    \"id:5,phase:1,block,msg:'a, b: c',logdata:'%{MATCHED_VAR_NAME}=%{tx.0}',\\\n",
        "    t:none,t:lowercase,setvar:'tx.score=+%{tx.critical_anomaly_score}',setvar:!tx.gone,\\\n",
        "    setvar:tx.flag,ctl:ruleRemoveTargetById=942100;ARGS:pass,chain\"\n",
        "    SecRule &ARGS \"@eq 0\" \"t:none\"\n",
        "SecMarker END\n",
    ))
    .unwrap();
    let r = rule(&set, 5);
    assert_eq!(r.origin.line, 2, "the directive's first line");
    let Kind::Match { targets, operator } = &r.kind else {
        panic!()
    };
    assert_eq!(targets.len(), 5);
    assert_eq!(targets[2].selector, Selector::Regex("^a|b$".into()));
    assert!(targets[3].count && targets[3].var == Var::Tx);
    let Op::Rx(p) = &operator.op else { panic!() };
    assert_eq!(p.literal(), Some("(?i)\\\"x\\\""));
    assert_eq!(r.actions.msg.as_ref().unwrap().literal(), Some("a, b: c"));
    let logdata = &r.actions.logdata.as_ref().unwrap().parts;
    assert_eq!(logdata[0], Part::Var(Var::MatchedVarName, None));
    assert_eq!(logdata[2], Part::Var(Var::Tx, Some("0".into())));
    assert_eq!(
        r.actions.transforms,
        vec![Step::Reset, Step::Apply(Transform::Lowercase)]
    );
    let ops: Vec<_> = r
        .actions
        .effects
        .iter()
        .map(|e| match e {
            Effect::SetVar(s) => format!("{:?}", std::mem::discriminant(&s.op)),
            Effect::Ctl(Ctl::RuleRemoveTargetById(ids, t)) => {
                format!("ctl {ids:?} {:?}", t.selector)
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert!(
        ops[3].starts_with("ctl [(942100, 942100)] Key(\"pass\")"),
        "{ops:?}"
    );
    assert_eq!(r.chain.len(), 1);
    assert_eq!(r.chain[0].origin.line, 7);
    assert!(matches!(set.rules[1].kind, Kind::Marker(ref m) if m == "END"));
}

#[test]
fn what_the_engine_does_not_implement_is_refused_with_its_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("SecFoo On", 1, "does not implement this directive"),
        ("SecRule ARGS \"@rbl sbl.example\" \"id:1\"", 1, "@rbl"),
        ("SecRule ARGS \"@verifyCC x\" \"id:1\"", 1, "@verifyCC"),
        (
            "\n\nSecRule NOPE \"@rx a\" \"id:1\"",
            3,
            "unknown variable `NOPE`",
        ),
        (
            "SecRule ARGS \"@rx a\" \"id:1,t:parityEven7bit\"",
            1,
            "t:parityEven7bit",
        ),
        (
            "SecRule ARGS \"@rx a\" \\\n  \"id:1,exec:/bin/sh\"",
            1,
            "action `exec`",
        ),
        ("SecRule ARGS \"@rx (a\" \"id:1\"", 1, "does not compile"),
        (
            "SecRule ARGS \"@rx a\" \"id:1\"\nSecRule ARGS \"@rx b\" \"id:1\"",
            2,
            "already used",
        ),
        ("SecRule ARGS \"@rx a\" \"phase:1\"", 1, "no id"),
        (
            "SecRule ARGS \"@rx a\" \"id:1,chain\"",
            1,
            "no rule follows",
        ),
        (
            "SecRule ARGS \"@rx a\" \"id:1,chain\"\nSecRule ARGS \"@rx b\" \"id:2\"",
            2,
            "cannot have id",
        ),
        (
            "SecRule ARGS \"@rx a\" \"id:1,msg:'%{nope}'\"",
            1,
            "unknown variable `nope`",
        ),
        (
            "SecRule ARGS \"@rx a\" \"id:1,setvar:tx=1\"",
            1,
            "names no key",
        ),
        (
            "SecRule ARGS \"@rx a\" \"id:1,setvar:args.x=1\"",
            1,
            "cannot be written",
        ),
        (
            "SecRule ARGS \"@rx a\" \"id:1,ctl:debugLogLevel=9\"",
            1,
            "ctl:debugloglevel",
        ),
        ("SecRule XML:/a/b \"@rx a\" \"id:1\"", 1, "XPath"),
        ("SecRule ARGS \"@rx a\" \"id:1,msg:'open\"", 1, "not closed"),
        ("SecRule ARGS \"@rx a", 1, "no closing"),
        ("Include /nonexistent/*.conf", 1, "no file matches"),
        ("SecAction \"id:1,phase:9\"", 1, "not a phase"),
        ("SecRule !ARGS \"@rx a\" \"id:1\"", 1, "excludes nothing"),
        ("SecDefaultAction \"phase:2,log\"", 1, "disruptive action"),
        (
            "SecRule ARGS \"@validateByteRange 9-300\" \"id:1\"",
            1,
            "not a byte",
        ),
        (
            "SecRule ARGS \"@ipMatch 10.0.0.300\" \"id:1\"",
            1,
            "not an address",
        ),
    ];
    for (rules, line, why) in cases {
        let e = refused(rules);
        assert_eq!(e.place, format!("test.conf:{line}"), "{rules}: {e}");
        assert!(
            e.to_string().contains(why),
            "{rules}: `{e}` does not say `{why}`"
        );
    }
}

#[test]
fn includes_resolve_beside_their_file_and_may_not_loop() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(
        d.join("main.conf"),
        "Include sub/*.conf\nIncludeOptional none/*.conf\n",
    )
    .unwrap();
    std::fs::write(d.join("sub/a.conf"), "SecAction \"id:1,pass\"\n").unwrap();
    std::fs::write(
        d.join("sub/b.conf"),
        "SecRule ARGS \"@pmFromFile words.data\" \"id:2\"\n",
    )
    .unwrap();
    std::fs::write(d.join("sub/words.data"), "# comment\nselect\n\nunion all\n").unwrap();
    let set = load(&[Piece::File(d.join("main.conf"))]).unwrap();
    let Kind::Match { operator, .. } = &rule(&set, 2).kind else {
        panic!()
    };
    let Op::Pm(words) = &operator.op else {
        panic!()
    };
    assert_eq!(words, &["select", "union all"]);

    std::fs::write(d.join("loop.conf"), "Include loop.conf\n").unwrap();
    let e = load(&[Piece::File(d.join("loop.conf"))]).unwrap_err();
    assert!(e.why.contains("nest deeper"), "{e}");
    assert!(
        Path::new(&e.place.rsplit_once(':').unwrap().0).ends_with("loop.conf"),
        "{e}"
    );
}
