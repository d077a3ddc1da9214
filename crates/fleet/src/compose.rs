//! From the local file and the fleet's objects to one [`Snapshot`], incrementally.
//!
//! Two parts, rebuilt at different rates:
//!
//! - **The base**: the local file with the fleet's settings, upstreams and certificates
//!   rendered after it as TOML tables, loaded by the ordinary loader (every check, the
//!   certificate cache). Rebuilt only when one of those objects, or the local file, changed.
//!   An error located inside a rendered object leaves that object out (the load is tried
//!   again without it); an error in the local part refuses the whole configuration, as a
//!   reload of a broken file does.
//! - **Routes**, the bulk of a large site's table: each one checked alone against the base
//!   ([`sluice_config::load_route`]) and kept by its `mod_revision`, so a changed route costs
//!   one route's check, not the table's. All of them are checked again only when what a route
//!   refers to changes (the upstreams' names, the listeners, the settings).
//!
//! Fleet routes follow the local file's routes in name order: where order decides (regular
//! expressions, equal prefixes), name them accordingly.

use crate::keyring::Keyring;
use crate::objects::{Objects, Slot, Stored};
use serde_json::{Map, Value, json};
use sluice_config::{CertCache, ConfigError, LoadError, Route, RouteContext, Snapshot};
use sluice_control::{Kind, ReloadError, locate};
use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Keeps what the last composition built, to rebuild only what changed.
pub(crate) struct Composer {
    prefix: String,
    file: String,
    base_dir: PathBuf,
    keyring: Keyring,
    certs: CertCache,
    /// Certificates' PEM files and the ticket key file: a private directory (0700).
    secrets: tempfile::TempDir,
    /// mod_revision of each certificate's files as written.
    written: HashMap<String, i64>,
    /// The ticket key file and the mod_revision written to it.
    tickets: Option<(PathBuf, i64)>,
    local_text: String,
    base: Option<Base>,
    context: Option<(ContextKey, RouteContext)>,
    routes: BTreeMap<String, RouteState>,
}

struct Base {
    inputs: BaseInputs,
    snapshot: Arc<Snapshot>,
    /// Settings, upstreams and certificates left out, by etcd key.
    invalid: BTreeMap<String, Vec<Value>>,
}

/// What the base was built from. Every put gives its key a `mod_revision` above all others,
/// and a delete lowers the count, so (count, highest `mod_revision`) of the settings,
/// upstreams and certificates changes whenever one of them does: a check that costs one pass
/// over them, with no copy.
#[derive(PartialEq)]
struct BaseInputs {
    local: u64,
    count: usize,
    newest: i64,
}

/// What routes are checked against; when it changes, every route is checked again.
#[derive(PartialEq)]
struct ContextKey {
    local: u64,
    settings: i64,
    upstreams: Vec<String>,
}

struct RouteState {
    mod_revision: i64,
    result: Result<Arc<Route>, Vec<Value>>,
}

impl Composer {
    pub(crate) fn new(
        prefix: &str,
        file: &str,
        base_dir: &Path,
        keyring: Keyring,
        local_text: String,
    ) -> std::io::Result<Composer> {
        Ok(Composer {
            prefix: prefix.to_owned(),
            file: file.to_owned(),
            base_dir: base_dir.to_path_buf(),
            keyring,
            certs: CertCache::new(),
            secrets: tempfile::Builder::new().prefix("sluice-fleet-").tempdir()?,
            written: HashMap::new(),
            tickets: None,
            local_text,
            base: None,
            context: None,
            routes: BTreeMap::new(),
        })
    }

    /// The local file's text composed last.
    pub(crate) fn set_local(&mut self, text: String) {
        self.local_text = text;
    }

    /// Objects left out of the configuration, by etcd key, with their errors.
    pub(crate) fn invalid(&self) -> BTreeMap<String, Vec<Value>> {
        let mut out = self
            .base
            .as_ref()
            .map(|b| b.invalid.clone())
            .unwrap_or_default();
        for (name, r) in &self.routes {
            if let Err(e) = &r.result {
                out.insert(
                    Slot::Object(Kind::Route, name.clone()).key(&self.prefix),
                    e.clone(),
                );
            }
        }
        out
    }

