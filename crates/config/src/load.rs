//! Parsing and validation: raw TOML → [`Snapshot`], collecting every error on the way.

use crate::cache::CertCache;
use crate::compression::Compression;
use crate::error::{ConfigError, LoadError, Locator};
use crate::logging::{
    AccessLogFormat, AccessLogTarget, DEFAULT_ACCESS_FLUSH, DEFAULT_REQUEST_LOG_BYTES, LogConfig,
};
use crate::raw::*;
use crate::snapshot::*;
use crate::units::{parse_byte_size, parse_duration};
use serde::de::DeserializeOwned;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

mod acme;
mod acme_secrets;
mod admin;
mod auth;
mod cache;
mod certificate;
mod client_auth;
mod client_tls;
mod compression;
pub(crate) mod fleet;
mod health;
mod listener;
mod log_ship;
mod lua;
mod mirror;
mod offload;
mod policy;
mod rate_limit;
mod route;
mod split;
mod tracing;
mod upstream;
mod waf;

/// Loads and validates a configuration file. Relative paths inside it are resolved against
/// the file's directory.
pub fn load_file(path: &Path) -> Result<Snapshot, LoadError> {
    load_file_cached(path, &CertCache::new())
}

/// [`load_file`], reusing the certificates in `cache` whose files did not change, and
/// leaving in it the certificates of this load when it succeeds.
pub fn load_file_cached(path: &Path, cache: &CertCache) -> Result<Snapshot, LoadError> {
    let src = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_str_cached(&src, &path.display().to_string(), base, cache)
}

/// Loads and validates configuration text. `file` names it in errors; relative paths are
/// resolved against `base_dir`.
pub fn load_str(src: &str, file: &str, base_dir: &Path) -> Result<Snapshot, LoadError> {
    load_str_cached(src, file, base_dir, &CertCache::new())
}

/// [`load_str`] with a certificate cache (see [`load_file_cached`]).
pub fn load_str_cached(
    src: &str,
    file: &str,
    base_dir: &Path,
    cache: &CertCache,
) -> Result<Snapshot, LoadError> {
    let mut cx = Cx::new(file, src, base_dir, cache);
    let raw = cx.parse(src);
    let snapshot = raw.and_then(|raw| cx.validate(raw, file, src));
    match snapshot {
        Some(s) if cx.errors.is_empty() => {
            cache.replace(&cx.used_certs);
            Ok(s)
        }
        _ => {
            cx.errors.sort_by_key(|e| (e.line, e.column));
            Err(LoadError::Invalid(cx.errors))
        }
    }
}

/// Whether `key` is the private half of `leaf`'s public key (a certificate and a key given
/// as a pair: TLS listeners, the admin listener, key servers' and Redis's client certificates).
fn key_belongs(leaf: &boring::x509::X509, key: &boring::pkey::PKey<boring::pkey::Private>) -> bool {
    leaf.public_key().is_ok_and(|pk| pk.public_eq(key))
}

/// A short content hash of a configuration: its text, its certificates' bytes and those of
/// every other file it names (`files`).
fn revision(src: &str, certificates: &[Arc<Certificate>], files: &[[u8; 32]]) -> String {
    let mut h = boring::sha::Sha256::new();
    h.update(src.as_bytes());
    for c in certificates {
        h.update(&c.fingerprint);
    }
    for f in files {
        h.update(f);
    }
    h.finish()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Default)]
struct RawConfig {
    global: RawGlobal,
    log: RawLog,
    dangerous: RawDangerous,
    listeners: Vec<RawListener>,
    certificates: Vec<RawCertificate>,
    upstreams: Vec<RawUpstream>,
    routes: Vec<RawRoute>,
    offload: RawOffload,
    admin: RawAdmin,
    demo: Option<RawDemo>,
    compression: Option<RawCompression>,
    rate_limit: Option<RawRateLimitStore>,
    cache: Option<RawCache>,
    tracing: Option<RawTracing>,
    resolver: RawResolver,
    config: Option<RawConfigSource>,
    acme: Option<RawAcme>,
    lua: Option<RawLua>,
    waf: Option<RawWaf>,
    auth: Option<RawAuthSettings>,
    /// Names of entries that failed to parse, by section: references to them are not
    /// reported again as "not defined".
    broken: HashMap<&'static str, HashSet<String>>,
}

