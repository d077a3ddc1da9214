//! Header names as the peers spell them, made into `HeaderName`s once per thread.
//!
//! `HeaderName::from_bytes` lowercases a name into a scratch buffer and matches it against
//! the standard names, and a proxied request parses about 18 (its own and its response's):
//! 1,460 instructions per keep-alive request (callgrind). A client or an origin sends the
//! same names in the same spelling request after request, so each thread keeps the last
//! names it made in a small direct-mapped table, found by their exact bytes: about half
//! the cost (530 instructions fewer per request). A name is validated when it is made; a hit
//! is a byte comparison and a clone (a standard name is a tag; another, a shared `Bytes`).
//! Collisions only cost a miss; a peer that sends many names only evicts others.

use http::header::{HeaderName, InvalidHeaderName};
use std::cell::RefCell;

/// Slots in each thread's table (80 bytes each: 5 KiB a thread).
const SLOTS: usize = 64;
/// Longer names are made each time (few standard names are longer).
const LONGEST: usize = 32;

struct Slot {
    len: u8,
    raw: [u8; LONGEST],
    name: Option<HeaderName>,
}

thread_local! {
    static MADE: RefCell<[Slot; SLOTS]> = const {
        RefCell::new([const { Slot { len: 0, raw: [0; LONGEST], name: None } }; SLOTS])
    };
}

/// `HeaderName::from_bytes(raw)`, from this thread's table when `raw` was made before.
pub(crate) fn header_name(raw: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    let len = raw.len();
    if len == 0 || len > LONGEST {
        return HeaderName::from_bytes(raw);
    }
    let at =
        (len * 7 + usize::from(raw[0]) * 3 + usize::from(raw[len / 2]) + usize::from(raw[len - 1]))
            % SLOTS;
    MADE.with(|made| {
        let mut made = made.borrow_mut();
        let slot = &mut made[at];
        if usize::from(slot.len) == len
            && slot.raw[..len] == *raw
            && let Some(name) = &slot.name
        {
            return Ok(name.clone());
        }
        let name = HeaderName::from_bytes(raw)?;
        slot.len = len as u8;
        slot.raw[..len].copy_from_slice(raw);
        slot.name = Some(name.clone());
        Ok(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table answers what `from_bytes` answers, for names made again, in other cases,
    /// colliding, invalid, and too long to keep; a hit is the same name, not a neighbour's.
    #[test]
    fn names_are_what_from_bytes_makes() {
        let mut names: Vec<Vec<u8>> = [
            "Content-Type",
            "content-type",
            "CONTENT-TYPE",
            "Host",
            "X-Request-Id",
            "x-a",
            "X-B",
            "Accept-Encoding",
            "ETag",
            "Last-Modified",
            "Bad Name",
            "",
            "a\u{0}b",
            "x-a-name-that-is-longer-than-thirty-two-bytes",
            "Server",
            "Date",
            "x:y",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        // Many names of one length and first and last byte: they share slots.
        for c in b'a'..=b'z' {
            names.push(vec![b'x', b'-', c, b'-', b'y']);
        }
        for round in 0..3 {
            for raw in &names {
                let want = HeaderName::from_bytes(raw);
                let got = header_name(raw);
                match (want, got) {
                    (Ok(w), Ok(g)) => assert_eq!(w, g, "{raw:?} round {round}"),
                    (Err(_), Err(_)) => {}
                    (w, g) => panic!("{raw:?}: from_bytes {w:?}, table {g:?}"),
                }
            }
        }
    }
}
