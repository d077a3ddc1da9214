//! Every ```toml block in docs/*.md loads through the real loader, as `sluice check` would
//! load it, so an example that stops loading (a key renamed, a wrong type) fails here and not
//! in a reader's hands.
//!
//! - A block that contains `[[listener]]` is a whole configuration and loads as written.
//! - Any other block is a fragment. It is added to the last whole configuration above it in
//!   its document (mqtt.md's "add them to the listener above"), or else to [`BASE`], one plain
//!   HTTP listener. The fragment's text follows the base's, so TOML itself merges them: a
//!   table the base lacks is added, `[[route]]` appends a route, and `[listener.tls]` extends
//!   the base's last listener. A fragment may not reopen a table its base already opens.
//! - An upstream that a listener or route names and no block defines gets a stub
//!   `[[upstream]]`, and a certificate a listener names gets a stub `[[certificate]]` (see
//!   [`stubs`]): fragments name them without defining them. A fleet gateway's local file
//!   (`[config] source = "etcd"`) without certificates gets one, as etcd's would be added to it.
//! - Each block loads in a temporary folder of its own, where the files its keys name are
//!   made first, their content decided by the key (see [`provide_files`]): certificates and
//!   keys generated in pairs, CA files, tokens and keyrings (mode 0600), ticket keys, Lua
//!   scripts. Paths under Sluice's own system folders ([`MOVED`]) are moved into that folder,
//!   since they need root; other absolute paths (the CRS files waf.md names, which
//!   `scripts/test-deps` installs) are used as they are.
//! - A block tagged ```toml keyserver is `sluice-keyserver`'s configuration, not a gateway's:
//!   it is skipped here and loaded by crates/keyless/tests/docs_example.rs.
//!
//! Errors name the document and line the problem is on.

use sluice_config::selfsigned::{KeyKind, generate};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// What a fragment is added to when its document has no whole configuration above it.
const BASE: &str = "[[listener]]\nname = \"base\"\naddress = \"127.0.0.1:0\"\n";

/// Sluice's system folders: a path under one is moved into the block's temporary folder.
const MOVED: &[&str] = &[
    "/etc/sluice/",
    "/var/lib/sluice/",
    "/var/cache/sluice",
    "/var/log/sluice/",
];

/// The tag after ```toml that marks a key server's configuration.
const KEYSERVER: &str = "keyserver";

/// A ```toml block of a document.
struct Block {
    /// The document line of the block's first line of text.
    line: usize,
    /// What follows "```toml" on the opening line (such as `keyserver`).
    tag: String,
    text: String,
}

/// The ```toml blocks of `md`.
fn toml_blocks(md: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for (i, line) in md.lines().enumerate() {
        let fence = line.trim_start();
        match &mut current {
            None => {
                if let Some(tag) = fence.strip_prefix("```toml") {
                    let (line, tag) = (i + 2, tag.trim().to_owned());
                    current = Some(Block {
                        line,
                        tag,
                        text: String::new(),
                    });
                }
            }
            Some(_) if fence.starts_with("```") => blocks.extend(current.take()),
            Some(block) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
        }
    }
    blocks
}

#[test]
fn every_toml_block_in_the_docs_loads() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    paths.sort();
    let (mut loaded, mut failures) = (0, Vec::new());
    for path in &paths {
        let doc = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
        let blocks = toml_blocks(&std::fs::read_to_string(path).unwrap());
        let mut above = Base::Test;
        for block in blocks.iter().filter(|b| b.tag != KEYSERVER) {
            let whole = block.text.contains("[[listener]]");
            match load(&doc, block, if whole { Base::Nothing } else { above }) {
                Ok(()) => loaded += 1,
                Err(e) => failures.push(e),
            }
            if whole {
                above = Base::Above(block);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(loaded > 0, "no ```toml block found in {}", docs.display());
    println!("{loaded} ```toml blocks of docs/*.md loaded");
}

/// What a block is loaded on top of.
#[derive(Clone, Copy)]
enum Base<'a> {
    /// Nothing: the block is a whole configuration.
    Nothing,
    /// [`BASE`]: a fragment with no whole configuration above it in its document.
    Test,
    /// The last whole configuration above the fragment in its document.
    Above(&'a Block),
}

impl Base<'_> {
    fn text(&self) -> &str {
        match self {
            Base::Nothing => "",
            Base::Test => BASE,
            Base::Above(block) => &block.text,
        }
    }
}

/// Loads `block` of `doc`, after `base`, in a folder of its own; the error names the lines
/// of the document.
fn load(doc: &str, block: &Block, base: Base<'_>) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut src = moved(&format!("{}{}", base.text(), block.text), dir.path());
    // A text that is not TOML gets neither: the loader reports its error, located.
    if let Ok(config) = toml::from_str::<Table>(&src) {
        src.push_str(&stubs(&config));
        let config = toml::from_str::<Table>(&src).expect("stubs keep the text TOML");
        provide_files(&config, dir.path());
    }
    let Err(e) = sluice_config::load_str(&src, doc, dir.path()) else {
        return Ok(());
    };
    let lines = Lines { doc, base, block };
    let errors: Vec<String> = e.errors().iter().map(|e| lines.locate(e)).collect();
    if errors.is_empty() {
        return Err(format!("{doc}:{}: {e}", block.line));
    }
    Err(errors.join("\n"))
}

/// Where the lines of a loaded text come from: the base's, the block's, then stubs.
struct Lines<'a> {
    doc: &'a str,
    base: Base<'a>,
    block: &'a Block,
}

