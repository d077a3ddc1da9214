//! A rule's action list (`"id:942100,phase:2,block,t:none,setvar:'tx.x=+%{tx.y}'"`):
//! split as ModSecurity v3 and Coraza split it, each action parsed and checked at load.

use super::expand::{self, Expansion};
use super::transform::{self, Step};
use super::variable::{self, Target, Var};

/// A rule's phase: 1 request headers, 2 request body, 3 response headers, 4 response body,
/// 5 logging.
pub type Phase = u8;

/// What a rule does to the transaction when it matches.
#[expect(
    missing_docs,
    reason = "ModSecurity's disruptive actions, named as the actions are"
)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disruptive {
    Pass,
    /// What `SecDefaultAction` of the rule's phase says (CRS: `pass` in detection, `deny`
    /// with anomaly scoring's own rules deciding).
    Block,
    Deny,
    Drop,
    Allow(AllowScope),
    Redirect(Expansion),
}

/// How far `allow` lets the transaction through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowScope {
    /// `allow`: every later phase of the request and response (logging still runs).
    All,
    /// `allow:phase`: the rest of the current phase.
    Phase,
    /// `allow:request`: the request's phases (1-2).
    Request,
}

/// An action that changes the transaction's state when the rule matches, in list order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// `setvar`.
    SetVar(SetVar),
    /// `expirevar:ip.key=seconds`.
    ExpireVar {
        /// The collection (ip or global).
        var: Var,
        /// The key, expanded when the rule matches.
        key: Expansion,
        /// Seconds from then.
        seconds: Expansion,
    },
    /// `initcol:ip=%{remote_addr}`: a collection kept in memory by key.
    InitCol {
        /// ip or global.
        var: Var,
        /// Which of its records this transaction uses.
        key: Expansion,
    },
    /// `ctl`.
    Ctl(Ctl),
}

/// `setvar:tx.key=value`, `=+n`, `=-n`, `!tx.key`, `tx.key` (set to 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetVar {
    /// The collection: tx, ip or global.
    pub var: Var,
    /// The key, expanded when the rule matches (`tx.%{rule.id}-x`).
    pub key: Expansion,
    /// What is done to it.
    pub op: SetOp,
}

/// What `setvar` does to its variable.
#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(missing_docs, reason = "`=value`, `=+n`, `=-n` and `!name`")]
pub enum SetOp {
    Set(Expansion),
    Add(Expansion),
    Sub(Expansion),
    Delete,
}

/// `ctl:`: a change to this transaction's configuration.
#[expect(
    missing_docs,
    reason = "each variant is the `ctl:` option of the same name"
)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ctl {
    RuleEngine(Engine),
    RequestBodyAccess(bool),
    RequestBodyProcessor(BodyProcessor),
    ForceRequestBodyVariable(bool),
    RuleRemoveById(Vec<(u64, u64)>),
    RuleRemoveByTag(String),
    RuleRemoveTargetById(Vec<(u64, u64)>, Target),
    RuleRemoveTargetByTag(String, Target),
    /// `auditEngine`, `auditLogParts`: ModSecurity's audit log, which Sluice replaces with
    /// its own match records; accepted and without effect.
    Audit,
}

/// `SecRuleEngine` and `ctl:ruleEngine`.
#[expect(missing_docs, reason = "the directive's three values")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    On,
    Off,
    DetectionOnly,
}

impl Engine {
    /// `On`, `Off` or `DetectionOnly`, any case.
    pub fn parse(s: &str) -> Result<Engine, String> {
        match s.to_ascii_lowercase().as_str() {
            "on" => Ok(Engine::On),
            "off" => Ok(Engine::Off),
            "detectiononly" => Ok(Engine::DetectionOnly),
            _ => Err(format!("`{s}` is not On, Off or DetectionOnly")),
        }
    }
}

/// The request body parsers.
#[expect(missing_docs, reason = "`ctl:requestBodyProcessor`'s values")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyProcessor {
    UrlEncoded,
    Multipart,
    Xml,
    Json,
}