    /// The configuration of `objects` with the local text.
    pub(crate) fn compose(&mut self, objects: &Objects) -> Result<Snapshot, ReloadError> {
        let local = hash(&self.local_text);
        let inputs = BaseInputs {
            local,
            count: objects.base_slots().count(),
            newest: objects
                .base_slots()
                .map(|(_, v)| v.mod_revision)
                .max()
                .unwrap_or(0),
        };
        if self.base.as_ref().is_none_or(|b| b.inputs != inputs) {
            let (snapshot, invalid) = self.build_base(objects)?;
            let snapshot = Arc::new(snapshot);
            let key = ContextKey {
                local,
                settings: objects
                    .slots
                    .get(&Slot::Settings)
                    .map_or(0, |s| s.mod_revision),
                upstreams: snapshot.upstreams.iter().map(|u| u.name.clone()).collect(),
            };
            if self.context.as_ref().is_none_or(|(k, _)| *k != key) {
                self.context = Some((key, RouteContext::new(&snapshot)));
                self.routes.clear();
            }
            self.base = Some(Base {
                inputs,
                snapshot,
                invalid,
            });
        }
        let base = self.base.as_ref().expect("built above").snapshot.clone();
        self.check_routes(objects);
        let mut snapshot = (*base).clone();
        snapshot.routes.extend(
            self.routes
                .values()
                .filter_map(|r| r.result.as_ref().ok().cloned()),
        );
        snapshot.revision = format!("{}-r{}", base.revision, objects.revision);
        snapshot.source = format!("{} + etcd {}", self.file, self.prefix);
        if let Some(path) = self.ticket_file(objects) {
            for l in &mut snapshot.listeners {
                if let Some(tls) = &mut l.tls
                    && tls.session_tickets
                    && tls.ticket_key_file.is_none()
                {
                    tls.ticket_key_file = Some(path.clone());
                }
            }
        }
        Ok(snapshot)
    }

    /// Checks the routes whose version changed since the last composition; drops the gone.
    /// Both lists are in name order: one pass side by side finds the differences, and only
    /// they touch the map (a change to one route of 40,000 costs one check, not a new map).
    fn check_routes(&mut self, objects: &Objects) {
        let (_, cx) = self.context.as_ref().expect("set before");
        let mut stale: Vec<(String, &Stored)> = Vec::new();
        let mut gone: Vec<String> = Vec::new();
        let mut have = self.routes.iter().peekable();
        for (name, stored) in objects.of(Kind::Route) {
            while let Some((old, _)) = have.next_if(|(old, _)| old.as_str() < name) {
                gone.push(old.clone());
            }
            match have.next_if(|(old, _)| old.as_str() == name) {
                Some((_, state)) if state.mod_revision == stored.mod_revision => {}
                _ => stale.push((name.to_owned(), stored)),
            }
        }
        gone.extend(have.map(|(old, _)| old.clone()));
        for name in gone {
            self.routes.remove(&name);
        }
        for (name, stored) in stale {
            let result = check_route(&self.prefix, &self.base_dir, cx, &name, stored);
            self.routes.insert(
                name,
                RouteState {
                    mod_revision: stored.mod_revision,
                    result,
                },
            );
        }
    }

    /// Loads the local text with the settings, upstreams and certificates; leaves out the
    /// objects that errors are located in, and tries again (a few rounds: leaving out an
    /// upstream cannot break another upstream).
    fn build_base(
        &mut self,
        objects: &Objects,
    ) -> Result<(Snapshot, BTreeMap<String, Vec<Value>>), ReloadError> {
        let mut invalid: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for _round in 0..4 {
            let mut text = self.local_text.clone();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            let mut lines = text.matches('\n').count();
            let mut placed: Vec<(RangeInclusive<usize>, Slot)> = Vec::new();
            for (slot, stored) in &objects.slots {
                let key = slot.key(&self.prefix);
                if invalid.contains_key(&key)
                    || !matches!(
                        slot,
                        Slot::Settings | Slot::Object(Kind::Upstream | Kind::Certificate, _)
                    )
                {
                    continue;
                }
                match self.render_base_object(slot, stored) {
                    Ok(snippet) => {
                        text.push_str(&format!("\n# etcd: {key}\n"));
                        lines += 2;
                        let first = lines + 1;
                        text.push_str(&snippet);
                        if !snippet.ends_with('\n') {
                            text.push('\n');
                        }
                        lines = first + snippet.trim_end_matches('\n').matches('\n').count();
                        placed.push((first..=lines, slot.clone()));
                    }
                    Err(e) => {
                        invalid.insert(key, vec![json!({ "message": e })]);
                    }
                }
            }
            let errors = match sluice_config::load_str_cached(
                &text,
                &self.file,
                &self.base_dir,
                &self.certs,
            ) {
                Ok(snapshot) => return Ok((snapshot, invalid)),
                Err(LoadError::Invalid(errors)) => errors,
                Err(e) => return Err(ReloadError::Read(e.to_string())),
            };
            let mut local: Vec<ConfigError> = Vec::new();
            let mut blamed: BTreeMap<Slot, Vec<ConfigError>> = BTreeMap::new();
            for e in errors {
                match placed.iter().find(|(lines, _)| lines.contains(&e.line)) {
                    Some((_, slot)) => blamed.entry(slot.clone()).or_default().push(e),
                    None => local.push(e),
                }
            }
            if blamed.is_empty() {
                return Err(ReloadError::Invalid(local));
            }
            for (slot, errs) in blamed {
                let located = match &slot {
                    Slot::Object(kind, name) => locate(&text, *kind, name, &errs),
                    _ => errs
                        .iter()
                        .map(|e| json!({ "message": e.message, "help": e.help }))
                        .collect(),
                };
                let key = slot.key(&self.prefix);
                tracing::warn!(key = %key, errors = %serde_json::Value::Array(located.clone()), "fleet object refused; the rest of the configuration applies");
                invalid.insert(key, located);
            }
        }
        Err(ReloadError::Read(
            "the fleet's objects did not load after leaving out the invalid ones; see the log"
                .into(),
        ))
    }

