//! The native engine behind the inspection's interface: a request's verdict, and its
//! transaction kept as a [`Session`] whose response [`crate::inspect_response`] inspects as
//! it does libmodsecurity's.

use super::evaluate::{Kept, NativeRules};
use crate::facts::{RequestFacts, ResponseFacts};
use crate::inspect::{Respond, Session};
use crate::verdict::Verdict;
use std::sync::Arc;

/// A request's transaction with the rules that run its response.
#[derive(Debug)]
struct NativeSession {
    rules: Arc<NativeRules>,
    kept: Kept,
}

impl Respond for NativeSession {
    fn respond(&mut self, response: &ResponseFacts) -> Verdict {
        let body = crate::decode::for_rules(&response.headers, &response.body, response.body_limit);
        let o = self.rules.response(&mut self.kept, response, &body);
        Verdict::of(o.matches, o.intervention)
    }
}

/// Evaluates `request` with the native engine's `rules` on the calling thread, as
/// [`crate::inspect`] does with libmodsecurity's.
pub fn inspect_native(
    rules: &Arc<NativeRules>,
    request: &RequestFacts,
    keep: bool,
) -> (Verdict, Option<Session>) {
    let (outcome, kept) = rules.request(request, keep);
    let verdict = Verdict::of(outcome.matches, outcome.intervention);
    let session = kept.map(|kept| {
        Session::of(Box::new(NativeSession {
            rules: rules.clone(),
            kept,
        }))
    });
    (verdict, session)
}