pub(crate) const SECTIONS: &str = "[config], [global], [log], [admin], [demo], [offload], [compression], [rate_limit], [cache], [tracing], [resolver], [acme], [lua], [waf], [auth], [dangerous], [[listener]], [[certificate]], [[upstream]], [[route]]";

struct Cx<'a> {
    loc: Locator<'a>,
    errors: Vec<ConfigError>,
    base_dir: PathBuf,
    /// Certificates of the previous load.
    certs: &'a CertCache,
    /// Certificates of this one.
    used_certs: Vec<Arc<Certificate>>,
    /// Where routes ask for `store = "redis"` (an error without `[rate_limit] redis`).
    redis_users: Vec<usize>,
    /// SHA-256 of every other file read (keys, CAs, client certificates, tokens), so that the
    /// revision changes when one of them is replaced and a reload applies it.
    files: Vec<[u8; 32]>,
}

impl<'a> Cx<'a> {
    /// A loader for `src` (named `file` in errors), its relative paths starting at
    /// `base_dir`, reusing the certificates in `certs`.
    fn new(file: &'a str, src: &'a str, base_dir: &Path, certs: &'a CertCache) -> Self {
        Cx {
            loc: Locator::new(file, src),
            errors: Vec::new(),
            base_dir: base_dir.to_path_buf(),
            certs,
            used_certs: Vec::new(),
            redis_users: Vec::new(),
            files: Vec::new(),
        }
    }

    /// Reads a file the configuration names, counting its bytes into the revision.
    fn read_file(&mut self, path: &Path) -> std::io::Result<Vec<u8>> {
        let bytes = std::fs::read(path)?;
        let mut h = boring::sha::Sha256::new();
        h.update(path.as_os_str().as_encoded_bytes());
        h.update(&bytes);
        self.files.push(h.finish());
        Ok(bytes)
    }

    pub(super) fn err(
        &mut self,
        offset: usize,
        message: impl Into<String>,
        help: impl Into<String>,
    ) {
        let e = self.loc.error(offset, message, help);
        self.errors.push(e);
    }

    fn err_at<T>(&mut self, at: &Spanned<T>, message: impl Into<String>, help: impl Into<String>) {
        self.err(at.span().start, message, help);
    }

    /// `at` as an ip:port address; else `None` and the error "`{what} `…` is not an ip:port
    /// address`" with `help`.
    fn ip_port(&mut self, at: &Spanned<String>, what: &str, help: &str) -> Option<SocketAddr> {
        let parsed = at.get_ref().parse::<SocketAddr>().ok();
        if parsed.is_none() {
            let message = format!("{what} `{}` is not an ip:port address", at.get_ref());
            self.err_at(at, message, help);
        }
        parsed
    }

    // ---- stage 1: syntax and schema ----

    fn parse(&mut self, src: &str) -> Option<RawConfig> {
        let (root, syntax) = DeTable::parse_recoverable(src);
        if !syntax.is_empty() {
            for e in syntax {
                let at = e.span().map_or(0, |s| s.start);
                self.err(
                    at,
                    e.message().trim(),
                    "fix the TOML syntax at this position",
                );
            }
            return None;
        }
        let mut raw = RawConfig::default();
        for (key, value) in root.into_inner() {
            let name: &str = key.get_ref();
            match name {
                "global" => raw.global = self.section(value).unwrap_or_default(),
                "log" => raw.log = self.section(value).unwrap_or_default(),
                "dangerous" => raw.dangerous = self.section(value).unwrap_or_default(),
                "offload" => raw.offload = self.section(value).unwrap_or_default(),
                "admin" => raw.admin = self.section(value).unwrap_or_default(),
                "demo" => raw.demo = self.section(value),
                "compression" => raw.compression = self.section(value),
                "rate_limit" => raw.rate_limit = self.section(value),
                "cache" => raw.cache = self.section(value),
                "tracing" => raw.tracing = self.section(value),
                "resolver" => raw.resolver = self.section(value).unwrap_or_default(),
                "config" => raw.config = self.section(value),
                "acme" => raw.acme = self.section(value),
                "lua" => raw.lua = self.section(value),
                "waf" => raw.waf = self.section(value),
                "auth" => raw.auth = self.section(value),
                "listener" => raw.listeners = self.array("listener", value, &mut raw.broken),
                "certificate" => {
                    raw.certificates = self.array("certificate", value, &mut raw.broken)
                }
                "upstream" => raw.upstreams = self.array("upstream", value, &mut raw.broken),
                "route" => raw.routes = self.array("route", value, &mut raw.broken),
                other => self.err(
                    key.span().start,
                    format!("unknown section `{other}`"),
                    format!("the sections are {SECTIONS}; check the spelling"),
                ),
            }
        }
        Some(raw)
    }