    /// An upstream, a certificate (its PEM written to files first) or the settings as TOML.
    fn render_base_object(&mut self, slot: &Slot, stored: &Stored) -> Result<String, String> {
        let value = stored.json().map_err(Clone::clone)?;
        match slot {
            Slot::Settings => {
                let Value::Object(map) = value else {
                    return Err("settings must be a JSON object, such as {\"compression\": {…}, \"rate_limit\": {…}}".into());
                };
                for k in map.keys() {
                    if !matches!(k.as_str(), "compression" | "rate_limit") {
                        return Err(format!(
                            "settings key `{k}` is not shared by the fleet; settings hold compression and rate_limit"
                        ));
                    }
                }
                to_toml(value)
            }
            Slot::Object(Kind::Certificate, name) => {
                let table = self.certificate_files(name, value, stored.mod_revision)?;
                render_table(Kind::Certificate, name, &Value::Object(table))
            }
            Slot::Object(kind, name) => render_table(*kind, name, value),
            Slot::TicketKeys => Err("not a configuration object".into()),
        }
    }

    /// Writes a certificate's PEM texts to the private directory; the table with their paths.
    fn certificate_files(
        &mut self,
        name: &str,
        value: &Value,
        mod_revision: i64,
    ) -> Result<Map<String, Value>, String> {
        let Value::Object(map) = value else {
            return Err("a certificate must be a JSON object".into());
        };
        let mut map = map.clone();
        for path_key in ["cert", "key"] {
            if map.contains_key(path_key) {
                return Err(format!(
                    "`{path_key}` is a path on one machine; in etcd a certificate carries cert_pem (and key_sealed, or key_pem through the admin API)"
                ));
            }
        }
        let cert_pem = match map.remove("cert_pem") {
            Some(Value::String(s)) => s,
            _ => return Err("cert_pem (the PEM chain, leaf first) is missing".into()),
        };
        let key_pem = match map.remove("key_sealed") {
            None => None,
            Some(Value::String(s)) => {
                let context = Slot::Object(Kind::Certificate, name.to_owned()).key(&self.prefix);
                Some(self.keyring.open(&s, &context)?)
            }
            Some(_) => return Err("key_sealed must be a string".into()),
        };
        let dir = self.secrets.path();
        // A trial (a PUT's check) writes beside the serving files, never over them.
        let stem = if mod_revision < 0 {
            format!("{name}.trial")
        } else {
            name.to_owned()
        };
        let cert_path = dir.join(format!("{stem}.crt"));
        let key_path = dir.join(format!("{stem}.key"));
        if self.written.get(name) != Some(&mod_revision) {
            write_private(&cert_path, cert_pem.as_bytes())
                .map_err(|e| format!("writing {}: {e}", cert_path.display()))?;
            if let Some(k) = &key_pem {
                write_private(&key_path, k)
                    .map_err(|e| format!("writing {}: {e}", key_path.display()))?;
            }
            self.written.insert(name.to_owned(), mod_revision);
        }
        map.insert("cert".into(), json!(cert_path.display().to_string()));
        if key_pem.is_some() {
            map.insert("key".into(), json!(key_path.display().to_string()));
        }
        Ok(map)
    }

