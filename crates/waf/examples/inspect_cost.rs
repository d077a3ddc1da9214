//! µs per inspection of a benign GET and a benign 10 KiB form POST through Debian's CRS
//! 3.3.4 at paranoia level 1, on this thread, without the proxy: for comparing builds and
//! engine settings on one machine. `cargo run --release -p sluice-waf --example inspect_cost`.

use bytes::Bytes;
use sluice_config::{RouteWaf, WafRuleSet};
use sluice_waf::{RequestFacts, Rules, inspect, rules::pieces};
use std::time::Instant;

fn main() {
    let set = WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "crs".into(),
        files: [
            "/etc/modsecurity/crs/crs-setup.conf",
            "/usr/share/modsecurity-crs/rules/*.conf",
        ]
        .iter()
        .map(Into::into)
        .collect(),
        rules: None,
    };
    let route = RouteWaf {
        response_mime_types: vec!["text/html".into(), "text/plain".into()],
        ..RouteWaf::new("crs")
    };
    let started = Instant::now();
    let rules = std::sync::Arc::new(Rules::build(&pieces(&set, &route)).expect("CRS compiles"));
    println!("compile: {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    let mut headers = http::HeaderMap::new();
    let host = std::env::var("HOST").unwrap_or_else(|_| "shop.test".into());
    headers.insert("host", host.parse().unwrap());
    headers.insert(
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
            .parse()
            .unwrap(),
    );
    headers.insert("accept", "text/html,*/*".parse().unwrap());
    let get = RequestFacts {
        client: "127.0.0.1:40000".parse().unwrap(),
        server: "127.0.0.1:8080".parse().unwrap(),
        method: http::Method::GET,
        target: "/1k".into(),
        version: "1.1",
        headers: headers.clone(),
        body: Bytes::new(),
        id: String::new(),
    };
    let mut form = b"name=Ann+Example&email=ann%40example.com&comment=".to_vec();
    while form.len() < 10 << 10 {
        form.extend_from_slice(b"the+quick+brown+fox+jumps+over+a+lazy+dog+");
    }
    form.truncate(10 << 10);
    let mut post = get.clone();
    post.method = http::Method::POST;
    post.target = "/form".into();
    post.headers.insert(
        "content-type",
        "application/x-www-form-urlencoded".parse().unwrap(),
    );
    post.headers
        .insert("content-length", form.len().to_string().parse().unwrap());
    post.body = Bytes::from(form);
    let posts = std::env::var("POSTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    for (name, req, n) in [("GET", &get, 3000), ("POST 10 KiB form", &post, posts)] {
        if n == 0 {
            continue;
        }
        let v = inspect(&rules, req, false).0;
        assert!(v.intervention.is_none(), "{name}: {:?}", v.matches);
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(inspect(&rules, req, false));
        }
        println!(
            "{name}: {:.1} µs per inspection",
            t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        );
    }
}