    /// Deserializes one table. serde stops at the first unknown key of a table; to report
    /// every one in a single pass, the offending key is removed and the table tried again.
    /// A table whose only problems were unknown keys is returned (its errors are recorded,
    /// so the load still fails), so that its other values are checked too and references to
    /// it are not reported as undefined.
    fn section<T: DeserializeOwned>(&mut self, value: Spanned<DeValue<'_>>) -> Option<T> {
        let span = value.span();
        let mut value = value;
        let mut removed = false;
        // Bounded: each round removes one key.
        for _ in 0..256 {
            match T::deserialize(ValueDeserializer::from(value.clone())) {
                Ok(t) => return Some(t),
                Err(e) => {
                    let at = e.span().unwrap_or(span.clone()).start;
                    let (message, help) = explain(e.message());
                    let unknown = message.starts_with("unknown field");
                    // A misspelt required key is one mistake: its "unknown field" says it.
                    if removed && message.starts_with("missing field") {
                        return None;
                    }
                    removed |= unknown;
                    self.err(at, message, help);
                    if !(unknown && remove_key_at(value.get_mut(), at)) {
                        return None;
                    }
                }
            }
        }
        None
    }

    fn array<T: DeserializeOwned>(
        &mut self,
        name: &'static str,
        value: Spanned<DeValue<'_>>,
        broken: &mut HashMap<&'static str, HashSet<String>>,
    ) -> Vec<T> {
        let start = value.span().start;
        match value.into_inner() {
            DeValue::Array(items) => items
                .into_iter()
                .filter_map(|item| {
                    let entry_name = item
                        .get_ref()
                        .get("name")
                        .and_then(|n| n.get_ref().as_str())
                        .map(str::to_owned);
                    let before = self.errors.len();
                    let parsed = self.section(item);
                    // Failed, or parsed without its misspelt keys: either way its mistakes
                    // are reported, and what follows from them (a reference to it, a
                    // required key that was misspelt) is not reported again.
                    if parsed.is_none() || self.errors.len() > before {
                        broken.entry(name).or_default().extend(entry_name);
                    }
                    parsed
                })
                .collect(),
            _ => {
                self.err(
                    start,
                    format!("`{name}` must be an array of tables"),
                    format!("write each entry as [[{name}]], with double brackets"),
                );
                Vec::new()
            }
        }
    }

    // ---- stage 2: values, defaults and cross-references ----

