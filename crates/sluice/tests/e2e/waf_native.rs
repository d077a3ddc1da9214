//! `[[waf.ruleset]] engine = "native"` end to end: the same Core Rule Set files (Debian's
//! 3.3.4) on two routes of one gateway, one evaluated by libmodsecurity and one by Sluice's
//! own engine, in front of a real origin; every request and its response (phases 1-4) must
//! get the same status and the same rules in the access log's record.

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokio::net::TcpStream;

/// Debian's CRS 3.3.4 without its IP reputation file, as `bench/waf` lists it (its HTTP:BL
/// `@rbl` needs a key to match anything; the native engine loads it, docs/waf.md).
fn crs_files() -> String {
    let mut files = vec!["\"/etc/modsecurity/crs/crs-setup.conf\"".to_string()];
    let mut rules: Vec<_> = std::fs::read_dir("/usr/share/modsecurity-crs/rules")
        .expect("Debian's modsecurity-crs (scripts/deps)")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .filter(|p| !p.to_string_lossy().contains("REQUEST-910-"))
        .collect();
    rules.sort();
    files.extend(rules.iter().map(|p| format!("\"{}\"", p.display())));
    files.join(", ")
}

/// `inline_percent = 100`: the native route's requests without a body are inspected on the
/// event loop (its responses and bodies on the WAF's threads), libmodsecurity's never.
fn config(origin: std::net::SocketAddr) -> String {
    let files = crs_files();
    let route = |name: &str, set: &str| {
        format!(
            "[[route]]\nname = \"{name}\"\npath_prefix = \"/{name}/\"\nstrip_prefix = \"/{name}\"\nupstream = \"api\"\n\
             [route.response_headers]\nset = {{ \"content-type\" = \"text/html\" }}\n\
             [route.waf]\nruleset = \"{set}\"\ninspect_response = true\n"
        )
    };
    format!(
        "[log]\naccess_log = \"{{dir}}/access.log\"\naccess_format = \"json\"\naccess_flush = \"0s\"\n\
         [[listener]]\nname = \"web\"\naddress = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"api\"\nservers = [{{ address = \"{origin}\" }}]\n\
         [waf]\ninline_percent = 100\n\
         [[waf.ruleset]]\nname = \"libmodsecurity\"\nengine = \"modsecurity\"\nfiles = [{files}]\n\
         [[waf.ruleset]]\nname = \"native\"\nengine = \"native\"\nfiles = [{files}]\n{}{}",
        route("m", "libmodsecurity"),
        route("n", "native"),
    )
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request<Full<Bytes>> {
    let mut r = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "shop.test")
        .header(
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0",
        )
        .header("accept", "text/html");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// A benign header value long enough to put its request's head over the 4 KiB that the
/// loop inspects itself (`placement::INLINE_HEAD_MAX`).
fn padding() -> &'static str {
    static PADDING: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PADDING.get_or_init(|| "a".repeat(4500))
}

/// One request: method, path, extra header fields, body.
type Case = (
    &'static str,
    String,
    Vec<(&'static str, &'static str)>,
    String,
);