impl Lines<'_> {
    /// `e`, its line in the loaded text turned into the line it came from.
    fn locate(&self, e: &sluice_config::ConfigError) -> String {
        let (doc, at) = (self.doc, self.block.line);
        let base_lines = self.base.text().lines().count();
        let block_lines = self.block.text.lines().count();
        let place = match (e.line, self.base) {
            (l, Base::Above(whole)) if l <= base_lines => format!("{doc}:{}", whole.line + l - 1),
            (l, _) if l <= base_lines => format!("the test's BASE, line {l}"),
            (l, _) if l <= base_lines + block_lines => format!("{doc}:{}", at + l - base_lines - 1),
            (l, _) => format!("a stub the test added (line {l}, after the block at {doc}:{at})"),
        };
        format!("{place}:{}: {}\n    help: {}", e.column, e.message, e.help)
    }
}

/// `src` with every path under [`MOVED`] moved into `dir` (same lines, so errors keep them).
fn moved(src: &str, dir: &Path) -> String {
    MOVED.iter().fold(src.to_owned(), |src, prefix| {
        let into = format!("\"{}{prefix}", dir.display());
        src.replace(&format!("\"{prefix}"), &into)
    })
}

/// `[[upstream]]` and `[[certificate]]` entries, as TOML to append, for the names that
/// listeners and routes use and no entry of `config` defines, and for the certificates a
/// fleet gateway gets from etcd (the fleet's composer renders them after the local file). A
/// stub upstream hashes with no load bound (one server that nobody listens on), which MQTT
/// listeners require and HTTP routes accept; a stub certificate's files are made like any
/// other.
fn stubs(config: &Table) -> String {
    let mut upstreams = BTreeSet::new();
    for key in ["listener", "route"] {
        if let Some(v) = config.get(key) {
            upstreams_named(v, &mut upstreams);
        }
    }
    let mut certificates = BTreeSet::new();
    let config_source = config.get("config").and_then(|c| c.get("source"));
    if config_source.and_then(Value::as_str) == Some("etcd")
        && defined(config, "certificate").is_empty()
    {
        certificates.insert("fleet");
    }
    for listener in entries(config, "listener") {
        let tls = listener.get("tls").and_then(Value::as_table);
        let names = tls
            .and_then(|t| t.get("certificates"))
            .and_then(Value::as_array);
        certificates.extend(names.into_iter().flatten().filter_map(Value::as_str));
        let default = tls.and_then(|t| t.get("default_certificate"));
        certificates.extend(default.and_then(Value::as_str));
    }
    let mut out = String::new();
    for name in upstreams.difference(&defined(config, "upstream")) {
        out += &format!(
            "\n[[upstream]]\nname = {name:?}\nbalance = \"consistent_hash\"\n\
             hash_balance_factor = 0\nservers = [{{ address = \"127.0.0.1:1\" }}]\n"
        );
    }
    for name in certificates.difference(&defined(config, "certificate")) {
        out += &format!(
            "\n[[certificate]]\nname = {name:?}\ncert = \"stub-{name}.crt\"\nkey = \"stub-{name}.key\"\n"
        );
    }
    out
}

/// The tables of the array of tables `key` (none when it is a single table or absent).
fn entries<'a>(config: &'a Table, key: &str) -> impl Iterator<Item = &'a Table> {
    let array = config.get(key).and_then(Value::as_array);
    array.into_iter().flatten().filter_map(Value::as_table)
}

