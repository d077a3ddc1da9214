//! What the native engine computes once per rule set so that a request does less: each
//! rule's operators compiled, each rule's transformation chain interned (values are
//! transformed once per chain, not once per rule), and for each chain one multi-pattern
//! prefilter over the literal `@rx` of the rules that use it (a value is scanned once per
//! chain; each rule then looks its pattern up).

use super::action::Actions;
use super::error::LoadError;
use super::operate::Matcher;
use super::operator::Op;
use super::pattern::{PatternSet, Scratch};
use super::ruleset::{Kind, Rule, RuleSet};
use super::transform::{Step, Transform};
use super::variable::Target;
use std::sync::Mutex;

/// One rule of a chain, compiled.
#[derive(Debug)]
pub(crate) struct LinkPlan {
    pub(crate) matcher: Matcher,
    /// Its transformation chain (an index into [`Plan::chains`]).
    pub(crate) chain: u32,
    /// Its pattern in the chain's prefilter, for a literal `@rx` the prefilter decides
    /// (not with multiMatch, whose values are each stage of the chain).
    pub(crate) rx: Option<u32>,
    /// The targets it reads: its own and, for a chain's first rule, those
    /// `SecRuleUpdateTargetById/ByTag` add (computed once: they do not change per request).
    pub(crate) targets: Vec<Target>,
    /// Its own `!VAR:key`: keys left out of the same collection, compared without regard
    /// to case (libmodsecurity's parser makes them key exclusions).
    pub(crate) exclusions: Vec<Target>,
    /// `SecRuleUpdateTargetBy*`'s `!VAR:key` for a chain's first rule: a value's full name
    /// compared with case, or the regular expression on its key
    /// (`getVariablesExceptions`); none for the chained rules, which they do not reach.
    pub(crate) updates: Vec<Target>,
}

/// The plan of a rule set.
#[derive(Debug)]
pub(crate) struct Plan {
    /// For each rule: its link plans, the chain's first rule first (none for `SecAction`
    /// and markers).
    pub(crate) links: Vec<Vec<LinkPlan>>,
    /// The distinct transformation chains.
    pub(crate) chains: Vec<Vec<Transform>>,
    /// Each chain's prefilter (none where no rule of the chain has a literal `@rx`).
    pub(crate) prefilters: Vec<Option<PatternSet>>,
    /// Scratch spaces for the prefilters, one set per transaction in flight; kept between
    /// transactions so that the lazy DFAs' states stay built.
    scratch: Mutex<Vec<Vec<Option<Scratch>>>>,
}

impl Plan {
    pub(crate) fn new(set: &RuleSet) -> Result<Plan, LoadError> {
        let mut chains: Vec<Vec<Transform>> = Vec::new();
        let mut patterns: Vec<Vec<String>> = Vec::new();
        let mut links = Vec::with_capacity(set.rules.len());
        for rule in &set.rules {
            let Kind::Match { operator, targets } = &rule.kind else {
                links.push(Vec::new());
                continue;
            };
            let defaults =
                set.settings.defaults[usize::from(rule.phase().clamp(1, 5) - 1)].as_ref();
            // The first rule reads its own targets and those SecRuleUpdateTarget* adds; the
            // chained rules only theirs.
            let (mut read, own) = split(targets);
            let (added, updates) = split(updates(set, rule));
            read.extend(added);
            let first = (read, own, updates);
            let chained = rule.chain.iter().map(|l| {
                let (read, own) = split(&l.targets);
                (read, own, Vec::new())
            });
            let ops = std::iter::once((operator, &rule.actions, first)).chain(
                rule.chain
                    .iter()
                    .zip(chained)
                    .map(|(l, t)| (&l.operator, &l.actions, t)),
            );
            let mut plans = Vec::new();
            for (op, actions, (targets, exclusions, updates)) in ops {
                let matcher = Matcher::new(&op.op)
                    .map_err(|why| LoadError::at(&rule.origin, "SecRule", why))?;
                let steps = chain(actions, defaults);
                let id = match chains.iter().position(|c| *c == steps) {
                    Some(i) => i,
                    None => {
                        chains.push(steps);
                        patterns.push(Vec::new());
                        chains.len() - 1
                    }
                };
                let rx = match &op.op {
                    Op::Rx(e) if !actions.multi_match => e.literal().map(|p| {
                        let list = &mut patterns[id];
                        let at = list.iter().position(|x| x == p).unwrap_or_else(|| {
                            list.push(p.to_string());
                            list.len() - 1
                        });
                        at as u32
                    }),
                    _ => None,
                };
                plans.push(LinkPlan {
                    matcher,
                    chain: id as u32,
                    rx,
                    targets,
                    exclusions,
                    updates,
                });
            }
            links.push(plans);
        }
        let prefilters = patterns
            .iter()
            .map(|list| {
                if list.is_empty() {
                    return Ok(None);
                }
                let refs: Vec<&str> = list.iter().map(String::as_str).collect();
                PatternSet::new(&refs)
                    .map(Some)
                    .map_err(|(i, why)| LoadError {
                        place: String::new(),
                        directive: "SecRule".into(),
                        why: format!("`{}`: {why}", list[i]),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Plan {
            links,
            chains,
            prefilters,
            scratch: Mutex::new(Vec::new()),
        })
    }

    /// A set of scratch spaces for one transaction (give it back with [`Plan::give_back`]).
    pub(crate) fn take_scratch(&self) -> Vec<Option<Scratch>> {
        let kept = self.scratch.lock().unwrap_or_else(|p| p.into_inner()).pop();
        kept.unwrap_or_else(|| {
            self.prefilters
                .iter()
                .map(|p| p.as_ref().map(PatternSet::scratch))
                .collect()
        })
    }

    pub(crate) fn give_back(&self, scratch: Vec<Option<Scratch>>) {
        self.scratch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(scratch);
    }
}

/// `targets` as (those read, those excluded with `!`).
fn split<'t>(targets: impl IntoIterator<Item = &'t Target>) -> (Vec<Target>, Vec<Target>) {
    let (excluded, read) = targets.into_iter().cloned().partition(|t| t.exclude);
    (read, excluded)
}

/// The targets `SecRuleUpdateTargetById/ByTag` give `rule` (added, or with `!` left out).
fn updates<'s>(set: &'s RuleSet, rule: &'s Rule) -> impl Iterator<Item = &'s Target> {
    let id = rule.id().unwrap_or(0);
    let ex = &set.exclusions;
    let by_id = ex
        .targets_by_id
        .iter()
        .filter(move |((a, b), _)| (*a..=*b).contains(&id))
        .map(|(_, t)| t);
    let by_tag = ex
        .targets_by_tag
        .iter()
        .filter(|(tag, _)| rule.actions.tags.iter().any(|t| t == tag))
        .map(|(_, t)| t);
    by_id.chain(by_tag)
}

/// The transformations a rule applies: the phase's default ones unless the rule has a
/// `t:none`, then the rule's after its last `t:none` (libmodsecurity's
/// `executeTransformations`).
pub(crate) fn chain(actions: &Actions, defaults: Option<&Actions>) -> Vec<Transform> {
    let own = &actions.transforms;
    let apply = |steps: &[Step]| -> Vec<Transform> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Apply(t) => Some(*t),
                Step::Reset => None,
            })
            .collect()
    };
    match own.iter().rposition(|s| *s == Step::Reset) {
        Some(r) => apply(&own[r + 1..]),
        None => {
            let mut v = defaults.map(|d| apply(&d.transforms)).unwrap_or_default();
            v.extend(apply(own));
            v
        }
    }
}
