//! Running a loaded rule set on a request: the phase loop and one rule's evaluation, in the
//! order and with the quirks of libmodsecurity 3.0.9 (`RulesSet::evaluate`,
//! `RuleWithOperator::evaluate`, `RuleWithActions::executeActions*`), which the
//! differential tests hold it to:
//!
//! - a rule's `setvar`s run once per value that matched (so CRS's anomaly score grows with
//!   each matching argument), its other actions once, after the whole chain matched;
//! - `block` takes the phase's `SecDefaultAction` disruptive action; disruptive actions run
//!   only with the engine `On`; a disruptive match ends the phase;
//! - `skipAfter` skips to the named marker, `skip:N` the next N rules, `allow` the rest of
//!   its scope;
//! - a target excluded with `!VAR:key` is compared by its full name as written (with case),
//!   a `ctl:ruleRemoveTargetById` likewise, and neither reaches a chained rule.

use super::action::{Actions, AllowScope, Ctl, Disruptive, Effect, Engine, SetOp};
use super::error::LoadError;
use super::expand::Expansion;
use super::operate::stoi;
use super::operator::Operator;
use super::plan::{LinkPlan, Plan, Workspace};
use super::request::{BodyLimit, RequestData};
use super::ruleset::{Kind, Rule, RuleSet};
use super::transaction::{Event, Intervention, Transaction, Value, with_lowercase};
use super::variable::{Selector, Target};
use crate::facts::{RequestFacts, ResponseFacts};
use crate::matches::Match;
use std::borrow::Cow;

/// A rule set ready to run: each rule's operators compiled, the rules of each phase listed.
#[derive(Debug)]
pub struct NativeRules {
    set: RuleSet,
    /// Indexes into `set.rules`, by phase (0 is phase 1).
    phases: [Vec<usize>; 5],
    /// By rule: whether `SecRuleRemoveBy*` took it out (known at load; asked per rule
    /// per request in the phase loop, where a skip still counts it).
    removed: Vec<bool>,
    plan: Plan,
    /// This rule set's number in the process (from 1), by which a recycled TX knows
    /// whose reads' slots it keeps.
    id: u64,
}

/// The next rule set's [`NativeRules::id`].
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A request's transaction kept for its response's phases.
#[derive(Debug)]
pub struct Kept(Box<Transaction>);

/// What a request's phases 1 and 2 (or a response's 3 and 4) gave.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The disruptive action, if a rule took one.
    pub intervention: Option<crate::Intervention>,
    /// The rules that matched and log, in order.
    pub matches: Vec<Match>,
}

