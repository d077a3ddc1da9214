//! The prefilter's shortcuts beside libmodsecurity: rules sharing targets and chains whose
//! patterns the prefilter answers per target (a rule whose pattern no value matches skips
//! the target), with the cases where a shortcut would be wrong: a negated operator, a
//! target left out with `!`, a key selector, a `&` count, `ctl:ruleRemoveTargetById`,
//! captures read by a chained rule, patterns of other paranoia levels in the same chain
//! (ordered apart in the prefilter), the request body's values in phase 2, values that
//! match only after the chain's transformations, and chains that share their first steps
//! (each computed from the shorter one's result), and long values asked by many chains,
//! which the whole-set automaton and the phrasebook answer once per the bytes they are
//! (chains that leave a value as it is share them; those that decode it do not). The same
//! rule ids, data and intervention on every request, or the shortcut changed a verdict.

use crate::facts::RequestFacts;
use crate::inspect::inspect;
use crate::native::session::inspect_native;
use crate::native::{NativeRules, load};
use crate::rules::Piece;
use crate::{Rules, Verdict};
use bytes::Bytes;
use std::sync::Arc;

const RULES: &str = r#"
SecRuleEngine On
SecRequestBodyAccess On
SecRule ARGS|REQUEST_HEADERS:User-Agent "@rx foo" "id:1,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule ARGS|REQUEST_HEADERS:User-Agent "@rx bar" "id:2,phase:1,pass,log,t:none,t:lowercase,tag:'paranoia-level/2',logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS|!ARGS:skip "@rx qux" "id:3,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "!@rx foo" "id:4,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule &ARGS "@rx ^2$" "id:5,phase:1,pass,log,t:none"
SecRule ARGS:b "@rx bar" "id:6,phase:1,pass,log,t:none,t:lowercase,tag:'paranoia-level/3',logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS_NAMES "@rx ^skip$" "id:7,phase:1,pass,log,t:none,t:lowercase,tag:'paranoia-level/4'"
SecRule REQUEST_URI "@rx /remove" "id:8,phase:1,pass,log,t:none,ctl:ruleRemoveTargetById=9;ARGS:a"
SecRule ARGS "@rx foo" "id:9,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx (?:bar|foo)(x+)" "id:10,phase:1,pass,log,t:none,t:lowercase,capture,chain,logdata:'%{TX.1}'"
    SecRule TX:1 "@rx ^xx$" "t:none"
SecRule ARGS "@rx <script" "id:11,phase:1,pass,log,t:none,t:urlDecodeUni,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx <SCRIPT" "id:13,phase:1,pass,log,t:none,t:urlDecodeUni,logdata:'%{MATCHED_VAR}'"
SecRule ARGS "@rx <script>" "id:14,phase:1,pass,log,t:none,t:urlDecodeUni,t:lowercase,t:removeWhitespace,logdata:'%{MATCHED_VAR}'"
SecRule ARGS|REQUEST_HEADERS:User-Agent "@rx bar" "id:12,phase:1,pass,log,t:none,t:lowercase,tag:'paranoia-level/2',logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx foo" "id:21,phase:2,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule ARGS_POST|REQUEST_HEADERS:User-Agent "@rx bar" "id:22,phase:2,deny,status:403,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx <script" "id:41,phase:2,pass,log,t:none,t:urlDecodeUni,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx <SCRIPT" "id:42,phase:2,pass,log,t:none,t:urlDecodeUni,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx ordinary" "id:43,phase:2,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx words\s+some" "id:44,phase:2,pass,log,t:none,t:htmlEntityDecode,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx <script>" "id:45,phase:2,pass,log,t:none,t:urlDecodeUni,t:lowercase,t:removeWhitespace,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx script" "id:46,phase:2,pass,log,t:none,t:urlDecodeUni,t:removeNulls,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx words<some" "id:47,phase:2,pass,log,t:none,t:htmlEntityDecode,t:removeWhitespace,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx words<some" "id:48,phase:2,pass,log,t:none,t:urlDecodeUni,t:removeWhitespace,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@rx ordinarywords" "id:49,phase:2,pass,log,t:none,t:lowercase,t:removeWhitespace,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@pm cmd.exe" "id:34,phase:2,pass,log,t:none,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@pm etc/passwd cmd.exe" "id:31,phase:2,pass,log,t:none,t:urlDecodeUni,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "@pm /bin/sh" "id:32,phase:2,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS "!@pm harmless" "id:33,phase:2,pass,log,t:none,t:htmlEntityDecode,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS|REQUEST_HEADERS:User-Agent "@pm sqlmap nikto" "id:35,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS|!ARGS:skip "@pm nikto" "id:36,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule REQUEST_HEADERS:User-Agent "!@pm nikto" "id:37,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
SecRule ARGS:b "@pm sqlmap" "id:38,phase:1,pass,log,t:none,t:lowercase,logdata:'%{MATCHED_VAR_NAME}'"
"#;

