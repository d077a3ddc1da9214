//! The native SecLang engine: rule sets in ModSecurity's language (the OWASP Core Rule Set,
//! `crs-setup.conf`, an operator's own `SecRule`s) read into Sluice's own model, so that
//! evaluation can know the whole set at load (DESIGN.md, "The WAF engine").
//!
//! - Loading ([`load`]): each directive, variable, operator, action and transformation is
//!   parsed into a typed value and checked (regular expressions compile, macros name real
//!   variables, chains close, ids are unique); anything the engine does not implement is a
//!   [`LoadError`] naming the file, line and directive, never a skipped rule.
//! - Running ([`NativeRules`]): phases 1 and 2 of a request as libmodsecurity 3.0.9 runs
//!   them, each part held to libmodsecurity by a differential test, with each value
//!   transformed once per chain and each chain's patterns asked in one pass ([`PatternSet`]).
//!
//! Responses (phases 3-4) run on the request's transaction (`request/response.rs`). It is
//! the engine a rule set runs unless it names `engine = "modsecurity"` (docs/waf.md, "The
//! native engine"); libmodsecurity is the oracle its tests compare it with.

mod action;
#[cfg(test)]
mod crs_module;
mod directive;
mod error;
mod evaluate;
mod expand;
mod key_regex;
mod load;
mod memo;
mod operate;
mod operator;
mod pattern;
mod plan;
pub mod profile;
mod request;
mod ruleset;
pub(crate) mod session;
mod transaction;
mod transform;
mod tx;
mod tx_key;
mod variable;

pub use action::{
    Actions, AllowScope, BodyProcessor, Ctl, Disruptive, Effect, Engine, Phase, SetOp, SetVar,
};
pub use error::{LoadError, Origin};
pub use evaluate::{Kept, NativeRules, Outcome};
pub use expand::{Expansion, Part, RuleField};
pub use load::load;
pub use operator::{Op, Operator};
pub use pattern::{PatternSet, Scratch};
pub use ruleset::{Exclusions, Kind, LimitAction, Link, Rule, RuleSet, Settings};
pub use session::inspect_native;
pub use transform::{Step, Transform};
pub use variable::{Selector, Target, Var};

#[cfg(test)]
mod tests;
