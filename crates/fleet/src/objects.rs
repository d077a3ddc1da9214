//! The fleet's objects as etcd holds them: one JSON value per key under the prefix.
//!
//! `{prefix}/routes/{name}`, `{prefix}/upstreams/{name}`, `{prefix}/certificates/{name}`,
//! `{prefix}/settings` and `{prefix}/ticket_keys`. Values are JSON objects with the keys of the
//! TOML tables (the admin API's schema); a certificate carries its PEM texts instead of paths.

use serde_json::{Map, Value, json};
use sluice_control::Kind;
use std::sync::Arc;

/// What a key under the prefix holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// A route, upstream or certificate, by name.
    Object(Kind, String),
    /// `{prefix}/settings`: `[compression]` and `[rate_limit]` of the fleet.
    Settings,
    /// `{prefix}/ticket_keys`: the fleet's session ticket keys (sealed).
    TicketKeys,
}

/// The plural path segment of a kind, as in the admin API.
pub fn plural(kind: Kind) -> &'static str {
    match kind {
        Kind::Route => "routes",
        Kind::Upstream => "upstreams",
        Kind::Certificate => "certificates",
    }
}

impl Slot {
    /// Its etcd key under `prefix`.
    pub fn key(&self, prefix: &str) -> String {
        match self {
            Slot::Object(kind, name) => format!("{prefix}/{}/{name}", plural(*kind)),
            Slot::Settings => format!("{prefix}/settings"),
            Slot::TicketKeys => format!("{prefix}/ticket_keys"),
        }
    }

    /// The slot of an etcd key, or `None` for keys Sluice does not use (left alone).
    pub fn parse(prefix: &str, key: &str) -> Option<Slot> {
        let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
        match rest {
            "settings" => return Some(Slot::Settings),
            "ticket_keys" => return Some(Slot::TicketKeys),
            _ => {}
        }
        let (plural, name) = rest.split_once('/')?;
        let kind = Kind::from_plural(plural)?;
        (!name.is_empty() && !name.contains('/')).then(|| Slot::Object(kind, name.to_owned()))
    }
}

/// One value as read from etcd.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The JSON value, or why the bytes are not JSON (shared: the map's nodes are copied
    /// on change, the values must not be).
    pub value: Arc<Result<Value, String>>,
    /// etcd's `mod_revision` of the key: the object's version (its `ETag`).
    pub mod_revision: i64,
    /// The bytes as etcd holds them: the cache file is written from these, a copy rather
    /// than a serialization of 40,000 values.
    pub raw: Arc<[u8]>,
}

impl Stored {
    /// Parses `bytes` as read from etcd.
    pub fn from_bytes(bytes: &[u8], mod_revision: i64) -> Stored {
        Stored {
            value: Arc::new(
                serde_json::from_slice(bytes).map_err(|e| format!("the value is not JSON: {e}")),
            ),
            mod_revision,
            raw: Arc::from(bytes),
        }
    }

    /// The JSON value, or why the bytes are not JSON.
    pub fn json(&self) -> Result<&Value, &String> {
        self.value.as_ref().as_ref()
    }

    /// A value made here (a cache file's, a test's).
    pub fn new(value: Value, mod_revision: i64) -> Stored {
        let raw = Arc::from(value.to_string().into_bytes());
        Stored {
            value: Arc::new(Ok(value)),
            mod_revision,
            raw,
        }
    }
}

/// Every object of the fleet at one etcd revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objects {
    /// The etcd revision this view is at.
    pub revision: i64,
    /// By slot. A persistent map: a copy is one reference, and a change to a map another
    /// holder shares copies a path of the tree, not 40,000 values. The watch changes the map
    /// while the composer (at idle priority) and the cache writer still read the previous one;
    /// with a `BTreeMap` that was a deep copy of every object on the event loop.
    pub slots: imbl::OrdMap<Slot, Stored>,
}

impl Objects {
    /// The objects of one kind, by name.
    pub fn of(&self, kind: Kind) -> impl Iterator<Item = (&str, &Stored)> {
        let start = Slot::Object(kind, String::new());
        self.slots
            .range(start..)
            .take_while(move |(s, _)| matches!(s, Slot::Object(k, _) if *k == kind))
            .filter_map(|(s, v)| match s {
                Slot::Object(_, name) => Some((name.as_str(), v)),
                _ => None,
            })
    }

