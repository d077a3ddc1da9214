//! One request's state while the rules run, as libmodsecurity 3.0.9 keeps it: the TX
//! collection, the matched variables of the rule being evaluated, what `ctl:` changed for
//! this transaction, the skip and marker state of the phase, the intervention and the
//! messages; and how a rule's targets become (name, value) pairs and its macros text.

use super::action::{AllowScope, BodyProcessor, Engine};
use super::expand::{Expansion, Part, RuleField};
use super::key_regex::with_key_regex;
use super::memo::Memos;
use super::operate::stoi;
use super::pattern::Scratch;
use super::request::RequestData;
use super::ruleset::Rule;
use super::tx::Tx;
use super::tx_key;
use super::variable::{Selector, Target, Var};
use std::borrow::Cow;
use std::cell::RefCell;

/// What a rule that intervened decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Intervention {
    pub(crate) status: u16,
    pub(crate) rule: u64,
    /// `drop`: close the connection rather than answer.
    pub(crate) drop: bool,
    pub(crate) redirect: Option<String>,
}

/// A value a rule inspects: its name as `MATCHED_VAR_NAME` gives it (`ARGS:id`,
/// `REQUEST_URI`) and its bytes.
#[derive(Debug, Clone)]
pub(crate) struct Value<'a> {
    /// Where the bytes live in the request's data (address, length), for the memo of
    /// transformed values; none for TX and the matched variables, which change.
    pub(crate) origin: Option<(usize, usize)>,
    pub(crate) var: Var,
    /// The key (for a collection's value, or a counted `&VAR:key`).
    pub(crate) key: Cow<'a, [u8]>,
    /// Whether the name carries the key (`VAR:key`) or is the variable's alone.
    pub(crate) keyed: bool,
    /// Borrowed from the request's data where it lives there: a rule looks at most values
    /// without copying them.
    pub(crate) bytes: Cow<'a, [u8]>,
}

impl Value<'_> {
    /// A copy that owns its bytes (to keep as MATCHED_VAR).
    pub(crate) fn into_owned(self) -> Value<'static> {
        Value {
            origin: self.origin,
            var: self.var,
            key: Cow::Owned(self.key.into_owned()),
            keyed: self.keyed,
            bytes: Cow::Owned(self.bytes.into_owned()),
        }
    }

    /// Its name as `MATCHED_VAR_NAME` gives it (`ARGS:id`, `REQUEST_URI`), made only when
    /// asked (most values never match). Bytes, as the key's are: a name made text lost
    /// what is not UTF-8, and a TX key made of it merged distinct names.
    pub(crate) fn name(&self) -> Vec<u8> {
        let var = self.var.name().as_bytes();
        if self.keyed {
            [var, b":", &self.key].concat()
        } else {
            var.to_vec()
        }
    }

    /// Whether its name is `name` (compared with case), without making it.
    pub(crate) fn name_is(&self, name: &str) -> bool {
        let var = self.var.name();
        match name.strip_prefix(var) {
            Some("") => !self.keyed,
            Some(rest) => {
                self.keyed
                    && rest
                        .strip_prefix(':')
                        .is_some_and(|k| k.as_bytes() == &*self.key)
            }
            None => false,
        }
    }
}

