//! What the native engine computes once per rule set so that a request does less: each
//! rule's operators compiled, each rule's transformation chain interned (values are
//! transformed once per chain, not once per rule), and for each chain one multi-pattern
//! prefilter over the literal `@rx` of the rules that use it (a value is scanned once per
//! chain; each rule then looks its pattern up).

use super::action::Actions;
use super::error::LoadError;
use super::memo::Memos;
use super::operate::{Matcher, Phrasebook};
use super::operator::Op;
use super::pattern::whole::WholeSet;
use super::pattern::{PatternSet, Scratch};
use super::ruleset::{Kind, Rule, RuleSet};
use super::transform::{Step, Transform};
use super::variable::{Selector, Target, Var};
use std::sync::Mutex;

/// One rule of a chain, compiled.
#[derive(Debug)]
pub(crate) struct LinkPlan {
    pub(crate) matcher: Matcher,
    /// Its transformation chain (an index into [`Plan::chains`]).
    pub(crate) chain: u32,
    /// Its pattern in the chain's prefilter, for a literal `@rx` the prefilter decides
    /// (not with multiMatch, whose values are each stage of the chain).
    pub(crate) rx: Option<Literal>,
    /// Its `@pm` list in the plan's [`Phrasebook`] (not with multiMatch).
    pub(crate) pm: Option<u32>,
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
    /// For each of `targets`: the target's summary (an index shared by every link that
    /// reads the same target), for a target whose values all come from the request's data
    /// (each with its origin, so that its prefilter answers are memoized); none for TX, the
    /// matched variables and `&` counts, whose values change from rule to rule.
    pub(crate) summaries: Vec<Option<u32>>,
    /// For each of `targets` with a summary, for a link with `rx` or `pm`: the
    /// [`UnionGroup`] that answers whether any of the target's values can match it.
    pub(crate) unions: Vec<Option<u32>>,
    /// Where the link reads one TX value alone, with no transformation, capture,
    /// multiMatch or macro in its operator's argument: that value
    /// (`evaluate/tx_read.rs` reads it without the general path).
    pub(crate) tx: Option<TxRead>,
}

/// The TX value a link alone reads ([`LinkPlan::tx`]).
#[derive(Debug)]
pub(crate) struct TxRead {
    /// The key as the rule writes it (a count's value is named so).
    pub(crate) written: String,
    /// Lowered, as TX keeps its keys.
    pub(crate) key: String,
    /// `&TX:key`: how many values (0 or 1), not the value.
    pub(crate) counted: bool,
    /// Its number among the plan's reads (a recycled TX keeps each one's slot).
    pub(crate) n: usize,
}

impl TxRead {
    /// What a link with `targets` (its own and those added, `exclusions` and `updates` of
    /// it), transformed by `steps`, with `actions` and `op`, reads, where it reads one TX
    /// value alone; `n` its number, counted up where it does.
    fn of(
        link: (&[Target], &[Target], &[Target]),
        steps: &[Transform],
        actions: &Actions,
        op: &Op,
        n: &mut usize,
    ) -> Option<TxRead> {
        let (targets, exclusions, updates) = link;
        let [target] = targets else {
            return None;
        };
        let Selector::Key(written) = &target.selector else {
            return None;
        };
        let plain = target.var == Var::Tx
            && exclusions.is_empty()
            && updates.is_empty()
            && steps.is_empty()
            && !actions.capture
            && !actions.multi_match
            && op.macro_arg().is_none();
        plain.then(|| {
            *n += 1;
            TxRead {
                written: written.clone(),
                key: written.to_ascii_lowercase(),
                counted: target.count,
                n: *n - 1,
            }
        })
    }
}

/// The prefilter units of one chain asked together of every value of one target, at one
/// paranoia level: every unit of that level whose patterns some rule asks of the target
/// through the chain. The first rule to ask whether a target's values can match its
/// pattern has them all scanned and keeps what any value matched, a bit per pattern, so
/// each later rule reading the target through the chain at that level asks one bit (keyed
/// by the rule's unit instead, most rules walked the target's values again to ask their
/// own; the scans themselves are the same, so this saved under 1% of a GET's
/// instructions, CRS 3.3.4).
///
/// A `@pm` link's group is its (target, chain): its bits are the `@pm` lists with a phrase
/// in some value of the target through the chain, by the phrasebook (`phrases`).
#[derive(Debug)]
pub(crate) struct UnionGroup {
    pub(crate) chain: u32,
    pub(crate) units: Vec<u32>,
    pub(crate) phrases: bool,
}

/// A rule's literal `@rx` in its chain's prefilter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Literal {
    /// The pattern's index in the prefilter.
    pub(crate) pattern: u32,
    /// The prefilter's unit that answers it (`PatternSet::unit`, known once the
    /// prefilter is built).
    pub(crate) unit: u32,
}

