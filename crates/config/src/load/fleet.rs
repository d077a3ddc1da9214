//! Fleet mode's part of the loader: the `[config]` section, and routes checked one at a time.
//!
//! In fleet mode a gateway's routes arrive from etcd one object at a time. Checking a changed
//! route alone, against the names and defaults of the configuration it joins
//! ([`RouteContext`]), costs microseconds where loading the whole table again costs about 4 µs
//! per route (0.2 s at 40,000): the same checks (`Cx::route`), run on one route.

use super::Cx;
use crate::cache::CertCache;
use crate::compression::Compression;
use crate::error::LoadError;
use crate::raw::RawConfigSource;
use crate::snapshot::{FleetSource, Route, Snapshot};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// `[config]`: whether the gateway runs in fleet mode, and how it reaches etcd. `None` in
    /// file mode, or when a setting has a mistake (reported).
    pub(super) fn fleet_source(
        &mut self,
        raw: &RawConfigSource,
        allow_insecure: bool,
    ) -> Option<FleetSource> {
        let source = self.etcd_source(raw)?;
        let before = self.errors.len();
        let endpoints = self.etcd_endpoints(raw, source)?;
        let prefix = self.etcd_prefix(raw);
        let cache_file = raw.cache_file.as_ref().map(|p| self.path(p.get_ref()));
        let ca_pem = self.etcd_ca(raw);
        let client_identity = self.etcd_client_identity(raw, allow_insecure);
        let user = self.etcd_user(raw, allow_insecure);
        let keyring = self.fleet_keyring(raw, allow_insecure);
        let ticket_key_rotation = self
            .duration(raw.ticket_key_rotation.as_ref())
            .unwrap_or(Duration::from_secs(12 * 3600));
        let timeout = self
            .duration(raw.timeout.as_ref())
            .unwrap_or(Duration::from_secs(5));
        // Each mistake above was reported: none may have been.
        (self.errors.len() == before).then_some(FleetSource {
            endpoints,
            prefix,
            cache_file,
            ca_pem,
            client_identity,
            user,
            keyring,
            ticket_key_rotation,
            timeout,
        })
    }

    /// `source` (default "file"): where it says "etcd", or `None` for file mode (or a
    /// mistake, reported).
    fn etcd_source<'r>(&mut self, raw: &'r RawConfigSource) -> Option<&'r Spanned<String>> {
        let source = raw.source.as_ref();
        match source.map(|s| s.get_ref().as_str()) {
            None | Some("file") => {
                if let Some(e) = &raw.endpoints {
                    self.err_at(
                        e,
                        "[config] endpoints are set but source is not \"etcd\"",
                        "add source = \"etcd\" to run in fleet mode, or remove the etcd settings",
                    );
                }
                None
            }
            Some("etcd") => source,
            Some(other) => {
                let at = source.expect("matched a value");
                self.err_at(
                    at,
                    format!("[config] source is \"{other}\", which is not a known source"),
                    "use \"file\" (everything in this file) or \"etcd\" (fleet mode)",
                );
                None
            }
        }
    }

    /// `endpoints`: etcd's URLs, the ones that are not left out (reported); `None` when there
    /// are none at all (reported at `source`).
    fn etcd_endpoints(
        &mut self,
        raw: &RawConfigSource,
        source: &Spanned<String>,
    ) -> Option<Vec<String>> {
        let Some(list) = raw.endpoints.as_ref().filter(|l| !l.get_ref().is_empty()) else {
            self.err_at(
                source,
                "[config] source = \"etcd\" needs endpoints",
                "add endpoints = [\"127.0.0.1:2379\"]",
            );
            return None;
        };
        let mut out = Vec::new();
        for e in list.get_ref() {
            match endpoint_url(e) {
                Ok(url) => out.push(url),
                Err(why) => self.err_at(
                    list,
                    why,
                    "write each as \"127.0.0.1:2379\" or \"https://etcd-1:2379\"",
                ),
            }
        }
        Some(out)
    }

    /// `prefix` (default "/sluice"): under which etcd key the fleet's objects live.
    fn etcd_prefix(&mut self, raw: &RawConfigSource) -> String {
        let Some(p) = &raw.prefix else {
            return "/sluice".to_owned();
        };
        let v = p.get_ref().trim_end_matches('/').to_owned();
        if !v.starts_with('/') || v.is_empty() {
            self.err_at(
                p,
                format!(
                    "[config] prefix `{}` must start with `/` and name a key prefix",
                    p.get_ref()
                ),
                "write it as \"/sluice\" or \"/sites/shop\"",
            );
        }
        v
    }

    /// `ca`: the PEM of the CAs etcd's certificates chain to, for etcd over TLS.
    fn etcd_ca(&mut self, raw: &RawConfigSource) -> Option<Vec<u8>> {
        let at = raw.ca.as_ref()?;
        let path = self.path(at.get_ref());
        std::fs::read(&path)
            .inspect_err(|e| {
                self.err_at(
                    at,
                    format!("[config] ca: cannot read {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
            })
            .ok()
    }

    /// `cert` and `key`, both or neither: the PEM of etcd's client certificate and its key.
    fn etcd_client_identity(
        &mut self,
        raw: &RawConfigSource,
        allow_insecure: bool,
    ) -> Option<(Vec<u8>, Vec<u8>)> {
        match (&raw.cert, &raw.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                let cert_path = self.path(cert.get_ref());
                let cert_pem = std::fs::read(&cert_path)
                    .inspect_err(|e| {
                        self.err_at(
                            cert,
                            format!("[config] cert: cannot read {}: {e}", cert_path.display()),
                            "check the path",
                        );
                    })
                    .ok();
                let key_path = self.path(key.get_ref());
                let key_pem = self.key_file("[config] key", key, &key_path, allow_insecure);
                cert_pem.zip(key_pem)
            }
            (Some(at), None) | (None, Some(at)) => {
                self.err_at(
                    at,
                    "[config] cert and key go together (etcd's client certificate)",
                    "set both, or neither",
                );
                None
            }
        }
    }

    /// `user` and `password_file`, both or neither: etcd's user and password.
    fn etcd_user(
        &mut self,
        raw: &RawConfigSource,
        allow_insecure: bool,
    ) -> Option<(String, String)> {
        match (&raw.user, &raw.password_file) {
            (None, None) => None,
            (Some(user), Some(pw)) => {
                let path = self.path(pw.get_ref());
                self.key_file("[config] password_file", pw, &path, allow_insecure)
                    .map(|p| {
                        (
                            user.get_ref().clone(),
                            String::from_utf8_lossy(&p).trim().to_owned(),
                        )
                    })
            }
            (Some(at), None) | (None, Some(at)) => {
                self.err_at(
                    at,
                    "[config] user and password_file go together",
                    "set both, or neither",
                );
                None
            }
        }
    }

    /// `keyring`: the keys that seal private keys stored in etcd (see [`parse_keyring`]);
    /// empty when unset or unusable (reported).
    fn fleet_keyring(
        &mut self,
        raw: &RawConfigSource,
        allow_insecure: bool,
    ) -> Vec<(String, [u8; 32])> {
        let Some(at) = &raw.keyring else {
            return Vec::new();
        };
        let path = self.path(at.get_ref());
        let Some(bytes) = self.key_file("[config] keyring", at, &path, allow_insecure) else {
            return Vec::new();
        };
        match parse_keyring(&String::from_utf8_lossy(&bytes)) {
            Ok(keys) => keys,
            Err(why) => {
                self.err_at(
                    at,
                    format!("[config] keyring {}: {why}", path.display()),
                    "write one key per line, newest first: `echo \"k2 $(openssl rand -hex 32)\" | cat - keyring > keyring.new`",
                );
                Vec::new()
            }
        }
    }
}

