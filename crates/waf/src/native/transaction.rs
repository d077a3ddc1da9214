//! One request's state while the rules run, as libmodsecurity 3.0.9 keeps it: the TX
//! collection, the matched variables of the rule being evaluated, what `ctl:` changed for
//! this transaction, the skip and marker state of the phase, the intervention and the
//! messages; and how a rule's targets become (name, value) pairs and its macros text.

use super::action::{AllowScope, BodyProcessor, Engine};
use super::expand::{Expansion, Part, RuleField};
use super::operate::stoi;
use super::pattern::Scratch;
use super::request::RequestData;
use super::ruleset::Rule;
use super::variable::{Selector, Target, Var};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;

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
    /// asked (most values never match).
    pub(crate) fn name(&self) -> String {
        if self.keyed {
            format!("{}:{}", self.var.name(), String::from_utf8_lossy(&self.key))
        } else {
            self.var.name().to_string()
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

/// The transaction.
#[derive(Debug)]
pub(crate) struct Transaction {
    pub(crate) request: RequestData,
    /// TX, keys lower-cased (looked up without regard to case, as libmodsecurity does).
    pub(crate) tx: BTreeMap<String, Vec<u8>>,
    pub(crate) matched_var: Option<Value<'static>>,
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
    pub(crate) marker: Option<String>,
    pub(crate) allow: Option<AllowScope>,
    pub(crate) intervention: Option<Intervention>,
    /// `status:` of the rule that matched last (the status a `deny` answers with).
    pub(crate) status: Option<u16>,
    pub(crate) messages: Vec<crate::Match>,
    /// Request values already transformed and what the prefilters said of them, per value
    /// and per target ([`Memos`]). Cleared whenever the request's data change (the body's
    /// phase, a `ctl`).
    pub(crate) memo: RefCell<Memos>,
    /// The prefilters' scratch spaces, by chain (from the plan, given back at the end).
    pub(crate) scratch: RefCell<Vec<Option<Scratch>>>,
}

/// The memo's map: keyed by (address, length, chain), hashed with rustc-hash's FxHash (the
/// keys are the process's own pointers, not an attacker's strings; SipHash cost 3% of a
/// request).
pub(crate) type MemoMap = rustc_hash::FxHashMap<(usize, usize, u32), Memo>;

/// What the rules of a phase learn about the request's values and keep for the next rule:
/// cleared together whenever the request's data change.
#[derive(Debug, Default)]
pub(crate) struct Memos {
    /// Each value through each chain (and its prefilter hits).
    pub(crate) values: MemoMap,
    /// For a target's values through a chain (by the plan's target summary and the chain):
    /// the chain's prefilter patterns that any of them matches, a bit each. A rule whose
    /// pattern is not among them skips the target without looking at its values.
    /// Keyed by (summary, chain, prefilter unit): a unit's patterns are answered together.
    pub(crate) unions: rustc_hash::FxHashMap<(u32, u32, u32), Vec<u64>>,
}

impl Memos {
    pub(crate) fn clear(&mut self) {
        self.values.clear();
        self.unions.clear();
    }
}

/// A request value through one transformation chain.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    /// Empty where the chain is (the value is then its own).
    pub(crate) value: Vec<u8>,
    /// The prefilter units (`PatternSet::unit`) `value` was scanned by.
    pub(crate) units: Vec<u32>,
    /// The chain's prefilter patterns of those units that match `value`.
    pub(crate) hits: Vec<usize>,
}

impl Transaction {
    pub(crate) fn new(request: RequestData, engine: Engine) -> Transaction {
        Transaction {
            request,
            tx: BTreeMap::new(),
            matched_var: None,
            matched_vars: Vec::new(),
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
            memo: RefCell::new(Memos::default()),
            scratch: RefCell::new(Vec::new()),
        }
    }

    /// The values of `target` (selector applied, `&` counted), appended to `out`.
    pub(crate) fn values<'a>(&'a self, target: &Target, out: &mut Vec<Value<'a>>) {
        let start = out.len();
        match &target.selector {
            Selector::All => self.all_values(target.var, out),
            Selector::XPath(path) => {
                self.all_values(target.var, out);
                retain_from(out, start, |v| &*v.key == path.as_bytes());
            }
            Selector::Key(k) => {
                // A request collection gives a key's values as libmodsecurity does (the
                // latest added first); the others are filtered in order.
                let mut pairs = Vec::new();
                if self
                    .request
                    .values_named(target.var, k.as_bytes(), &mut pairs)
                {
                    out.extend(
                        pairs
                            .into_iter()
                            .map(|(key, v)| from_request(target.var, key, v)),
                    );
                } else if target.var == Var::Tx {
                    // TX keys are kept lower-cased: one lookup, not a walk of them all
                    // (CRS asks TX:name in most of its rules).
                    let key = k.to_ascii_lowercase();
                    if let Some((name, v)) = self.tx.get_key_value(&key) {
                        out.push(named(Var::Tx, name.as_bytes(), v));
                    }
                } else {
                    self.all_values(target.var, out);
                    retain_from(out, start, |v| v.key.eq_ignore_ascii_case(k.as_bytes()));
                }
            }
            Selector::Regex(re) => {
                self.all_values(target.var, out);
                with_key_regex(re, |r| {
                    retain_from(out, start, |v| {
                        r.is_some_and(|r| r.is_match(&v.key).unwrap_or(false))
                    });
                });
            }
        }
        if target.count {
            let n = out.len() - start;
            out.truncate(start);
            let (key, keyed) = match &target.selector {
                Selector::Key(k) => (k.as_bytes().to_vec(), true),
                _ => (Vec::new(), false),
            };
            out.push(Value {
                origin: None,
                var: target.var,
                key: Cow::Owned(key),
                keyed,
                bytes: Cow::Owned(n.to_string().into_bytes()),
            });
        }
    }

    /// Every value of `var`, named `VAR:key` (collections) or `VAR` (scalars).
    fn all_values<'a>(&'a self, var: Var, out: &mut Vec<Value<'a>>) {
        let one = |key: &[u8], bytes: &[u8]| named(var, key, bytes).into_owned();
        match var {
            Var::Tx => out.extend(self.tx.iter().map(|(k, v)| named(var, k.as_bytes(), v))),
            Var::MatchedVar => out.extend(self.matched_var.iter().map(|m| one(b"", &m.bytes))),
            Var::MatchedVarName => {
                out.extend(
                    self.matched_var
                        .iter()
                        .map(|m| one(b"", m.name().as_bytes())),
                );
            }
            Var::MatchedVars => out.extend(
                self.matched_vars
                    .iter()
                    .map(|m| one(m.name().as_bytes(), &m.bytes)),
            ),
            Var::MatchedVarsNames => out.extend(self.matched_vars.iter().map(|m| {
                let n = m.name();
                one(n.as_bytes(), n.as_bytes())
            })),
            _ => {
                let mut pairs = Vec::new();
                self.request.values(var, &mut pairs);
                out.extend(pairs.into_iter().map(|(k, v)| from_request(var, k, v)));
            }
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
                Part::Var(var, key) => {
                    let target = Target {
                        var: *var,
                        selector: key.clone().map_or(Selector::All, Selector::Key),
                        count: false,
                        exclude: false,
                    };
                    let mut values = Vec::new();
                    self.values(&target, &mut values);
                    if let Some(v) = values.first() {
                        out.extend_from_slice(&v.bytes);
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

    /// Records a value a rule matched (MATCHED_VAR, MATCHED_VAR_NAME, MATCHED_VARS).
    pub(crate) fn matched(&mut self, value: Value<'static>, transformed: &[u8]) {
        let v = Value {
            origin: None,
            bytes: Cow::Owned(transformed.to_vec()),
            ..value
        };
        self.matched_vars.push(v.clone());
        self.matched_var = Some(v);
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

/// A value of the request's data: as [`named`], with where its bytes live.
fn from_request<'a>(var: Var, key: &'a [u8], bytes: &'a [u8]) -> Value<'a> {
    let mut v = named(var, key, bytes);
    v.origin = Some((bytes.as_ptr() as usize, bytes.len()));
    v
}

/// Keeps, of `out[start..]`, the values `keep` accepts, in order.
fn retain_from(out: &mut Vec<Value<'_>>, start: usize, mut keep: impl FnMut(&Value<'_>) -> bool) {
    // In place: this runs per rule per target, and a split-off tail was an allocation
    // each time.
    let mut at = 0;
    out.retain(|v| {
        at += 1;
        at <= start || keep(v)
    });
}

/// Calls `f` with a selector's regular expression, compiled without regard to case (as
/// libmodsecurity compiles it) once per thread; `None` if it does not compile.
pub(crate) fn with_key_regex<T>(re: &str, f: impl FnOnce(Option<&pcre2::bytes::Regex>) -> T) -> T {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static CACHE: RefCell<HashMap<String, Option<pcre2::bytes::Regex>>> = RefCell::new(HashMap::new());
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let r = c.entry(re.to_string()).or_insert_with(|| {
            pcre2::bytes::RegexBuilder::new()
                .caseless(true)
                .dotall(true)
                .multi_line(true)
                .build(re)
                .ok()
        });
        f(r.as_ref())
    })
}
