//! What one request costs each WAF engine, in process, on the calling thread: the native
//! engine beside libmodsecurity, the same Core Rule Set 4.22 pieces as Sluice loads them
//! (paranoia level 1, blocking), a benign keep-alive GET and a 10 KiB urlencoded form POST.
//! The engine alone: no gateway, no WAF threads (bench/waf measures the gateway).
//!
//! `cargo run --profile quick -p sluice-waf --example engines -- CRS_RULES_DIR` where the
//! directory holds `crs-setup.conf` and `rules/*.conf` (bench/crs.py's `prepare_rules`
//! writes one; bench/README.md, "WAF engines"). Prints the CPU model and µs per request
//! (median of 7 runs [min-max]) for each engine, and the ratio.
//!
//! With `GAP_US=N`: the native engine's inspections one by one, each after N µs idle (p50,
//! p90, p99), where a paced load finds the caches cold. With `--features profile` and
//! `PROFILE=1`: the native engine's time by rule (the 25 dearest, file and line) and by
//! transformation (`sluice_waf::native::profile`). With `N=count`: that many inspections per
//! run instead of the default (fewer for a run under callgrind: `ONLY=GET NATIVE_ONLY=1
//! N=250`, 2,001 inspections in all).

use bytes::Bytes;
use sluice_config::{RouteWaf, WafRuleSet};
use sluice_waf::native::{NativeRules, load, profile};
use sluice_waf::rules::pieces;
use sluice_waf::{RequestFacts, Rules, inspect};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The system allocator, counting calls: the example prints the native engine's
/// allocations per request (on the common path there should be few: issue 88).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to `System` unchanged; the counter is a relaxed atomic.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `System.alloc` (through `alloc` or `realloc`).
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `dealloc`, and `size` is the caller's to choose under `System`'s rules.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: engines CRS_RULES_DIR"),
    );
    let route = RouteWaf {
        response_mime_types: vec!["text/html".into()],
        ..RouteWaf::new("crs")
    };
    let set = WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "crs".into(),
        files: vec![dir.join("crs-setup.conf"), dir.join("rules/*.conf")],
        rules: None,
    };
    let pieces = pieces(&set, &route);
    let oracle = Arc::new(Rules::build(&pieces).expect("libmodsecurity loads the rules"));
    let native = NativeRules::new(load(&pieces).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    println!("CPU: {}\n", cpu_model());
    println!("| request | libmodsecurity µs | native µs | ratio | native allocations |");
    println!("|---|---|---|---|---|");
    for (name, request, n) in [
        ("GET 1 KiB page", get(), 2000),
        ("POST 10 KiB form", post(), 200),
    ] {
        // `ONLY=GET` or `ONLY=POST`: that request alone (for a profile of it).
        if std::env::var("ONLY").is_ok_and(|o| !name.starts_with(o.as_str())) {
            continue;
        }
        // `N=count`: that many inspections per run (fewer for a profile under callgrind).
        let n = std::env::var("N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(n);
        // `NATIVE_ONLY=1`: time the native engine alone (for a profile of it).
        let a = if std::env::var_os("NATIVE_ONLY").is_some() {
            vec![f64::NAN; 7]
        } else {
            runs(n, || {
                black_box(inspect(&oracle, &request, false));
            })
        };
        let b = runs(n, || {
            black_box(native.inspect(&request));
        });
        let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y / x).collect();
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        black_box(native.inspect(&request));
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        println!(
            "| {name} | {} | {} | {} | {allocations} |",
            summary(&a, "µs"),
            summary(&b, "µs"),
            summary(&ratios, "x")
        );
        // `GAP_US=N`: each inspection alone after N µs idle, as at a paced load.
        if let Some(gap) = std::env::var("GAP_US").ok().and_then(|g| g.parse().ok()) {
            after_gaps(&native, &request, gap);
        }
        // `PROFILE=1` (with `--features profile`): where the native engine's time goes.
        if std::env::var_os("PROFILE").is_some() {
            profile(&native, &request, name, n);
        }
    }
}

/// The native engine's time on `request` when each inspection follows `gap` µs idle (the
/// load of a site at a moderate rate, where a request finds the caches cooled by the wait):
/// p50, p90 and p99 of 2,000 inspections timed one by one.
fn after_gaps(native: &NativeRules, request: &RequestFacts, gap: u64) {
    let mut us: Vec<f64> = (0..2000)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_micros(gap));
            let t = Instant::now();
            black_box(native.inspect(request));
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    println!(
        "\nnative, each inspection after {gap} µs idle: p50 {:.1} µs, p90 {:.1}, p99 {:.1}",
        us[1000], us[1800], us[1980]
    );
}