/// The plan of a rule set.
#[derive(Debug)]
pub(crate) struct Plan {
    /// For each rule: its link plans, the chain's first rule first (none for `SecAction`
    /// and markers).
    pub(crate) links: Vec<Vec<LinkPlan>>,
    /// The distinct transformation chains, with every prefix of each.
    pub(crate) chains: Vec<Vec<Transform>>,
    /// By chain: the chain without its last step (none for a chain of one step or none):
    /// a value through a chain is its parent's result through one more step, so chains
    /// that share their first steps (CRS's `t:utf8toUnicode,t:urlDecodeUni,...` family)
    /// run them once per value.
    pub(crate) parents: Vec<Option<u32>>,
    /// Each chain's prefilter (none where no rule of the chain has a literal `@rx`).
    pub(crate) prefilters: Vec<Option<PatternSet>>,
    /// One automaton over the level-1 units of every chain's prefilter, for the bytes
    /// that several chains' values are (`pattern/whole.rs`).
    pub(crate) whole: Option<WholeSet>,
    /// One automaton over every `@pm` list (`operate/phrasebook.rs`).
    pub(crate) phrasebook: Option<Phrasebook>,
    /// The links' union groups (`LinkPlan::unions` indexes it).
    pub(crate) union_groups: Vec<UnionGroup>,
    /// What a transaction in flight works in, kept between transactions: the prefilters'
    /// scratch spaces (so that the lazy DFAs' states stay built) and the memos' maps (so
    /// that they are not grown again for each request).
    spaces: Mutex<Vec<Workspace>>,
}

/// What one transaction works in ([`Plan::take_space`]).
#[derive(Debug, Default)]
pub(crate) struct Workspace {
    /// The prefilters' scratch spaces, by chain.
    pub(crate) scratch: Vec<Option<Scratch>>,
    /// The whole-set automaton's.
    pub(crate) whole: Option<Scratch>,
    /// Empty when taken.
    pub(crate) memos: Memos,
}

/// A workspace whose memo holds more (value, chain) entries than this when given back is
/// not kept: one large request should not hold its memory for the process's life.
const KEPT_MEMO: usize = 4096;

impl Plan {
    pub(crate) fn new(set: &RuleSet) -> Result<Plan, LoadError> {
        let mut chains = Chains::default();
        let mut links = Vec::with_capacity(set.rules.len());
        let mut summarized: Vec<Target> = Vec::new();
        let mut reads = 0;
        let mut pm_lists: Vec<&[String]> = Vec::new();
        for rule in &set.rules {
            let Kind::Match { operator, targets } = &rule.kind else {
                links.push(Vec::new());
                continue;
            };
            let defaults =
                set.settings.defaults[usize::from(rule.phase().clamp(1, 5) - 1)].as_ref();
            let level = paranoia_level(&rule.actions);
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
                let mut matcher = Matcher::new(&op.op)
                    .map_err(|why| LoadError::at(&rule.origin, "SecRule", why))?;
                if actions.multi_match {
                    matcher = matcher.screened();
                }
                let steps = chain(actions, defaults);
                let tx = TxRead::of(
                    (&targets, &exclusions, &updates),
                    &steps,
                    actions,
                    &op.op,
                    &mut reads,
                );
                let id = chains.intern(steps);
                let summaries: Vec<Option<u32>> = targets
                    .iter()
                    .map(|t| summary(&mut summarized, t))
                    .collect();
                let rx = match &op.op {
                    Op::Rx(e) if !actions.multi_match => e.literal().map(|p| Literal {
                        pattern: chains.pattern(id, p, level, &summaries),
                        unit: 0,
                    }),
                    _ => None,
                };
                let pm = match &op.op {
                    Op::Pm(list) if !actions.multi_match => Some(list_index(&mut pm_lists, list)),
                    _ => None,
                };
                plans.push(LinkPlan {
                    matcher,
                    chain: id,
                    rx,
                    pm,
                    targets,
                    exclusions,
                    updates,
                    summaries,
                    unions: Vec::new(),
                    tx,
                });
            }
            links.push(plans);
        }
        let (chains, parents, prefilters, level1, union_groups) = chains.finish(&mut links)?;
        let whole = WholeSet::new(&prefilters, &level1);
        let phrasebook = Phrasebook::new(&pm_lists);
        Ok(Plan {
            links,
            chains,
            parents,
            prefilters,
            whole,
            phrasebook,
            union_groups,
            spaces: Mutex::new(Vec::new()),
        })
    }

    /// A workspace for one transaction (give it back with [`Plan::give_back`]).
    pub(crate) fn take_space(&self) -> Workspace {
        let kept = self.spaces.lock().unwrap_or_else(|p| p.into_inner()).pop();
        kept.unwrap_or_else(|| Workspace {
            scratch: self
                .prefilters
                .iter()
                .map(|p| p.as_ref().map(PatternSet::scratch))
                .collect(),
            whole: self.whole.as_ref().map(WholeSet::scratch),
            memos: Memos::default(),
        })
    }

    pub(crate) fn give_back(&self, mut space: Workspace) {
        if space.memos.values.len() > KEPT_MEMO {
            space.memos = Memos::default();
        }
        space.memos.clear();
        self.spaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(space);
    }
}

