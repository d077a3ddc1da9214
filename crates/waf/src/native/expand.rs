//! Macro text (`%{tx.anomaly_score}`, `%{MATCHED_VAR}`, `%{rule.msg}`): strings that
//! `setvar`, `msg`, `logdata` and numeric operators expand per transaction, parsed once at
//! load so that a misspelt variable is a load error rather than an empty string at run time.

use super::variable::Var;

/// A string with macros, as parts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expansion {
    /// Text and macros in order.
    pub parts: Vec<Part>,
}

/// One part of an [`Expansion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// As written.
    Text(String),
    /// `%{VAR}` or `%{COLLECTION.key}` (the key as written; looked up without regard to case).
    Var(Var, Option<String>),
    /// `%{rule.FIELD}`: the running rule's own metadata.
    Rule(RuleField),
}

/// The rule metadata a macro may read (`%{rule.id}`).
#[expect(missing_docs, reason = "each is the action of the same name")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleField {
    Id,
    Msg,
    Severity,
    LogData,
    Ver,
    Rev,
}

impl Expansion {
    /// Text without macros.
    pub fn literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Text(t)] => Some(t),
            _ => None,
        }
    }
}

/// `text` with its macros parsed; `%{` without a closing `}` is kept as text, as ModSecurity
/// keeps it.
pub(super) fn parse(text: &str) -> Result<Expansion, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("%{") {
        let Some(len) = rest[at + 2..].find('}') else {
            break;
        };
        if at > 0 {
            parts.push(Part::Text(rest[..at].to_string()));
        }
        parts.push(reference(&rest[at + 2..at + 2 + len])?);
        rest = &rest[at + 3 + len..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    Ok(Expansion { parts })
}

fn reference(name: &str) -> Result<Part, String> {
    let (head, key) = match name.split_once('.') {
        Some((h, k)) => (h, Some(k)),
        None => (name, None),
    };
    if head.eq_ignore_ascii_case("rule") {
        let field = match key.map(str::to_ascii_lowercase).as_deref() {
            Some("id") => RuleField::Id,
            Some("msg") => RuleField::Msg,
            Some("severity") => RuleField::Severity,
            Some("logdata") => RuleField::LogData,
            Some("ver") => RuleField::Ver,
            Some("rev") => RuleField::Rev,
            _ => {
                return Err(format!(
                    "`%{{{name}}}`: a rule macro reads rule.id, rule.msg, rule.severity, rule.logdata, rule.ver or rule.rev"
                ));
            }
        };
        return Ok(Part::Rule(field));
    }
    let var = Var::named(head)
        .ok_or_else(|| format!("`%{{{name}}}` names an unknown variable `{head}`"))?;
    match (var.is_collection(), key) {
        (true, None) => Err(format!(
            "`%{{{name}}}` names a collection without a key; write `%{{{head}.key}}`"
        )),
        (false, Some(_)) => Err(format!("`%{{{name}}}`: `{head}` has no keys")),
        // TX keeps its keys lower-cased: a macro's key is lowered here, once.
        (_, Some(key)) if var == Var::Tx => Ok(Part::Var(var, Some(key.to_ascii_lowercase()))),
        (_, key) => Ok(Part::Var(var, key.map(str::to_string))),
    }
}
