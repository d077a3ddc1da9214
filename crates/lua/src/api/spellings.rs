//! Header names and short values that scripts set, kept by the Lua string that spelled
//! them: `ngx.req.set_header("X-Gateway", "lua")` names the same interned Lua strings on
//! every request, and parsing a name into a [`HeaderName`] (lower-casing it into a new
//! buffer) and copying a value into a [`HeaderValue`] cost more than the rest of the call.
//!
//! A small direct-mapped table per thread, keyed by the string's address and checked by its
//! bytes: a Lua string freed and another made at its address finds the old entry's bytes
//! different and is parsed afresh. Nothing here is unsafe; the address is only a hash.
//!
//! What a table keeps is made static where it can be ([`made_static`]): a name or value
//! over static bytes is cloned and dropped without touching a reference count, which for
//! the two headers of a five-line script was eight atomic operations per request.

use http::header::{HeaderName, HeaderValue};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Mutex;

/// Slots per thread (a script sets a handful of distinct headers).
const SLOTS: usize = 64;

/// Values longer than this are not kept (a token differs per request; comparing a long one
/// would cost what it saves).
const MAX_VALUE: usize = 64;

struct Slot<T> {
    at: usize,
    spelled: Box<[u8]>,
    parsed: T,
}

struct Table<T>(Vec<Option<Slot<T>>>);

impl<T: Clone> Table<T> {
    fn get_or(&mut self, spelled: &[u8], parse: impl FnOnce(&[u8]) -> Option<T>) -> Option<T> {
        let at = spelled.as_ptr() as usize;
        if self.0.is_empty() {
            self.0.resize_with(SLOTS, || None);
        }
        let i = (at >> 4) % SLOTS;
        if let Some(s) = &self.0[i]
            && s.at == at
            && *s.spelled == *spelled
        {
            return Some(s.parsed.clone());
        }
        let parsed = parse(spelled)?;
        self.0[i] = Some(Slot {
            at,
            spelled: spelled.into(),
            parsed: parsed.clone(),
        });
        Some(parsed)
    }
}

thread_local! {
    static NAMES: RefCell<Table<HeaderName>> = const { RefCell::new(Table(Vec::new())) };
    static VALUES: RefCell<Table<HeaderValue>> = const { RefCell::new(Table(Vec::new())) };
}

/// Distinct spellings made static at most, process-wide (each at most [`MAX_VALUE`] bytes:
/// 64 KiB in all): beyond them (a script that sets ever-new short values), what the tables
/// keep is reference-counted as before.
const MAX_STATIC: usize = 1024;

/// `text` as a string that lives as long as the process, the same one for the same text on
/// every thread; `None` once [`MAX_STATIC`] are made. Taken on a table's miss only.
fn made_static(text: &str) -> Option<&'static str> {
    static ALL: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut all = ALL.lock().unwrap_or_else(|p| p.into_inner());
    let all = all.get_or_insert_with(HashSet::new);
    if let Some(s) = all.get(text) {
        return Some(s);
    }
    if all.len() >= MAX_STATIC {
        return None;
    }
    // Leaked on purpose, bounded above: the tables' entries point at it for good.
    let made: &'static str = Box::leak(text.into());
    all.insert(made);
    Some(made)
}

/// The header name a script spelled (`_` as `-`, as lua-nginx-module), or `None` when it is
/// not a valid one.
pub(crate) fn header_name(spelled: &[u8]) -> Option<HeaderName> {
    NAMES.with_borrow_mut(|t| {
        t.get_or(spelled, |b| {
            let name = parse_name(b)?;
            // A parsed name is valid and in lower case, what `from_static` asks.
            Some(made_static(name.as_str()).map_or(name, HeaderName::from_static))
        })
    })
}

/// The header value a script gave, or `None` when it is not a valid one.
pub(crate) fn header_value(spelled: &[u8]) -> Option<HeaderValue> {
    if spelled.len() > MAX_VALUE {
        return HeaderValue::from_bytes(spelled).ok();
    }
    VALUES.with_borrow_mut(|t| {
        t.get_or(spelled, |b| {
            let value = HeaderValue::from_bytes(b).ok()?;
            // `from_static` takes visible ASCII and tabs only (what `to_str` accepts).
            Some(match value.to_str().ok().and_then(made_static) {
                Some(text) => HeaderValue::from_static(text),
                None => value,
            })
        })
    })
}

fn parse_name(spelled: &[u8]) -> Option<HeaderName> {
    if spelled.contains(&b'_') {
        let dashed: Vec<u8> = spelled
            .iter()
            .map(|&b| if b == b'_' { b'-' } else { b })
            .collect();
        HeaderName::from_bytes(&dashed).ok()
    } else {
        HeaderName::from_bytes(spelled).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_address_with_other_bytes_is_parsed_afresh() {
        let mut buf = *b"X-First_One";
        let first = header_name(&buf).unwrap();
        assert_eq!(first, "x-first-one");
        assert_eq!(header_name(&buf).unwrap(), "x-first-one");
        // Another string at the same address (a Lua string freed and its memory reused).
        buf.copy_from_slice(b"X-Other-Two");
        assert_eq!(header_name(&buf).unwrap(), "x-other-two");
        assert!(header_name(b"bad name").is_none());
        let mut v = *b"one";
        assert_eq!(header_value(&v).unwrap(), "one");
        v.copy_from_slice(b"two");
        assert_eq!(header_value(&v).unwrap(), "two");
        assert!(header_value(b"bad\nvalue").is_none());
        let long = vec![b'a'; MAX_VALUE + 1];
        assert_eq!(header_value(&long).unwrap().len(), MAX_VALUE + 1);
        // Beyond visible ASCII: kept as given, not made static.
        assert_eq!(
            header_value(b"caf\xc3\xa9").unwrap().as_bytes(),
            b"caf\xc3\xa9"
        );
    }

    #[test]
    fn the_same_text_is_made_static_once_and_the_count_is_bounded() {
        let a = made_static("x-interned").unwrap();
        let b = made_static(&String::from("x-interned")).unwrap();
        assert!(std::ptr::eq(a, b), "one copy per text");
        // Fill to the bound (other tests add a few of their own).
        let mut made = 0;
        while made_static(&format!("v-{made}")).is_some() {
            made += 1;
            assert!(made <= MAX_STATIC, "more than {MAX_STATIC} made");
        }
        // Past the bound the tables still answer, with counted values.
        assert_eq!(header_value(b"after-the-bound").unwrap(), "after-the-bound");
        assert_eq!(header_name(b"X-After-Bound").unwrap(), "x-after-bound");
        assert!(
            std::ptr::eq(made_static("x-interned").unwrap(), a),
            "old ones stay"
        );
    }
}
