//! Test support: the Go module coraza-coreruleset v4.22.0 (CRS 4.22's rules and its
//! regression tests), the same module bench/crs uses, downloaded into Go's module cache once
//! (`go` comes from scripts/test-deps) and found where that cache is, wherever it is.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The module's directory (`rules/`, `tests/`).
pub(crate) fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = std::process::Command::new("go")
            .args([
                "mod",
                "download",
                "-json",
                "github.com/corazawaf/coraza-coreruleset/v4@v4.22.0",
            ])
            .current_dir(std::env::temp_dir())
            .output()
            .expect("go runs (scripts/test-deps installs it)");
        let json = String::from_utf8_lossy(&out.stdout);
        let dir = json
            .lines()
            .find_map(|l| l.trim().strip_prefix("\"Dir\": \""))
            .and_then(|l| l.strip_suffix("\","))
            .unwrap_or_else(|| {
                panic!(
                    "go mod download: {json} {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        PathBuf::from(dir)
    })
}
