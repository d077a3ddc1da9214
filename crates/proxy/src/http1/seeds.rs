//! The fuzz targets' saved inputs (`crates/proxy/fuzz/seeds/<target>/`), replayed through the
//! same invariants in every `cargo test`: an input a fuzzer found, saved there, stays a test
//! wherever the suite runs (the corpus a long run grows in `fuzz/corpus` is not kept in git;
//! what is worth keeping from it is copied here). CI also runs the libFuzzer binaries over
//! the same directories (`scripts/fuzz-replay`).

use std::path::Path;

/// Runs `check` on every saved input of `target`; the directory must hold some.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&input));
        assert!(outcome.is_ok(), "{} breaks an invariant", path.display());
        n += 1;
    }
    assert!(
        n >= 10,
        "{} holds {n} inputs; the seeds are missing",
        dir.display()
    );
}

#[test]
fn request_head_seeds_keep_the_parsers_invariants() {
    replay("request_head", super::head::check_invariants);
}

#[test]
fn response_head_seeds_keep_the_parsers_invariants() {
    replay("response_head", super::client::check_invariants);
}

#[test]
fn chunked_body_seeds_keep_the_parsers_invariants() {
    replay("chunked_body", super::decode::check_invariants);
}
