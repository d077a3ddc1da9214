//! docs/configuration.md names every key the loader accepts: the keys are read from the raw
//! schema itself (each section's serde type, walked by a deserializer that records the field
//! names every struct asks for), so a key added to `raw.rs` without a line in the reference
//! fails here, and so does a section added to the loader without a type below.

use crate::raw::*;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// Table path (`listener.tls`) → the keys its struct accepts.
type Tables = BTreeMap<String, BTreeSet<String>>;

/// The loader's sections and the type each is read into (load.rs, `Cx::sections`).
fn sections() -> Tables {
    let tables = RefCell::new(Tables::new());
    fn walk<'de, T: Deserialize<'de>>(tables: &RefCell<Tables>, section: &str) {
        let rec = Recorder {
            tables,
            path: section.to_owned(),
        };
        if let Err(e) = T::deserialize(rec) {
            panic!("walking [{section}]'s type failed: {e}");
        }
    }
    walk::<RawGlobal>(&tables, "global");
    walk::<RawLog>(&tables, "log");
    walk::<RawDangerous>(&tables, "dangerous");
    walk::<RawOffload>(&tables, "offload");
    walk::<RawAdmin>(&tables, "admin");
    walk::<RawDemo>(&tables, "demo");
    walk::<RawCompression>(&tables, "compression");
    walk::<RawRateLimitStore>(&tables, "rate_limit");
    walk::<RawCache>(&tables, "cache");
    walk::<RawTracing>(&tables, "tracing");
    walk::<RawResolver>(&tables, "resolver");
    walk::<RawConfigSource>(&tables, "config");
    walk::<RawAcme>(&tables, "acme");
    walk::<RawLua>(&tables, "lua");
    walk::<RawWaf>(&tables, "waf");
    walk::<RawAuthSettings>(&tables, "auth");
    walk::<RawListener>(&tables, "listener");
    walk::<RawCertificate>(&tables, "certificate");
    walk::<RawUpstream>(&tables, "upstream");
    walk::<RawRoute>(&tables, "route");
    tables.into_inner()
}

/// A deserializer that answers every request with the smallest value that satisfies it and
/// records, for each struct, the fields it names, under the path of keys that led there.
struct Recorder<'a> {
    tables: &'a RefCell<Tables>,
    path: String,
}

impl Recorder<'_> {
    fn at(&self, path: String) -> Self {
        Recorder {
            tables: self.tables,
            path,
        }
    }
}

/// toml's `Spanned<T>` asks for a struct of this name; its value is the key's own.
const SPANNED: &str = "$__serde_spanned_private_";

impl<'de> Deserializer<'de> for Recorder<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        // Untagged enums (`RawSize`) buffer what they are given: a number fits the first.
        v.visit_u64(1)
    }
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        v.visit_bool(false)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        v.visit_u64(1)
    }
    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        v.visit_f64(1.0)
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        v.visit_str("")
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        v.visit_some(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        // One element: an array of tables records its struct once, under the array's path.
        v.visit_seq(One(Some(self)))
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        // A map's keys are the operator's (header names, server names): nothing to record.
        v.visit_map(Fields {
            rec: self,
            fields: &[],
            at: 0,
            spanned: false,
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Self::Error> {
        let spanned = name.starts_with(SPANNED);
        if !spanned {
            let mut tables = self.tables.borrow_mut();
            let keys = tables.entry(self.path.clone()).or_default();
            keys.extend(fields.iter().map(|f| (*f).to_owned()));
        }
        v.visit_map(Fields {
            rec: self,
            fields,
            at: 0,
            spanned,
        })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Self::Error> {
        v.visit_enum(FirstVariant(variants[0]))
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        v.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u128 f32 char str bytes byte_buf unit unit_struct
        tuple tuple_struct identifier ignored_any
    }
}

/// A sequence of one element.
struct One<'a>(Option<Recorder<'a>>);

impl<'de> SeqAccess<'de> for One<'_> {
    type Error = de::value::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0.take().map(|rec| seed.deserialize(rec)).transpose()
    }
}

