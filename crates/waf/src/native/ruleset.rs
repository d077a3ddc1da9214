//! A loaded rule set: the rules in order with their chains and markers, the engine's
//! settings, and the exclusions that apply to every rule (`SecRuleRemoveById`,
//! `SecRuleUpdateTargetById`), kept apart as ModSecurity v3 keeps them, so that an exclusion
//! written before or after its rule has the same effect.

use super::action::{Actions, Engine, Phase};
use super::error::Origin;
use super::operator::Operator;
use super::variable::Target;

/// One `SecRule`, `SecAction` or `SecMarker`, with the rules chained to it.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Where it is written.
    pub origin: Origin,
    /// What it is.
    pub kind: Kind,
    /// The rule's own actions, as written (the phase's `SecDefaultAction` is merged when
    /// the rule runs, as ModSecurity v3 merges it).
    pub actions: Actions,
    /// The rules after `chain`, in order: each runs only if the one before matched.
    pub chain: Vec<Link>,
}

/// What a [`Rule`] is.
#[derive(Debug, Clone)]
pub enum Kind {
    /// `SecRule`.
    Match {
        /// What it inspects.
        targets: Vec<Target>,
        /// What it looks for.
        operator: Operator,
    },
    /// `SecAction`: matches unconditionally.
    Action,
    /// `SecMarker`: where a `skipAfter` with its name resumes.
    Marker(String),
}

/// A rule after `chain`.
#[derive(Debug, Clone)]
pub struct Link {
    /// Where it is written.
    pub origin: Origin,
    /// What it inspects.
    pub targets: Vec<Target>,
    /// What it looks for.
    pub operator: Operator,
    /// Its own actions (no id, phase or disruptive action: the chain's first rule has those).
    pub actions: Actions,
}

impl Rule {
    /// The rule's id (markers and their like have none).
    pub fn id(&self) -> Option<u64> {
        self.actions.id
    }

    /// Its phase: as written, else 2 (ModSecurity's default).
    pub fn phase(&self) -> Phase {
        self.actions.phase.unwrap_or(2)
    }

    /// Whether the chain is still waiting for its next rule.
    pub(super) fn open_chain(&self) -> bool {
        match self.chain.last() {
            Some(link) => link.actions.chain,
            None => self.actions.chain,
        }
    }
}

/// What `SecRequestBodyLimitAction` and `SecResponseBodyLimitAction` say.
#[expect(missing_docs, reason = "the directives' two values")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitAction {
    Reject,
    ProcessPartial,
}

/// The engine's settings, from the configuration directives.
#[expect(
    missing_docs,
    reason = "each field is the Sec directive of the same name"
)]
#[derive(Debug, Clone)]
pub struct Settings {
    pub engine: Engine,
    pub request_body_access: bool,
    pub request_body_limit: u64,
    pub request_body_no_files_limit: u64,
    pub request_body_limit_action: LimitAction,
    pub response_body_access: bool,
    pub response_body_limit: u64,
    pub response_body_limit_action: LimitAction,
    /// `SecResponseBodyMimeType`'s types as written (libmodsecurity compares them with
    /// case); `None` until the directive is given, when every type is inspected.
    pub response_mime_types: Option<Vec<String>>,
    /// `SecDefaultAction` by phase (index 0 is phase 1).
    pub defaults: [Option<Actions>; 5],
}

impl Default for Settings {
    /// ModSecurity v3's defaults.
    fn default() -> Self {
        Settings {
            engine: Engine::Off,
            request_body_access: false,
            request_body_limit: 134_217_728,
            request_body_no_files_limit: 1_048_576,
            request_body_limit_action: LimitAction::Reject,
            response_body_access: false,
            response_body_limit: 524_288,
            response_body_limit_action: LimitAction::Reject,
            response_mime_types: None,
            defaults: Default::default(),
        }
    }
}

/// Exclusions that apply to every rule of the set, wherever they were written.
#[derive(Debug, Clone, Default)]
pub struct Exclusions {
    /// `SecRuleRemoveById` ranges.
    pub removed_ids: Vec<(u64, u64)>,
    /// `SecRuleRemoveByTag` (the tag compared whole, as libmodsecurity compares it).
    pub removed_tags: Vec<String>,
    /// `SecRuleRemoveByMsg`.
    pub removed_msgs: Vec<String>,
    /// `SecRuleUpdateTargetById id "TARGETS"`: targets added to (or, with `!`, taken out
    /// of) the rule's list.
    pub targets_by_id: Vec<((u64, u64), Target)>,
    /// `SecRuleUpdateTargetByTag`.
    pub targets_by_tag: Vec<(String, Target)>,
}

/// A rule set as loaded.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// In the order written.
    pub rules: Vec<Rule>,
    /// From the configuration directives.
    pub settings: Settings,
    /// `SecRuleRemove*` and `SecRuleUpdateTarget*`, wherever written.
    pub exclusions: Exclusions,
}

impl RuleSet {
    /// The rules of `phase` in order, with every marker (a marker belongs to all phases,
    /// as ModSecurity v3's `SecMarker` does), those the set's exclusions remove left out.
    pub fn phase(&self, phase: Phase) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(move |r| {
            (matches!(r.kind, Kind::Marker(_)) || r.phase() == phase) && !self.removed(r)
        })
    }

    /// Whether `SecRuleRemoveBy*` removes `rule`.
    pub fn removed(&self, rule: &Rule) -> bool {
        let ex = &self.exclusions;
        let by_id = rule
            .id()
            .is_some_and(|id| ex.removed_ids.iter().any(|&(a, b)| (a..=b).contains(&id)));
        let by_tag = rule
            .actions
            .tags
            .iter()
            .any(|t| ex.removed_tags.iter().any(|x| x == t));
        let by_msg = rule
            .actions
            .msg
            .as_ref()
            .and_then(|m| m.literal())
            .is_some_and(|m| ex.removed_msgs.iter().any(|x| x == m));
        by_id || by_tag || by_msg
    }
}