/// The distinct transformation chains of a rule set and, for each, the literal `@rx`
/// patterns of the rules that use it, while the plan is made.
#[derive(Default)]
struct Chains {
    chains: Vec<Vec<Transform>>,
    parents: Vec<Option<u32>>,
    /// By chain: each pattern, the lowest paranoia level of the rules using it, and the
    /// targets they read (their summaries, `u32::MAX` for one without).
    patterns: Vec<Vec<(String, u8, Vec<u32>)>>,
}

impl Chains {
    /// The index of `steps` among the chains (added if new, after its prefixes).
    fn intern(&mut self, steps: Vec<Transform>) -> u32 {
        if let Some(at) = self.chains.iter().position(|c| *c == steps) {
            return at as u32;
        }
        let parent = (steps.len() > 1).then(|| self.intern(steps[..steps.len() - 1].to_vec()));
        self.chains.push(steps);
        self.parents.push(parent);
        self.patterns.push(Vec::new());
        (self.chains.len() - 1) as u32
    }

    /// The index of `pattern` among `chain`'s (added if new), for a rule at `level`
    /// reading the targets of `summaries`.
    fn pattern(&mut self, chain: u32, pattern: &str, level: u8, summaries: &[Option<u32>]) -> u32 {
        let list = &mut self.patterns[chain as usize];
        let at = match list.iter().position(|(x, ..)| x == pattern) {
            Some(i) => {
                list[i].1 = list[i].1.min(level);
                i
            }
            None => {
                list.push((pattern.to_string(), level, Vec::new()));
                list.len() - 1
            }
        };
        let reads = &mut list[at].2;
        reads.extend(summaries.iter().map(|s| s.unwrap_or(u32::MAX)));
        reads.sort_unstable();
        reads.dedup();
        at as u32
    }