fn endpoint_url(e: &str) -> Result<String, String> {
    let (scheme, rest) = match e.split_once("://") {
        Some((s @ ("http" | "https"), rest)) => (s, rest),
        Some((s, _)) => {
            return Err(format!(
                "[config] endpoint `{e}`: scheme `{s}` is not http or https"
            ));
        }
        None => ("http", e),
    };
    let ok = rest
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !ok {
        return Err(format!("[config] endpoint `{e}` is not host:port"));
    }
    Ok(format!("{scheme}://{rest}"))
}

/// `ID HEX` lines (64 hex digits: an AES-256 key); `#` comments and blank lines skipped.
pub fn parse_keyring(text: &str) -> Result<Vec<(String, [u8; 32])>, String> {
    let mut keys: Vec<(String, [u8; 32])> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (id, hex) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("line {}: expected `ID HEX`", n + 1))?;
        let hex = hex.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "line {}: the key must be 64 hex digits (32 bytes)",
                n + 1
            ));
        }
        if keys.iter().any(|(k, _)| k == id) {
            return Err(format!("line {}: key id `{id}` appears twice", n + 1));
        }
        let mut key = [0u8; 32];
        for (i, b) in key.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex");
        }
        keys.push((id.to_owned(), key));
    }
    if keys.is_empty() {
        return Err("it holds no key".into());
    }
    Ok(keys)
}

