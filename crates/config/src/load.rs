//! Parsing and validation: raw TOML → [`Snapshot`], collecting every error on the way.

use crate::error::{ConfigError, LoadError, Locator};
use crate::pattern::HostPattern;
use crate::raw::*;
use crate::snapshot::*;
use crate::units::{parse_byte_size, parse_duration};
use boring::nid::Nid;
use boring::pkey::{Id, PKey, Private};
use boring::x509::X509;
use serde::de::DeserializeOwned;
use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, ToSocketAddrs};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

/// Loads and validates a configuration file. Relative paths inside it are resolved against
/// the file's directory.
pub fn load_file(path: &Path) -> Result<Snapshot, LoadError> {
    let src = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_str(&src, &path.display().to_string(), base)
}

/// Loads and validates configuration text. `file` names it in errors; relative paths are
/// resolved against `base_dir`.
pub fn load_str(src: &str, file: &str, base_dir: &Path) -> Result<Snapshot, LoadError> {
    let mut cx = Cx {
        loc: Locator::new(file, src),
        errors: Vec::new(),
        base_dir: base_dir.to_path_buf(),
    };
    let raw = cx.parse(src);
    let snapshot = raw.and_then(|raw| cx.validate(raw, file));
    match snapshot {
        Some(s) if cx.errors.is_empty() => Ok(s),
        _ => {
            cx.errors.sort_by_key(|e| (e.line, e.column));
            Err(LoadError::Invalid(cx.errors))
        }
    }
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
    compression: Option<RawCompression>,
    /// Names of entries that failed to parse, by section: references to them are not
    /// reported again as "not defined".
    broken: HashMap<&'static str, HashSet<String>>,
}

const SECTIONS: &str = "[global], [log], [admin], [offload], [compression], [dangerous], [[listener]], [[certificate]], [[upstream]], [[route]]";

struct Cx<'a> {
    loc: Locator<'a>,
    errors: Vec<ConfigError>,
    base_dir: PathBuf,
}