impl NativeRules {
    /// `set` compiled; an operator that cannot be compiled names its rule.
    pub fn new(set: RuleSet) -> Result<NativeRules, LoadError> {
        let plan = Plan::new(&set)?;
        let mut phases: [Vec<usize>; 5] = Default::default();
        for (p, list) in phases.iter_mut().enumerate() {
            let phase = u8::try_from(p + 1).unwrap_or(5);
            *list = (0..set.rules.len())
                .filter(|&i| {
                    let r = &set.rules[i];
                    matches!(r.kind, Kind::Marker(_)) || r.phase() == phase
                })
                .collect();
        }
        let removed = set.rules.iter().map(|r| set.removed(r)).collect();
        Ok(NativeRules {
            set,
            phases,
            removed,
            plan,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The rules it runs (for a profile's names: `native::profile` counts by index).
    pub fn rule_set(&self) -> &RuleSet {
        &self.set
    }

    /// Phases 1 and 2 of `facts`, as the libmodsecurity engine runs them.
    pub fn inspect(&self, facts: &RequestFacts) -> Outcome {
        self.request(facts, false).0
    }

    /// Phases 1 and 2 of `facts`; with `keep`, and unless a rule intervened, the
    /// transaction for [`NativeRules::response`] (TX carries over to the response's
    /// phases, as CRS's outbound rules expect).
    pub fn request(&self, facts: &RequestFacts, keep: bool) -> (Outcome, Option<Kept>) {
        let mut t = Transaction::new(RequestData::head(facts), self.set.settings.engine);
        self.take_space(&mut t);
        self.phase(&mut t, 1);
        // Without body access libmodsecurity runs no phase 2 (`processRequestBody`).
        if t.intervention.is_none()
            && t.body_access
                .unwrap_or(self.set.settings.request_body_access)
        {
            t.request.body(facts, t.body_processor, &self.set.settings);
            t.memo.borrow_mut().clear();
            self.phase(&mut t, 2);
        }
        self.give_back(&mut t);
        let outcome = outcome(&mut t);
        let kept = (keep && outcome.intervention.is_none()).then(|| Kept(Box::new(t)));
        (outcome, kept)
    }

    /// Phases 3 and 4 of `facts` with its request's transaction, as libmodsecurity runs
    /// them (`processResponseHeaders`, `appendResponseBody`, `processResponseBody`): none
    /// with the engine `Off` (`ctl:ruleEngine` included), phase 4 only with response body
    /// access and a listed type. `body`: the body as the rules see it (decoded, at most the
    /// route's limit). The outcome holds only what the response matched.
    pub fn response(&self, kept: &mut Kept, facts: &ResponseFacts, body: &[u8]) -> Outcome {
        let t = &mut *kept.0;
        t.request.response_head(facts);
        if t.engine == Engine::Off {
            return Outcome::default();
        }
        self.take_space(t);
        self.phase(t, 3);
        let settings = &self.set.settings;
        if t.intervention.is_none() && t.request.response_body_inspected(settings) {
            // Rejected, libmodsecurity decides its 403 and still runs phase 4, where the
            // first rule runs and a matching `pass` rule takes the decision back.
            if t.request.response_body(body, settings) == BodyLimit::Rejected
                && t.engine == Engine::On
            {
                t.intervention = Some(Intervention {
                    status: 403,
                    rule: 0,
                    drop: false,
                    redirect: None,
                });
            }
            t.memo.borrow_mut().clear();
            self.phase(t, 4);
        }
        self.give_back(t);
        outcome(t)
    }

    /// Gives `t` a workspace from the plan's (its memo empty).
    fn take_space(&self, t: &mut Transaction) {
        let space = self.plan.take_space();
        *t.scratch.get_mut() = space.scratch;
        *t.whole.get_mut() = space.whole;
        *t.memo.get_mut() = space.memos;
    }

    /// Gives `t`'s workspace back to the plan.
    fn give_back(&self, t: &mut Transaction) {
        self.plan.give_back(Workspace {
            scratch: t.scratch.take(),
            whole: t.whole.take(),
            memos: t.memo.take(),
        });
    }

    fn phase(&self, t: &mut Transaction, phase: u8) {
        match t.allow {
            Some(AllowScope::All) if phase != 5 => return,
            Some(AllowScope::Request) if phase <= 2 => return,
            _ => t.allow = None,
        }
        for &i in &self.phases[usize::from(phase - 1)] {
            let rule = &self.set.rules[i];
            if let Kind::Marker(name) = &rule.kind {
                if t.marker.as_deref() == Some(name) {
                    t.marker = None;
                }
                continue;
            }
            if t.marker.is_some() {
                continue;
            }
            if t.skip_next > 0 {
                t.skip_next -= 1;
                continue;
            }
            if t.allow.is_some() || self.removed[i] || removed_by_tag(t, &rule.actions) {
                continue;
            }
            super::profile::rule(i, || self.rule(t, i));
            if t.intervention.is_some() {
                break;
            }
        }
    }

    /// One rule with its chain; whether it matched.
    fn rule(&self, t: &mut Transaction, i: usize) -> bool {
        let rule = &self.set.rules[i];
        let Kind::Match { operator, .. } = &rule.kind else {
            // SecAction: everything runs, once.
            self.setvars(t, rule, &rule.actions);
            self.after_match(t, rule, &rule.actions, true);
            return true;
        };
        let id = rule.id().unwrap_or(0);
        if t.removed_ids.iter().any(|&(a, b)| (a..=b).contains(&id)) {
            return true;
        }
        let link = Link {
            plan: &self.plan.links[i][0],
            operator,
            actions: &rule.actions,
            id: Some(id),
            tags: &rule.actions.tags,
        };
        if !self.link(t, rule, &link) {
            return false;
        }
        for (k, l) in rule.chain.iter().enumerate() {
            let chained = Link {
                plan: &self.plan.links[i][k + 1],
                operator: &l.operator,
                actions: &l.actions,
                id: None,
                tags: &[],
            };
            if !self.link(t, rule, &chained) {
                return false;
            }
        }
        // The chain's actions after the whole chain matched: the last rule's first, as
        // libmodsecurity's recursion runs them.
        for l in rule.chain.iter().rev() {
            self.after_match(t, rule, &l.actions, false);
        }
        self.after_match(t, rule, &rule.actions, true);
        true
    }
}

/// One rule of a chain as it is evaluated.
struct Link<'a> {
    /// Its operator, transformations and targets, compiled.
    plan: &'a LinkPlan,
    operator: &'a Operator,
    actions: &'a Actions,
    /// The chain's first rule's id (chained rules have none: ctl's target removal and
    /// `ruleRemoveById` do not reach them).
    id: Option<u64>,
    tags: &'a [String],
}

impl NativeRules {
    /// Whether any value of the link's targets matches; each match runs the link's
    /// `setvar`s. Two passes: the values are looked at without copying them (the
    /// transaction borrowed, its memo behind a `RefCell`), and what the matches change
    /// (captures, MATCHED_VAR, `setvar`, multiMatch's messages) is applied after, in the
    /// order it happened. The operator reads no TX of its own (its macro argument is
    /// expanded first), so the order of evaluation is libmodsecurity's.
    fn link(&self, t: &mut Transaction, rule: &Rule, link: &Link<'_>) -> bool {
        if let Some(read) = &link.plan.tx
            && let Some(matched) = self.tx_link(t, rule, link, read)
        {
            return matched;
        }
        let arg = link.operator.op.macro_arg().map(|e| t.expand(e, rule));
        // The transaction's list, reused from link to link.
        let mut events = std::mem::take(&mut t.events);
        self.look(t, link, arg.as_deref(), &mut events);
        let matched = events.iter().any(|e| matches!(e, Event::Match(_)));
        for e in events.drain(..) {
            match e {
                Event::Capture(groups) => {
                    for (k, g) in groups.into_iter().enumerate() {
                        t.tx.set(capture_key(k).as_ref(), g);
                    }
                }
                Event::Match(v) => {
                    t.matched(v);
                    self.setvars(t, rule, link.actions);
                    // With multiMatch libmodsecurity logs each match as it happens
                    // (`performLogging` before the chain), and not after the chain.
                    if link.actions.multi_match && self.logs(rule, link.actions) {
                        let m = self.message(t, rule);
                        t.messages.push(m);
                    }
                }
            }
        }
        t.events = events;
        if !matched {
            t.matched_vars.clear();
        }
        matched
    }

    /// The first pass of [`NativeRules::link`]: each value through the operator.
    fn look(&self, t: &Transaction, link: &Link<'_>, arg: Option<&[u8]>, events: &mut Vec<Event>) {
        for (k, target) in link.plan.targets.iter().enumerate() {
            if removed_whole(t, link, target) {
                continue;
            }
            // A pattern none of the target's values matches: nothing to look at (a
            // negated operator matches those, so it looks).
            if !link.operator.negated && self.may_match(t, link, k, target) == Some(false) {
                continue;
            }
            t.each_value(target, |v| {
                if excluded(&link.plan.exclusions, target, &v)
                    || updated_out(&link.plan.updates, &v)
                    || removed_target(t, link, &v)
                {
                    return;
                }
                if link.actions.multi_match {
                    self.stages(t, link, &v.bytes, |stage| {
                        self.operate(link, &v, stage, arg, None, events);
                    });
                    return;
                }
                let known = self.prefilter(t, link, &v);
                if known == Some(false) && !link.operator.negated {
                    return;
                }
                self.with_transformed(t, link, &v, |stage| {
                    self.operate(link, &v, stage, arg, known, events);
                });
            });
        }
    }

    /// One value (one stage of it with multiMatch) through the operator. `known`: the
    /// prefilter's answer for the operator, where it has one.
    fn operate(
        &self,
        link: &Link<'_>,
        v: &Value<'_>,
        stage: &[u8],
        arg: Option<&[u8]>,
        known: Option<bool>,
        events: &mut Vec<Event>,
    ) {
        let capture = link.actions.capture;
        let mut groups = Vec::new();
        let hit = match known {
            Some(false) => false,
            Some(true) if !capture => true,
            Some(true) => link.plan.matcher.captures(stage, arg, &mut groups),
            None => link
                .plan
                .matcher
                .matches(stage, arg, capture.then_some(&mut groups)),
        };
        // The captures are stored when the operator matched, even where a negated rule
        // then does not.
        if capture && hit {
            events.push(Event::Capture(groups));
        }
        if hit != link.operator.negated {
            events.push(Event::Match(Value {
                origin: None,
                var: v.var,
                key: Cow::Owned(v.key.to_vec()),
                keyed: v.keyed,
                bytes: Cow::Owned(stage.to_vec()),
            }));
        }
    }

    /// Calls `f` with multiMatch's values: the original, then each transformation's result
    /// that changed it.
    fn stages(&self, t: &Transaction, link: &Link<'_>, value: &[u8], mut f: impl FnMut(&[u8])) {
        f(value);
        // The transaction's two buffers, reused from value to value.
        let (mut current, mut next) = std::mem::take(&mut t.memo.borrow_mut().stages);
        // Whether `current` holds the latest stage (else it is `value`).
        let mut changed = false;
        for tr in &self.plan.chains[link.plan.chain as usize] {
            let input: &[u8] = if changed { &current } else { value };
            if tr.leaves(input) {
                continue;
            }
            tr.apply(input, &mut next);
            if next != input {
                f(&next);
                std::mem::swap(&mut current, &mut next);
                changed = true;
            }
        }
        t.memo.borrow_mut().stages = (current, next);
    }

    fn defaults(&self, rule: &Rule) -> Option<&Actions> {
        self.set.settings.defaults[usize::from(rule.phase().clamp(1, 5) - 1)].as_ref()
    }

    /// `setvar`s of `actions`, in order.
    fn setvars(&self, t: &mut Transaction, rule: &Rule, actions: &Actions) {
        for e in &actions.effects {
            let Effect::SetVar(s) = e else { continue };
            if s.var != super::variable::Var::Tx {
                continue;
            }
            // A literal key (most of CRS's) is the rule's own text, lowered at load.
            if let Some(key) = s.key.literal() {
                setvar(t, rule, key, &s.op);
                continue;
            }
            let raw = t.expand_text(&s.key, rule);
            // Every byte kept (a name from the request may not be UTF-8): distinct names,
            // distinct keys.
            let key = super::tx_key::text(&raw);
            t.tx_escaped |= matches!(key, Cow::Owned(_));
            with_lowercase(&key, |key| setvar(t, rule, key, &s.op));
        }
    }

    /// What runs once the whole chain matched: ctl, skip, status, the disruptive action and
    /// (for the chain's first rule) the message.
    fn after_match(&self, t: &mut Transaction, rule: &Rule, actions: &Actions, first: bool) {
        for e in &actions.effects {
            if let Effect::Ctl(c) = e {
                ctl(t, c);
            }
        }
        if let Some(n) = actions.skip {
            t.skip_next = n;
        }
        if let Some(m) = &actions.skip_after {
            t.marker = Some(m.clone());
        }
        if let Some(s) = actions.status {
            t.status = Some(s);
        }
        if !first {
            return;
        }
        let defaults = self.defaults(rule);
        let log = self.logs(rule, actions);
        let disruptive = match &actions.disruptive {
            Some(Disruptive::Block) => defaults.and_then(|d| d.disruptive.clone()),
            other => other.clone(),
        };
        let status = actions.status.or_else(|| defaults.and_then(|d| d.status));
        if log && !actions.multi_match {
            t.messages.push(self.message(t, rule));
        }
        if t.engine != Engine::On {
            return;
        }
        let id = rule.id().unwrap_or(0);
        let intervene = |drop, redirect| Intervention {
            status: status.unwrap_or(403),
            rule: id,
            drop,
            redirect,
        };
        match disruptive {
            Some(Disruptive::Deny) => t.intervention = Some(intervene(false, None)),
            Some(Disruptive::Drop) => t.intervention = Some(intervene(true, None)),
            Some(Disruptive::Redirect(to)) => {
                let url = String::from_utf8_lossy(&t.expand(&to, rule)).into_owned();
                let mut i = intervene(false, Some(url));
                i.status = status.unwrap_or(302);
                t.intervention = Some(i);
            }
            Some(Disruptive::Allow(scope)) => t.allow = Some(scope),
            // libmodsecurity's `pass` clears a decision taken before its rule ran (one a
            // body over its limit took, say).
            Some(Disruptive::Pass) => t.intervention = None,
            Some(Disruptive::Block) | None => {}
        }
    }

    /// Whether a match of `rule` is logged: its own `log`/`nolog`, else its phase's
    /// `SecDefaultAction`'s, else yes.
    fn logs(&self, rule: &Rule, actions: &Actions) -> bool {
        actions
            .log
            .or(rule.actions.log)
            .or_else(|| self.defaults(rule).and_then(|d| d.log))
            .unwrap_or(true)
    }

    fn message(&self, t: &Transaction, rule: &Rule) -> Match {
        let text = |e: &Option<Expansion>| {
            e.as_ref()
                .map(|e| String::from_utf8_lossy(&t.expand(e, rule)).into_owned())
                .unwrap_or_default()
        };
        let mut data = text(&rule.actions.logdata);
        if data.len() > crate::matches::MAX_DATA {
            let mut cut = crate::matches::MAX_DATA;
            while !data.is_char_boundary(cut) {
                cut -= 1;
            }
            data.truncate(cut);
            data.push('…');
        }
        Match {
            id: u32::try_from(rule.id().unwrap_or(0)).unwrap_or(u32::MAX),
            msg: text(&rule.actions.msg),
            data,
            severity: rule.actions.severity,
        }
    }
}

/// The intervention and messages so far, taken from `t`.
fn outcome(t: &mut Transaction) -> Outcome {
    Outcome {
        intervention: t.intervention.take().map(|i| crate::Intervention {
            status: i.status,
            url: i.redirect,
            log: None,
        }),
        matches: std::mem::take(&mut t.messages),
    }
}

/// Whether the rule's own `!VAR:key` or `!VAR:/regex/` leaves `v` of `target` out.
fn excluded(exclusions: &[Target], target: &Target, v: &Value<'_>) -> bool {
    exclusions.iter().any(|x| {
        x.var == target.var
            && match &x.selector {
                Selector::Key(k) => v.key.eq_ignore_ascii_case(k.as_bytes()),
                Selector::Regex(re) => key_matches(re, &v.key),
                Selector::All | Selector::XPath(_) => false,
            }
    })
}

/// Whether a `SecRuleUpdateTargetBy*` exclusion leaves `v` out: its full name as written
/// (with case), or its regular expression on the key of any variable.
fn updated_out(updates: &[Target], v: &Value<'_>) -> bool {
    updates.iter().any(|x| match &x.selector {
        Selector::Key(k) => v.var == x.var && v.keyed && &*v.key == k.as_bytes(),
        Selector::Regex(re) => key_matches(re, &v.key),
        Selector::All | Selector::XPath(_) => v.var == x.var && !v.keyed,
    })
}

fn key_matches(re: &str, key: &[u8]) -> bool {
    super::key_regex::with_key_regex(re, |r| r.is_some_and(|r| r.is_match(key)))
}

/// Whether this transaction's `ctl:ruleRemoveTarget*` names the whole target as written
/// (`getFinalVars`).
fn removed_whole(t: &Transaction, link: &Link<'_>, target: &Target) -> bool {
    let Some(id) = link.id else { return false };
    if t.removed_targets_by_id.is_empty() && t.removed_targets_by_tag.is_empty() {
        return false;
    }
    t.removed_targets_by_id
        .iter()
        .any(|(r, n)| *r == id && target.is_named(n))
        || t.removed_targets_by_tag
            .iter()
            .any(|(tag, n)| link.tags.iter().any(|x| x == tag) && target.is_named(n))
}

/// Whether this transaction's `ctl:ruleRemoveTarget*` took `v` out of the link.
fn removed_target(t: &Transaction, link: &Link<'_>, v: &Value<'_>) -> bool {
    let Some(id) = link.id else { return false };
    t.removed_targets_by_id
        .iter()
        .any(|(r, name)| *r == id && v.name_is(name))
        || t.removed_targets_by_tag
            .iter()
            .any(|(tag, name)| link.tags.iter().any(|x| x == tag) && v.name_is(name))
}

fn removed_by_tag(t: &Transaction, actions: &Actions) -> bool {
    // (Most transactions remove none: a rule's half-dozen tags are not walked then.)
    !t.removed_tags.is_empty()
        && actions
            .tags
            .iter()
            .any(|tag| t.removed_tags.iter().any(|x| x == tag))
}

/// A `ctl:` for the rest of the transaction.
fn ctl(t: &mut Transaction, c: &Ctl) {
    match c {
        Ctl::RuleEngine(e) => t.engine = *e,
        Ctl::RequestBodyProcessor(p) => {
            t.body_processor = Some(*p);
            t.request.set_processor(*p);
            t.memo.borrow_mut().clear();
        }
        Ctl::RuleRemoveById(ids) => t.removed_ids.extend(ids.iter().copied()),
        Ctl::RuleRemoveByTag(tag) => t.removed_tags.push(tag.clone()),
        // libmodsecurity reads one id (`stoi` of the text before `;`).
        Ctl::RuleRemoveTargetById(ids, target) => {
            if let Some(&(id, _)) = ids.first() {
                t.removed_targets_by_id.push((id, target.full_name()));
            }
        }
        Ctl::RuleRemoveTargetByTag(tag, target) => {
            t.removed_targets_by_tag
                .push((tag.clone(), target.full_name()));
        }
        Ctl::RequestBodyAccess(on) => t.body_access = Some(*on),
        Ctl::ForceRequestBodyVariable(_) | Ctl::Audit => {}
    }
}

mod prefilter;
#[cfg(all(test, feature = "modsecurity"))]
mod tests;
mod tx_read;
#[cfg(all(test, feature = "modsecurity"))]
mod variants;

/// TX's key for capture group `k` (`TX:0` the whole match): the first ten without an
/// allocation, as most rules that capture set them.
fn capture_key(k: usize) -> Cow<'static, str> {
    const KEYS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    KEYS.get(k)
        .map_or_else(|| Cow::Owned(k.to_string()), |s| Cow::Borrowed(*s))
}

/// One `setvar` on TX's `key` (lower-cased). An existing value's buffer is reused: CRS
/// adds to its scores in most rules that match.
fn setvar(t: &mut Transaction, rule: &Rule, key: &str, op: &SetOp) {
    match op {
        SetOp::Set(v) => {
            let v = t.expand_text(v, rule);
            t.tx.set_bytes(key, &v);
        }
        SetOp::Add(v) | SetOp::Sub(v) => {
            let by = stoi(&t.expand_text(v, rule));
            let now = t.tx_int(key);
            let n = if matches!(op, SetOp::Add(_)) {
                now + by
            } else {
                now - by
            };
            let mut digits = itoa::Buffer::new();
            t.tx.set_bytes(key, digits.format(n).as_bytes());
        }
        SetOp::Delete => t.tx.remove(key),
    }
}
