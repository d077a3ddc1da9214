//! The admin API in fleet mode: reads from the gateway's view of etcd, writes to etcd after
//! the same checks as a file edit, with etcd's `mod_revision` as the `ETag` (a stale
//! `If-Match` is a 412), so any gateway's admin API changes the fleet.

use crate::etcd::Write;
use crate::sync::{Fleet, State, slot, unix};
use serde_json::{Value, json};
use sluice_config::Snapshot;
use sluice_control::{
    EditError, Kind, ReloadError, SharedObjects, StoreFuture, StoredObject, check_name,
};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a write waits to see itself applied on this gateway before answering.
const APPLIED_WAIT: Duration = Duration::from_secs(5);

impl SharedObjects for Fleet {
    /// At idle priority: composing a large table must never delay a request.
    fn compose(self: Arc<Self>, local_text: Option<String>) -> Result<Snapshot, ReloadError> {
        sluice_offload::idle::run_idle(move || self.compose_now(local_text))
    }

    fn config(&self) -> Result<Value, EditError> {
        let st = self.lock();
        let mut tables = st.objects.as_tables();
        tables.insert("fleet".into(), self.status_of(&st));
        Ok(Value::Object(tables))
    }

    fn object(&self, kind: Kind, name: &str) -> Result<(Value, String), EditError> {
        let st = self.lock();
        let stored = st
            .objects
            .slots
            .get(&slot(kind, name))
            .ok_or_else(|| not_found(kind, name))?;
        let mut value = stored.json().cloned().map_err(|e| {
            EditError::new(
                500,
                format!("the stored value is broken: {e}; PUT a good one"),
            )
        })?;
        if let Value::Object(m) = &mut value {
            m.insert("name".into(), json!(name));
        }
        Ok((value, etag(stored.mod_revision)))
    }