/// A struct's fields, each with the smallest value its type takes.
struct Fields<'a> {
    rec: Recorder<'a>,
    fields: &'static [&'static str],
    at: usize,
    spanned: bool,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = de::value::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some(field) = self.fields.get(self.at) else {
            return Ok(None);
        };
        seed.deserialize(de::value::BorrowedStrDeserializer::new(field))
            .map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let field = self.fields[self.at];
        self.at += 1;
        let path = if self.spanned {
            self.rec.path.clone()
        } else {
            format!("{}.{field}", self.rec.path)
        };
        seed.deserialize(self.rec.at(path))
    }
}

/// An enum's first variant, as a unit.
struct FirstVariant(&'static str);

impl<'de> EnumAccess<'de> for FirstVariant {
    type Error = de::value::Error;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), Self::Error> {
        let v = seed.deserialize(de::value::BorrowedStrDeserializer::new(self.0))?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for FirstVariant {
    type Error = de::value::Error;
    fn unit_variant(self) -> Result<(), Self::Error> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _: T) -> Result<T::Value, Self::Error> {
        Err(de::Error::custom("newtype variants are not walked"))
    }
    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("tuple variants are not walked"))
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("struct variants are not walked"))
    }
}

/// The reference's tables: each `## `/`### ` heading that names a table in backticks
/// (``### `[listener.tls]` ``, ``## `[[route]]` ``) and the keys its table rows name
/// (``| `client_ca` | ...``).
fn documented(md: &str) -> Tables {
    let mut tables = Tables::new();
    let mut current: Option<String> = None;
    // A section that says "Same keys as `[other]`" documents other's keys and subtables as
    // its own (one reference, read by two loaders).
    let mut aliases = Vec::new();
    for line in md.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            current = line
                .split('`')
                .nth(1)
                .map(|t| t.trim_matches(['[', ']']).to_owned());
        } else if let (Some(table), Some(rest)) = (&current, line.strip_prefix("Same keys as `["))
            && let Some(source) = rest.split(']').next()
        {
            aliases.push((table.clone(), source.to_owned()));
        } else if let (Some(table), Some(row)) = (&current, line.strip_prefix("| `"))
            && let Some(key) = row.split('`').next()
        {
            tables
                .entry(table.clone())
                .or_default()
                .insert(key.to_owned());
        }
    }
    for (alias, source) in aliases {
        let copied: Vec<(String, BTreeSet<String>)> = tables
            .iter()
            .filter_map(|(t, keys)| {
                let suffix = t.strip_prefix(&source)?;
                (suffix.is_empty() || suffix.starts_with('.'))
                    .then(|| (format!("{alias}{suffix}"), keys.clone()))
            })
            .collect();
        for (t, keys) in copied {
            tables.entry(t).or_default().extend(keys);
        }
    }
    tables
}

fn reference() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    std::fs::read_to_string(path).expect("docs/configuration.md exists")
}

/// The `table.key`s of `a` that `b` lacks.
fn lacking(a: &Tables, b: &Tables) -> Vec<String> {
    a.iter()
        .flat_map(|(table, keys)| keys.iter().map(move |key| (table, key)))
        .filter(|(table, key)| !b.get(*table).is_some_and(|k| k.contains(*key)))
        .map(|(table, key)| format!("{table}.{key}"))
        .collect()
}

#[test]
fn every_accepted_key_is_in_the_reference() {
    let missing = lacking(&sections(), &documented(&reference()));
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks these keys the loader accepts (add a row \
         | `key` | under the table's heading): {missing:?}"
    );
}

#[test]
fn the_reference_names_no_key_the_loader_refuses() {
    let unknown = lacking(&documented(&reference()), &sections());
    assert!(
        unknown.is_empty(),
        "docs/configuration.md documents keys the loader does not accept: {unknown:?}"
    );
}

#[test]
fn every_section_of_the_loader_is_walked() {
    let walked = sections();
    let listed = crate::load::SECTIONS;
    for section in listed.split(", ").map(|s| s.trim_matches(['[', ']'])) {
        assert!(
            walked.contains_key(section),
            "the loader reads [{section}], which this test does not walk: add its type to sections()"
        );
    }
}

#[test]
fn the_walk_finds_nested_tables_and_array_entries() {
    // The walk itself: a nested table, an array of tables and a spanned key each land where
    // an operator writes them.
    let t = sections();
    assert!(t["listener.tls"].contains("min_version"));
    assert!(t["listener"].contains("address"), "{:?}", t["listener"]);
    assert!(t.keys().any(|k| k.starts_with("upstream.")));
    assert!(!t["listener"].iter().any(|k| k.starts_with('$')));
}