/// The `[config]` section of a file alone: whether it runs in fleet mode, and how to reach
/// etcd. The rest of the file is checked once it is composed with the fleet's objects (a
/// listener may serve a certificate that lives in etcd).
pub fn fleet_source(
    src: &str,
    file: &str,
    base_dir: &Path,
) -> Result<Option<FleetSource>, LoadError> {
    let certs = CertCache::new();
    let mut c = Cx::new(file, src, base_dir, &certs);
    let allow_insecure = |raw: &super::RawConfig| {
        raw.dangerous
            .allow_insecure_key_permissions
            .unwrap_or(false)
    };
    let fleet = c.parse(src).and_then(|raw| {
        let insecure = allow_insecure(&raw);
        raw.config
            .as_ref()
            .and_then(|cfg| c.fleet_source(cfg, insecure))
    });
    if c.errors.is_empty() {
        Ok(fleet)
    } else {
        c.errors.sort_by_key(|e| (e.line, e.column));
        Err(LoadError::Invalid(c.errors))
    }
}

/// What a route loaded alone is checked against: the names and defaults of the configuration
/// it joins. Built once per change of that configuration, not per route.
#[derive(Debug, Clone)]
pub struct RouteContext {
    upstreams: HashMap<String, usize>,
    listeners: HashMap<String, usize>,
    compression: Arc<Compression>,
    redis: bool,
    /// Routes of the configuration itself (a fleet route may not take their names).
    taken: HashSet<String>,
}

impl RouteContext {
    /// The context of `snapshot` (upstream indices are its own).
    pub fn new(snapshot: &Snapshot) -> Self {
        RouteContext {
            upstreams: snapshot
                .upstreams
                .iter()
                .enumerate()
                .map(|(i, u)| (u.name.clone(), i))
                .collect(),
            listeners: snapshot
                .listeners
                .iter()
                .enumerate()
                .map(|(i, l)| (l.name.clone(), i))
                .collect(),
            compression: snapshot.compression.clone(),
            redis: snapshot.rate_limit_store.redis.is_some(),
            taken: snapshot.routes.iter().map(|r| r.name.clone()).collect(),
        }
    }
}

/// Loads the one `[[route]]` in `src` against `cx`. `file` names it in errors (an etcd key,
/// say). Any other section in `src` is an error.
pub fn load_route(
    src: &str,
    file: &str,
    base_dir: &Path,
    cx: &RouteContext,
) -> Result<Route, LoadError> {
    let certs = CertCache::new();
    let mut c = Cx::new(file, src, base_dir, &certs);
    let route = c.parse(src).and_then(|raw| {
        let only_route = raw.listeners.is_empty()
            && raw.upstreams.is_empty()
            && raw.certificates.is_empty()
            && raw.config.is_none();
        if !only_route || raw.routes.len() != 1 {
            c.err(0, "expected exactly one [[route]] and nothing else", "send one route object");
            return None;
        }
        let r = &raw.routes[0];
        if cx.taken.contains(r.name.get_ref()) {
            c.err_at(
                &r.name,
                format!("route `{}` is defined in the gateway's own file", r.name.get_ref()),
                "rename one of them: a local route keeps its name",
            );
        }
        let route = c.route(r, &cx.upstreams, &cx.listeners, &raw.broken, &cx.compression);
        if !cx.redis {
            for at in std::mem::take(&mut c.redis_users) {
                c.err(
                    at,
                    "store = \"redis\" shares this limit through Redis, and no Redis is configured",
                    "add [rate_limit] redis = \"redis://127.0.0.1:6379/\" to the fleet's settings, or use store = \"local\"",
                );
            }
        }
        route
    });
    match route {
        Some(r) if c.errors.is_empty() => Ok(r),
        _ => {
            c.errors.sort_by_key(|e| (e.line, e.column));
            Err(LoadError::Invalid(c.errors))
        }
    }
}