/// What a value did to a rule's operator, applied once the rule's values were all seen.
#[derive(Debug)]
pub(crate) enum Event {
    Capture(Vec<Vec<u8>>),
    /// The value matched: named as it is, its bytes as the operator saw them.
    Match(Value<'static>),
}

/// The transaction.
#[derive(Debug)]
pub(crate) struct Transaction {
    pub(crate) request: RequestData,
    /// TX, keys lower-cased (looked up without regard to case, as libmodsecurity does).
    pub(crate) tx: Tx,
    /// Whether a key of TX holds bytes that are not UTF-8 ([`tx_key::text`] escaped them):
    /// only then is a key read back through [`tx_key::bytes`] (reading TX is on every
    /// rule's path; such keys come only from unusual requests).
    pub(crate) tx_escaped: bool,
    /// MATCHED_VARS: what the rules matched since the last rule that did not (the last of
    /// them is MATCHED_VAR and MATCHED_VAR_NAME).
    pub(crate) matched_vars: Vec<Value<'static>>,
    pub(crate) engine: Engine,
    pub(crate) body_processor: Option<BodyProcessor>,
    /// `ctl:requestBodyAccess`, over `SecRequestBodyAccess`.
    pub(crate) body_access: Option<bool>,
    pub(crate) removed_ids: Vec<(u64, u64)>,
    pub(crate) removed_tags: Vec<String>,
    /// `ctl:ruleRemoveTargetById=ID;TARGET`: the rule and the target's full name.
    pub(crate) removed_targets_by_id: Vec<(u64, String)>,
    pub(crate) removed_targets_by_tag: Vec<(String, String)>,
    pub(crate) skip_next: u32,
    pub(crate) marker: Option<std::sync::Arc<str>>,
    pub(crate) allow: Option<AllowScope>,
    pub(crate) intervention: Option<Intervention>,
    /// `status:` of the rule that matched last (the status a `deny` answers with).
    pub(crate) status: Option<u16>,
    pub(crate) messages: Vec<crate::Match>,
    /// The rule being evaluated's [`Event`]s (empty between rules: a list reused).
    pub(crate) events: Vec<Event>,
    /// Request values already transformed and what the prefilters said of them, per value
    /// and per target ([`Memos`]). Cleared whenever the request's data change (the body's
    /// phase, a `ctl`).
    pub(crate) memo: RefCell<Memos>,
    /// The prefilters' scratch spaces, by chain (from the plan, given back at the end).
    pub(crate) scratch: RefCell<Vec<Option<Scratch>>>,
    /// The whole-set automaton's scratch space (from the plan, given back at the end).
    pub(crate) whole: RefCell<Option<Scratch>>,
}

impl Transaction {
    pub(crate) fn new(request: RequestData, engine: Engine) -> Transaction {
        Transaction {
            request,
            tx: Tx::default(),
            matched_vars: Vec::new(),
            tx_escaped: false,
            engine,
            body_processor: None,
            body_access: None,
            removed_ids: Vec::new(),
            removed_tags: Vec::new(),
            removed_targets_by_id: Vec::new(),
            removed_targets_by_tag: Vec::new(),
            skip_next: 0,
            marker: None,
            allow: None,
            intervention: None,
            status: None,
            messages: Vec::new(),
            events: Vec::new(),
            memo: RefCell::new(Memos::default()),
            scratch: RefCell::new(Vec::new()),
            whole: RefCell::new(None),
        }
    }