    /// The settings, upstreams and certificates: what the composer's base is built from
    /// (a range of the map: routes, the bulk, are not visited).
    pub fn base_slots(&self) -> impl Iterator<Item = (&Slot, &Stored)> {
        self.slots
            .range(Slot::Object(Kind::Upstream, String::new())..=Slot::Settings)
    }

    /// How many objects of `kind`.
    pub fn count(&self, kind: Kind) -> usize {
        self.of(kind).count()
    }

    /// The names of routes whose `upstream` (or a split's, or a mirror's) is `upstream`.
    pub fn routes_using(&self, upstream: &str) -> Vec<String> {
        self.of(Kind::Route)
            .filter(|(_, s)| {
                let Ok(v) = s.json() else { return false };
                let in_list = |key: &str| {
                    v.get(key).and_then(Value::as_array).is_some_and(|list| {
                        list.iter()
                            .any(|s| s.get("upstream").and_then(Value::as_str) == Some(upstream))
                    })
                };
                v.get("upstream").and_then(Value::as_str) == Some(upstream)
                    || in_list("split")
                    || in_list("mirror")
            })
            .map(|(n, _)| format!("route `{n}`"))
            .collect()
    }

    /// The file's shape: `{"route": [...], "upstream": [...], "certificate": [...], …}` with
    /// each object's name, as `sluice config pull` and `GET /api/v1/config` give it.
    pub fn as_tables(&self) -> Map<String, Value> {
        let mut out = Map::new();
        for kind in [Kind::Upstream, Kind::Route, Kind::Certificate] {
            let list: Vec<Value> = self
                .of(kind)
                .filter_map(|(name, s)| {
                    let mut v = s.json().ok()?.clone();
                    if let Value::Object(m) = &mut v {
                        m.insert("name".into(), json!(name));
                    }
                    Some(v)
                })
                .collect();
            if !list.is_empty() {
                out.insert(kind.table().to_owned(), Value::Array(list));
            }
        }
        if let Some(Ok(Value::Object(settings))) = self.slots.get(&Slot::Settings).map(Stored::json)
        {
            for (k, v) in settings {
                out.insert(k.clone(), v.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_foreign_keys_are_ignored() {
        let p = "/sluice";
        for slot in [
            Slot::Object(Kind::Route, "api".into()),
            Slot::Object(Kind::Upstream, "u-1".into()),
            Slot::Object(Kind::Certificate, "site".into()),
            Slot::Settings,
            Slot::TicketKeys,
        ] {
            assert_eq!(Slot::parse(p, &slot.key(p)), Some(slot));
        }
        for foreign in [
            "/sluice2/routes/x",
            "/sluice/routes/",
            "/sluice/routes/a/b",
            "/sluice/listeners/x",
            "/other/routes/x",
            "/sluice",
        ] {
            assert_eq!(Slot::parse(p, foreign), None, "{foreign}");
        }
    }

    #[test]
    fn kinds_are_listed_apart_and_users_of_an_upstream_are_found() {
        let mut o = Objects::default();
        let put = |o: &mut Objects, kind, name: &str, v: Value| {
            o.slots
                .insert(Slot::Object(kind, name.into()), Stored::new(v, 1));
        };
        put(&mut o, Kind::Route, "a", json!({"upstream": "u"}));
        put(
            &mut o,
            Kind::Route,
            "b",
            json!({"upstream": "v", "split": [{"upstream": "u", "weight": 5}]}),
        );
        put(&mut o, Kind::Route, "c", json!({"upstream": "v"}));
        put(
            &mut o,
            Kind::Route,
            "d",
            json!({"upstream": "v", "mirror": [{"upstream": "u", "percent": 10}]}),
        );
        put(&mut o, Kind::Upstream, "u", json!({"servers": []}));
        assert_eq!(o.count(Kind::Route), 4);
        assert_eq!(o.count(Kind::Upstream), 1);
        assert_eq!(o.count(Kind::Certificate), 0);
        assert_eq!(
            o.routes_using("u"),
            vec!["route `a`", "route `b`", "route `d`"]
        );
        let tables = o.as_tables();
        assert_eq!(tables["route"][1]["name"], "b");
    }
}
