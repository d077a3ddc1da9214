//! The raw form of a size, shared by every section that takes one.

use serde::Deserialize;

/// A size in bytes: an integer, or a string with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    /// A plain number of bytes.
    Bytes(u64),
    /// `"16k"`, `"10m"`, …
    Text(String),
}