    /// Every section checked and its defaults applied, then the cross-references between
    /// them; `None` when a certificate failed (the errors say why).
    fn validate(&mut self, raw: RawConfig, file: &str, src: &str) -> Option<Snapshot> {
        let global = self.global(&raw.global);
        let log = self.log(&raw.log);
        let allow_insecure_keys = raw
            .dangerous
            .allow_insecure_key_permissions
            .unwrap_or(false);
        let admin = self.admin(&raw.admin, allow_insecure_keys);
        let offload = self.offload(&raw.offload, allow_insecure_keys);
        self.check_keyless_wiring(&raw);
        let compression = self.compression(
            &Compression::default(),
            raw.compression.as_ref(),
            "[compression]",
        );
        let acme = self.acme_settings(raw.acme.as_ref());
        let (cert_names, certificates) =
            self.certificates(&raw, &offload, &acme, allow_insecure_keys);
        let (upstream_names, upstreams) = self.upstreams(&raw.upstreams);
        let (listener_names, listeners) =
            self.listeners(&raw, &cert_names, &upstream_names, &upstreams);
        let rate_limit_store = self.rate_limit_store(raw.rate_limit.as_ref(), allow_insecure_keys);
        let waf = self.waf_settings(raw.waf.as_ref());
        let routes = self.routes(&raw, &upstream_names, &listener_names, &compression);
        self.check_route_tables(&raw, &routes, &upstreams, &waf);
        self.check_passthrough_tls(&raw, &listeners, &upstreams);
        self.check_no_route_on_tcp(&raw, &listeners);
        self.check_redis_configured(&rate_limit_store);
        let fleet = raw
            .config
            .as_ref()
            .and_then(|c| self.fleet_source(c, allow_insecure_keys));
        self.check_acme_listeners(&raw.certificates, &certificates, &listeners);
        self.check_acme_in_fleet(&raw.certificates, fleet.as_ref());
        let certificates = certificates.into_iter().collect::<Option<Vec<_>>>()?;
        Some(Snapshot {
            compression: compression.clone(),
            fleet,
            source: file.to_owned(),
            revision: revision(src, &certificates, &self.files),
            global,
            log,
            listeners,
            certificates,
            upstreams,
            routes,
            offload,
            admin,
            rate_limit_store,
            cache: self.cache_settings(raw.cache.as_ref()),
            lua: Arc::new(self.lua_settings(raw.lua.as_ref())),
            waf: Arc::new(waf),
            auth: self.auth_settings(raw.auth.as_ref()),
            tracing: raw.tracing.as_ref().and_then(|t| self.tracing(t)),
            acme,
            resolver: self.resolver(&raw.resolver),
            demo: raw.demo.as_ref().and_then(|d| self.demo(d)),
        })
    }

    /// `[global]`: how long shutdown and a binary upgrade wait for what is in flight.
    fn global(&mut self, raw: &RawGlobal) -> Global {
        Global {
            shutdown_timeout: self
                .duration(raw.shutdown_timeout.as_ref())
                .unwrap_or(Duration::from_secs(30)),
            stream_drain_timeout: self
                .duration(raw.stream_drain_timeout.as_ref())
                .unwrap_or(Duration::from_secs(3600)),
        }
    }

    /// `[demo]`: where the built-in demo origin listens.
    fn demo(&mut self, raw: &RawDemo) -> Option<SocketAddr> {
        self.ip_port(
            &raw.address,
            "[demo] address",
            "write it as \"127.0.0.1:8081\"",
        )
    }

    fn unique(
        &mut self,
        seen: &mut HashMap<String, usize>,
        name: &Spanned<String>,
        kind: &str,
        index: usize,
    ) {
        if name.get_ref().trim().is_empty() {
            self.err_at(
                name,
                format!("{kind} name is empty"),
                "give it a short unique name",
            );
            return;
        }
        if seen.insert(name.get_ref().clone(), index).is_some() {
            self.err_at(
                name,
                format!("duplicate {kind} name `{}`", name.get_ref()),
                format!("each [[{kind}]] needs a unique name; rename or remove one of them"),
            );
        }
    }

    fn duration(&mut self, value: Option<&SpannedStr>) -> Option<Duration> {
        let value = value?;
        match parse_duration(value.get_ref()) {
            Ok(d) if d.is_zero() => {
                self.err_at(
                    value,
                    "a duration of zero is not allowed here",
                    "use a positive duration such as \"30s\"",
                );
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.err_at(value, e, "");
                None
            }
        }
    }