    /// Calls `f` with each value of `target` (selector applied, `&` counted), in
    /// libmodsecurity's order. Nothing is collected: rules read targets hundreds of times a
    /// request, and most reads look at each value once.
    pub(crate) fn each_value<'a>(&'a self, target: &'a Target, mut f: impl FnMut(Value<'a>)) {
        if !target.count {
            return self.select(target.var, &target.selector, &mut f);
        }
        let mut n = 0usize;
        self.select(target.var, &target.selector, &mut |_| n += 1);
        let key: &[u8] = match &target.selector {
            Selector::Key(k) => k.as_bytes(),
            _ => &[],
        };
        f(Value {
            origin: None,
            var: target.var,
            key: Cow::Borrowed(key),
            keyed: matches!(target.selector, Selector::Key(_)),
            bytes: count_text(n),
        });
    }

    /// The values of `var` that `selector` takes, each to `f`.
    fn select<'a>(&'a self, var: Var, selector: &'a Selector, f: &mut impl FnMut(Value<'a>)) {
        match selector {
            Selector::All => self.all_values(var, f),
            Selector::XPath(path) => self.all_values(var, &mut |v| {
                if &*v.key == path.as_bytes() {
                    f(v);
                }
            }),
            Selector::Key(k) => self.keyed(var, k, f),
            // TX's keys are the same from request to request: which the pattern selects is
            // kept with them.
            Selector::Regex(re) if var == Var::Tx => with_key_regex(re, |r| {
                let Some(r) = r else { return };
                let escaped = self.tx_escaped;
                self.tx
                    .each_selected(re, &|k| r.is_match(k), |k, v| f(tx_named(k, v, escaped)));
            }),
            Selector::Regex(re) => with_key_regex(re, |r| {
                let Some(r) = r else { return };
                self.all_values(var, &mut |v| {
                    if r.is_match(&v.key) {
                        f(v);
                    }
                });
            }),
        }
    }

    /// `VAR:key`'s values. A request collection gives a key's values as libmodsecurity
    /// does (the latest added first); the others are filtered in order.
    fn keyed<'a>(&'a self, var: Var, k: &'a str, f: &mut impl FnMut(Value<'a>)) {
        if self
            .request
            .values_named(var, k.as_bytes(), |key, v| f(from_request(var, key, v)))
        {
            return;
        }
        if var == Var::Tx {
            // TX keys are kept lower-cased: one lookup, not a walk of them all (CRS asks
            // TX:name in most of its rules), and the key lowered on the stack.
            // Named as the rule writes it, as libmodsecurity names it (`TX:LEVEL`).
            if let Some(v) = with_lowercase(k, |key| self.tx.get(key)) {
                f(tx_named(k, v, false));
            }
            return;
        }
        self.all_values(var, &mut |v| {
            if v.key.eq_ignore_ascii_case(k.as_bytes()) {
                f(v);
            }
        });
    }

    /// Every value of `var`, named `VAR:key` (collections) or `VAR` (scalars).
    fn all_values<'a>(&'a self, var: Var, f: &mut impl FnMut(Value<'a>)) {
        let last = self.matched_vars.last();
        match var {
            Var::Tx => self
                .tx
                .each_sorted(|k, v| f(tx_named(k, v, self.tx_escaped))),
            Var::MatchedVar => last.into_iter().for_each(|m| f(named(var, b"", &m.bytes))),
            Var::MatchedVarName => last.into_iter().for_each(|m| {
                f(named(var, b"", &m.name()).into_owned());
            }),
            Var::MatchedVars => self.matched_vars.iter().for_each(|m| {
                f(named(var, &m.name(), &m.bytes).into_owned());
            }),
            Var::MatchedVarsNames => self.matched_vars.iter().for_each(|m| {
                let n = m.name();
                f(named(var, &n, &n).into_owned());
            }),
            _ => {
                self.request.values(var, |k, v| f(from_request(var, k, v)));
            }
        }
    }

    /// `text` with its macros replaced, for `rule`; borrowed where it has none.
    pub(crate) fn expand_text<'s>(&self, text: &'s Expansion, rule: &Rule) -> Cow<'s, [u8]> {
        match text.parts.as_slice() {
            [] => Cow::Borrowed(&[]),
            [Part::Text(t)] => Cow::Borrowed(t.as_bytes()),
            _ => Cow::Owned(self.expand(text, rule)),
        }
    }

    /// `text` with its macros replaced, for `rule`.
    pub(crate) fn expand(&self, text: &Expansion, rule: &Rule) -> Vec<u8> {
        let mut out = Vec::new();
        for part in &text.parts {
            match part {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                Part::Rule(field) => {
                    out.extend_from_slice(self.rule_field(*field, rule).as_bytes())
                }
                // (Its key lowered at load: one lookup.)
                Part::Var(Var::Tx, Some(k)) => {
                    if let Some(v) = self.tx.get(k) {
                        out.extend_from_slice(v);
                    }
                }
                Part::Var(var, key) => {
                    let mut first = true;
                    let mut take = |v: Value<'_>| {
                        if std::mem::take(&mut first) {
                            out.extend_from_slice(&v.bytes);
                        }
                    };
                    match key {
                        Some(k) => self.keyed(*var, k, &mut take),
                        None => self.all_values(*var, &mut take),
                    }
                }
            }
        }
        out
    }

    fn rule_field(&self, field: RuleField, rule: &Rule) -> String {
        let a = &rule.actions;
        match field {
            RuleField::Id => a.id.map(|i| i.to_string()).unwrap_or_default(),
            RuleField::Msg => a
                .msg
                .as_ref()
                .map(|m| String::from_utf8_lossy(&self.expand(m, rule)).into_owned())
                .unwrap_or_default(),
            RuleField::Severity => a.severity.map(|s| s.to_string()).unwrap_or_default(),
            RuleField::LogData => a
                .logdata
                .as_ref()
                .map(|m| String::from_utf8_lossy(&self.expand(m, rule)).into_owned())
                .unwrap_or_default(),
            RuleField::Ver => a.ver.clone().unwrap_or_default(),
            RuleField::Rev => a.rev.clone().unwrap_or_default(),
        }
    }

    /// Records a value a rule matched, its bytes as the operator saw them (MATCHED_VARS;
    /// MATCHED_VAR and MATCHED_VAR_NAME are the last of them).
    pub(crate) fn matched(&mut self, value: Value<'static>) {
        self.matched_vars.push(value);
    }

    /// `TX:written`'s value (`key`: `written` lowered), named as the rule writes it: read
    /// `n` of rule set `owner` ([`super::tx::Tx::get_read`]).
    pub(crate) fn tx_value<'a>(
        &'a mut self,
        (owner, n): (u64, usize),
        written: &'a str,
        key: &str,
    ) -> Option<Value<'a>> {
        self.tx
            .get_read(owner, n, key)
            .map(|v| tx_named(written, v, false))
    }

    /// `&TX:written`'s value (`key`: `written` lowered): how many values it has, 0 or 1.
    pub(crate) fn tx_count<'a>(
        &mut self,
        (owner, n): (u64, usize),
        written: &'a str,
        key: &str,
    ) -> Value<'a> {
        let present = self.tx.get_read(owner, n, key).is_some();
        Value {
            origin: None,
            var: Var::Tx,
            key: Cow::Borrowed(written.as_bytes()),
            keyed: true,
            bytes: count_text(usize::from(present)),
        }
    }

    /// The TX value `key` as an integer, as libmodsecurity's `stoi` reads it (0 when it
    /// does not start with a number).
    pub(crate) fn tx_int(&self, key: &str) -> i64 {
        self.tx.get(key).map_or(0, |v| stoi(v))
    }
}

