//! What a reload ends in: applied ([`ReloadOutcome`]) or refused ([`ReloadError`]), shared by
//! the controller and the fleet seam (`shared`).

use sluice_config::ConfigError;

/// Why a reload did not apply.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The configuration has errors; each is located in its source.
    #[error("{} error(s) in the configuration; the running configuration is unchanged", .0.len())]
    Invalid(Vec<ConfigError>),
    /// The configuration file could not be read.
    #[error("{0}; the running configuration is unchanged")]
    Read(String),
    /// The configuration is valid but the gateway could not apply it.
    #[error("{0}; the running configuration is unchanged")]
    Apply(String),
}

impl ReloadError {
    /// The located errors (empty for a read or apply failure).
    pub fn errors(&self) -> &[ConfigError] {
        match self {
            ReloadError::Invalid(e) => e,
            _ => &[],
        }
    }
}

/// A reload that applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// The revision now serving.
    pub revision: String,
    /// The revision before.
    pub previous: String,
    /// What the data plane changed.
    pub summary: String,
}