/// The names the entries of `key` define.
fn defined<'a>(config: &'a Table, key: &str) -> BTreeSet<&'a str> {
    let names = entries(config, key).filter_map(|t| t.get("name"));
    names.filter_map(Value::as_str).collect()
}

/// Every upstream named in `value`: `upstream = "..."` at any depth (routes, splits,
/// mirrors, TCP and MQTT listeners) and the targets of `passthrough = { ... }`.
fn upstreams_named<'a>(value: &'a Value, out: &mut BTreeSet<&'a str>) {
    match value {
        Value::Table(t) => {
            for (key, v) in t {
                match (key.as_str(), v) {
                    ("upstream", Value::String(name)) => {
                        out.insert(name);
                    }
                    ("passthrough", Value::Table(map)) => {
                        out.extend(map.values().filter_map(Value::as_str));
                    }
                    _ => upstreams_named(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| upstreams_named(v, out)),
        _ => {}
    }
}

/// Keys naming a PEM certificate chain, each with the key (in the same table) that names
/// its private key: the two are generated together, since the loader checks they match.
const PAIRS: &[(&str, &str)] = &[
    ("cert", "key"),
    ("certificate", "key"),
    ("client_cert", "client_key"),
    ("redis_certificate", "redis_key"),
];

/// Makes, in `dir`, every file that `config` names by a key this test knows (a new kind of
/// file in the docs needs a line in [`file_content`]). A path outside `dir` (absolute and
/// not [`MOVED`]) is a system file, used as it is.
fn provide_files(config: &Table, dir: &Path) {
    for (key, value) in config {
        match value {
            Value::String(file) => {
                let path = dir.join(file);
                if !path.starts_with(dir) || path.exists() {
                    continue;
                }
                if let Some((_, key_key)) = PAIRS.iter().find(|(c, _)| c == key) {
                    let (cert, private) = generate(KeyKind::EcdsaP256, &["localhost"], 30, "docs")
                        .expect("a self-signed certificate");
                    write(&path, &cert.to_pem().unwrap(), false);
                    if let Some(key_file) = config.get(*key_key).and_then(Value::as_str) {
                        let pem = private.private_key_to_pem_pkcs8().unwrap();
                        write(&dir.join(key_file), &pem, true);
                    }
                } else if let Some((bytes, private)) = file_content(key, file) {
                    write(&path, &bytes, private);
                }
            }
            Value::Table(t) => provide_files(t, dir),
            Value::Array(a) => {
                for t in a.iter().filter_map(Value::as_table) {
                    provide_files(t, dir);
                }
            }
            _ => {}
        }
    }
}

/// What a file named by `key` (other than a certificate or its key, see [`PAIRS`]) holds,
/// as the loader expects it, and whether it must be private (mode 0600, as for keys).
fn file_content(key: &str, file: &str) -> Option<(Vec<u8>, bool)> {
    let hex = "0123456789abcdef".repeat(4);
    Some(match key {
        // PEM CA certificates (or pinned certificates: any self-signed one reads the same).
        "ca" | "client_ca" | "redis_ca" | "jwks_ca" => (ca_pem(), false),
        // One token of 16+ printable characters (an etcd password reads the same way).
        "token_file" | "read_token_file" | "password_file" => (hex.into_bytes(), true),
        // `ID HEX32` lines, the first sealing.
        "keyring" => (format!("k1 {hex}\n").into_bytes(), true),
        // NGINX's format: 80-byte keys.
        "ticket_key_file" => (vec![7; 80], true),
        // [upstream.sticky]: 32 or more bytes.
        "key_file" => (vec![7; 32], true),
        // `user:{SHA}base64(sha1(password))`; the loader only checks that it exists.
        "htpasswd" => (
            b"device-1:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n".to_vec(),
            false,
        ),
        // A phase of [route.lua] from a file (`access_file`, `header_filter_file`...).
        k if k.ends_with("_file") && file.ends_with(".lua") => (b"return\n".to_vec(), false),
        _ => return None,
    })
}

/// A self-signed certificate, in PEM, to stand for a CA.
fn ca_pem() -> Vec<u8> {
    let (cert, _) = generate(KeyKind::EcdsaP256, &["docs-ca"], 30, "docs").expect("a CA");
    cert.to_pem().unwrap()
}

/// Writes `bytes` at `path`, making its folder; `private`: mode 0600.
fn write(path: &Path, bytes: &[u8], private: bool) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    if private {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}