    /// The chains and their prefilters, each chain's patterns ordered by paranoia level
    /// (the links' pattern indexes renumbered to match, and their units filled in), and by
    /// chain how many of its patterns are of level 1 (its first ones). A
    /// prefilter scans a value with an automaton only once a rule asks one of its
    /// patterns; with the patterns of paranoia level 1 together, a site at level 1 never
    /// runs the automata of the others. Also the links' union groups ([`UnionGroup`]).
    #[allow(
        clippy::type_complexity,
        reason = "the five parts of the plan it makes"
    )]
    fn finish(
        self,
        links: &mut [Vec<LinkPlan>],
    ) -> Result<
        (
            Vec<Vec<Transform>>,
            Vec<Option<u32>>,
            Vec<Option<PatternSet>>,
            Vec<usize>,
            Vec<UnionGroup>,
        ),
        LoadError,
    > {
        let mut renumber = Vec::with_capacity(self.patterns.len());
        let mut prefilters = Vec::with_capacity(self.patterns.len());
        let level1 = self
            .patterns
            .iter()
            .map(|list| list.iter().filter(|(_, level, _)| *level <= 1).count())
            .collect();
        for list in &self.patterns {
            // Patterns asked of the same values together: by level, then by the targets
            // their rules read, so that an automaton scans a value only where most of its
            // patterns are asked of it (a raw form body was scanned by a unit of CRS 3.3.4
            // holding 942130's costly pattern, read of ARGS, because 944's rules of the
            // same chain read REQUEST_BODY: 80-170 µs a pass where the others take 25).
            let mut reads: Vec<&[u32]> = Vec::new();
            let kind: Vec<u32> = list
                .iter()
                .map(|(_, _, r)| {
                    let at = reads.iter().position(|x| x == r).unwrap_or_else(|| {
                        reads.push(r);
                        reads.len() - 1
                    });
                    at as u32
                })
                .collect();
            let mut order: Vec<usize> = (0..list.len()).collect();
            order.sort_by_key(|&i| (list[i].1, kind[i], i));
            let mut new = vec![0_u32; list.len()];
            for (to, &from) in order.iter().enumerate() {
                new[from] = to as u32;
            }
            renumber.push(new);
            if list.is_empty() {
                prefilters.push(None);
                continue;
            }
            let refs: Vec<&str> = order.iter().map(|&i| list[i].0.as_str()).collect();
            let groups: Vec<u32> = order
                .iter()
                .map(|&i| u32::from(list[i].1) << 24 | kind[i])
                .collect();
            let set = PatternSet::grouped(&refs, &groups).map_err(|(i, why)| LoadError {
                place: String::new(),
                directive: "SecRule".into(),
                why: format!("`{}`: {why}", refs[i]),
            })?;
            prefilters.push(Some(set));
        }
        for l in links.iter_mut().flatten() {
            if let Some(rx) = &mut l.rx {
                rx.pattern = renumber[l.chain as usize][rx.pattern as usize];
                if let Some(set) = &prefilters[l.chain as usize] {
                    rx.unit = set.unit(rx.pattern as usize) as u32;
                }
            }
        }
        let groups = self.union_groups(&renumber, &prefilters, links);
        Ok((self.chains, self.parents, prefilters, level1, groups))
    }

    /// The union groups ([`UnionGroup`]), each link's filled in: one per (target summary,
    /// chain, paranoia level of the pattern), holding every unit of the chain's prefilter
    /// with a pattern of that level read of that target. A link's own unit is always in
    /// its group: its pattern's level and targets are among those the pattern records.
    fn union_groups(
        &self,
        renumber: &[Vec<u32>],
        prefilters: &[Option<PatternSet>],
        links: &mut [Vec<LinkPlan>],
    ) -> Vec<UnionGroup> {
        // (summary, chain, level, phrases)
        let mut keys: Vec<(u32, u32, u8, bool)> = Vec::new();
        let mut groups: Vec<UnionGroup> = Vec::new();
        for (chain, list) in self.patterns.iter().enumerate() {
            let Some(set) = &prefilters[chain] else {
                continue;
            };
            for (old, (_, level, reads)) in list.iter().enumerate() {
                let unit = set.unit(renumber[chain][old] as usize) as u32;
                for &s in reads.iter().filter(|&&s| s != u32::MAX) {
                    let key = (s, chain as u32, *level, false);
                    let at = group_of(&mut keys, &mut groups, key);
                    if !groups[at].units.contains(&unit) {
                        groups[at].units.push(unit);
                    }
                }
            }
        }
        for l in links.iter_mut().flatten() {
            l.unions = l
                .summaries
                .iter()
                .map(|s| {
                    let s = (*s)?;
                    if l.pm.is_some() {
                        let key = (s, l.chain, 0, true);
                        return Some(group_of(&mut keys, &mut groups, key) as u32);
                    }
                    let rx = l.rx?;
                    let chain = l.chain as usize;
                    let old = renumber[chain].iter().position(|&n| n == rx.pattern)?;
                    let key = (s, l.chain, self.patterns[chain][old].1, false);
                    keys.iter().position(|k| *k == key).map(|i| i as u32)
                })
                .collect();
        }
        for g in &mut groups {
            g.units.sort_unstable();
        }
        groups
    }
}

/// The index of the union group of `key` (summary, chain, level, phrases), made if new.
fn group_of(
    keys: &mut Vec<(u32, u32, u8, bool)>,
    groups: &mut Vec<UnionGroup>,
    key: (u32, u32, u8, bool),
) -> usize {
    keys.iter().position(|k| *k == key).unwrap_or_else(|| {
        keys.push(key);
        groups.push(UnionGroup {
            chain: key.1,
            units: Vec::new(),
            phrases: key.3,
        });
        keys.len() - 1
    })
}

/// The index of `list` among `lists` (added if new).
fn list_index<'s>(lists: &mut Vec<&'s [String]>, list: &'s [String]) -> u32 {
    let at = lists.iter().position(|l| *l == list).unwrap_or_else(|| {
        lists.push(list);
        lists.len() - 1
    });
    at as u32
}

/// A rule's paranoia level by CRS's tag (`paranoia-level/2`); 1 for a rule without one.
fn paranoia_level(actions: &Actions) -> u8 {
    actions
        .tags
        .iter()
        .find_map(|t| t.strip_prefix("paranoia-level/")?.parse().ok())
        .unwrap_or(1)
}

/// The summary index of `target` among `known` (added there if new), or none where its
/// values do not all come from the request's data.
fn summary(known: &mut Vec<Target>, target: &Target) -> Option<u32> {
    let changing = target.var.is_writable()
        || matches!(
            target.var,
            Var::MatchedVar | Var::MatchedVarName | Var::MatchedVars | Var::MatchedVarsNames
        );
    if target.count || changing {
        return None;
    }
    let at = known.iter().position(|k| k == target).unwrap_or_else(|| {
        known.push(target.clone());
        known.len() - 1
    });
    u32::try_from(at).ok()
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
