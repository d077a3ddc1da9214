//! Every whole configuration in the docs loads as written, as `sluice check` would load it.
//! The convention: a ```toml block that contains `[[listener]]` is a whole configuration
//! and is loaded; any other block is a fragment (a table or two to add to one) and is
//! skipped. Files a block names (certificates, password files) are looked for in an empty
//! folder, so a whole example must need none: what needs a file goes in a fragment.
//!
//! [`FOLLOWING`] lists the documents written to this convention; the others' examples
//! still name files (certificates, keys, token files) in their whole configurations.

use std::path::Path;

/// The documents whose whole configurations are loaded (see the module's docs).
const FOLLOWING: &[&str] = &["mqtt.md"];

/// The ```toml blocks of `md` that contain `[[listener]]`, with the line each starts on.
fn whole_configurations(md: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in md.lines().enumerate() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```toml") => current = Some((i + 1, String::new())),
            (Some(_), l) if l.starts_with("```") => {
                let (at, text) = current.take().unwrap_or_default();
                if text.contains("[[listener]]") {
                    blocks.push((at, text));
                }
            }
            (Some((_, text)), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_whole_configuration_in_the_docs_loads() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut failures = Vec::new();
    let mut loaded = 0;
    for entry in std::fs::read_dir(&docs).unwrap() {
        let path = entry.unwrap().path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !FOLLOWING.contains(&name) {
            continue;
        }
        let md = std::fs::read_to_string(&path).unwrap();
        for (line, text) in whole_configurations(&md) {
            let dir = tempfile::tempdir().unwrap();
            let name = format!("{}:{line}", path.display());
            match sluice_config::load_str(&text, &name, dir.path()) {
                Ok(_) => loaded += 1,
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(loaded > 0, "no whole configuration found in {FOLLOWING:?}");
}