/// A rule's actions, parsed.
#[expect(
    missing_docs,
    reason = "each field is the action of the same name (`skip_after`: skipAfter)"
)]
#[derive(Debug, Clone, Default)]
pub struct Actions {
    pub id: Option<u64>,
    pub phase: Option<Phase>,
    pub disruptive: Option<Disruptive>,
    pub status: Option<u16>,
    pub msg: Option<Expansion>,
    pub logdata: Option<Expansion>,
    pub tags: Vec<String>,
    pub severity: Option<u8>,
    pub ver: Option<String>,
    pub rev: Option<String>,
    pub maturity: Option<String>,
    pub accuracy: Option<String>,
    /// `t:` in order, `t:none` included.
    pub transforms: Vec<Step>,
    pub effects: Vec<Effect>,
    pub capture: bool,
    pub multi_match: bool,
    pub chain: bool,
    pub skip: Option<u32>,
    pub skip_after: Option<std::sync::Arc<str>>,
    /// `log`/`nolog`, the last written.
    pub log: Option<bool>,
    /// `auditlog`/`noauditlog`: accepted, without effect (see [`Ctl::Audit`]).
    pub auditlog: Option<bool>,
}

/// The actions in `text`.
pub(super) fn parse(text: &str) -> Result<Actions, String> {
    let mut a = Actions::default();
    for (key, value) in split(text)? {
        apply(&mut a, &key, value.as_deref()).map_err(|why| format!("action `{key}`: {why}"))?;
    }
    Ok(a)
}

/// `key:value` pairs, split at commas outside single quotes, values without their quotes.
fn split(text: &str) -> Result<Vec<(String, Option<String>)>, String> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let bytes = text.as_bytes();
    for i in 0..=bytes.len() {
        let c = bytes.get(i).copied();
        if i > 0 && bytes[i - 1] == b'\\' && c.is_some() {
            continue;
        }
        match c {
            Some(b'\'') => quoted = !quoted,
            Some(b',') | None if !quoted => {
                let item = text[start..i].trim();
                start = i + 1;
                if item.is_empty() {
                    continue;
                }
                let (k, v) = match item.split_once(':') {
                    Some((k, v)) => (k.trim(), Some(unquote(v.trim()).to_string())),
                    None => (item, None),
                };
                out.push((k.to_ascii_lowercase(), v));
            }
            _ => {}
        }
    }
    if quoted {
        return Err(format!("a `'` is not closed in `{text}`"));
    }
    Ok(out)
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or(s)
}

fn need(value: Option<&str>) -> Result<&str, String> {
    value.ok_or_else(|| "needs a value (`name:value`)".to_string())
}

fn none(value: Option<&str>) -> Result<(), String> {
    match value {
        None => Ok(()),
        Some(v) => Err(format!("takes no value, got `{v}`")),
    }
}

fn apply(a: &mut Actions, key: &str, value: Option<&str>) -> Result<(), String> {
    match key {
        "id" => a.id = Some(id(need(value)?)?),
        "phase" => a.phase = Some(phase(need(value)?)?),
        "pass" | "block" | "deny" | "drop" | "allow" | "redirect" => {
            a.disruptive = Some(disruptive(key, value)?);
        }
        "status" => {
            let v = need(value)?;
            let s: u16 = v
                .parse()
                .map_err(|_| format!("`{v}` is not a status code"))?;
            if !(100..=999).contains(&s) {
                return Err(format!("`{v}` is not a status code"));
            }
            a.status = Some(s);
        }
        "msg" => a.msg = Some(expand::parse(need(value)?)?),
        "logdata" => a.logdata = Some(expand::parse(need(value)?)?),
        "tag" => a.tags.push(need(value)?.to_string()),
        "severity" => a.severity = Some(severity(need(value)?)?),
        "ver" => a.ver = Some(need(value)?.to_string()),
        "rev" => a.rev = Some(need(value)?.to_string()),
        "maturity" => a.maturity = Some(need(value)?.to_string()),
        "accuracy" => a.accuracy = Some(need(value)?.to_string()),
        "t" => a.transforms.push(transform::parse(need(value)?)?),
        "setvar" => a.effects.push(Effect::SetVar(setvar(need(value)?)?)),
        "expirevar" => a.effects.push(expirevar(need(value)?)?),
        "initcol" => a.effects.push(initcol(need(value)?)?),
        "ctl" => a.effects.push(Effect::Ctl(ctl(need(value)?)?)),
        "capture" => a.capture = none(value).map(|()| true)?,
        "multimatch" => a.multi_match = none(value).map(|()| true)?,
        "chain" => a.chain = none(value).map(|()| true)?,
        "skip" => {
            let v = need(value)?;
            let n: u32 = v
                .parse()
                .map_err(|_| format!("`{v}` is not a number of rules"))?;
            if n == 0 {
                return Err("skip:0 skips nothing; write at least 1".into());
            }
            a.skip = Some(n);
        }
        "skipafter" => a.skip_after = Some(need(value)?.into()),
        "log" | "nolog" => a.log = none(value).map(|()| key == "log").map(Some)?,
        "auditlog" | "noauditlog" => {
            a.auditlog = none(value).map(|()| key == "auditlog").map(Some)?;
        }
        _ => {
            return Err(
                "the native engine does not implement this action; use `engine = \"modsecurity\"` for this rule set, or remove it (docs/waf.md lists the actions)"
                    .into(),
            );
        }
    }
    Ok(())
}