impl Cx<'_> {
    fn err(&mut self, offset: usize, message: impl Into<String>, help: impl Into<String>) {
        let e = self.loc.error(offset, message, help);
        self.errors.push(e);
    }

    fn err_at<T>(&mut self, at: &Spanned<T>, message: impl Into<String>, help: impl Into<String>) {
        self.err(at.span().start, message, help);
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
                "compression" => raw.compression = self.section(value),
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

    fn section<T: DeserializeOwned>(&mut self, value: Spanned<DeValue<'_>>) -> Option<T> {
        let span = value.span();
        match T::deserialize(ValueDeserializer::from(value)) {
            Ok(t) => Some(t),
            Err(e) => {
                let at = e.span().unwrap_or(span).start;
                let (message, help) = explain(e.message());
                self.err(at, message, help);
                None
            }
        }
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
                    let parsed = self.section(item);
                    if parsed.is_none() {
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

    fn validate(&mut self, raw: RawConfig, file: &str) -> Option<Snapshot> {
        let global = Global {
            shutdown_timeout: self
                .duration(raw.global.shutdown_timeout.as_ref())
                .unwrap_or(Duration::from_secs(30)),
        };
        let log = self.log(&raw.log);
        let admin = self.admin(&raw.admin);
        let allow_insecure_keys = raw
            .dangerous
            .allow_insecure_key_permissions
            .unwrap_or(false);
        let offload = Offload {
            crypto: self.crypto_offload(raw.offload.crypto.as_ref()),
            compress: self.compress_offload(raw.offload.compress.as_ref()),
            keyless: raw
                .offload
                .keyless
                .as_ref()
                .and_then(|k| self.keyless_offload(k, allow_insecure_keys)),
        };
        self.check_keyless_wiring(&raw);
        let compression = self.compression(
            &Compression::default(),
            raw.compression.as_ref(),
            "[compression]",
        );

        let mut cert_names = HashMap::new();
        let mut certificates = Vec::new();
        for c in &raw.certificates {
            self.unique(&mut cert_names, &c.name, "certificate", certificates.len());
            // A certificate that failed keeps its slot (None) so that indexes stay aligned
            // with the file; the load then fails because an error was recorded.
            let remote_ok = c.offload_engines.as_ref().map_or_else(
                || offload.crypto.engines.contains(&CryptoEngine::Keyless),
                |list| list.get_ref().iter().any(|e| e == "keyless"),
            );
            certificates.push(
                self.certificate(c, allow_insecure_keys, remote_ok)
                    .map(Arc::new),
            );
        }

        let mut upstream_names = HashMap::new();
        let mut upstreams = Vec::new();
        for u in &raw.upstreams {
            self.unique(&mut upstream_names, &u.name, "upstream", upstreams.len());
            upstreams.push(Arc::new(self.upstream(u)));
        }

        let mut listener_names = HashMap::new();
        let mut addresses: HashMap<SocketAddr, String> = HashMap::new();
        let mut listeners = Vec::new();
        for l in &raw.listeners {
            self.unique(&mut listener_names, &l.name, "listener", listeners.len());
            if let Some(listener) = self.listener(l, &cert_names, &raw.certificates, &raw.broken) {
                // Port 0 asks the OS for a free port, so it can never clash.
                let clash = (listener.address.port() != 0)
                    .then(|| addresses.insert(listener.address, listener.name.clone()))
                    .flatten();
                if let Some(other) = clash {
                    self.err_at(
                        &l.address,
                        format!(
                            "listener `{}` binds {}, which listener `{other}` already binds",
                            listener.name, listener.address
                        ),
                        "give each listener its own address or port",
                    );
                }
                listeners.push(listener);
            }
        }
        if raw.listeners.is_empty() {
            self.err(
                0,
                "the configuration has no [[listener]], so Sluice would accept nothing",
                "add one, for example:\n      [[listener]]\n      name = \"http\"\n      address = \"127.0.0.1:8080\"",
            );
        }

        let mut route_names = HashMap::new();
        let mut routes = Vec::new();
        for r in &raw.routes {
            self.unique(&mut route_names, &r.name, "route", routes.len());
            if let Some(route) = self.route(
                r,
                &upstream_names,
                &listener_names,
                &raw.broken,
                &compression,
            ) {
                routes.push(route);
            }
        }

        Some(Snapshot {
            source: file.to_owned(),
            global,
            log,
            listeners,
            certificates: certificates.into_iter().collect::<Option<Vec<_>>>()?,
            upstreams,
            routes,
            offload,
            admin,
        })
    }

    fn admin(&mut self, raw: &RawAdmin) -> Option<SocketAddr> {
        if raw.enabled == Some(false) {
            return None;
        }
        let Some(a) = &raw.address else {
            return Some(SocketAddr::from(([127, 0, 0, 1], 9901)));
        };
        match a.get_ref().parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.err_at(
                    a,
                    format!(
                        "[admin] address `{}` is not an ip:port address",
                        a.get_ref()
                    ),
                    "write it as \"127.0.0.1:9901\"",
                );
                None
            }
        }
    }

    fn crypto_engines(&mut self, list: &Spanned<Vec<String>>, key: &str) -> Vec<CryptoEngine> {
        let mut engines = Vec::new();
        for e in list.get_ref() {
            match e.as_str() {
                "pool" => engines.push(CryptoEngine::Pool),
                "mb" => engines.push(CryptoEngine::Mb),
                "keyless" => engines.push(CryptoEngine::Keyless),
                // The software engine ends every chain; naming it changes nothing.
                "inline" => {}
                other => self.err_at(
                    list,
                    format!("{key} names \"{other}\", which this build does not have"),
                    "use \"pool\" (dedicated threads), \"mb\" (AVX-512 IFMA multi-buffer RSA), \"keyless\" (remote key servers, [offload.keyless]) or [] (sign on the event loop); \"inline\" always ends the chain",
                ),
            }
        }
        engines
    }

    fn crypto_offload(&mut self, raw: Option<&RawOffloadCrypto>) -> CryptoOffload {
        let d = CryptoOffload::default();
        let Some(raw) = raw else { return d };
        let engines = raw.engines.as_ref().map_or_else(
            || d.engines.clone(),
            |list| self.crypto_engines(list, "[offload.crypto] engines"),
        );
        let positive = |cx: &mut Self, v: Option<&Spanned<u32>>, key: &str| -> Option<usize> {
            let v = v?;
            if *v.get_ref() == 0 {
                cx.err_at(
                    v,
                    format!("[offload.crypto] {key} must be at least 1"),
                    "remove it for the default",
                );
                return None;
            }
            Some(*v.get_ref() as usize)
        };
        let pool_threads = positive(self, raw.pool_threads.as_ref(), "pool_threads");
        let pool_capacity = positive(self, raw.pool_capacity.as_ref(), "pool_capacity");
        let breaker_failures = positive(self, raw.breaker_failures.as_ref(), "breaker_failures")
            .map_or(d.breaker_failures, |n| n as u32);
        let verify_all = self
            .choice(
                raw.verify.as_ref(),
                "verify",
                &[("all", true), ("rsa", false)],
            )
            .unwrap_or(d.verify_all);
        CryptoOffload {
            engines,
            pool_threads,
            pool_capacity,
            deadline: self.duration(raw.deadline.as_ref()).unwrap_or(d.deadline),
            breaker_failures,
            breaker_backoff: self
                .duration(raw.breaker_backoff.as_ref())
                .unwrap_or(d.breaker_backoff),
            verify_all,
            mb_max_wait: self
                .duration(raw.mb_max_wait.as_ref())
                .unwrap_or(d.mb_max_wait),
            mb_capacity: positive(self, raw.mb_capacity.as_ref(), "mb_capacity")
                .unwrap_or(d.mb_capacity),
            mb_min_batch: positive(self, raw.mb_min_batch.as_ref(), "mb_min_batch")
                .unwrap_or(d.mb_min_batch),
            mb_on_worker: self
                .choice(
                    raw.mb_run_on.as_ref(),
                    "mb_run_on",
                    &[("thread", false), ("worker", true)],
                )
                .unwrap_or(d.mb_on_worker),
            mb_lanes: self.mb_lanes(raw.mb_lanes.as_ref()),
        }
    }

    /// `mb_lanes`: `"auto"`, 4 or 8.
    fn mb_lanes(&mut self, v: Option<&Spanned<toml::Value>>) -> Option<usize> {
        let v = v?;
        match v.get_ref() {
            toml::Value::String(s) if s == "auto" => None,
            toml::Value::Integer(n @ (4 | 8)) => Some(*n as usize),
            other => {
                self.err_at(
                    v,
                    format!("[offload.crypto] mb_lanes = {other} is not a batch width"),
                    "use 8 (512-bit IFMA, the default: most signatures per core) or 4 (256-bit IFMA: half the time per batch)",
                );
                None
            }
        }
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
        LogConfig {
            level: raw
                .level
                .as_ref()
                .map_or_else(|| "info".to_owned(), |l| l.get_ref().clone()),
            access_log,
            access_format,
        }
    }

    fn certificate(
        &mut self,
        raw: &RawCertificate,
        allow_insecure_keys: bool,
        remote_ok: bool,
    ) -> Option<Certificate> {
        let cert_path = self.path(raw.cert.get_ref());
        let name = raw.name.get_ref();

        let chain = match std::fs::read(&cert_path) {
            Err(e) => {
                self.err_at(
                    &raw.cert,
                    format!("certificate `{name}`: cannot read {}: {e}", cert_path.display()),
                    "check the path (relative paths start at the configuration file's directory) and that Sluice may read it",
                );
                None
            }
            Ok(pem) => match X509::stack_from_pem(&pem) {
                Ok(chain) if !chain.is_empty() => Some(chain),
                _ => {
                    self.err_at(
                        &raw.cert,
                        format!("certificate `{name}`: {} holds no PEM certificate", cert_path.display()),
                        "give a PEM file that starts with -----BEGIN CERTIFICATE-----, leaf first, then intermediates",
                    );
                    None
                }
            },
        };

        let Some(key_span) = &raw.key else {
            if !remote_ok {
                self.err_at(
                    &raw.name,
                    format!("certificate `{name}` has no `key`"),
                    "give `key = \"site.key\"`, or sign through key servers: add \"keyless\" to [offload.crypto] engines (or this certificate's offload_engines) and configure [offload.keyless]",
                );
                return None;
            }
            let chain = chain?;
            let public = match chain[0].public_key() {
                Ok(k) => k,
                Err(_) => {
                    self.err_at(
                        &raw.cert,
                        format!("certificate `{name}`: cannot read its public key"),
                        "use an RSA, ECDSA (P-256, P-384) or Ed25519 certificate",
                    );
                    return None;
                }
            };
            let key_type = self.key_type(name, &raw.cert, public.id(), public.bits())?;
            let hosts = self.certificate_hosts(raw, &chain[0]);
            let offload_engines = raw.offload_engines.as_ref().map(|list| {
                self.crypto_engines(list, &format!("certificate `{name}`: offload_engines"))
            });
            return Some(Certificate {
                name: name.clone(),
                chain,
                key: None,
                key_type,
                hosts,
                offload_engines,
            });
        };
        let key_path = self.path(key_span.get_ref());
        let key = self.private_key(name, key_span, &key_path, allow_insecure_keys);
        let (chain, key) = (chain?, key?);

        let leaf = &chain[0];
        let matches = leaf
            .public_key()
            .map(|pk| pk.public_eq(&key))
            .unwrap_or(false);
        if !matches {
            self.err_at(
                key_span,
                format!(
                    "certificate `{name}`: the private key in {} does not belong to the certificate in {}",
                    key_path.display(),
                    cert_path.display()
                ),
                "pair each certificate with the key it was issued for (compare `openssl x509 -noout -pubkey` with `openssl pkey -pubout`)",
            );
            return None;
        }
        let key_type = self.key_type(name, key_span, key.id(), key.bits())?;
        let hosts = self.certificate_hosts(raw, leaf);
        let offload_engines = raw.offload_engines.as_ref().map(|list| {
            self.crypto_engines(list, &format!("certificate `{name}`: offload_engines"))
        });
        Some(Certificate {
            name: name.clone(),
            chain,
            key: Some(key),
            key_type,
            hosts,
            offload_engines,
        })
    }

    fn key_type<T>(&mut self, name: &str, at: &Spanned<T>, id: Id, bits: u32) -> Option<KeyType> {
        let key_type = match id {
            Id::RSA => KeyType::Rsa(bits),
            Id::EC => KeyType::Ecdsa(bits),
            Id::ED25519 => KeyType::Ed25519,
            _ => {
                self.err_at(
                    at,
                    format!("certificate `{name}`: unsupported key type"),
                    "use an RSA, ECDSA (P-256, P-384) or Ed25519 key",
                );
                return None;
            }
        };
        if let KeyType::Rsa(bits) = key_type
            && bits < 2048
        {
            self.err_at(
                at,
                format!("certificate `{name}`: RSA-{bits} is too weak"),
                "use an RSA key of at least 2048 bits",
            );
        }
        Some(key_type)
    }

    fn certificate_hosts(&mut self, raw: &RawCertificate, leaf: &X509) -> Vec<HostPattern> {
        let name = raw.name.get_ref();
        match &raw.hosts {
            Some(list) => {
                let mut hosts = Vec::new();
                for h in list {
                    match HostPattern::parse(h.get_ref()) {
                        Ok(p) => hosts.push(p),
                        Err(e) => self.err_at(h, format!("certificate `{name}`: {e}"), ""),
                    }
                }
                hosts
            }
            None => {
                let hosts = certificate_names(leaf);
                if hosts.is_empty() {
                    self.err_at(
                        &raw.cert,
                        format!(
                            "certificate `{name}` names no host (no subjectAltName or common name)"
                        ),
                        "list the names it serves with `hosts = [\"example.com\"]`",
                    );
                }
                hosts
            }
        }
    }

    /// Reads the private key at `path` for `what` (a certificate's name), refusing a file
    /// others may read; errors point at `at`.
    fn private_key(
        &mut self,
        what: &str,
        at: &Spanned<String>,
        path: &Path,
        allow_insecure: bool,
    ) -> Option<PKey<Private>> {
        let name = what;
        let meta =
            match std::fs::metadata(path) {
                Ok(m) => m,
                Err(e) => {
                    self.err_at(
                    at,
                    format!("certificate `{name}`: cannot read key {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                    return None;
                }
            };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 && !allow_insecure {
                self.err_at(
                    at,
                    format!(
                        "certificate `{name}`: private key {} is readable by group or others (mode {mode:03o})",
                        path.display()
                    ),
                    format!(
                        "run `chmod 600 {}` (or set allow_insecure_key_permissions = true under [dangerous], which is not recommended)",
                        path.display()
                    ),
                );
                return None;
            }
        }
        let _ = (meta, allow_insecure);
        let pem = match std::fs::read(path) {
            Ok(p) => p,
            Err(e) => {
                self.err_at(
                    at,
                    format!(
                        "certificate `{name}`: cannot read key {}: {e}",
                        path.display()
                    ),
                    "check that Sluice's user may read it",
                );
                return None;
            }
        };
        match PKey::private_key_from_pem(&pem) {
            Ok(k) => Some(k),
            Err(_) => {
                self.err_at(
                    at,
                    format!("certificate `{name}`: {} holds no PEM private key", path.display()),
                    "give an unencrypted PEM key (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA/EC PRIVATE KEY-----)",
                );
                None
            }
        }
    }

    fn listener(
        &mut self,
        raw: &RawListener,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<Listener> {
        let name = raw.name.get_ref().clone();
        let address = match raw.address.get_ref().parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.err_at(
                    &raw.address,
                    format!(
                        "listener `{name}`: `{}` is not an ip:port address",
                        raw.address.get_ref()
                    ),
                    "write it as \"127.0.0.1:8443\", \"0.0.0.0:443\" or \"[::]:443\"",
                );
                None
            }
        };
        let (mut h2, mut http1) = (true, true);
        if let Some(protocols) = &raw.protocols {
            h2 = false;
            http1 = false;
            for p in protocols.get_ref() {
                match p.as_str() {
                    "h2" => h2 = true,
                    "http/1.1" => http1 = true,
                    other => self.err_at(
                        protocols,
                        format!("listener `{name}`: `protocols` contains \"{other}\", which this build does not support"),
                        "use \"h2\" and \"http/1.1\"",
                    ),
                }
            }
            if !h2 && !http1 {
                self.err_at(
                    protocols,
                    format!("listener `{name}`: `protocols` is empty"),
                    "list \"h2\", \"http/1.1\" or both",
                );
            }
        }
        let tls = raw
            .tls
            .as_ref()
            .and_then(|t| self.listener_tls(&name, t, cert_names, raw_certs, broken));
        let max_header_bytes = self
            .size(raw.max_header_bytes.as_ref())
            .unwrap_or(32 * 1024);
        if let Some(v) = &raw.max_header_bytes
            && !(1024..=1 << 20).contains(&max_header_bytes)
        {
            self.err_at(
                v,
                format!("listener `{name}`: max_header_bytes must be between 1k and 1m"),
                "NGINX's default is 32k",
            );
        }
        let listener = Listener {
            name,
            address: address?,
            h2,
            http1,
            header_read_timeout: self
                .duration(raw.header_read_timeout.as_ref())
                .unwrap_or(Duration::from_secs(30)),
            keepalive_timeout: self
                .duration(raw.keepalive_timeout.as_ref())
                .unwrap_or(Duration::from_secs(75)),
            max_header_bytes: max_header_bytes as usize,
            max_body_bytes: self.size(raw.max_body_bytes.as_ref()).unwrap_or(10 << 20),
            forwarded_header: raw.forwarded_header.unwrap_or(false),
            tls: None,
        };
        if raw.tls.is_some() {
            return Some(Listener {
                tls: Some(tls?),
                ..listener
            });
        }
        Some(listener)
    }

    fn listener_tls(
        &mut self,
        listener: &str,
        raw: &RawListenerTls,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<TlsListener> {
        let is_broken = |kind: &str, n: &str| broken.get(kind).is_some_and(|set| set.contains(n));
        let defined = || {
            let names: Vec<&str> = raw_certs
                .iter()
                .map(|c| c.name.get_ref().as_str())
                .collect();
            if names.is_empty() {
                "none are defined yet".to_owned()
            } else {
                format!("defined: {}", names.join(", "))
            }
        };
        let mut ok = true;
        let certificates: Vec<usize> = match &raw.certificates {
            Some(list) => list
                .iter()
                .filter_map(|n| {
                    let found = cert_names.get(n.get_ref()).copied();
                    if found.is_none() {
                        ok = false;
                        if is_broken("certificate", n.get_ref()) {
                            return None;
                        }
                        let msg = format!(
                            "listener `{listener}` uses certificate `{}`, which is not defined",
                            n.get_ref()
                        );
                        self.err_at(
                            n,
                            msg,
                            format!(
                                "add a [[certificate]] with that name or fix the name ({})",
                                defined()
                            ),
                        );
                    }
                    found
                })
                .collect(),
            None => (0..raw_certs.len()).collect(),
        };
        if certificates.is_empty() && ok {
            self.err(
                0,
                format!("HTTPS listener `{listener}` has no certificate"),
                "add a [[certificate]] (cert and key files) or remove [listener.tls]",
            );
            return None;
        }
        let default_certificate = match &raw.default_certificate {
            None => certificates.first().copied(),
            Some(n) => match cert_names.get(n.get_ref()) {
                Some(i) if certificates.contains(i) => Some(*i),
                Some(_) => {
                    self.err_at(n, format!("listener `{listener}`: default_certificate `{}` is not in its `certificates` list", n.get_ref()), "add it to `certificates` or pick one from that list");
                    None
                }
                None => {
                    self.err_at(
                        n,
                        format!(
                            "listener `{listener}`: default_certificate `{}` is not defined",
                            n.get_ref()
                        ),
                        defined(),
                    );
                    None
                }
            },
        };
        let unknown_sni = self
            .choice(
                raw.unknown_sni.as_ref(),
                "unknown_sni",
                &[
                    ("default", UnknownSni::Default),
                    ("reject", UnknownSni::Reject),
                ],
            )
            .unwrap_or(UnknownSni::Default);
        let versions = [("1.2", TlsVersion::V1_2), ("1.3", TlsVersion::V1_3)];
        let min_version = self
            .choice(raw.min_version.as_ref(), "min_version", &versions)
            .unwrap_or(TlsVersion::V1_2);
        let max_version = self
            .choice(raw.max_version.as_ref(), "max_version", &versions)
            .unwrap_or(TlsVersion::V1_3);
        if min_version > max_version
            && let Some(v) = &raw.min_version
        {
            self.err_at(
                v,
                format!("listener `{listener}`: min_version is above max_version"),
                "make min_version at most max_version",
            );
        }
        let ticket_key_file = raw.ticket_key_file.as_ref().and_then(|f| {
            let path = self.path(f.get_ref());
            match std::fs::read(&path) {
                Ok(bytes) if !bytes.is_empty() && bytes.len() % 80 == 0 => Some(path),
                Ok(bytes) => {
                    self.err_at(f, format!("listener `{listener}`: ticket key file {} is {} bytes, not a multiple of 80", path.display(), bytes.len()), "write one or more 80-byte keys, newest first, e.g. `openssl rand 80 > ticket.key` (NGINX's format)");
                    None
                }
                Err(e) => {
                    self.err_at(f, format!("listener `{listener}`: cannot read ticket key file {}: {e}", path.display()), "check the path and permissions");
                    None
                }
            }
        });
        let ticket_key_rotation = self
            .duration(raw.ticket_key_rotation.as_ref())
            .unwrap_or(Duration::from_secs(3600));
        if raw.ticket_key_file.is_some() && ticket_key_file.is_none() {
            ok = false;
        }
        let rsa_key_exchange = raw.rsa_key_exchange.as_ref().is_some_and(|r| *r.get_ref());
        if rsa_key_exchange
            && min_version == TlsVersion::V1_3
            && let Some(r) = &raw.rsa_key_exchange
        {
            self.err_at(
                r,
                format!("listener `{listener}`: rsa_key_exchange needs TLS 1.2, but min_version is 1.3"),
                "set min_version = \"1.2\" or remove rsa_key_exchange (TLS 1.3 has no RSA key exchange)",
            );
            ok = false;
        }
        if !ok {
            return None;
        }
        Some(TlsListener {
            certificates,
            default_certificate: default_certificate?,
            unknown_sni,
            min_version,
            max_version,
            session_tickets: raw.session_tickets.unwrap_or(true),
            ticket_key_file,
            ticket_key_rotation,
            rsa_key_exchange,
        })
    }

    fn upstream(&mut self, raw: &RawUpstream) -> Upstream {
        let name = raw.name.get_ref().clone();
        let mut servers = Vec::new();
        if raw.servers.get_ref().is_empty() {
            self.err_at(
                &raw.servers,
                format!("upstream `{name}` has no servers"),
                "add at least one: servers = [{ address = \"127.0.0.1:9000\" }]",
            );
        }
        for s in raw.servers.get_ref() {
            let text = s.address.get_ref();
            let addr = match text.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) if text.contains(':') => {
                    text.to_socket_addrs().ok().and_then(|mut a| a.next())
                }
                Err(_) => None,
            };
            let Some(addr) = addr else {
                self.err_at(
                    &s.address,
                    format!("upstream `{name}`: server address `{text}` is not a reachable host:port"),
                    "write it as \"10.0.0.5:8080\" or \"app.internal:8080\" (names are resolved when the configuration loads)",
                );
                continue;
            };
            let weight = match &s.weight {
                None => NonZeroU32::MIN,
                Some(w) => NonZeroU32::new(*w.get_ref()).unwrap_or_else(|| {
                    self.err_at(
                        w,
                        format!("upstream `{name}`: weight 0 would never be chosen"),
                        "use a weight of 1 or more, or remove the server",
                    );
                    NonZeroU32::MIN
                }),
            };
            servers.push(UpstreamServer {
                address: ServerAddr {
                    name: text.clone(),
                    addr,
                },
                weight,
            });
        }
        let balance = self
            .choice(
                raw.balance.as_ref(),
                "balance",
                &[
                    ("round_robin", Balance::RoundRobin),
                    ("weighted_round_robin", Balance::WeightedRoundRobin),
                    ("least_conn", Balance::LeastConn),
                    ("ip_hash", Balance::IpHash),
                ],
            )
            .unwrap_or(Balance::RoundRobin);
        let protocol = self
            .choice(
                raw.protocol.as_ref(),
                "protocol",
                &[
                    ("http1", UpstreamProtocol::Http1),
                    ("h2", UpstreamProtocol::H2),
                ],
            )
            .unwrap_or(UpstreamProtocol::Http1);
        #[derive(Clone, Copy)]
        enum Mode {
            Pass,
            Node,
            Rewrite,
        }
        let mode = self
            .choice(
                raw.pass_host.as_ref(),
                "pass_host",
                &[
                    ("pass", Mode::Pass),
                    ("node", Mode::Node),
                    ("rewrite", Mode::Rewrite),
                ],
            )
            .unwrap_or(Mode::Pass);
        let pass_host = match (mode, &raw.upstream_host) {
            (Mode::Rewrite, Some(h)) => PassHost::Rewrite(h.get_ref().clone()),
            (Mode::Rewrite, None) => {
                if let Some(p) = &raw.pass_host {
                    self.err_at(
                        p,
                        format!("upstream `{name}`: pass_host = \"rewrite\" needs `upstream_host`"),
                        "add upstream_host = \"the.host.to.send\"",
                    );
                }
                PassHost::Pass
            }
            (_, Some(h)) => {
                self.err_at(
                    h,
                    format!(
                        "upstream `{name}`: upstream_host is only used with pass_host = \"rewrite\""
                    ),
                    "add pass_host = \"rewrite\" or remove upstream_host",
                );
                PassHost::Pass
            }
            (Mode::Node, None) => PassHost::Node,
            (Mode::Pass, None) => PassHost::Pass,
        };
        let max_fails = match &raw.max_fails {
            None => NonZeroU32::MIN,
            Some(v) => NonZeroU32::new(*v.get_ref()).unwrap_or_else(|| {
                self.err_at(
                    v,
                    format!("upstream `{name}`: max_fails must be at least 1"),
                    "use 1 to skip a server after its first failure",
                );
                NonZeroU32::MIN
            }),
        };
        Upstream {
            name,
            servers,
            balance,
            protocol,
            pass_host,
            connect_timeout: self
                .duration(raw.connect_timeout.as_ref())
                .unwrap_or(Duration::from_secs(5)),
            response_timeout: self
                .duration(raw.response_timeout.as_ref())
                .unwrap_or(Duration::from_secs(60)),
            max_fails,
            fail_timeout: self
                .duration(raw.fail_timeout.as_ref())
                .unwrap_or(Duration::from_secs(10)),
            keepalive: raw.keepalive.as_ref().map_or(32, |k| *k.get_ref() as usize),
            keepalive_timeout: self
                .duration(raw.keepalive_timeout.as_ref())
                .unwrap_or(Duration::from_secs(60)),
        }
    }

    fn route(
        &mut self,
        raw: &RawRoute,
        upstream_names: &HashMap<String, usize>,
        listener_names: &HashMap<String, usize>,
        broken: &HashMap<&'static str, HashSet<String>>,
        compression: &Arc<Compression>,
    ) -> Option<Route> {
        let is_broken = |kind: &str, n: &str| broken.get(kind).is_some_and(|set| set.contains(n));
        let name = raw.name.get_ref().clone();
        let mut ok = true;
        let mut hosts = Vec::new();
        for h in raw.hosts.iter().flatten() {
            match HostPattern::parse(h.get_ref()) {
                Ok(p) => hosts.push(p),
                Err(e) => {
                    ok = false;
                    self.err_at(h, format!("route `{name}`: {e}"), "");
                }
            }
        }
        let given: Vec<&Spanned<String>> = [&raw.path_exact, &raw.path_prefix, &raw.path_regex]
            .into_iter()
            .flatten()
            .collect();
        if given.len() > 1 {
            ok = false;
            self.err_at(
                given[1],
                format!(
                    "route `{name}` sets more than one of path_exact, path_prefix and path_regex"
                ),
                "keep one; split the route in two if you need both",
            );
        }
        let path = if let Some(p) = &raw.path_exact {
            self.path_literal(&name, p).map(PathMatch::Exact)
        } else if let Some(p) = &raw.path_regex {
            match regex::Regex::new(p.get_ref()) {
                Ok(re) => Some(PathMatch::Regex(re)),
                Err(e) => {
                    self.err_at(
                        p,
                        format!("route `{name}`: path_regex does not compile: {e}"),
                        "fix the regular expression (Rust regex syntax)",
                    );
                    None
                }
            }
        } else if let Some(p) = &raw.path_prefix {
            self.path_literal(&name, p).map(PathMatch::Prefix)
        } else {
            Some(PathMatch::Prefix("/".to_owned()))
        };
        let mut methods = Vec::new();
        for m in raw.methods.iter().flatten() {
            let text = m.get_ref();
            match http::Method::from_bytes(text.as_bytes()) {
                Ok(method) if text.chars().all(|c| c.is_ascii_uppercase()) => methods.push(method),
                _ => {
                    ok = false;
                    self.err_at(
                        m,
                        format!("route `{name}`: `{text}` is not an HTTP method"),
                        "use upper-case methods such as \"GET\", \"POST\"",
                    );
                }
            }
        }
        let mut headers = Vec::new();
        for (k, v) in raw.headers.iter().flatten() {
            match (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(v.get_ref()),
            ) {
                (Ok(hn), Ok(hv)) => {
                    headers.push((hn, hv));
                }
                _ => {
                    ok = false;
                    self.err_at(v, format!("route `{name}`: header match `{k}` is not a valid header name and value"), "use a header name of letters, digits and '-' and a printable value");
                }
            }
        }
        let mut listeners = Vec::new();
        for l in raw.listeners.iter().flatten() {
            if !listener_names.contains_key(l.get_ref()) {
                ok = false;
                if is_broken("listener", l.get_ref()) {
                    continue;
                }
                let known: Vec<&str> = listener_names.keys().map(String::as_str).collect();
                self.err_at(
                    l,
                    format!(
                        "route `{name}` names listener `{}`, which is not defined",
                        l.get_ref()
                    ),
                    format!("use one of: {}", known.join(", ")),
                );
            }
            listeners.push(l.get_ref().clone());
        }
        let upstream = upstream_names.get(raw.upstream.get_ref()).copied();
        if upstream.is_none() && !is_broken("upstream", raw.upstream.get_ref()) {
            let mut known: Vec<&str> = upstream_names.keys().map(String::as_str).collect();
            known.sort_unstable();
            self.err_at(
                &raw.upstream,
                format!(
                    "route `{name}` sends to upstream `{}`, which is not defined",
                    raw.upstream.get_ref()
                ),
                if known.is_empty() {
                    "add an [[upstream]] with that name".to_owned()
                } else {
                    format!(
                        "fix the name or add an [[upstream]] with it (defined: {})",
                        known.join(", ")
                    )
                },
            );
        }
        if !ok {
            return None;
        }
        Some(Route {
            name,
            hosts,
            path: path?,
            methods,
            headers,
            listeners,
            upstream: upstream?,
            compression: match &raw.compression {
                None => compression.clone(),
                Some(c) => self.compression(
                    compression,
                    Some(c),
                    &format!("route `{}`: [route.compression]", raw.name.get_ref()),
                ),
            },
        })
    }

    /// `base` with the settings of `raw` applied; errors are reported and leave the base
    /// value in place.
    fn compression(
        &mut self,
        base: &Compression,
        raw: Option<&RawCompression>,
        section: &str,
    ) -> Arc<Compression> {
        let mut c = base.clone();
        let Some(raw) = raw else {
            return Arc::new(c);
        };
        if let Some(e) = raw.enabled {
            c.enabled = e;
        }
        if let Some(list) = &raw.codecs {
            let mut codecs = Vec::new();
            for name in list.get_ref() {
                match name.as_str() {
                    "gzip" => codecs.push(ContentCoding::Gzip),
                    "br" => codecs.push(ContentCoding::Brotli),
                    "zstd" => codecs.push(ContentCoding::Zstd),
                    other => self.err_at(
                        list,
                        format!(
                            "{section} codecs names \"{other}\", which Sluice does not produce"
                        ),
                        "use \"zstd\", \"br\" and/or \"gzip\", in your order of preference",
                    ),
                }
            }
            if codecs.is_empty() && list.get_ref().is_empty() {
                self.err_at(
                    list,
                    format!("{section} codecs is empty"),
                    "name at least one of \"zstd\", \"br\", \"gzip\", or set enabled = false",
                );
            }
            c.codecs = codecs;
        }
        if let Some(b) = self.choice(
            raw.gzip_backend.as_ref(),
            "gzip_backend",
            &[
                ("isal", GzipBackend::Isal),
                ("zlib-rs", GzipBackend::ZlibRs),
            ],
        ) {
            c.gzip_backend = b;
        }
        let level = |cx: &mut Self,
                     v: Option<&Spanned<u32>>,
                     key: &str,
                     range: std::ops::RangeInclusive<u32>,
                     help: &str|
         -> Option<u32> {
            let v = v?;
            if !range.contains(v.get_ref()) {
                cx.err_at(
                    v,
                    format!(
                        "{section} {key} = {} is out of range {}-{}",
                        v.get_ref(),
                        range.start(),
                        range.end()
                    ),
                    help.to_owned(),
                );
                return None;
            }
            Some(*v.get_ref())
        };
        let gzip_range = match c.gzip_backend {
            GzipBackend::Isal => 0..=3,
            GzipBackend::ZlibRs => 1..=9,
        };
        match (raw.gzip_level.as_ref(), c.gzip_backend) {
            (Some(v), b) => {
                if let Some(l) = level(
                    self,
                    Some(v),
                    "gzip_level",
                    gzip_range,
                    if b == GzipBackend::Isal {
                        "ISA-L has levels 0-3 (1 is about zlib's 1 in size, several times faster); use gzip_backend = \"zlib-rs\" for levels 1-9"
                    } else {
                        "zlib levels are 1 (fastest) to 9 (smallest)"
                    },
                ) {
                    c.gzip_level = l;
                }
            }
            // A level inherited from a zlib-rs base does not fit ISA-L's scale: clamp.
            (None, GzipBackend::Isal) => c.gzip_level = c.gzip_level.min(3),
            (None, GzipBackend::ZlibRs) => c.gzip_level = c.gzip_level.max(1),
        }
        if let Some(l) = level(
            self,
            raw.brotli_level.as_ref(),
            "brotli_level",
            0..=11,
            "brotli qualities are 0 to 11; 4-5 suit dynamic responses",
        ) {
            c.brotli_level = l;
        }
        if let Some(l) = level(
            self,
            raw.zstd_level.as_ref(),
            "zstd_level",
            1..=19,
            "zstd levels are 1 to 19; 3 is zstd's default",
        ) {
            c.zstd_level = l;
        }
        if let Some(n) = self.size(raw.min_length.as_ref()) {
            c.min_length = n;
        }
        if let Some(list) = &raw.types {
            let mut types = Vec::new();
            for t in list.get_ref() {
                let t = t.trim().to_ascii_lowercase();
                if t != "*" && !t.contains('/') {
                    self.err_at(
                        list,
                        format!("{section} types has `{t}`, which is not a MIME type"),
                        "write types as \"text/html\", \"text/*\", \"application/*+json\" or \"*\"",
                    );
                    continue;
                }
                types.push(t);
            }
            c.types = types;
        }
        if let Some(n) = self.size(raw.chunk_size.as_ref()) {
            if (4096..=(16 << 20)).contains(&n) {
                c.chunk_size = n as usize;
            } else if let Some(v) = &raw.chunk_size {
                self.err_at(
                    v,
                    format!("{section} chunk_size must be between 4k and 16m"),
                    "use a size such as \"64k\" (smaller chunks flush sooner, larger ones compress better)",
                );
            }
        }
        if let Some(n) = self.size(raw.sw_threshold.as_ref()) {
            c.sw_threshold = Some(n);
        }
        if let Some(d) = raw.dictionary {
            c.dictionary = d;
        }
        if let Some(d) = raw.decompress_requests {
            c.decompress_requests = d;
        }
        if let Some(n) = self.size(raw.max_decompressed_bytes.as_ref()) {
            c.max_decompressed_bytes = n;
        }
        Arc::new(c)
    }

    fn keyless_offload(
        &mut self,
        raw: &RawOffloadKeyless,
        allow_insecure: bool,
    ) -> Option<KeylessOffload> {
        let servers = raw.servers.get_ref().clone();
        if servers.is_empty() {
            self.err_at(
                &raw.servers,
                "[offload.keyless] servers is empty",
                "list the key servers, e.g. servers = [\"10.0.0.5:2407\", \"10.0.0.6:2407\"]",
            );
            return None;
        }
        for a in &servers {
            let ok = a
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                self.err_at(
                    &raw.servers,
                    format!("[offload.keyless] server \"{a}\" is not host:port"),
                    "write each key server as host:port, e.g. \"10.0.0.5:2407\"",
                );
                return None;
            }
        }
        let server_name = raw.server_name.as_ref().map_or_else(
            || {
                let host = servers[0].rsplit_once(':').map_or("", |(h, _)| h);
                host.trim_matches(['[', ']']).to_owned()
            },
            |n| n.get_ref().clone(),
        );
        let ca = self.pem_certificates(
            &raw.ca,
            "[offload.keyless] ca",
            "the CA (or the certificates) that key servers' certificates chain to",
        );
        let certificate = self.pem_certificates(
            &raw.certificate,
            "[offload.keyless] certificate",
            "this gateway's client certificate, leaf first",
        );
        let key_path = self.path(raw.key.get_ref());
        let key = self.private_key("[offload.keyless]", &raw.key, &key_path, allow_insecure);
        let (ca, certificate, key) = (ca?, certificate?, key?);
        let matches = certificate[0]
            .public_key()
            .map(|pk| pk.public_eq(&key))
            .unwrap_or(false);
        if !matches {
            self.err_at(
                &raw.key,
                "[offload.keyless]: key does not belong to certificate",
                "give the key the client certificate was issued for",
            );
            return None;
        }
        let connections = match &raw.connections {
            Some(c) if *c.get_ref() == 0 => {
                self.err_at(
                    c,
                    "[offload.keyless] connections must be at least 1",
                    "remove it for the default (2)",
                );
                2
            }
            Some(c) => *c.get_ref() as usize,
            None => 2,
        };
        let fallback_local = self
            .choice(
                raw.fallback.as_ref(),
                "fallback",
                &[("local", true), ("none", false)],
            )
            .unwrap_or(true);
        Some(KeylessOffload {
            servers,
            server_name,
            ca,
            certificate,
            key,
            connections,
            timeout: self
                .duration(raw.timeout.as_ref())
                .unwrap_or(Duration::from_millis(50)),
            ping_interval: self
                .duration(raw.ping_interval.as_ref())
                .unwrap_or(Duration::from_secs(1)),
            fallback_local,
        })
    }

    /// Reads a non-empty PEM certificate list for `key`.
    fn pem_certificates(
        &mut self,
        at: &Spanned<String>,
        key: &str,
        what: &str,
    ) -> Option<Vec<X509>> {
        let path = self.path(at.get_ref());
        match std::fs::read(&path) {
            Err(e) => {
                self.err_at(
                    at,
                    format!("{key}: cannot read {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                None
            }
            Ok(pem) => match X509::stack_from_pem(&pem) {
                Ok(c) if !c.is_empty() => Some(c),
                _ => {
                    self.err_at(
                        at,
                        format!("{key}: {} holds no PEM certificate", path.display()),
                        format!("give {what} in PEM"),
                    );
                    None
                }
            },
        }
    }

    /// `"keyless"` in an engine list needs `[offload.keyless]`.
    fn check_keyless_wiring(&mut self, raw: &RawConfig) {
        if raw.offload.keyless.is_some() {
            return;
        }
        let lists = raw
            .offload
            .crypto
            .as_ref()
            .and_then(|c| c.engines.as_ref())
            .into_iter()
            .chain(
                raw.certificates
                    .iter()
                    .filter_map(|c| c.offload_engines.as_ref()),
            );
        for list in lists {
            if list.get_ref().iter().any(|e| e == "keyless") {
                self.err_at(
                    list,
                    "\"keyless\" is named but [offload.keyless] is missing",
                    "add [offload.keyless] with servers, ca, certificate and key (see README, \"Keyless: private keys on key servers\")",
                );
                return;
            }
        }
    }

    fn compress_offload(&mut self, raw: Option<&RawOffloadCompress>) -> CompressOffload {
        let d = CompressOffload::default();
        let Some(raw) = raw else { return d };
        let mut engines = d.engines.clone();
        if let Some(list) = &raw.engines {
            engines.clear();
            for e in list.get_ref() {
                match e.as_str() {
                    "pool" => engines.push(CompressEngineName::Pool),
                    "inline" => {}
                    other => self.err_at(
                        list,
                        format!("[offload.compress] engines names \"{other}\", which this build does not have"),
                        "use \"pool\" (dedicated threads) or [] (compress on the event loop); \"inline\" always ends the chain",
                    ),
                }
            }
        }
        let positive = |cx: &mut Self, v: Option<&Spanned<u32>>, key: &str| -> Option<usize> {
            let v = v?;
            if *v.get_ref() == 0 {
                cx.err_at(
                    v,
                    format!("[offload.compress] {key} must be at least 1"),
                    "remove it for the default",
                );
                return None;
            }
            Some(*v.get_ref() as usize)
        };
        CompressOffload {
            engines,
            pool_threads: positive(self, raw.pool_threads.as_ref(), "pool_threads"),
            pool_capacity: positive(self, raw.pool_capacity.as_ref(), "pool_capacity"),
            deadline: self.duration(raw.deadline.as_ref()).unwrap_or(d.deadline),
        }
    }

    fn path_literal(&mut self, route: &str, p: &Spanned<String>) -> Option<String> {
        if p.get_ref().starts_with('/') {
            Some(p.get_ref().clone())
        } else {
            self.err_at(
                p,
                format!(
                    "route `{route}`: path `{}` does not start with '/'",
                    p.get_ref()
                ),
                format!("write it as \"/{}\"", p.get_ref()),
            );
            None
        }
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

/// Names a certificate serves by default: its DNS and IP subjectAltNames, else its CN.
fn certificate_names(leaf: &X509) -> Vec<HostPattern> {
    let mut names = Vec::new();
    if let Some(sans) = leaf.subject_alt_names() {
        for san in &sans {
            if let Some(dns) = san.dnsname() {
                names.extend(HostPattern::parse(dns).ok());
            } else if let Some(ip) = san.ipaddress() {
                names.extend(ip_text(ip).and_then(|t| HostPattern::parse(&t).ok()));
            }
        }
    }
    if names.is_empty() {
        for cn in leaf.subject_name().entries_by_nid(Nid::COMMONNAME) {
            if let Ok(s) = cn.data().as_utf8() {
                names.extend(HostPattern::parse(&s).ok());
            }
        }
    }
    let mut seen = HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

fn ip_text(ip: &[u8]) -> Option<String> {
    if let Ok(v4) = <[u8; 4]>::try_from(ip) {
        return Some(std::net::Ipv4Addr::from(v4).to_string());
    }
    let v6 = <[u8; 16]>::try_from(ip).ok()?;
    Some(format!("[{}]", std::net::Ipv6Addr::from(v6)))
}
