//! `sluice-keyserver`'s configuration file.
//!
//! ```toml
//! listen = "127.0.0.1:2407"          # where gateways connect (TLS 1.3, client certificates)
//! metrics = "127.0.0.1:9902"         # Prometheus text on GET /metrics (omit: none)
//! engines = ["pool"]                 # crypto engines before `inline`: "pool", "mb"
//! pool_threads = 2
//! max_pending = 128                  # requests in progress per connection before it stops reading
//!
//! [tls]
//! certificate = "keyserver.crt"      # the key server's own certificate chain (PEM) ...
//! key = "keyserver.key"              # ... and key
//! client_ca = "gateways-ca.crt"      # gateways whose certificate chains to this CA may connect
//!
//! [[client]]                         # a gateway by its certificate's SHA-256 fingerprint,
//! name = "edge-1"                    # accepted even without client_ca
//! fingerprint = "3f2a...e9"          # `openssl x509 -noout -fingerprint -sha256` (colons optional)
//!
//! [[key]]
//! file = "example.com.key"           # PKCS#8 or traditional PEM, mode 0600
//! clients = ["edge-1"]               # who may use it (omit: every client that may connect)
//! ```
//!
//! A client that presents a CA-issued certificate is named by its subject's common name.
//! Relative paths start at the configuration file's directory.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: String,
    metrics: Option<String>,
    tls: RawTls,
    engines: Option<Vec<String>>,
    pool_threads: Option<usize>,
    max_pending: Option<usize>,
    #[serde(default, rename = "client")]
    clients: Vec<RawClient>,
    #[serde(default, rename = "key")]
    keys: Vec<RawKey>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    certificate: String,
    key: String,
    client_ca: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    name: String,
    fingerprint: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    file: String,
    clients: Option<Vec<String>>,
}

/// A gateway pinned by fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedClient {
    /// Its name in `[[key]] clients`.
    pub name: String,
    /// SHA-256 of its certificate (DER).
    pub fingerprint: [u8; 32],
}

/// A key to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    /// The PEM file.
    pub file: PathBuf,
    /// Clients that may use it; `None`: every client that may connect.
    pub clients: Option<Vec<String>>,
}

/// A key server's configuration, paths resolved.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where gateways connect.
    pub listen: SocketAddr,
    /// Where `/metrics` is served.
    pub metrics: Option<SocketAddr>,
    /// The server's certificate chain (PEM).
    pub certificate: PathBuf,
    /// The server's key (PEM).
    pub key: PathBuf,
    /// CA for client certificates.
    pub client_ca: Option<PathBuf>,
    /// Gateways pinned by fingerprint.
    pub clients: Vec<PinnedClient>,
    /// Keys served.
    pub keys: Vec<KeyEntry>,
    /// Crypto engines before `inline`.
    pub engines: Vec<sluice_crypto::EngineKind>,
    /// Threads of the `pool` engine.
    pub pool_threads: Option<usize>,
    /// Requests in progress per connection before the server stops reading from it.
    pub max_pending: usize,
}

/// A configuration error, naming the file and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}\n  fix: {fix}")]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// What is wrong (with the line, where TOML knows it).
    pub message: String,
    /// What to do.
    pub fix: String,
}