    /// The fleet's ticket keys as a key file (NGINX's format, which listeners re-read), when
    /// etcd has them and they open.
    fn ticket_file(&mut self, objects: &Objects) -> Option<PathBuf> {
        // Without a keyring the fleet's keys cannot open: listeners keep their own (said once,
        // at start).
        if self.keyring.is_empty() {
            return None;
        }
        let stored = objects.slots.get(&Slot::TicketKeys)?;
        if let Some((path, rev)) = &self.tickets
            && *rev == stored.mod_revision
        {
            return Some(path.clone());
        }
        let context = Slot::TicketKeys.key(&self.prefix);
        let keys = stored
            .json()
            .map_err(Clone::clone)
            .and_then(|v| crate::tickets::open(v, &self.keyring, &context));
        match keys {
            Ok(bytes) => {
                let path = self.secrets.path().join("ticket_keys");
                if let Err(e) = write_private(&path, &bytes) {
                    tracing::error!(error = %e, "cannot write the fleet's ticket keys; listeners keep their own");
                    return None;
                }
                self.tickets = Some((path.clone(), stored.mod_revision));
                Some(path)
            }
            Err(e) => {
                tracing::error!(error = %e, "the fleet's ticket keys do not open; listeners keep their own keys");
                self.tickets.as_ref().map(|(p, _)| p.clone())
            }
        }
    }

    /// Whether the ticket key file changed in the last composition (listeners re-read it).
    pub(crate) fn ticket_revision(&self) -> Option<i64> {
        self.tickets.as_ref().map(|(_, r)| *r)
    }

    /// Checks one route object against the current base, as a PUT does before writing.
    pub(crate) fn check_route_alone(&self, name: &str, value: &Value) -> Result<(), Vec<Value>> {
        let (_, cx) = self
            .context
            .as_ref()
            .ok_or_else(|| vec![json!({"message": "the gateway has no configuration yet"})])?;
        let stored = Stored::new(value.clone(), 0);
        check_route(&self.prefix, &self.base_dir, cx, name, &stored).map(|_| ())
    }

    /// Checks an upstream or certificate object by composing the base with it, as a PUT does
    /// before writing; the errors located in it.
    pub(crate) fn check_base_object(
        &mut self,
        objects: &Objects,
        slot: Slot,
        value: Value,
    ) -> Result<(), Vec<Value>> {
        let key = slot.key(&self.prefix);
        let mut trial = objects.clone();
        trial.slots.insert(slot, Stored::new(value, -1));
        let outcome = self.build_base(&trial);
        self.written.retain(|_, rev| *rev >= 0);
        match outcome {
            Ok((_, invalid)) => match invalid.get(&key) {
                Some(errors) => Err(errors.clone()),
                None => Ok(()),
            },
            Err(e) => Err(vec![json!({ "message": e.to_string() })]),
        }
    }

    /// Whether the base still loads without `slot` (a certificate a local listener names, an
    /// upstream a local route uses): the errors it would cause, as a DELETE's 409.
    pub(crate) fn check_delete(
        &mut self,
        objects: &Objects,
        slot: &Slot,
    ) -> Result<(), Vec<Value>> {
        let mut trial = objects.clone();
        trial.slots.remove(slot);
        match self.build_base(&trial) {
            Ok(_) => Ok(()),
            Err(ReloadError::Invalid(errors)) => Err(errors
                .iter()
                .map(|e| json!({ "file": e.file, "line": e.line, "column": e.column, "message": e.message }))
                .collect()),
            Err(e) => Err(vec![json!({ "message": e.to_string() })]),
        }
    }
}

fn check_route(
    prefix: &str,
    base_dir: &Path,
    cx: &RouteContext,
    name: &str,
    stored: &Stored,
) -> Result<Arc<Route>, Vec<Value>> {
    let value = stored.json().map_err(|e| vec![json!({ "message": e })])?;
    let snippet =
        render_table(Kind::Route, name, value).map_err(|e| vec![json!({ "message": e })])?;
    let key = Slot::Object(Kind::Route, name.to_owned()).key(prefix);
    match sluice_config::load_route(&snippet, &format!("etcd:{key}"), base_dir, cx) {
        Ok(route) => Ok(Arc::new(route)),
        Err(e) => {
            let located = locate(&snippet, Kind::Route, name, e.errors());
            tracing::warn!(key = %key, errors = %serde_json::Value::Array(located.clone()), "fleet route refused; the rest of the configuration applies");
            Err(located)
        }
    }
}

/// `[[kind]]` with `name` from the key (a body's own `name` must agree).
pub(crate) fn render_table(kind: Kind, name: &str, value: &Value) -> Result<String, String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "a {} must be a JSON object with the keys of its TOML table",
            kind.table()
        ));
    };
    if let Some(n) = map.get("name")
        && n.as_str() != Some(name)
    {
        return Err(format!(
            "`name` is {n} but the key names `{name}`; leave `name` out or make them agree"
        ));
    }
    let mut map = map.clone();
    map.insert("name".into(), json!(name));
    let mut root = Map::new();
    root.insert(
        kind.table().to_owned(),
        Value::Array(vec![Value::Object(map)]),
    );
    to_toml(&Value::Object(root))
}