    /// A duration where zero is allowed (a leeway, a max-age, "write at once").
    fn duration_or_zero(&mut self, value: Option<&SpannedStr>) -> Option<Duration> {
        let value = value?;
        match parse_duration(value.get_ref()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err_at(value, e, "");
                None
            }
        }
    }

    fn size(&mut self, value: Option<&Spanned<RawSize>>) -> Option<u64> {
        let value = value?;
        match value.get_ref() {
            RawSize::Bytes(n) => Some(*n),
            RawSize::Text(s) => match parse_byte_size(s) {
                Ok(n) => Some(n),
                Err(e) => {
                    self.err_at(value, e, "");
                    None
                }
            },
        }
    }

    fn choice<T: Copy>(
        &mut self,
        value: Option<&Spanned<String>>,
        key: &str,
        options: &[(&str, T)],
    ) -> Option<T> {
        let value = value?;
        let found = options
            .iter()
            .find(|(name, _)| *name == value.get_ref().as_str())
            .map(|(_, v)| *v);
        if found.is_none() {
            let names: Vec<String> = options.iter().map(|(n, _)| format!("\"{n}\"")).collect();
            self.err_at(
                value,
                format!(
                    "`{key}` is \"{}\", which is not a known value",
                    value.get_ref()
                ),
                format!("use one of {}", names.join(", ")),
            );
        }
        found
    }

    fn path(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    fn log(&mut self, raw: &RawLog) -> LogConfig {
        let access_log = match raw.access_log.as_ref() {
            None => AccessLogTarget::Stdout,
            Some(v) => match v.get_ref().as_str() {
                "off" => AccessLogTarget::Off,
                "stdout" => AccessLogTarget::Stdout,
                "stderr" => AccessLogTarget::Stderr,
                "" => {
                    self.err_at(
                        v,
                        "`access_log` is empty",
                        "use \"stdout\", \"stderr\", \"off\" or a file path",
                    );
                    AccessLogTarget::Off
                }
                path => AccessLogTarget::File(self.path(path)),
            },
        };
        let access_format = self
            .choice(
                raw.access_format.as_ref(),
                "access_format",
                &[
                    ("text", AccessLogFormat::Text),
                    ("json", AccessLogFormat::Json),
                ],
            )
            .unwrap_or(AccessLogFormat::Text);
        let access_flush = self
            .duration_or_zero(raw.access_flush.as_ref())
            .unwrap_or(DEFAULT_ACCESS_FLUSH);
        let request_log_bytes = self
            .size(raw.request_log.as_ref())
            .map_or(DEFAULT_REQUEST_LOG_BYTES, |n| n as usize);
        LogConfig {
            level: raw
                .level
                .as_ref()
                .map_or_else(|| "info".to_owned(), |l| l.get_ref().clone()),
            access_log,
            access_format,
            access_flush,
            request_log_bytes,
            ship: self.log_shippers(raw.ship.as_deref().unwrap_or_default()),
        }
    }
}

/// Removes the key that starts at byte `at` from `value` or any table nested in it.
fn remove_key_at(value: &mut DeValue<'_>, at: usize) -> bool {
    match value {
        DeValue::Table(table) => {
            let key = table
                .iter()
                .find(|(k, _)| k.span().start == at)
                .map(|(k, _)| k.get_ref().to_string());
            if let Some(key) = key {
                table.remove(key.as_str());
                return true;
            }
            table
                .iter_mut()
                .any(|(_, v)| v.span().contains(&at) && remove_key_at(v.get_mut(), at))
        }
        DeValue::Array(items) => items
            .iter_mut()
            .any(|v| v.span().contains(&at) && remove_key_at(v.get_mut(), at)),
        _ => false,
    }
}

/// Serde's messages are good at saying what is wrong; add what to do.
fn explain(message: &str) -> (String, String) {
    let message = message.trim().to_owned();
    let help = if message.starts_with("unknown field") {
        "remove the key or fix its spelling"
    } else if message.starts_with("missing field") {
        "add the key; it has no default"
    } else if message.contains("untagged enum RawSize") {
        return (
            "expected a size".to_owned(),
            "write a number of bytes or a string with a unit, such as \"16k\" or \"10m\""
                .to_owned(),
        );
    } else if message.starts_with("invalid type") {
        "give a value of the expected type (strings in quotes, durations as \"30s\")"
    } else {
        ""
    };
    (message, help.to_owned())
}