/// A value of `var` with key `key`, named as libmodsecurity names it.
fn named<'a>(var: Var, key: &'a [u8], bytes: &'a [u8]) -> Value<'a> {
    Value {
        origin: None,
        var,
        keyed: var.is_collection(),
        key: Cow::Borrowed(key),
        bytes: Cow::Borrowed(bytes),
    }
}

/// A TX value, named by the bytes its key stands for ([`tx_key::bytes`], where TX holds
/// an escaped key: `escaped`).
fn tx_named<'a>(key: &'a str, bytes: &'a [u8], escaped: bool) -> Value<'a> {
    let key = if escaped {
        tx_key::bytes(key)
    } else {
        Cow::Borrowed(key.as_bytes())
    };
    Value {
        key,
        ..named(Var::Tx, b"", bytes)
    }
}

/// A value of the request's data: as [`named`], with where its bytes live.
fn from_request<'a>(var: Var, key: &'a [u8], bytes: &'a [u8]) -> Value<'a> {
    let mut v = named(var, key, bytes);
    v.origin = Some((bytes.as_ptr() as usize, bytes.len()));
    v
}

/// `&VAR`'s count as text (most are 0 or 1: no allocation for those below ten).
fn count_text(n: usize) -> Cow<'static, [u8]> {
    const DIGITS: &[u8; 10] = b"0123456789";
    match DIGITS.get(n) {
        Some(d) => Cow::Borrowed(std::slice::from_ref(d)),
        None => Cow::Owned(n.to_string().into_bytes()),
    }
}

/// Calls `f` with `key` lowercased (ASCII), on the stack where it is short.
pub(crate) fn with_lowercase<R>(key: &str, f: impl FnOnce(&str) -> R) -> R {
    if !key.bytes().any(|c| c.is_ascii_uppercase()) {
        return f(key);
    }
    let mut buf = [0u8; 64];
    match buf.get_mut(..key.len()) {
        Some(b) => {
            b.copy_from_slice(key.as_bytes());
            b.make_ascii_lowercase();
            // Lowercasing ASCII letters keeps the text UTF-8.
            f(std::str::from_utf8(b).unwrap_or(key))
        }
        None => f(&key.to_ascii_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::{count_text, with_lowercase};

    #[test]
    fn counts_and_lowered_keys_read_as_written() {
        for n in [0, 1, 9, 10, 12345] {
            assert_eq!(&*count_text(n), n.to_string().as_bytes());
        }
        let long = "K".repeat(100);
        for (key, lower) in [
            ("anomaly_score", "anomaly_score"),
            ("EXECUTING_Paranoia_LEVEL", "executing_paranoia_level"),
            (long.as_str(), &"k".repeat(100)),
            ("Ünïcode_KEY", "Ünïcode_key"),
        ] {
            assert_eq!(with_lowercase(key, str::to_string), lower);
        }
    }
}
