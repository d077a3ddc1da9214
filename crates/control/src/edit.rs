//! Edits of the configuration file through the admin API: one route, upstream or certificate
//! at a time, as JSON with the same keys as its TOML table.
//!
//! The file stays the single source of truth. A change is made on the file's text with
//! `toml_edit` (comments and formatting elsewhere, and on unchanged keys, are kept), checked
//! by the same loader as the file (errors inside the object are named by their JSON path),
//! written (atomically), and applied as a reload; if applying fails the file is put back.

use serde_json::{Map, Value, json};
use sluice_config::ConfigError;
use std::ops::Range;
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

/// The kinds of object the API edits, named as their TOML arrays of tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `[[route]]`.
    Route,
    /// `[[upstream]]`.
    Upstream,
    /// `[[certificate]]`.
    Certificate,
}

impl Kind {
    /// From the API's plural path segment (`routes`, `upstreams`, `certificates`).
    pub fn from_plural(s: &str) -> Option<Kind> {
        match s {
            "routes" => Some(Kind::Route),
            "upstreams" => Some(Kind::Upstream),
            "certificates" => Some(Kind::Certificate),
            _ => None,
        }
    }

    /// The TOML array's name.
    pub fn table(self) -> &'static str {
        match self {
            Kind::Route => "route",
            Kind::Upstream => "upstream",
            Kind::Certificate => "certificate",
        }
    }
}

/// Why an edit was refused; carries the HTTP status the admin API answers with.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct EditError {
    /// 400, 404, 409, 412, 422 or 500.
    pub status: u16,
    /// What is wrong and what to do.
    pub message: String,
    /// Located problems: inside the object by JSON path, elsewhere by file position.
    pub errors: Vec<Value>,
}

impl EditError {
    /// An error without located problems.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        EditError {
            status,
            message: message.into(),
            errors: Vec::new(),
        }
    }
}