fn id(v: &str) -> Result<u64, String> {
    match v.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{v}` is not a rule id (a number from 1)")),
    }
}

pub(super) fn phase(v: &str) -> Result<Phase, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" => Ok(1),
        "2" | "request" => Ok(2),
        "3" => Ok(3),
        "4" | "response" => Ok(4),
        "5" | "logging" => Ok(5),
        _ => Err(format!(
            "`{v}` is not a phase (1-5, request, response, logging)"
        )),
    }
}

fn severity(v: &str) -> Result<u8, String> {
    const NAMES: [&str; 8] = [
        "EMERGENCY",
        "ALERT",
        "CRITICAL",
        "ERROR",
        "WARNING",
        "NOTICE",
        "INFO",
        "DEBUG",
    ];
    if let Ok(n) = v.parse::<u8>()
        && n < 8
    {
        return Ok(n);
    }
    NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(v))
        .map(|p| p as u8)
        .ok_or_else(|| format!("`{v}` is not a severity (0-7 or EMERGENCY ... DEBUG)"))
}

fn disruptive(key: &str, value: Option<&str>) -> Result<Disruptive, String> {
    Ok(match key {
        "pass" => none(value).map(|()| Disruptive::Pass)?,
        "block" => none(value).map(|()| Disruptive::Block)?,
        "deny" => none(value).map(|()| Disruptive::Deny)?,
        "drop" => none(value).map(|()| Disruptive::Drop)?,
        "redirect" => Disruptive::Redirect(expand::parse(need(value)?)?),
        _ => Disruptive::Allow(match value.map(str::to_ascii_lowercase).as_deref() {
            None => AllowScope::All,
            Some("phase") => AllowScope::Phase,
            Some("request") => AllowScope::Request,
            Some(v) => {
                return Err(format!(
                    "`allow:{v}`: write allow, allow:phase or allow:request"
                ));
            }
        }),
    })
}

/// A writable variable and its key: `tx.name` (the key may hold macros).
fn var_key(s: &str) -> Result<(Var, Expansion), String> {
    let (col, key) = s
        .split_once('.')
        .ok_or_else(|| format!("`{s}` names no key; write `tx.name`"))?;
    let var = Var::named(col)
        .filter(|v| v.is_writable())
        .ok_or_else(|| format!("`{col}` cannot be written; rules write tx, ip and global"))?;
    if key.is_empty() {
        return Err(format!("`{s}` names no key; write `{col}.name`"));
    }
    let mut key = expand::parse(key)?;
    // The collections keep their keys lower-cased: a literal one is lowered here, once,
    // not at each write.
    if let [expand::Part::Text(t)] = key.parts.as_mut_slice() {
        t.make_ascii_lowercase();
    }
    Ok((var, key))
}

fn setvar(v: &str) -> Result<SetVar, String> {
    if let Some(name) = v.strip_prefix('!') {
        let (var, key) = var_key(name)?;
        let op = SetOp::Delete;
        return Ok(SetVar { var, key, op });
    }
    let (name, value) = match v.split_once('=') {
        Some((n, val)) => (n, Some(val)),
        None => (v, None),
    };
    let (var, key) = var_key(name.trim())?;
    let op = match value {
        None => SetOp::Set(expand::parse("1")?),
        Some(val) => match (val.strip_prefix('+'), val.strip_prefix('-')) {
            (Some(n), _) => SetOp::Add(expand::parse(n)?),
            (_, Some(n)) => SetOp::Sub(expand::parse(n)?),
            _ => SetOp::Set(expand::parse(val)?),
        },
    };
    Ok(SetVar { var, key, op })
}

fn expirevar(v: &str) -> Result<Effect, String> {
    let (name, seconds) = v
        .split_once('=')
        .ok_or_else(|| format!("`{v}`: write `ip.name=seconds`"))?;
    let (var, key) = var_key(name.trim())?;
    let seconds = expand::parse(seconds.trim())?;
    Ok(Effect::ExpireVar { var, key, seconds })
}

fn initcol(v: &str) -> Result<Effect, String> {
    let (col, key) = v
        .split_once('=')
        .ok_or_else(|| format!("`{v}`: write `ip=%{{remote_addr}}`"))?;
    let var = Var::named(col.trim())
        .filter(|v| matches!(v, Var::Ip | Var::Global))
        .ok_or_else(|| format!("`{col}`: the native engine initializes the ip and global collections only; use `engine = \"modsecurity\"` for this rule set"))?;
    Ok(Effect::InitCol {
        var,
        key: expand::parse(key.trim())?,
    })
}