    fn put<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
        body: Value,
        if_match: Option<&'a str>,
    ) -> StoreFuture<'a, StoredObject> {
        Box::pin(async move {
            check_name(name)?;
            let expect = expected(if_match)?;
            let value = self.prepare(kind, name, body)?;
            self.check(kind, name, &value)?;
            let etcd = self.client().await.map_err(unreachable)?;
            match etcd
                .put_if(&slot(kind, name), &value, expect)
                .await
                .map_err(unreachable)?
            {
                Write::Conflict(now) => Err(stale(if_match, now)),
                Write::Done { revision, created } => {
                    self.wait_applied(revision).await;
                    let mut object = value;
                    if let Value::Object(m) = &mut object {
                        m.insert("name".into(), json!(name));
                    }
                    Ok(StoredObject {
                        object,
                        created,
                        etag: etag(revision),
                    })
                }
            }
        })
    }

    fn members(&self) -> StoreFuture<'_, Vec<(String, String)>> {
        Box::pin(async move {
            Ok(Fleet::members(self)
                .await
                .map_err(|e| {
                    EditError::new(503, format!("{e}: the fleet's gateways cannot be listed"))
                })?
                .into_iter()
                .map(|m| (m.name, m.admin))
                .collect())
        })
    }

    fn purge_cache<'a>(
        &'a self,
        host: &'a str,
        path: &'a str,
        prefix: bool,
        at: std::time::SystemTime,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let purge = crate::purge::Purge {
                host: host.to_owned(),
                path: path.to_owned(),
                prefix,
                at,
            };
            self.purge(&purge).await.map_err(unreachable)
        })
    }

    fn delete<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
        if_match: Option<&'a str>,
    ) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let expect = expected(if_match)?;
            {
                let st = self.lock();
                if !st.objects.slots.contains_key(&slot(kind, name)) {
                    return Err(not_found(kind, name));
                }
                let users = match kind {
                    Kind::Upstream => st.objects.routes_using(name),
                    _ => Vec::new(),
                };
                if !users.is_empty() {
                    return Err(EditError::new(
                        409,
                        format!(
                            "upstream `{name}` is in use by {}; change or delete those first",
                            users.join(", ")
                        ),
                    ));
                }
            }
            // The local file may name it (a listener's certificate, a local route's upstream).
            if kind != Kind::Route {
                let objects = self.lock().objects.clone();
                let check = tokio::task::block_in_place(|| {
                    let mut composer = self.composer.lock().unwrap_or_else(|e| e.into_inner());
                    composer.check_delete(&objects, &slot(kind, name))
                });
                if let Err(errors) = check {
                    return Err(EditError {
                        status: 409,
                        message: format!(
                            "{} `{name}` is in use by this gateway's own file; change it there first",
                            kind.table()
                        ),
                        errors,
                    });
                }
            }
            let etcd = self.client().await.map_err(unreachable)?;
            match etcd
                .delete_if(&slot(kind, name), expect)
                .await
                .map_err(unreachable)?
            {
                Write::Conflict(now) => Err(stale(if_match, now)),
                Write::Done { revision, .. } => {
                    self.wait_applied(revision).await;
                    Ok(revision.to_string())
                }
            }
        })
    }

    fn status(&self) -> Value {
        self.status_of(&self.lock())
    }

    fn metrics(&self, out: &mut String) {
        let st = self.lock();
        let invalid = st.invalid.len();
        let _ = writeln!(
            out,
            "# HELP sluice_fleet_etcd_up Whether the gateway is connected to the fleet's etcd (0: serving its last good configuration).\n# TYPE sluice_fleet_etcd_up gauge\nsluice_fleet_etcd_up {}",
            u8::from(st.link.up)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_fleet_revision The etcd revision of the fleet's objects this gateway has.\n# TYPE sluice_fleet_revision gauge\nsluice_fleet_revision {}",
            st.objects.revision
        );
        let _ = writeln!(
            out,
            "# HELP sluice_fleet_objects The fleet's objects in etcd, by kind.\n# TYPE sluice_fleet_objects gauge"
        );
        for (kind, n) in [Kind::Route, Kind::Upstream, Kind::Certificate]
            .iter()
            .zip(st.counts)
        {
            let _ = writeln!(out, "sluice_fleet_objects{{kind=\"{}\"}} {n}", kind.table());
        }
        let _ = writeln!(
            out,
            "# HELP sluice_fleet_invalid_objects Objects in etcd refused alone (see /status fleet.invalid).\n# TYPE sluice_fleet_invalid_objects gauge\nsluice_fleet_invalid_objects {invalid}"
        );
        let c = &self.counters;
        let _ = writeln!(
            out,
            "# HELP sluice_fleet_changes_total Batches of changes from etcd's watch applied.\n# TYPE sluice_fleet_changes_total counter\nsluice_fleet_changes_total {}",
            c.changes.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_fleet_resyncs_total Full reads after the watch's revision was compacted away.\n# TYPE sluice_fleet_resyncs_total counter\nsluice_fleet_resyncs_total {}",
            c.resyncs.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_fleet_etcd_errors_total Lost or failed connections to etcd.\n# TYPE sluice_fleet_etcd_errors_total counter\nsluice_fleet_etcd_errors_total {}",
            c.etcd_errors.load(Ordering::Relaxed)
        );
    }
}

impl Fleet {
    fn status_of(&self, st: &State) -> Value {
        let invalid: Vec<Value> = st
            .invalid
            .iter()
            .map(|(key, errors)| json!({ "key": key, "errors": errors }))
            .collect();
        json!({
            "source": "etcd",
            "endpoints": self.source.endpoints,
            "prefix": self.source.prefix,
            "etcd": if st.link.up { "up" } else { "down" },
            "since": unix(st.link.since),
            "last_error": st.link.last_error,
            "revision": st.objects.revision,
            "applied_revision": *self.applied.borrow(),
            "started_from": st.started_from,
            "cache_file": self.source.cache_file.as_ref().map(|p| p.display().to_string()),
            "objects": {
                "routes": st.counts[0],
                "upstreams": st.counts[1],
                "certificates": st.counts[2],
            },
            "invalid": invalid,
            "ticket_keys_revision": st.ticket_revision,
            "changes": self.counters.changes.load(Ordering::Relaxed),
            "resyncs": self.counters.resyncs.load(Ordering::Relaxed),
        })
    }