fn to_toml(value: &Value) -> Result<String, String> {
    let v = toml::Value::try_from(value).map_err(|e| {
        format!("cannot be written as TOML ({e}); JSON null is not allowed: leave the key out")
    })?;
    toml::to_string(&v).map_err(|e| format!("cannot be written as TOML: {e}"))
}

fn hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Writes a file readable by its owner only (temporary name, then rename).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(items: &[(Slot, Value)]) -> Objects {
        let mut o = Objects {
            revision: 9,
            ..Objects::default()
        };
        for (i, (slot, v)) in items.iter().enumerate() {
            o.slots
                .insert(slot.clone(), Stored::new(v.clone(), i as i64 + 1));
        }
        o
    }

    const LOCAL: &str = "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n";

    fn composer(dir: &Path) -> Composer {
        Composer::new("/s", "gw.toml", dir, Keyring::default(), LOCAL.into()).unwrap()
    }

    #[test]
    fn an_invalid_object_is_left_out_alone_and_a_local_error_refuses_everything() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = composer(dir.path());
        let up = |a: &str| json!({"servers": [{"address": a}]});
        let mut o = objects(&[
            (
                Slot::Object(Kind::Upstream, "good".into()),
                up("127.0.0.1:9"),
            ),
            (
                Slot::Object(Kind::Upstream, "bad".into()),
                json!({"servers": [{"address": "127.0.0.1:9"}], "balance": "fastest"}),
            ),
            (
                Slot::Object(Kind::Route, "a".into()),
                json!({"path_prefix": "/a", "upstream": "good"}),
            ),
            (
                Slot::Object(Kind::Route, "b".into()),
                json!({"path_prefix": "/b", "upstream": "bad"}),
            ),
            (Slot::Settings, json!({"compression": {"enabled": true}})),
        ]);
        let s = c.compose(&o).unwrap();
        assert_eq!(
            s.upstreams
                .iter()
                .map(|u| u.name.as_str())
                .collect::<Vec<_>>(),
            ["good"]
        );
        assert_eq!(
            s.routes.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        assert!(s.compression.enabled);
        let invalid = c.invalid();
        assert_eq!(
            invalid["/s/upstreams/bad"][0]["path"], "balance",
            "{invalid:?}"
        );
        assert!(
            invalid["/s/routes/b"][0]["message"]
                .as_str()
                .unwrap()
                .contains("not defined")
        );
        assert!(s.revision.ends_with("-r9"));

        // A route changed alone is checked alone; the others keep their Arc.
        let before = s.routes[0].clone();
        o.slots.insert(
            Slot::Object(Kind::Route, "b".into()),
            Stored::new(json!({"path_prefix": "/b", "upstream": "good"}), 20),
        );
        o.revision = 20;
        let s = c.compose(&o).unwrap();
        assert_eq!(s.routes.len(), 2);
        assert!(
            Arc::ptr_eq(&before, &s.routes[0]),
            "route a was not checked again"
        );
        assert_eq!(c.invalid().len(), 1);

        // A broken local file refuses the whole configuration, with its own line numbers.
        c.set_local(format!("{LOCAL}[log]\nlevel = 3\n"));
        let Err(ReloadError::Invalid(errs)) = c.compose(&o) else {
            panic!("a broken local file composed")
        };
        assert_eq!((errs[0].file.as_str(), errs[0].line), ("gw.toml", 5));
    }

    #[test]
    fn certificates_need_their_pem_and_keyring() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = composer(dir.path());
        let o = objects(&[
            (
                Slot::Object(Kind::Certificate, "paths".into()),
                json!({"cert": "/etc/x.crt", "key": "/etc/x.key"}),
            ),
            (
                Slot::Object(Kind::Certificate, "sealed".into()),
                json!({"cert_pem": "x", "key_sealed": "sluice-sealed:v1:k9:AAAA"}),
            ),
        ]);
        c.compose(&o).unwrap();
        let invalid = c.invalid();
        assert!(
            invalid["/s/certificates/paths"][0]["message"]
                .as_str()
                .unwrap()
                .contains("cert_pem")
        );
        assert!(
            invalid["/s/certificates/sealed"][0]["message"]
                .as_str()
                .unwrap()
                .contains("k9")
        );
    }
}
