//! `cache_file`: the last good set of the fleet's objects, so that a gateway starts (and
//! serves what it served) while etcd is down — APISIX cannot start without etcd.
//!
//! Written after a configuration applied, at most once a second (a burst of changes is one
//! write), atomically (temporary file, then rename), mode 0600: it holds sealed private keys.

use crate::objects::{Objects, Slot, Stored};
use serde_json::Value;
use std::path::Path;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// The cache as JSON text: `{"prefix", "revision", "objects": {key: {"mod_revision",
/// "value"}}}`, each value the bytes etcd holds (values that are not JSON are left out: they
/// were refused anyway).
pub(crate) fn to_json(objects: &Objects, prefix: &str) -> Vec<u8> {
    let size: usize = objects.slots.values().map(|s| s.raw.len() + 64).sum();
    let mut out = Vec::with_capacity(size + 128);
    out.extend_from_slice(
        format!(
            "{{\"prefix\":{},\"revision\":{},\"objects\":{{",
            Value::from(prefix),
            objects.revision
        )
        .as_bytes(),
    );
    let mut first = true;
    for (slot, stored) in &objects.slots {
        if stored.value.is_err() {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(
            format!(
                "{}:{{\"mod_revision\":{},\"value\":",
                Value::from(slot.key(prefix)),
                stored.mod_revision
            )
            .as_bytes(),
        );
        out.extend_from_slice(&stored.raw);
        out.push(b'}');
    }
    out.extend_from_slice(b"}}");
    out
}

/// Reads a cache written for `prefix`.
pub(crate) fn read(path: &Path, prefix: &str) -> Result<Objects, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not a Sluice cache file: {e}", path.display()))?;
    if v.get("prefix").and_then(Value::as_str) != Some(prefix) {
        return Err(format!(
            "{} was written for another prefix ({}); delete it or fix [config] prefix",
            path.display(),
            v.get("prefix").unwrap_or(&Value::Null)
        ));
    }
    let mut objects = Objects {
        revision: v.get("revision").and_then(Value::as_i64).unwrap_or(0),
        ..Objects::default()
    };
    for (key, entry) in v
        .get("objects")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let Some(slot) = Slot::parse(prefix, key) else {
            continue;
        };
        let Some(value) = entry.get("value") else {
            continue;
        };
        let mod_revision = entry
            .get("mod_revision")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        objects
            .slots
            .insert(slot, Stored::new(value.clone(), mod_revision));
    }
    Ok(objects)
}

/// What the cache writer reads from the fleet (implemented by `sync::Fleet`; a trait so that
/// this module does not depend on the one that starts it).
pub(crate) trait Cached: Send + Sync + 'static {
    /// The cache file and the prefix, `None` without `cache_file`.
    fn cache_target(&self) -> Option<(PathBuf, String)>;
    /// A copy of the objects now serving.
    fn objects(&self) -> Arc<Objects>;
}

/// Writes the cache after changes, at most once a second, until the fleet goes.
pub(crate) async fn writer<F: Cached>(fleet: Weak<F>, dirty: Arc<Notify>) {
    loop {
        dirty.notified().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(f) = fleet.upgrade() else { return };
        let Some((path, prefix)) = f.cache_target() else {
            return;
        };
        // Copying 40,000 objects' bytes and writing them is background work: idle priority.
        let write = tokio::task::spawn_blocking(move || {
            sluice_offload::idle::run_idle(move || {
                let objects = f.objects();
                let bytes = to_json(&objects, &prefix);
                crate::compose::write_private(&path, &bytes)
                    .map_err(|e| format!("{}: {e}", path.display()))
            })
        })
        .await;
        match write {
            Ok(Ok(())) => tracing::debug!("fleet cache file written"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot write the fleet's cache file; a start without etcd would use an older one")
            }
            Err(e) => tracing::error!(error = %e, "the cache writer failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_control::Kind;

    #[test]
    fn the_cache_round_trips_and_refuses_another_prefix() {
        let mut o = Objects {
            revision: 42,
            ..Objects::default()
        };
        o.slots.insert(
            Slot::Object(Kind::Route, "a".into()),
            Stored::new(json!({"upstream": "u"}), 40),
        );
        o.slots
            .insert(Slot::Settings, Stored::new(json!({"compression": {}}), 41));
        // Values that are not JSON are not cached (they were refused anyway).
        o.slots.insert(
            Slot::Object(Kind::Route, "broken".into()),
            Stored::from_bytes(b"not JSON", 39),
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.json");
        std::fs::write(&path, to_json(&o, "/p")).unwrap();
        let back = read(&path, "/p").unwrap();
        assert_eq!(back.revision, 42);
        assert_eq!(back.slots.len(), 2);
        assert_eq!(
            back.slots[&Slot::Object(Kind::Route, "a".into())],
            o.slots[&Slot::Object(Kind::Route, "a".into())]
        );
        assert!(read(&path, "/q").unwrap_err().contains("another prefix"));
        std::fs::write(&path, "{").unwrap();
        assert!(read(&path, "/p").is_err());
    }
}
