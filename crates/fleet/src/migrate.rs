//! `sluice config push` and `sluice config pull`: the way from one machine's file to the
//! fleet's etcd, and back out as TOML.
//!
//! Push checks the file as `sluice check` does, then writes its routes, upstreams and
//! certificates (PEM texts, the key sealed with the keyring) and its `[compression]` and
//! `[rate_limit]` (the fleet's settings), 100 keys per etcd transaction. It imports: objects
//! already in etcd that the file lacks are left alone. Pull writes the fleet's objects as a
//! TOML file, certificates as PEM files beside it (`certs/NAME.crt`, `certs/NAME.key`, 0600).

use crate::compose::write_private;
use crate::etcd::Etcd;
use crate::keyring::Keyring;
use crate::objects::Slot;
use serde_json::{Map, Value, json};
use sluice_control::Kind;
use std::path::Path;

/// What a push wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Routes, upstreams, certificates written.
    pub routes: usize,
    /// Upstreams written.
    pub upstreams: usize,
    /// Certificates written.
    pub certificates: usize,
    /// Whether the fleet's settings were written.
    pub settings: bool,
    /// The etcd revision after the last write.
    pub revision: i64,
}

/// Imports `file`'s shared objects into etcd.
pub async fn push(file: &Path, etcd: &Etcd, keyring: &Keyring) -> Result<Pushed, String> {
    sluice_config::load_file(file).map_err(|e| {
        format!(
            "{} does not check; nothing was pushed:\n{e}",
            file.display()
        )
    })?;
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let root: toml::Table =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let root = serde_json::to_value(root).map_err(|e| e.to_string())?;
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut items: Vec<(Slot, Value)> = Vec::new();
    let mut pushed = Pushed::default();
    for kind in [Kind::Upstream, Kind::Certificate, Kind::Route] {
        for obj in root
            .get(kind.table())
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(Value::Object(mut map)) = Some(obj.clone()) else {
                continue;
            };
            let Some(name) = map
                .remove("name")
                .and_then(|n| n.as_str().map(str::to_owned))
            else {
                continue;
            };
            let slot = Slot::Object(kind, name.clone());
            match kind {
                Kind::Route => pushed.routes += 1,
                Kind::Upstream => pushed.upstreams += 1,
                Kind::Certificate => {
                    pushed.certificates += 1;
                    certificate_pems(&mut map, dir, keyring, &slot.key(etcd.prefix()))?;
                }
            }
            items.push((slot, Value::Object(map)));
        }
    }
    let mut settings = Map::new();
    for section in ["compression", "rate_limit"] {
        if let Some(v) = root.get(section) {
            settings.insert(section.to_owned(), v.clone());
        }
    }
    if !settings.is_empty() {
        pushed.settings = true;
        items.push((Slot::Settings, Value::Object(settings)));
    }
    for chunk in items.chunks(100) {
        pushed.revision = etcd.put_many(chunk).await?;
    }
    Ok(pushed)
}

/// A file's certificate table with its files' PEM texts instead of their paths.
fn certificate_pems(
    map: &mut Map<String, Value>,
    dir: &Path,
    keyring: &Keyring,
    context: &str,
) -> Result<(), String> {
    let read = |key: &str| -> Result<Option<Vec<u8>>, String> {
        let Some(p) = map.get(key).and_then(Value::as_str) else {
            return Ok(None);
        };
        let path = dir.join(p);
        std::fs::read(&path)
            .map(Some)
            .map_err(|e| format!("reading {}: {e}", path.display()))
    };
    let cert = read("cert")?.ok_or("a certificate without `cert`")?;
    let key = read("key")?;
    map.remove("cert");
    map.remove("key");
    map.insert("cert_pem".into(), json!(String::from_utf8_lossy(&cert)));
    if let Some(key) = key {
        map.insert("key_sealed".into(), json!(keyring.seal(&key, context)?));
    }
    Ok(())
}

/// Writes the fleet's objects to `out` as TOML, certificates' PEM files in `certs/` beside it.
pub async fn pull(etcd: &Etcd, keyring: &Keyring, out: &Path) -> Result<usize, String> {
    let objects = etcd.load_all().await?;
    let mut tables = objects.as_tables();
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Some(Value::Array(certs)) = tables.get_mut(Kind::Certificate.table()) {
        std::fs::create_dir_all(dir.join("certs"))
            .map_err(|e| format!("creating {}/certs: {e}", dir.display()))?;
        for c in certs.iter_mut() {
            let Value::Object(map) = c else { continue };
            let name = map
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let context = Slot::Object(Kind::Certificate, name.clone()).key(etcd.prefix());
            if let Some(pem) = map.remove("cert_pem").as_ref().and_then(Value::as_str) {
                let rel = format!("certs/{name}.crt");
                write_private(&dir.join(&rel), pem.as_bytes())
                    .map_err(|e| format!("writing {rel}: {e}"))?;
                map.insert("cert".into(), json!(rel));
            }
            if let Some(sealed) = map.remove("key_sealed").as_ref().and_then(Value::as_str) {
                let key = keyring
                    .open(sealed, &context)
                    .map_err(|e| format!("certificate `{name}`: {e}"))?;
                let rel = format!("certs/{name}.key");
                write_private(&dir.join(&rel), &key).map_err(|e| format!("writing {rel}: {e}"))?;
                map.insert("key".into(), json!(rel));
            }
        }
    }
    let count = objects.slots.len();
    let toml_value = toml::Value::try_from(Value::Object(tables)).map_err(|e| e.to_string())?;
    let text = format!(
        "# The fleet's objects from etcd ({}), revision {}, written by `sluice config pull`.\n{}",
        etcd.prefix(),
        objects.revision,
        toml::to_string(&toml_value).map_err(|e| e.to_string())?
    );
    std::fs::write(out, text).map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok(count)
}
