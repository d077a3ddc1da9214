//! The engine with real rules: inline rules, and Debian's OWASP Core Rule Set 3.3.4
//! (`modsecurity-crs`, which `scripts/test-deps` installs).

use crate::rules::pieces;
use crate::{RequestFacts, ResponseFacts, Rules, Verdict, inspect, inspect_response};
use bytes::Bytes;
use sluice_config::{RouteWaf, WafExclusion, WafInline, WafMode, WafRuleSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Debian's CRS as libmodsecurity loads it (the package's `owasp-crs.load` is for Apache:
/// libmodsecurity has no `IncludeOptional`).
pub(crate) const CRS: [&str; 2] = [
    "/etc/modsecurity/crs/crs-setup.conf",
    "/usr/share/modsecurity-crs/rules/*.conf",
];

pub(crate) fn route() -> RouteWaf {
    RouteWaf {
        response_mime_types: vec!["text/html".into(), "text/plain".into()],
        ..RouteWaf::new("crs")
    }
}

fn crs_set() -> WafRuleSet {
    WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "crs".into(),
        files: CRS.iter().map(PathBuf::from).collect(),
        rules: None,
    }
}

fn inline_set(text: &str) -> WafRuleSet {
    WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "own".into(),
        files: Vec::new(),
        rules: Some(WafInline {
            text: text.into(),
            file: "sluice.toml".into(),
            line: 10,
        }),
    }
}

/// CRS compiled once for the tests that only read it.
fn crs() -> Arc<Rules> {
    static CRS_RULES: OnceLock<Arc<Rules>> = OnceLock::new();
    CRS_RULES
        .get_or_init(|| {
            Arc::new(Rules::build(&pieces(&crs_set(), &route())).expect("CRS 3.3.4 compiles"))
        })
        .clone()
}

pub(crate) fn get(target: &str) -> RequestFacts {
    let mut headers = http::HeaderMap::new();
    headers.insert("host", "example.com".parse().unwrap());
    headers.insert(
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"
            .parse()
            .unwrap(),
    );
    headers.insert("accept", "text/html,application/xhtml+xml".parse().unwrap());
    RequestFacts {
        client: "192.0.2.7:40000".parse().unwrap(),
        server: "127.0.0.1:8443".parse().unwrap(),
        method: http::Method::GET,
        target: target.into(),
        version: "1.1",
        headers,
        body: Bytes::new(),
        id: String::new(),
    }
}

fn post(target: &str, content_type: &str, body: &str) -> RequestFacts {
    let mut r = get(target);
    r.method = http::Method::POST;
    r.headers
        .insert("content-type", content_type.parse().unwrap());
    r.headers
        .insert("content-length", body.len().to_string().parse().unwrap());
    r.body = Bytes::from(body.to_string());
    r
}

/// Phases 1 and 2 only, the transaction ended.
fn verdict(rules: &Arc<Rules>, request: &RequestFacts) -> Verdict {
    inspect(rules, request, false).0
}

fn ids(v: &crate::Verdict) -> Vec<u32> {
    v.matches.iter().map(|m| m.id).collect()
}

#[test]
fn an_inline_rule_denies_with_its_status_and_says_why() {
    let rules = Arc::new(
        Rules::build(&pieces(
            &inline_set("SecRule ARGS:q \"@contains evil\" \"id:10001,phase:2,deny,status:418,log,msg:'evil asked'\""),
            &route(),
        ))
        .expect("compiles"),
    );
    let v = verdict(&rules, &get("/search?q=very+evil+thing"));
    let i = v.intervention.as_ref().expect("denied");
    assert_eq!(i.status, 418);
    assert_eq!(ids(&v), [10001]);
    assert_eq!(v.matches[0].msg, "evil asked");
    let v = verdict(&rules, &get("/search?q=kind"));
    assert_eq!(v.intervention, None);
    assert!(v.matches.is_empty(), "{:?}", v.matches);
}

#[test]
fn a_broken_rule_names_its_file_and_line() {
    let err = Rules::build(&pieces(&inline_set("\n\nSecRuleEngin On"), &route()))
        .expect_err("a misspelt directive");
    assert!(err.contains("sluice.toml"), "{err}");
    assert!(
        err.contains("Line: 12"),
        "the rules start on line 10 of the file: {err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.conf");
    std::fs::write(&file, "SecRuleEngine On\nSecRequestBodyAcess On\n").unwrap();
    let set = WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "bad".into(),
        files: vec![file.clone()],
        rules: None,
    };
    let err = Rules::build(&pieces(&set, &route())).expect_err("a misspelt directive");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains("Line: 2"), "{err}");
}