/// Requests of each kind the rules read: query, form, JSON, multipart, cookie, user agent,
/// a response that leaks, and benign ones of the same kinds.
fn requests() -> Vec<Case> {
    let form = ("content-type", "application/x-www-form-urlencoded");
    let json = ("content-type", "application/json");
    let multipart = ("content-type", "multipart/form-data; boundary=b0undary");
    let part = |v: &str| {
        format!(
            "--b0undary\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n{v}\r\n--b0undary--\r\n"
        )
    };
    vec![
        (
            "GET",
            "/whoami?sort=price&page=2".into(),
            vec![],
            String::new(),
        ),
        (
            "GET",
            "/whoami?id=1%27%20or%20%271%27%3D%271".into(),
            vec![],
            String::new(),
        ),
        (
            "GET",
            "/whoami?file=../../../../etc/passwd".into(),
            vec![],
            String::new(),
        ),
        (
            "POST",
            "/upload".into(),
            vec![form],
            "user=ann&comment=hello".into(),
        ),
        (
            "POST",
            "/upload".into(),
            vec![form],
            "comment=%3Cscript%3Ealert(1)%3C%2Fscript%3E".into(),
        ),
        (
            "POST",
            "/upload".into(),
            vec![json],
            r#"{"user":{"name":"x' UNION SELECT password FROM users--"}}"#.into(),
        ),
        (
            "POST",
            "/upload".into(),
            vec![json],
            r#"{"user":{"name":"ann"}}"#.into(),
        ),
        ("POST", "/upload".into(), vec![multipart], part("a note")),
        (
            "POST",
            "/upload".into(),
            vec![multipart],
            part("; cat /etc/passwd"),
        ),
        (
            "GET",
            "/whoami".into(),
            vec![("cookie", "s=<script>alert(1)</script>")],
            String::new(),
        ),
        (
            "GET",
            "/whoami".into(),
            vec![("user-agent", "nikto")],
            String::new(),
        ),
        (
            "GET",
            "/echo?e=ORA-00933:%20SQL%20command%20not%20properly%20ended".into(),
            vec![],
            String::new(),
        ),
        (
            "GET",
            "/echo?e=%3C%3Fphp%20echo%201%3B".into(),
            vec![],
            String::new(),
        ),
        // A head over 4 KiB: no body, but inspected on the WAF's threads.
        (
            "GET",
            "/whoami?page=3".into(),
            vec![("x-padding", padding())],
            String::new(),
        ),
    ]
}

/// The native route's verdicts equal libmodsecurity's whether inspected on the loop (the
/// requests without a body) or on the WAF's threads (the bodies, the responses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_engine_decides_as_libmodsecurity_on_the_same_rules() {
    let origin = Origin::start("api").await;
    let gw = TestGateway::start_logged(&config(origin.addr), tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let cases = requests();
    for (method, path, headers, body) in &cases {
        for prefix in ["/m", "/n"] {
            let r = request(method, &format!("{prefix}{path}"), headers, body);
            http1_send(TcpStream::connect(web).await.unwrap(), r).await;
        }
    }
    let log = std::fs::read_to_string(gw.dir().join("access.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2 * cases.len(), "{log}");
    let record = |l: &serde_json::Value| {
        let ids: Vec<u64> = l["waf"]["matches"]
            .as_array()
            .map(|m| m.iter().map(|x| x["id"].as_u64().unwrap()).collect())
            .unwrap_or_default();
        (
            l["status"].as_u64(),
            l["waf"]["action"].as_str().map(str::to_string),
            ids,
        )
    };
    let mut blocked = 0;
    for (i, pair) in lines.chunks(2).enumerate() {
        let (m, n) = (record(&pair[0]), record(&pair[1]));
        assert_eq!(n, m, "{:?}: native, then libmodsecurity", cases[i].1);
        blocked += usize::from(m.0 != Some(200));
    }
    // Most of the requests are attacks CRS blocks; two are leaks in the response.
    assert!(blocked >= 7, "{blocked} blocked: {log}");
    let (admin, _task) = admin_for(&gw).await;
    let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
    let n = cases.len();
    let bodiless = cases
        .iter()
        .filter(|c| c.3.is_empty() && !c.2.iter().any(|h| h.1 == padding()))
        .count();
    for want in [
        format!("sluice_waf_inspected_total{{route=\"n\"}} {n}"),
        format!("sluice_waf_inspected_inline_total{{route=\"n\"}} {bodiless}"),
        "sluice_waf_inspected_inline_total{route=\"m\"} 0".to_string(),
        "sluice_waf_faults_total{route=\"n\"} 0".to_string(),
    ] {
        assert!(metrics.contains(&want), "{want} in\n{metrics}");
    }
    // `/status` names each route's engine.
    let status: serde_json::Value =
        serde_json::from_str(&crate::auth::get(admin, "/status", &[]).await.body).unwrap();
    let engines: Vec<_> = status["waf"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["route"].as_str().unwrap(), r["engine"].as_str().unwrap()))
        .collect();
    assert_eq!(engines, [("m", "modsecurity"), ("n", "native")]);
}