fn request(target: &str, agent: &str, body: &str) -> RequestFacts {
    let mut headers = http::HeaderMap::new();
    headers.insert("host", "example.com".parse().unwrap());
    headers.insert("user-agent", agent.parse().unwrap());
    if !body.is_empty() {
        headers.insert(
            "content-type",
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        headers.insert("content-length", body.len().to_string().parse().unwrap());
    }
    RequestFacts {
        client: "192.0.2.7:40000".parse().unwrap(),
        server: "127.0.0.1:80".parse().unwrap(),
        method: if body.is_empty() {
            http::Method::GET
        } else {
            http::Method::POST
        },
        target: target.into(),
        version: "1.1",
        headers,
        body: Bytes::from(body.to_string()),
        id: "1".into(),
    }
}

fn summary(v: &Verdict) -> (Vec<(u32, String)>, Option<u16>) {
    let ids = v.matches.iter().map(|m| (m.id, m.data.clone())).collect();
    (ids, v.intervention.as_ref().map(|i| i.status))
}

#[test]
fn shortcuts_give_libmodsecurity_s_verdicts() {
    let pieces = [Piece::Text {
        origin: "test.conf".into(),
        text: RULES.into(),
    }];
    let oracle = Arc::new(Rules::build(&pieces).expect("libmodsecurity loads the rules"));
    let native = Arc::new(NativeRules::new(load(&pieces).expect("native loads them")).unwrap());
    // Values long enough for the phrasebook (`operate/phrasebook.rs`), through chains that
    // leave them the same bytes and chains that do not.
    let words = "some+ordinary+words+".repeat(20);
    let long = [
        format!("a={words}%2FETC%2Fpasswd&b={words}"),
        format!("a={words}/BIN/sh+and+HARMLESS&b={words}harmless"),
        format!("a={words}cmd%252Eexe&b={words}CMD.exe&c={words}cmd.exe"),
        format!("a={words}cmd%252Eexe&b={words}"),
        format!("a={words}%253Cscript&b={words}"),
        format!("a={words}%253CSCRIPT%253E&b={words}FOO"),
        format!("a={words}words+%26lt%3B+some&b={words}"),
        format!("a={words}&b={words}h%26%23097%3Brmless"),
    ];
    let requests = [
        request("/p?a=FOO&b=bar", "curl", &long[0]),
        request("/p?a=FOO&b=bar", "curl", &long[1]),
        request("/p?a=FOO&b=bar", "curl", &long[2]),
        request("/p?a=FOO&b=bar", "curl", &long[3]),
        request("/p?a=FOO&b=bar", "curl", &long[4]),
        request("/p?a=FOO&b=bar", "curl", &long[5]),
        request("/p?a=FOO&b=bar", "curl", &long[6]),
        request("/p?a=FOO&b=bar", "curl", &long[7]),
        request("/p?a=FOO&b=bar", "curl", ""),
        request("/p?a=plain&b=plain", "FooBar", ""),
        request("/p?skip=qux&a=1", "curl", ""),
        request("/p?a=qux", "curl", ""),
        request("/remove?a=foo&c=foo", "curl", ""),
        request("/p?a=fooxx&b=barx", "curl", ""),
        request("/p?a=%253Cscript", "curl", ""),
        request("/p?a=%3Cscript", "curl", ""),
        request("/p?a=%3CSCRIPT&b=%3CS%20cript%3E", "curl", ""),
        request("/p", "curl", ""),
        request("/p?a=x", "curl", "a=foo&b=BAR"),
        request("/p?a=x", "BAR", "a=1"),
        request("/p?a=x", "curl", "c=plain"),
        // `@pm` answered per target: a phrase in one target and not another, in a value
        // left out with `!`, under a key selector, and a negated list.
        request("/p?skip=NIKTO&a=1", "curl", ""),
        request("/p?a=1", "Nikto/2.1", ""),
        request("/p?a=sqlmap&b=1", "curl", ""),
        request("/p?a=1&b=SQLMap", "curl", ""),
        request("/p?a=x", "curl", "a=nikto"),
    ];
    let mut matched = 0;
    for r in &requests {
        let want = summary(&inspect(&oracle, r, false).0);
        let got = summary(&inspect_native(&native, r, false).0);
        assert_eq!(
            got, want,
            "{} ({:?}): native, then libmodsecurity",
            r.target, r.body
        );
        matched += want.0.len();
    }
    // The requests reach the rules: a comparison of two empty lists proves nothing.
    assert!(matched > 20, "only {matched} matches in all");
}