#[test]
fn crs_passes_a_plain_page_and_blocks_sql_injection_with_its_score() {
    let rules = crs();
    let v = verdict(&rules, &get("/products/42?sort=price&page=2"));
    assert_eq!(v.intervention, None);
    assert!(v.matches.is_empty(), "{:?}", v.matches);
    let v = verdict(&rules, &get("/products?id=1%27%20or%20%271%27%3D%271"));
    assert_eq!(v.intervention.as_ref().map(|i| i.status), Some(403));
    assert!(
        ids(&v).contains(&942100),
        "libinjection's SQLi rule: {:?}",
        ids(&v)
    );
    assert!(
        ids(&v).contains(&949110),
        "the blocking evaluation: {:?}",
        ids(&v)
    );
    assert!(
        v.anomaly_score.is_some_and(|s| s >= 5),
        "{:?}",
        v.anomaly_score
    );
}

#[test]
fn crs_reads_urlencoded_json_and_multipart_bodies() {
    let rules = crs();
    let form = post(
        "/login",
        "application/x-www-form-urlencoded",
        "user=admin&comment=<script>alert(1)</script>",
    );
    let v = verdict(&rules, &form);
    assert!(v.intervention.is_some(), "XSS in a form: {:?}", ids(&v));
    assert!(
        ids(&v).iter().any(|id| (941000..942000).contains(id)),
        "{:?}",
        ids(&v)
    );
    let json = post(
        "/api",
        "application/json",
        r#"{"user":{"name":"x' UNION SELECT password FROM users--"}}"#,
    );
    let v = verdict(&rules, &json);
    assert!(v.intervention.is_some(), "SQLi in JSON: {:?}", ids(&v));
    let boundary = "----b0undary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n../../../../etc/passwd\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--{boundary}--\r\n"
    );
    let v = verdict(
        &rules,
        &post(
            "/upload",
            &format!("multipart/form-data; boundary={boundary}"),
            &body,
        ),
    );
    assert!(
        v.intervention.is_some(),
        "path traversal in a multipart field: {:?}",
        ids(&v)
    );
    let benign = post(
        "/upload",
        &format!("multipart/form-data; boundary={boundary}"),
        &body.replace("../../../../etc/passwd", "a note"),
    );
    let v = verdict(&rules, &benign);
    assert_eq!(v.intervention, None, "{:?}", v.matches);
    let broken = post("/api", "application/json", "{\"a\": ");
    let v = verdict(&rules, &broken);
    assert_eq!(
        v.intervention.as_ref().map(|i| i.status),
        Some(400),
        "a body that does not parse: {:?}",
        ids(&v)
    );
}

#[test]
fn detect_mode_forwards_and_keeps_the_matches() {
    let mut r = route();
    r.mode = WafMode::Detect;
    let rules = Arc::new(Rules::build(&pieces(&crs_set(), &r)).expect("compiles"));
    let v = verdict(&rules, &get("/products?id=1%27%20or%20%271%27%3D%271"));
    assert_eq!(v.intervention, None);
    assert!(ids(&v).contains(&942100), "{:?}", ids(&v));
    assert!(
        v.anomaly_score.is_some_and(|s| s >= 5),
        "the score rule reports it: {:?}",
        v.anomaly_score
    );
}

#[test]
fn exclusions_and_paranoia_change_what_matches() {
    let attack = get("/products?id=1%27%20or%20%271%27%3D%271");
    let mut r = route();
    r.exclusions = vec![WafExclusion::Target(942100, "!ARGS:id".into())];
    let rules = Arc::new(Rules::build(&pieces(&crs_set(), &r)).expect("compiles"));
    assert!(!ids(&verdict(&rules, &attack)).contains(&942100));
    r.exclusions = vec![WafExclusion::Tag("attack-sqli".into())];
    let rules = Arc::new(Rules::build(&pieces(&crs_set(), &r)).expect("compiles"));
    let v = verdict(&rules, &attack);
    assert!(
        !ids(&v).iter().any(|id| (942000..943000).contains(id)),
        "{:?}",
        ids(&v)
    );
    // 920273 (characters outside a narrow set) runs at paranoia level 4 only.
    let odd = get("/a?x=%7e%21");
    let pl1 = ids(&verdict(&crs(), &odd));
    let mut r = route();
    r.paranoia_level = 4;
    r.inbound_anomaly_threshold = 1000;
    let rules = Arc::new(Rules::build(&pieces(&crs_set(), &r)).expect("compiles"));
    let pl4 = ids(&verdict(&rules, &odd));
    assert!(!pl1.contains(&920273), "{pl1:?}");
    assert!(pl4.contains(&920273), "{pl4:?}");
}