/// The parsed file as `toml`'s plain values (for reading objects as JSON).
pub(crate) fn objects(text: &str, kind: Kind) -> Result<Vec<(String, Value)>, EditError> {
    let root: toml::Table = toml::from_str(text).map_err(|e| {
        EditError::new(
            500,
            format!("the configuration file does not parse: {e}; fix it by hand and reload"),
        )
    })?;
    let list = match root.get(kind.table()) {
        Some(toml::Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    Ok(list
        .into_iter()
        .filter_map(|item| {
            let name = item.get("name")?.as_str()?.to_owned();
            Some((name, serde_json::to_value(item).ok()?))
        })
        .collect())
}

/// One object as JSON, or 404.
pub(crate) fn object(text: &str, kind: Kind, name: &str) -> Result<Value, EditError> {
    objects(text, kind)?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .ok_or_else(|| not_found(kind, name))
}

fn not_found(kind: Kind, name: &str) -> EditError {
    EditError::new(
        404,
        format!(
            "no [[{}]] named `{name}` in the configuration",
            kind.table()
        ),
    )
}

/// The JSON body of a PUT as TOML items, key by key, in the body's order. `name` comes from
/// the URL.
fn body_items(body: &Value, name: &str) -> Result<Vec<(String, Item)>, EditError> {
    let Value::Object(map) = body else {
        return Err(EditError::new(
            400,
            "the body must be a JSON object with the keys of the TOML table",
        ));
    };
    if let Some(n) = map.get("name")
        && n.as_str() != Some(name)
    {
        return Err(invalid(
            "name",
            format!("`name` is {n}, but the URL names `{name}`"),
            "leave `name` out (the URL names the object) or make them equal",
        ));
    }
    let mut with_name = Map::new();
    with_name.insert("name".into(), json!(name));
    for (k, v) in map {
        if k != "name" {
            with_name.insert(k.clone(), v.clone());
        }
    }
    let as_toml: toml::Table =
        serde_json::from_value(Value::Object(with_name.clone())).map_err(|e| {
            invalid(
                "",
                format!("the body is not expressible in TOML: {e}"),
                "use strings, numbers, booleans, arrays and objects (TOML has no null)",
            )
        })?;
    let text = toml::to_string(&as_toml)
        .map_err(|e| EditError::new(400, format!("the body is not expressible in TOML: {e}")))?;
    let doc: DocumentMut = text
        .parse()
        .map_err(|e| EditError::new(500, format!("internal: re-parsing the body: {e}")))?;
    let mut items = Vec::new();
    // `name` first, as people write it; then the body's keys.
    let keys = std::iter::once("name").chain(
        with_name
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "name"),
    );
    for key in keys {
        let Some(item) = doc.get(key) else { continue };
        // Arrays of tables (an upstream's servers) are written inline, as people write them;
        // sub-tables (a route's compression) stay tables.
        let item = match item.clone() {
            Item::ArrayOfTables(a) => Item::Value(a.into_array().into()),
            Item::Table(mut t) => {
                unplace(&mut t);
                Item::Table(t)
            }
            other => other,
        };
        items.push((key.to_owned(), item));
    }
    Ok(items)
}

/// Forgets where a table (and its sub-tables) stood in the body's own document: kept, that
/// position placed `[route.respond]` among the file's first tables, before the `[[route]]`
/// it belongs to (a file that no longer parsed).
fn unplace(table: &mut Table) {
    table.set_position(None);
    for (_, item) in table.iter_mut() {
        if let Item::Table(t) = item {
            unplace(t);
        }
    }
}

fn invalid(path: &str, message: impl Into<String>, help: &str) -> EditError {
    EditError {
        status: 422,
        message: "the object is not valid; nothing was changed".into(),
        errors: vec![json!({ "path": path, "message": message.into(), "help": help })],
    }
}

fn array_mut(doc: &mut DocumentMut, kind: Kind) -> Option<&mut ArrayOfTables> {
    doc.get_mut(kind.table())
        .and_then(Item::as_array_of_tables_mut)
}

fn position(array: &ArrayOfTables, name: &str) -> Option<usize> {
    array
        .iter()
        .position(|t| t.get("name").and_then(Item::as_str) == Some(name))
}

/// The file's text with object `name` set to `body`: keys whose values did not change keep
/// their formatting and comments; keys not in `body` are removed; a new object is appended.
/// Returns the text and whether the object is new.
pub(crate) fn put(
    text: &str,
    kind: Kind,
    name: &str,
    body: &Value,
) -> Result<(String, bool), EditError> {
    let items = body_items(body, name)?;
    let mut doc = parse_mut(text)?;
    if doc.get(kind.table()).is_none() {
        doc.insert(kind.table(), Item::ArrayOfTables(ArrayOfTables::new()));
    }
    let Some(array) = array_mut(&mut doc, kind) else {
        return Err(EditError::new(
            409,
            format!(
                "`{}` in the file is not an array of tables; fix the file by hand",
                kind.table()
            ),
        ));
    };
    let created = match position(array, name) {
        Some(i) => {
            let table = array.get_mut(i).expect("position found it");
            let keep: Vec<&str> = items.iter().map(|(k, _)| k.as_str()).collect();
            let stale: Vec<String> = table
                .iter()
                .map(|(k, _)| k.to_owned())
                .filter(|k| !keep.contains(&k.as_str()))
                .collect();
            for k in stale {
                table.remove(&k);
            }
            for (k, item) in items {
                let same = table.get(&k).is_some_and(|old| plain(old) == plain(&item));
                if !same {
                    table.insert(&k, item);
                }
            }
            false
        }
        None => {
            let mut table = Table::new();
            for (k, item) in items {
                table.insert(&k, item);
            }
            array.push(table);
            true
        }
    };
    Ok((doc.to_string(), created))
}

/// An item's text without its comments and spacing, to tell whether a value changed.
fn plain(item: &Item) -> String {
    match item {
        Item::Value(v) => {
            let mut v = v.clone();
            v.decor_mut().clear();
            v.to_string()
        }
        other => other.to_string(),
    }
}

/// The file's text without object `name`.
pub(crate) fn delete(text: &str, kind: Kind, name: &str) -> Result<String, EditError> {
    let mut doc = parse_mut(text)?;
    let array = array_mut(&mut doc, kind).ok_or_else(|| not_found(kind, name))?;
    let i = position(array, name).ok_or_else(|| not_found(kind, name))?;
    array.remove(i);
    if array.is_empty() {
        doc.remove(kind.table());
    }
    Ok(doc.to_string())
}

/// Objects that refer to `name` of `kind` and would be left dangling by deleting it.
pub(crate) fn users(text: &str, kind: Kind, name: &str) -> Vec<String> {
    let Ok(root) = toml::from_str::<toml::Table>(text) else {
        return Vec::new();
    };
    let list = |t: &str| match root.get(t) {
        Some(toml::Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    };
    let name_of = |v: &toml::Value| v.get("name").and_then(|n| n.as_str()).map(str::to_owned);
    match kind {
        Kind::Upstream => list("route")
            .iter()
            .filter(|r| {
                let direct = r.get("upstream").and_then(|u| u.as_str()) == Some(name);
                // A gray-release share (`[[route.split]]`) or a mirror (`[[route.mirror]]`)
                // uses the upstream too.
                let in_list = |key: &str| {
                    r.get(key).and_then(|s| s.as_array()).is_some_and(|s| {
                        s.iter()
                            .any(|x| x.get("upstream").and_then(|u| u.as_str()) == Some(name))
                    })
                };
                direct || in_list("split") || in_list("mirror")
            })
            .filter_map(|r| name_of(r).map(|n| format!("route `{n}`")))
            .collect(),
        Kind::Certificate => list("listener")
            .iter()
            .filter(|l| {
                let tls = l.get("tls");
                let in_list = tls
                    .and_then(|t| t.get("certificates"))
                    .and_then(|c| c.as_array())
                    .is_some_and(|c| c.iter().any(|x| x.as_str() == Some(name)));
                let default = tls
                    .and_then(|t| t.get("default_certificate"))
                    .and_then(|d| d.as_str())
                    == Some(name);
                in_list || default
            })
            .filter_map(|l| name_of(l).map(|n| format!("listener `{n}`")))
            .collect(),
        Kind::Route => Vec::new(),
    }
}

fn parse_mut(text: &str) -> Result<DocumentMut, EditError> {
    text.parse().map_err(|e| {
        EditError::new(
            500,
            format!("the configuration file does not parse: {e}; fix it by hand and reload"),
        )
    })
}

/// Turns the loader's errors on the edited text into the API's: an error inside object `name`
/// is named by its JSON path (`servers[0].address`), any other by its file position. Fleet
/// mode uses it for objects rendered from etcd's JSON.
pub fn locate(text: &str, kind: Kind, name: &str, errors: &[ConfigError]) -> Vec<Value> {
    let spans = object_spans(text, kind, name);
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    errors
        .iter()
        .map(|e| {
            // Back from line:column to a byte offset (columns count characters).
            let offset = line_starts.get(e.line - 1).map(|&start| {
                start
                    + text[start..]
                        .chars()
                        .take(e.column - 1)
                        .map(char::len_utf8)
                        .sum::<usize>()
            });
            let path = offset.and_then(|o| {
                spans
                    .iter()
                    .filter(|(_, r)| r.contains(&o))
                    .min_by_key(|(_, r)| r.len())
                    .map(|(p, _)| p.clone())
            });
            match path {
                Some(path) => json!({ "path": path, "message": e.message, "help": e.help }),
                None => json!({
                    "file": e.file, "line": e.line, "column": e.column,
                    "message": e.message, "help": e.help,
                }),
            }
        })
        .collect()
}

/// JSON paths of object `name`'s keys with the byte range of each key and value.
fn object_spans(text: &str, kind: Kind, name: &str) -> Vec<(String, Range<usize>)> {
    let Ok(doc) = toml_edit::Document::parse(text) else {
        return Vec::new();
    };
    let Some(array) = doc.get(kind.table()).and_then(Item::as_array_of_tables) else {
        return Vec::new();
    };
    let Some(table) = array
        .iter()
        .find(|t| t.get("name").and_then(Item::as_str) == Some(name))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(span) = table.span() {
        out.push((String::new(), span));
    }
    for (key, item) in table.iter() {
        let key_span = table.key(key).and_then(|k| k.span());
        collect_spans(key.to_owned(), key_span, item, &mut out);
    }
    out
}

fn collect_spans(
    path: String,
    key_span: Option<Range<usize>>,
    item: &Item,
    out: &mut Vec<(String, Range<usize>)>,
) {
    let value_span = item.span();
    let whole = match (key_span, value_span.clone()) {
        (Some(k), Some(v)) => Some(k.start.min(v.start)..k.end.max(v.end)),
        (k, v) => k.or(v),
    };
    if let Some(r) = whole {
        out.push((path.clone(), r));
    }
    match item {
        Item::Value(toml_edit::Value::Array(a)) => {
            for (i, v) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                if let Some(r) = v.span() {
                    out.push((p.clone(), r));
                }
                if let toml_edit::Value::InlineTable(t) = v {
                    for (k, v) in t.iter() {
                        if let Some(r) = v.span() {
                            let start =
                                t.key(k).and_then(|k| k.span()).map_or(r.start, |s| s.start);
                            out.push((format!("{p}.{k}"), start..r.end));
                        }
                    }
                }
            }
        }
        Item::Value(toml_edit::Value::InlineTable(t)) => {
            for (k, v) in t.iter() {
                if let Some(r) = v.span() {
                    out.push((format!("{path}.{k}"), r));
                }
            }
        }
        Item::Table(t) => {
            for (k, v) in t.iter() {
                let ks = t.key(k).and_then(|k| k.span());
                collect_spans(format!("{path}.{k}"), ks, v, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route with a sub-table (`respond`, `cache`) put into a file that already has
    /// tables after its routes (the embedded default's `[demo]`, `[[upstream]]`): the result
    /// parses, the new route holds its sub-table, and the old route keeps its own keys.
    #[test]
    fn a_new_object_with_a_sub_table_is_written_where_it_parses() {
        let text = "[demo]\naddress = \"127.0.0.1:8081\"\n\n[[upstream]]\nname = \"demo\"\n\n\
                    [[route]]\nname = \"demo\"\nupstream = \"demo\"\n";
        let body = json!({
            "path_exact": "/x",
            "respond": {"status": 200, "body": "hi", "content_type": "text/plain"},
        });
        let (out, created) = put(text, Kind::Route, "x", &body).unwrap();
        assert!(created);
        let parsed: toml::Table = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let routes = parsed["route"].as_array().unwrap();
        assert_eq!(routes.len(), 2, "{out}");
        assert_eq!(routes[0].get("respond"), None, "{out}");
        assert_eq!(routes[1]["respond"]["body"].as_str(), Some("hi"), "{out}");
        // And again, replacing it (an existing object's sub-table).
        let body = json!({"path_exact": "/x", "respond": {"status": 204}});
        let (again, created) = put(&out, Kind::Route, "x", &body).unwrap();
        assert!(!created);
        let parsed: toml::Table = toml::from_str(&again).unwrap_or_else(|e| panic!("{e}\n{again}"));
        assert_eq!(
            parsed["route"][1]["respond"]["status"].as_integer(),
            Some(204)
        );
    }

    #[test]
    fn an_upstream_used_only_by_a_split_or_a_mirror_is_in_use() {
        let text = r#"
[[route]]
name = "app"
upstream = "stable"
[[route.split]]
upstream = "canary"
weight = 5
[[route]]
name = "other"
upstream = "stable"
[[route.mirror]]
upstream = "shadow"
"#;
        assert_eq!(users(text, Kind::Upstream, "canary"), ["route `app`"]);
        assert_eq!(users(text, Kind::Upstream, "shadow"), ["route `other`"]);
        assert_eq!(
            users(text, Kind::Upstream, "stable"),
            ["route `app`", "route `other`"]
        );
        assert!(users(text, Kind::Upstream, "unused").is_empty());
    }
}
