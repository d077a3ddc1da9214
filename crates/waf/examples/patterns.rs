//! What the native engine's multi-pattern prefilter costs beside PCRE2 pattern by pattern
//! (what libmodsecurity does: one JIT-compiled PCRE2 match per rule per value), on every
//! `@rx` of a rule set, for two kinds of values: the Core Rule Set's regression payloads
//! (mostly attacks) and ordinary request values (words, numbers, a user agent, a cookie, a
//! 1 KiB text, a 10 KiB form body).
//!
//! `cargo run --profile quick -p sluice-waf --example patterns -- RULES_GLOB [TESTS_DIR]`
//! (bench/README.md, "WAF patterns"). Prints the CPU model, ns per value (median of 7 runs
//! [min-max]) and the ratio.

use sluice_waf::native::{Kind, Op, PatternSet, load};
use sluice_waf::rules::Piece;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let rules = args
        .next()
        .expect("usage: patterns RULES_GLOB [CRS_TESTS_DIR]");
    let set = load(&[Piece::File(rules.into())]).unwrap_or_else(|e| panic!("{e}"));
    let mut patterns: Vec<String> = Vec::new();
    for r in &set.rules {
        let first = match &r.kind {
            Kind::Match { operator, .. } => Some(operator),
            _ => None,
        };
        for op in first.into_iter().chain(r.chain.iter().map(|l| &l.operator)) {
            if let Op::Rx(e) = &op.op
                && let Some(p) = e.literal()
            {
                patterns.push(p.to_string());
            }
        }
    }
    patterns.sort();
    patterns.dedup();
    let refs: Vec<&str> = patterns.iter().map(String::as_str).collect();
    let built = Instant::now();
    let prefilter = PatternSet::new(&refs).expect("patterns compile");
    let build_ms = built.elapsed().as_secs_f64() * 1e3;
    let pcre: Vec<_> = refs
        .iter()
        .map(|p| {
            pcre2::bytes::RegexBuilder::new()
                .utf(false)
                .dotall(true)
                .multi_line(true)
                .jit_if_available(true)
                .build(p)
                .unwrap()
        })
        .collect();
    let (exact, confirm, pcre_only) = prefilter.coverage();
    println!(
        "CPU: {}\n{} distinct @rx in {} automata: {exact} decided by them, {confirm} confirmed by PCRE2, {pcre_only} on PCRE2 alone; built in {build_ms:.0} ms\n",
        cpu_model(),
        refs.len(),
        prefilter.automata()
    );
    println!(
        "| values | count | PCRE2-JIT per pattern, ns/value | prefilter, ns/value | ratio | automaton runs left to PCRE2 | DFA caches after |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut classes = vec![("ordinary request values", ordinary())];
    if let Some(dir) = args.next() {
        classes.push(("CRS regression payloads", payloads(&dir)));
    }
    for (name, values) in classes {
        let mut scratch = prefilter.scratch();
        let mut out = Vec::new();
        let base = runs(|| {
            for v in &values {
                for re in &pcre {
                    black_box(re.is_match(v).unwrap_or(false));
                }
            }
        });
        let fast = runs(|| {
            for v in &values {
                out.clear();
                prefilter.matches(v, &mut scratch, &mut out);
                black_box(&out);
            }
        });
        let n = values.len() as f64;
        let ratios: Vec<f64> = base.iter().zip(&fast).map(|(b, f)| b / f).collect();
        // Runs of 8 passes over the values: the share the automaton gave up on.
        let fell = scratch.fallbacks as f64 / (8.0 * n);
        println!(
            "| {name} | {} | {} | {} | {} | {:.1}% | {:.1} MiB |",
            values.len(),
            summary(&base, n),
            summary(&fast, n),
            summary(&ratios, 1.0),
            fell * 100.0 / prefilter.automata() as f64,
            scratch.memory_usage() as f64 / f64::from(1 << 20)
        );
    }
}

/// Seconds per run, 7 runs (after one warm-up).
fn runs(mut f: impl FnMut()) -> Vec<f64> {
    f();
    (0..7)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect()
}

/// `median [min-max]` of `xs / per`, in ns when `per` counts values.
fn summary(xs: &[f64], per: f64) -> String {
    let mut v: Vec<f64> = xs
        .iter()
        .map(|x| if per == 1.0 { *x } else { x / per * 1e9 })
        .collect();
    v.sort_by(f64::total_cmp);
    let fmt = |x: f64| {
        if per == 1.0 {
            format!("{x:.1}x")
        } else {
            format!("{x:.0}")
        }
    };
    format!(
        "{} [{}-{}]",
        fmt(v[v.len() / 2]),
        fmt(v[0]),
        fmt(v[v.len() - 1])
    )
}

fn ordinary() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "john", "Smith", "42", "2026-12-02", "john.smith@example.com", "/shop/cart/checkout",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
        "session=3f2a9c0e7b1d4e5f; theme=dark; lang=en-GB",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "gzip, deflate, br", "en-GB,en;q=0.9", "keep-alive", "https://example.com/shop?page=2",
        "The quick brown fox jumps over the lazy dog", "123 Main Street", "London", "SW1A 1AA",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let text =
        "Ordinary prose a user writes into a comment box, with punctuation, numbers 12 and 3.5. ";
    v.push(text.repeat(12).into_bytes()[..1024].to_vec());
    let form: String = (0..800).map(|i| format!("field{i}=value+{i}&")).collect();
    v.push(form.into_bytes().into_iter().take(10240).collect());
    v
}

/// The URIs, bodies and header values of CRS's regression tests under `dir`.
fn payloads(dir: &str) -> Vec<Vec<u8>> {
    let mut out = std::collections::BTreeSet::new();
    let files = glob::glob(&format!("{dir}/**/*.yaml")).expect("a directory");
    for f in files.filter_map(Result::ok) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines() {
            if let Some((key, value)) = line.trim().split_once(": ")
                && matches!(key, "uri" | "data" | "User-Agent" | "Cookie" | "Referer")
            {
                out.insert(value.trim().trim_matches('"').as_bytes().to_vec());
            }
        }
    }
    out.into_iter().collect()
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
