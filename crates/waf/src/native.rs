//! The native SecLang engine: rule sets in ModSecurity's language (the OWASP Core Rule Set,
//! `crs-setup.conf`, an operator's own `SecRule`s) read into Sluice's own model, so that
//! evaluation can know the whole set at load (DESIGN.md, "The WAF engine").
//!
//! Built so far: loading. Each directive, variable, operator, action and transformation is
//! parsed into a typed value and checked (regular expressions compile, macros name real
//! variables, chains close, ids are unique); anything the engine does not implement is a
//! [`LoadError`] naming the file, line and directive, never a skipped rule. Evaluation is
//! not built yet, and `[[waf.ruleset]]` offers no way to select this engine until it is.

mod action;
mod directive;
mod evaluate;
mod expand;
mod load;
mod operate;
mod operator;
mod pattern;
mod plan;
mod request;
mod ruleset;
mod transaction;
mod transform;
mod variable;

pub use action::{
    Actions, AllowScope, BodyProcessor, Ctl, Disruptive, Effect, Engine, Phase, SetOp, SetVar,
};
pub use directive::Origin;
pub use evaluate::{NativeRules, Outcome};
pub use expand::{Expansion, Part, RuleField};
pub use load::load;
pub use operator::{Op, Operator};
pub use pattern::{PatternSet, Scratch};
pub use ruleset::{Exclusions, Kind, LimitAction, Link, Rule, RuleSet, Settings};
pub use transform::{Step, Transform};
pub use variable::{Selector, Target, Var};

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
    fn at(origin: &Origin, directive: &str, why: impl Into<String>) -> LoadError {
        LoadError {
            place: origin.to_string(),
            directive: directive.to_string(),
            why: why.into(),
        }
    }

    fn file(path: &std::path::Path, why: impl Into<String>) -> LoadError {
        LoadError {
            place: path.display().to_string(),
            directive: String::new(),
            why: why.into(),
        }
    }
}

#[cfg(test)]
mod tests;