impl ServerConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            message: format!("cannot read it: {e}"),
            fix: "check the path given to --config".into(),
        })?;
        Self::parse(&text, path)
    }

    /// Parses `text`, read from `path` (relative paths start at its directory).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let err = |message: String, fix: &str| ConfigError {
            file: file.clone(),
            message,
            fix: fix.to_owned(),
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
            let at = line.map_or_else(String::new, |l| format!("line {l}: "));
            err(
                format!("{at}{}", e.message()),
                "see the example at the top of crates/keyless/src/server_config.rs",
            )
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &str| dir.join(p);
        let addr = |v: &str, what: &str| {
            v.parse::<SocketAddr>().map_err(|e| {
                err(
                    format!("{what} = \"{v}\" is not an address: {e}"),
                    "write it as IP:port, e.g. \"127.0.0.1:2407\"",
                )
            })
        };
        let listen = addr(&raw.listen, "listen")?;
        let metrics = raw
            .metrics
            .as_deref()
            .map(|m| addr(m, "metrics"))
            .transpose()?;
        let clients = pinned_clients(&raw, &err)?;
        if raw.tls.client_ca.is_none() && clients.is_empty() {
            return Err(err(
                "no client may connect: neither client_ca nor a [[client]] with a fingerprint"
                    .into(),
                "give [tls] client_ca = \"ca.crt\" or pin gateways with [[client]] name/fingerprint",
            ));
        }
        if raw.keys.is_empty() {
            return Err(err(
                "no [[key]] to serve".into(),
                "add [[key]] file = \"site.key\" for each private key",
            ));
        }
        let engines = engine_kinds(raw.engines.as_deref(), &err)?;
        let max_pending = raw.max_pending.unwrap_or(128);
        if max_pending == 0 || raw.pool_threads == Some(0) {
            return Err(err(
                "max_pending and pool_threads must be at least 1".into(),
                "remove them for the defaults",
            ));
        }
        Ok(ServerConfig {
            listen,
            metrics,
            certificate: resolve(&raw.tls.certificate),
            key: resolve(&raw.tls.key),
            client_ca: raw.tls.client_ca.as_deref().map(resolve),
            clients,
            keys: raw
                .keys
                .iter()
                .map(|k| KeyEntry {
                    file: resolve(&k.file),
                    clients: k.clients.clone(),
                })
                .collect(),
            engines,
            pool_threads: raw.pool_threads,
            max_pending,
        })
    }
}

/// The `[[client]]`s pinned by fingerprint (a CA-issued client is named for its ACL entries
/// only, and has none).
fn pinned_clients(
    raw: &RawConfig,
    err: &impl Fn(String, &str) -> ConfigError,
) -> Result<Vec<PinnedClient>, ConfigError> {
    let mut clients = Vec::new();
    for c in &raw.clients {
        let Some(fp) = &c.fingerprint else {
            // A CA-issued client named for its ACL entries only.
            continue;
        };
        let fingerprint = parse_fingerprint(fp).ok_or_else(|| {
            err(
                format!(
                    "client `{}`: fingerprint \"{fp}\" is not 32 hex bytes",
                    c.name
                ),
                "use `openssl x509 -noout -fingerprint -sha256 -in client.crt` (colons are fine)",
            )
        })?;
        clients.push(PinnedClient {
            name: c.name.clone(),
            fingerprint,
        });
    }
    Ok(clients)
}

/// The `engines` chain (`pool` by default; `inline`, which ends every chain, adds none).
fn engine_kinds(
    names: Option<&[String]>,
    err: &impl Fn(String, &str) -> ConfigError,
) -> Result<Vec<sluice_crypto::EngineKind>, ConfigError> {
    let mut engines = Vec::new();
    for e in names.unwrap_or(&["pool".to_owned()]) {
        match e.as_str() {
            "pool" => engines.push(sluice_crypto::EngineKind::Pool),
            "mb" => engines.push(sluice_crypto::EngineKind::Mb),
            "inline" => {}
            other => {
                return Err(err(
                    format!("engines names \"{other}\", which a key server does not have"),
                    "use \"pool\", \"mb\" or [] (inline ends every chain)",
                ));
            }
        }
    }
    Ok(engines)
}

/// Parses a SHA-256 fingerprint written as hex, with or without colons.
pub fn parse_fingerprint(s: &str) -> Option<[u8; 32]> {
    let hex: Vec<u8> = s
        .bytes()
        .filter(|b| *b != b':')
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|c| {
            let s = std::str::from_utf8(c).ok()?;
            if s.len() != 2 {
                return None;
            }
            u8::from_str_radix(s, 16).ok()
        })
        .collect::<Option<_>>()?;
    hex.try_into().ok()
}