    /// The body as stored: `name` dropped (the key names it); a certificate's `key_pem`
    /// sealed into `key_sealed`.
    fn prepare(&self, kind: Kind, name: &str, body: Value) -> Result<Value, EditError> {
        let Value::Object(mut map) = body else {
            return Err(EditError::new(
                400,
                "the body must be a JSON object with the keys of the TOML table",
            ));
        };
        if let Some(n) = map.remove("name")
            && n.as_str() != Some(name)
        {
            return Err(EditError::new(
                400,
                format!(
                    "the body's name {n} is not the URL's `{name}`; leave it out or make them agree"
                ),
            ));
        }
        if kind == Kind::Certificate
            && let Some(pem) = map.remove("key_pem")
        {
            let Some(pem) = pem.as_str() else {
                return Err(EditError::new(400, "key_pem must be a PEM text"));
            };
            let context = slot(kind, name).key(&self.source.prefix);
            let sealed = self
                .keyring
                .seal(pem.as_bytes(), &context)
                .map_err(|e| EditError::new(422, e))?;
            map.insert("key_sealed".into(), json!(sealed));
        }
        Ok(Value::Object(map))
    }

    /// The same checks the watch applies, before anything is written. An upstream or a
    /// certificate is checked by loading the base with it (milliseconds to tens of them at
    /// thousands of objects), off the event loop's budget.
    fn check(&self, kind: Kind, name: &str, value: &Value) -> Result<(), EditError> {
        tokio::task::block_in_place(|| self.check_now(kind, name, value))
    }

    fn check_now(&self, kind: Kind, name: &str, value: &Value) -> Result<(), EditError> {
        let objects = self.lock().objects.clone();
        let mut composer = self.composer.lock().unwrap_or_else(|e| e.into_inner());
        let result = match kind {
            Kind::Route => composer.check_route_alone(name, value),
            _ => composer.check_base_object(&objects, slot(kind, name), value.clone()),
        };
        result.map_err(|errors| EditError {
            status: 422,
            message: "the change is not valid; nothing was changed".into(),
            errors,
        })
    }

    /// Waits (bounded) until this gateway serves `revision`, so that a read after the
    /// answer sees the write.
    async fn wait_applied(&self, revision: i64) {
        let mut rx = self.applied.subscribe();
        let _ = tokio::time::timeout(APPLIED_WAIT, rx.wait_for(|r| *r >= revision)).await;
    }
}

fn etag(revision: i64) -> String {
    format!("\"{revision}\"")
}

/// `If-Match` as a `mod_revision` to compare (`*` or absent: no condition).
fn expected(if_match: Option<&str>) -> Result<Option<i64>, EditError> {
    match if_match.map(str::trim) {
        None | Some("*") => Ok(None),
        Some(tag) => tag
            .trim_start_matches("W/")
            .trim_matches('"')
            .parse::<i64>()
            .map(Some)
            .map_err(|_| EditError::new(412, format!("If-Match {tag} is not an ETag of this fleet (they are etcd revisions, such as \"42\"); read the object again"))),
    }
}

fn stale(if_match: Option<&str>, now: i64) -> EditError {
    EditError::new(
        412,
        format!(
            "If-Match {} is stale: the object is at {} now; read it again and retry",
            if_match.unwrap_or(""),
            if now == 0 {
                "nothing (it was deleted)".to_owned()
            } else {
                etag(now)
            }
        ),
    )
}

fn unreachable(e: String) -> EditError {
    EditError::new(
        503,
        format!("{e}; nothing was changed (the gateway keeps serving its last configuration)"),
    )
}

fn not_found(kind: Kind, name: &str) -> EditError {
    EditError::new(
        404,
        format!("no {} named `{name}` in the fleet", kind.table()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_is_an_etcd_revision() {
        assert_eq!(expected(None).unwrap(), None);
        assert_eq!(expected(Some("*")).unwrap(), None);
        assert_eq!(expected(Some("\"42\"")).unwrap(), Some(42));
        assert_eq!(expected(Some("W/\"7\"")).unwrap(), Some(7));
        assert_eq!(expected(Some("\"abc\"")).unwrap_err().status, 412);
        assert!(stale(Some("\"3\""), 9).message.contains("\"9\""));
        assert_eq!(check_name("a/b").unwrap_err().status, 400);
    }
}