/// The native engine's time on `request` by rule and by transformation, over `n`
/// inspections (`sluice_waf::native::profile`): the rules that cost most, with their
/// file and line, and what the rules themselves do not account for (the request's values
/// made ready, the transaction's start and end).
fn profile(native: &NativeRules, request: &RequestFacts, name: &str, n: u32) {
    let _ = profile::take();
    let t = Instant::now();
    for _ in 0..n {
        black_box(native.inspect(request));
    }
    let total = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let p = profile::take();
    if p.rules.is_empty() {
        println!("\n(no profile: build with `--features profile`)");
        return;
    }
    let per = |c: profile::Cost| c.nanos as f64 / 1e3 / f64::from(n);
    let in_rules: f64 = p.rules.iter().map(|&(_, c)| per(c)).sum();
    println!(
        "\n{name}: {total:.1} µs per inspection (profiled), {in_rules:.1} in {} rules' evaluation, {:.1} outside them\n",
        p.rules.len(),
        total - in_rules
    );
    println!("| rule | where | runs per request | µs per request | share |");
    println!("|---|---|---|---|---|");
    let mut rules = p.rules.clone();
    rules.sort_by_key(|r| std::cmp::Reverse(r.1.nanos));
    let set = native.rule_set();
    for &(i, c) in rules.iter().take(25) {
        let rule = &set.rules[i];
        let file = rule.origin.file.rsplit('/').next().unwrap_or("");
        println!(
            "| {} | {file}:{} | {:.1} | {:.2} | {:.1}% |",
            rule.id().map_or("-".to_string(), |id| id.to_string()),
            rule.origin.line,
            c.calls as f64 / f64::from(n),
            per(c),
            100.0 * per(c) / total
        );
    }
    let mut transforms = p.transforms.clone();
    transforms.sort_by_key(|t| std::cmp::Reverse(t.1.nanos));
    println!("\n| transformation | runs per request | µs per request | share |");
    println!("|---|---|---|---|");
    for &(tr, c) in &transforms {
        println!(
            "| t:{tr} | {:.1} | {:.2} | {:.1}% |",
            c.calls as f64 / f64::from(n),
            per(c),
            100.0 * per(c) / total
        );
    }
}

/// µs per call, 7 runs of `n` calls (after one warm-up run).
fn runs(n: u32, mut f: impl FnMut()) -> Vec<f64> {
    (0..8)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        })
        .skip(1)
        .collect()
}

fn summary(xs: &[f64], unit: &str) -> String {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let f = |x: f64| {
        if unit == "x" {
            format!("{x:.3}x")
        } else {
            format!("{x:.1}")
        }
    };
    format!("{} [{}-{}]", f(v[v.len() / 2]), f(v[0]), f(v[v.len() - 1]))
}

fn get() -> RequestFacts {
    let mut headers = http::HeaderMap::new();
    for (k, v) in [
        ("host", "www.example.com"),
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
        ),
        (
            "accept",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        ),
        ("accept-language", "en-GB,en;q=0.9"),
        ("accept-encoding", "gzip, deflate, br"),
        ("cookie", "session=3f2a9c0e7b1d4e5f; theme=dark"),
    ] {
        headers.insert(k, v.parse().unwrap());
    }
    RequestFacts {
        client: "192.0.2.7:40000".parse().unwrap(),
        server: "127.0.0.1:443".parse().unwrap(),
        method: http::Method::GET,
        target: "/shop/items?page=2&sort=price".into(),
        version: "1.1",
        headers,
        body: Bytes::new(),
        id: "0".into(),
    }
}

fn post() -> RequestFacts {
    let mut r = get();
    // bench/waf.py's form: a comment box's words.
    let words = "the quick brown fox jumps over a lazy dog while sluice keeps the gate ";
    let mut form = String::from("name=Ann+Example&email=ann%40example.com&comment=");
    for w in words.split_whitespace().cycle() {
        if form.len() >= 10240 {
            break;
        }
        form.push_str(w);
        form.push('+');
    }
    let body: Vec<u8> = form.into_bytes().into_iter().take(10240).collect();
    r.method = http::Method::POST;
    r.target = "/form".into();
    r.headers.insert(
        "content-type",
        "application/x-www-form-urlencoded".parse().unwrap(),
    );
    r.headers
        .insert("content-length", body.len().to_string().parse().unwrap());
    r.body = Bytes::from(body);
    r
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}
