//! Where a rule set's text comes from and why it could not be loaded: the leaf every part of
//! the loader reports through.

use std::sync::Arc;

/// Where a directive starts, for errors and for a rule's `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file, or what the text is when it is not a file ("[route.waf] ...").
    pub file: Arc<str>,
    /// 1-based.
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A rule set the native engine cannot load: where, which directive, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}: {directive}{sep}{why}", sep = if directive.is_empty() { "" } else { ": " })]
pub struct LoadError {
    /// `file:line`, or the file alone.
    pub place: String,
    /// The directive as written (`SecRule`), or empty.
    pub directive: String,
    /// What is wrong and what to do.
    pub why: String,
}

impl LoadError {
    pub(super) fn at(origin: &Origin, directive: &str, why: impl Into<String>) -> LoadError {
        LoadError {
            place: origin.to_string(),
            directive: directive.to_string(),
            why: why.into(),
        }
    }

    pub(super) fn file(path: &std::path::Path, why: impl Into<String>) -> LoadError {
        LoadError {
            place: path.display().to_string(),
            directive: String::new(),
            why: why.into(),
        }
    }
}
