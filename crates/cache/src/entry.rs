//! One stored response: its head, freshness and every body made of it (identity first, then
//! the encodings), each variant with its hit count.

use crate::freshness::Timing;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The bytes an entry costs beyond its bodies and header bytes (the structures around them).
const ENTRY_OVERHEAD: u64 = 512;

static EMPTY: Bytes = Bytes::from_static(b"");

/// One body of an entry: identity, or an encoding of it.
#[derive(Debug)]
pub struct Variant {
    /// Its content-coding token (`identity`, `gzip`, `br`, `zstd`).
    pub coding: &'static str,
    /// The bytes sent.
    pub body: Bytes,
    /// Made at the codec's best level (the background upgrade's work): not upgraded again.
    pub best: bool,
    /// Times served since it was made (what decides its upgrade).
    pub hits: AtomicU32,
}

impl Variant {
    /// A variant not served yet.
    pub fn new(coding: &'static str, body: Bytes, best: bool) -> Variant {
        Variant {
            coding,
            body,
            best,
            hits: AtomicU32::new(0),
        }
    }

    /// Counts one serving; returns the count with it.
    pub fn hit(&self) -> u32 {
        self.hits.fetch_add(1, Ordering::Relaxed).saturating_add(1)
    }
}

impl Clone for Variant {
    fn clone(&self) -> Variant {
        Variant {
            coding: self.coding,
            body: self.body.clone(),
            best: self.best,
            hits: AtomicU32::new(self.hits.load(Ordering::Relaxed)),
        }
    }
}

/// One stored response and its encoded variants.
#[derive(Debug)]
pub struct Entry {
    /// The response status.
    pub status: StatusCode,
    /// The response head as stored (updated by revalidation).
    pub headers: HeaderMap,
    /// When it was fetched (its age derives from it).
    pub timing: Timing,
    /// How long it is fresh.
    pub lifetime: Duration,
    /// Its bodies: `identity` first, then the encodings made since.
    pub variants: Vec<Variant>,
}

impl Entry {
    /// The variant in `coding`, if made.
    pub fn variant(&self, coding: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.coding == coding)
    }

    /// Whether `other` is this response (its identity body the very same bytes), maybe with
    /// other variants or a renewed head.
    pub fn same_response(&self, other: &Entry) -> bool {
        let (a, b) = (self.identity(), other.identity());
        if a.is_empty() && b.is_empty() {
            // Empty bodies share one static buffer: tell them apart by what they said.
            return self.status == other.status
                && self.timing.response_time == other.timing.response_time;
        }
        a.as_ptr() == b.as_ptr() && a.len() == b.len()
    }

    /// The identity body.
    pub fn identity(&self) -> &Bytes {
        self.variant("identity").map_or(&EMPTY, |v| &v.body)
    }

    /// This entry with `variant` added (or replacing the one in its coding).
    pub(crate) fn with_variant(&self, variant: Variant) -> Entry {
        let mut variants = self.variants.clone();
        variants.retain(|v| v.coding != variant.coding);
        variants.push(variant);
        Entry {
            status: self.status,
            headers: self.headers.clone(),
            timing: self.timing,
            lifetime: self.lifetime,
            variants,
        }
    }

    /// This entry's bodies under a renewed head and freshness (a revalidation's 304).
    pub fn renewed(&self, headers: HeaderMap, timing: Timing, lifetime: Duration) -> Entry {
        Entry {
            status: self.status,
            headers,
            timing,
            lifetime,
            variants: self.variants.clone(),
        }
    }

    /// What the entry weighs against the store's bound.
    pub fn weight(&self) -> u64 {
        let head: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum();
        let bodies: usize = self.variants.iter().map(|v| v.body.len()).sum();
        ENTRY_OVERHEAD + head as u64 + bodies as u64
    }
}
