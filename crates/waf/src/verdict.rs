//! What the rules decided about a request: a leaf the engine (which reads interventions) and
//! the inspection (which gathers the verdict) both import.

use crate::matches::{Match, SCORE_RULE, anomaly_score};

/// What the rules decided about a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// A disruptive action (deny, drop, redirect), in a rule's phase 1 or 2.
    pub intervention: Option<Intervention>,
    /// The rules that matched and logged, in order (Sluice's own score rule left out).
    pub matches: Vec<Match>,
    /// CRS's inbound anomaly score, where the rules reported it.
    pub anomaly_score: Option<u32>,
}

/// A disruptive action the rules decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intervention {
    /// The status the rule gave (`deny,status:403`).
    pub status: u16,
    /// A redirect's target (`redirect:URL`).
    pub url: Option<String>,
    /// The engine's line about it.
    pub log: Option<String>,
}

impl Verdict {
    /// The verdict of `all` (a transaction's matches) and `intervention`: CRS's inbound
    /// anomaly score as Sluice's score rule reported it, and the matches without that rule.
    pub(crate) fn of(all: Vec<Match>, intervention: Option<Intervention>) -> Verdict {
        let anomaly_score = anomaly_score(&all);
        Verdict {
            intervention,
            matches: all.into_iter().filter(|m| m.id != SCORE_RULE).collect(),
            anomaly_score,
        }
    }
}