fn on_off(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(format!("`{v}` is not On or Off")),
    }
}

/// `942100`, `942100-942199`, or a comma list of them (the ids `SecRuleRemoveById` and
/// `ctl:ruleRemoveById` take).
pub(super) fn id_ranges(v: &str) -> Result<Vec<(u64, u64)>, String> {
    v.split([',', ' '])
        .filter(|s| !s.is_empty())
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (id(a.trim())?, id(b.trim())?);
                if a > b {
                    return Err(format!("the id range {a}-{b} is backwards"));
                }
                Ok((a, b))
            }
            None => id(part).map(|n| (n, n)),
        })
        .collect()
}

fn ctl(v: &str) -> Result<Ctl, String> {
    let (name, arg) = v
        .split_once('=')
        .ok_or_else(|| format!("`{v}`: write `ctl:name=value`"))?;
    let arg = arg.trim();
    let target = |arg: &str| -> Result<(String, Target), String> {
        let (what, t) = arg
            .split_once(';')
            .ok_or_else(|| format!("`{arg}`: write `id;TARGET`"))?;
        let mut targets = variable::parse(t)?;
        if targets.len() != 1 {
            return Err(format!("`{t}`: name one target"));
        }
        Ok((what.to_string(), targets.remove(0)))
    };
    Ok(match name.trim().to_ascii_lowercase().as_str() {
        "ruleengine" => Ctl::RuleEngine(Engine::parse(arg)?),
        "requestbodyaccess" => Ctl::RequestBodyAccess(on_off(arg)?),
        "forcerequestbodyvariable" => Ctl::ForceRequestBodyVariable(on_off(arg)?),
        "requestbodyprocessor" => {
            Ctl::RequestBodyProcessor(match arg.to_ascii_uppercase().as_str() {
                "URLENCODED" => BodyProcessor::UrlEncoded,
                "MULTIPART" => BodyProcessor::Multipart,
                "XML" => BodyProcessor::Xml,
                "JSON" => BodyProcessor::Json,
                _ => return Err(format!("`{arg}` is not URLENCODED, MULTIPART, XML or JSON")),
            })
        }
        "ruleremovebyid" => Ctl::RuleRemoveById(id_ranges(arg)?),
        "ruleremovebytag" => Ctl::RuleRemoveByTag(arg.to_string()),
        "ruleremovetargetbyid" => {
            let (ids, t) = target(arg)?;
            Ctl::RuleRemoveTargetById(id_ranges(&ids)?, t)
        }
        "ruleremovetargetbytag" => {
            let (tag, t) = target(arg)?;
            Ctl::RuleRemoveTargetByTag(tag, t)
        }
        "auditengine" | "auditlogparts" => Ctl::Audit,
        other => {
            return Err(format!(
                "the native engine does not implement `ctl:{other}`; use `engine = \"modsecurity\"` for this rule set"
            ));
        }
    })
}