#[test]
fn transactions_on_many_threads_share_one_rule_set() {
    let rules = crs();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let rules = rules.clone();
            std::thread::spawn(move || {
                for n in 0..50 {
                    let bad = verdict(
                        &rules,
                        &get(&format!("/p?id={i}{n}%27%20or%20%271%27%3D%271")),
                    );
                    let good = verdict(&rules, &get(&format!("/p?id={i}{n}")));
                    assert!(bad.intervention.is_some() && good.intervention.is_none());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no thread failed");
    }
}

fn page(status: u16, content_type: &str, body: &str) -> ResponseFacts {
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", content_type.parse().unwrap());
    headers.insert("x-trace", "none".parse().unwrap());
    ResponseFacts {
        status,
        protocol: "HTTP 1.1",
        headers,
        body: Bytes::from(body.to_string()),
        body_limit: 512 << 10,
    }
}

#[test]
fn a_kept_transaction_inspects_the_response_on_another_thread() {
    let rules = "SecRule ARGS:q \"@streq flag\" \"id:10010,phase:1,pass,log,setvar:tx.flagged=1,msg:'flagged'\"\n\
         SecRule RESPONSE_HEADERS:X-Trace \"@streq leak\" \"id:10011,phase:3,deny,status:502,log,msg:'header leak'\"\n\
         SecRule RESPONSE_BODY \"@contains SQL syntax\" \"id:10012,phase:4,deny,status:500,log,msg:'error leak'\"\n\
         SecRule TX:flagged \"@eq 1\" \"id:10013,phase:4,pass,log,msg:'flag carried to the response'\"";
    let mut r = route();
    r.inspect_response = true;
    let rules = Arc::new(Rules::build(&pieces(&inline_set(rules), &r)).expect("compiles"));
    // Phase 4 on another thread than phases 1-2: the transaction moves whole.
    let across = |request: RequestFacts, response: ResponseFacts| {
        let (v, session) = inspect(&rules, &request, true);
        let mut session = session.expect("kept for the response");
        let later = std::thread::spawn(move || inspect_response(&mut session, &response));
        (v, later.join().expect("the response's thread"))
    };
    let (req, resp) = across(
        get("/a?q=flag"),
        page(
            200,
            "text/html",
            "You have an error in your SQL syntax near",
        ),
    );
    assert_eq!(ids(&req), [10010]);
    assert_eq!(resp.intervention.as_ref().map(|i| i.status), Some(500));
    assert_eq!(ids(&resp), [10012], "only the response's matches");
    let (_, resp) = across(get("/a?q=flag"), page(200, "text/html", "fine"));
    assert_eq!(resp.intervention, None);
    assert_eq!(ids(&resp), [10013], "the request's TX variables carry over");
    let mut leaky = page(200, "text/html", "fine");
    leaky.headers.insert("x-trace", "leak".parse().unwrap());
    let (_, resp) = across(get("/a"), leaky);
    assert_eq!(resp.intervention.as_ref().map(|i| i.status), Some(502));
    // A type outside `response_mime_types` is not inspected by the engine either.
    let (_, resp) = across(
        get("/a"),
        page(200, "application/octet-stream", "SQL syntax"),
    );
    assert_eq!(resp.intervention, None, "{:?}", ids(&resp));
}

#[test]
fn a_transaction_is_kept_only_where_asked_and_not_after_a_block() {
    let rules = Arc::new(
        Rules::build(&pieces(
            &inline_set(
                "SecRule ARGS:q \"@contains evil\" \"id:10001,phase:2,deny,status:403,log\"",
            ),
            &route(),
        ))
        .expect("compiles"),
    );
    assert!(inspect(&rules, &get("/a?q=kind"), false).1.is_none());
    assert!(inspect(&rules, &get("/a?q=kind"), true).1.is_some());
    let (v, kept) = inspect(&rules, &get("/a?q=evil"), true);
    assert!(v.intervention.is_some() && kept.is_none());
}

/// CRS's data-leak rules see a gzip (or brotli, deflate, zstd) upstream body decoded: the
/// MySQL error page leaks through 951230 and blocks at the outbound threshold (959100), as
/// the same page uncompressed does; compressed as it came, nothing matched.
#[test]
fn crs_data_leak_rules_match_a_compressed_response() {
    use std::io::Write as _;
    let mut r = route();
    r.inspect_response = true;
    let rules = Arc::new(Rules::build(&pieces(&crs_set(), &r)).expect("CRS 3.3.4 compiles"));
    let leak = "<html><body>You have an error in your SQL syntax; check the manual that \
                corresponds to your MySQL server version for the right syntax to use near \
                '1'' at line 1</body></html>";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(leak.as_bytes()).unwrap();
    let mut response = page(200, "text/html", "");
    response.body = Bytes::from(gz.finish().unwrap());
    response
        .headers
        .insert("content-encoding", "gzip".parse().unwrap());
    let (_, session) = inspect(&rules, &get("/article?id=1"), true);
    let v = inspect_response(&mut session.expect("kept"), &response);
    assert!(ids(&v).contains(&951230), "{:?}", ids(&v));
    assert_eq!(v.intervention.map(|i| i.status), Some(403), "959100 blocks");
}
