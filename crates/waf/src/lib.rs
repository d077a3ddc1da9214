//! The web application firewall at Sluice's edge: ModSecurity rule sets (the OWASP Core
//! Rule Set) evaluated by Sluice's own SecLang engine ([`native`], the default) or by
//! libmodsecurity v3 (its oracle).
//!
//! - `[[waf.ruleset]]` names rule sets (files, inline rules); `[route.waf]` picks one for a
//!   route with its mode, CRS paranoia level, thresholds, exclusions and body limit
//!   ([`rules`] turns these into what the engines load). Routes with equal settings share
//!   one compiled set; a reload compiles new sets before it swaps anything, so a broken rule
//!   leaves the old sets serving.
//! - A request is inspected as one job on the WAF's threads ([`Inspector`], an offload
//!   `Pool` at idle priority): head, body and logging phases in ModSecurity-nginx's order.
//!   When its queue is full the route's `on_overload` decides, counted. The native engine's
//!   inspection of a request without a body runs on the event loop instead, within
//!   `[waf] inline_percent` of its time (`placement`): there the hand-off costs more than
//!   the inspection.
//! - Each match becomes a record (rule id, message, truncated data, anomaly score) for the
//!   access log and the request log, and counters by route and rule ([`RouteStats`]).
//! - `[[waf.ruleset]] engine` picks what evaluates a set: the native engine (the default),
//!   which gives the Core Rule Set's verdicts at a tenth of libmodsecurity's CPU and refuses
//!   at load what it does not implement, or libmodsecurity (`"modsecurity"`).
//!
//! Built without the `modsecurity` feature, the crate compiles, runs the native engine, and
//! refuses every rule set that asks for libmodsecurity with what to do.

mod decode;
#[cfg(feature = "modsecurity")]
mod engine;
#[cfg(not(feature = "modsecurity"))]
#[path = "without_engine.rs"]
mod engine;
mod facts;
#[cfg(feature = "modsecurity")]
mod ffi;
#[cfg(all(feature = "modsecurity", any(test, feature = "fuzzing")))]
pub mod fuzzing;
mod inspect;
mod matches;
pub mod native;
mod placement;
pub mod rules;
mod runtime;
mod stats;
mod verdict;

pub use engine::{Rules, version};
pub use facts::{RequestFacts, ResponseFacts};
pub use inspect::{Session, inspect, inspect_response};
pub use matches::{MAX_DATA, Match};
pub use native::inspect_native;
pub use rules::Piece;
pub use runtime::{
    Inspector, Outcome, PendingResponse, RouteFirewall, WafError, WafRuntime, check,
};
pub use stats::{RouteStats, StatsSnapshot};
pub use verdict::{Intervention, Verdict};

#[cfg(all(test, feature = "modsecurity"))]
mod tests;
