//! Header names and short values that scripts set, kept by the Lua string that spelled
//! them: `ngx.req.set_header("X-Gateway", "lua")` names the same interned Lua strings on
//! every request, and parsing a name into a [`HeaderName`] (lower-casing it into a new
//! buffer) and copying a value into a [`HeaderValue`] cost more than the rest of the call.
//!
//! A small direct-mapped table per thread, keyed by the string's address and checked by its
//! bytes: a Lua string freed and another made at its address finds the old entry's bytes
//! different and is parsed afresh. Nothing here is unsafe; the address is only a hash.

use http::header::{HeaderName, HeaderValue};
use std::cell::RefCell;

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

/// The header name a script spelled (`_` as `-`, as lua-nginx-module), or `None` when it is
/// not a valid one.
pub(crate) fn header_name(spelled: &[u8]) -> Option<HeaderName> {
    NAMES.with_borrow_mut(|t| t.get_or(spelled, parse_name))
}

/// The header value a script gave, or `None` when it is not a valid one.
pub(crate) fn header_value(spelled: &[u8]) -> Option<HeaderValue> {
    if spelled.len() > MAX_VALUE {
        return HeaderValue::from_bytes(spelled).ok();
    }
    VALUES.with_borrow_mut(|t| t.get_or(spelled, |b| HeaderValue::from_bytes(b).ok()))
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
    }
}
