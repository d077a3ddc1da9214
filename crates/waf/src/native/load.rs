//! Loading a rule set: a route's pieces (Sluice's settings, the rule set's files with their
//! `Include`s, inline rules) read directive by directive into a [`RuleSet`]. Whatever the
//! engine does not implement is refused here, naming the file, line and directive; nothing
//! is skipped.

use super::action::{self, Actions, Disruptive, Engine};
use super::directive::{self, Directive, shorten};
use super::error::LoadError;
use super::operator;
use super::ruleset::{Kind, LimitAction, Link, Rule, RuleSet, Settings};
use super::variable;
use crate::rules::Piece;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How deep `Include`s may nest (a file that includes itself stops here).
const MAX_INCLUDE_DEPTH: usize = 16;

/// Directives that configure what Sluice does in its own way (ModSecurity's audit and debug
/// logs, its temporary files, its status reporting): accepted, without effect, so that
/// `crs-setup.conf` and `modsecurity.conf` load as written.
const WITHOUT_EFFECT: &[&str] = &[
    "secauditengine",
    "secauditlog",
    "secauditlog2",
    "secauditlogdirmode",
    "secauditlogfilemode",
    "secauditlogformat",
    "secauditlogparts",
    "secauditlogrelevantstatus",
    "secauditlogstoragedir",
    "secauditlogtype",
    "seccollectiontimeout",
    "seccomponentsignature",
    "secdatadir",
    "secdebuglog",
    "secdebugloglevel",
    "secrequestbodyinmemorylimit",
    "secstatusengine",
    "sectmpdir",
    "secuploaddir",
    "secuploadfilemode",
    "secuploadkeepfiles",
    "secpcrematchlimit",
    "secpcrematchlimitrecursion",
];

/// The rule set `pieces` make, in order.
pub fn load(pieces: &[Piece]) -> Result<RuleSet, LoadError> {
    let mut loader = Loader::default();
    for piece in pieces {
        match piece {
            Piece::File(path) => loader.files(path)?,
            Piece::Text { origin, text } => {
                let dir = std::env::current_dir().unwrap_or_default();
                loader.text(&Arc::from(origin.as_str()), text, &dir, 0)?;
            }
        }
    }
    if let Some(rule) = loader.set.rules.last()
        && rule.open_chain()
    {
        let origin = rule.chain.last().map_or(&rule.origin, |l| &l.origin);
        return Err(LoadError::at(
            origin,
            "SecRule",
            "the rule ends with `chain` but no rule follows it; add the chained rule or remove `chain`",
        ));
    }
    Ok(loader.set)
}

#[derive(Default)]
struct Loader {
    set: RuleSet,
    ids: HashSet<u64>,
}

impl Loader {
    /// A rule set's file, or the files its glob names (`rules/*.conf`), in order.
    fn files(&mut self, path: &Path) -> Result<(), LoadError> {
        let text = path.to_string_lossy();
        if !text.contains(['*', '?', '[']) {
            return self.file(path, None, 0);
        }
        let paths: Vec<PathBuf> = glob::glob(&text)
            .map_err(|e| LoadError::file(path, format!("not a valid glob: {e}")))?
            .filter_map(Result::ok)
            .collect();
        if paths.is_empty() {
            return Err(LoadError::file(path, "no file matches"));
        }
        paths.iter().try_for_each(|p| self.file(p, None, 0))
    }

    fn file(
        &mut self,
        path: &Path,
        from: Option<&Directive>,
        depth: usize,
    ) -> Result<(), LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let why = format!("cannot read {}: {e}", path.display());
            match from {
                Some(d) => LoadError::at(&d.origin, &d.name, why),
                None => LoadError::file(path, why),
            }
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let name: Arc<str> = Arc::from(path.display().to_string());
        self.text(&name, &text, &dir, depth)
    }

    fn text(
        &mut self,
        file: &Arc<str>,
        text: &str,
        dir: &Path,
        depth: usize,
    ) -> Result<(), LoadError> {
        for d in directive::split(file, text)? {
            if d.name.eq_ignore_ascii_case("include")
                || d.name.eq_ignore_ascii_case("includeoptional")
            {
                self.include(&d, dir, depth)?;
                continue;
            }
            self.directive(&d, dir)
                .map_err(|why| LoadError::at(&d.origin, &d.name, why))?;
        }
        Ok(())
    }

    /// `Include PATTERN`: the files the glob names, in order, relative to `dir`;
    /// `IncludeOptional` may name none.
    fn include(&mut self, d: &Directive, dir: &Path, depth: usize) -> Result<(), LoadError> {
        let err = |why: String| LoadError::at(&d.origin, &d.name, why);
        let [pattern] = d.args.as_slice() else {
            return Err(err("takes one file name or glob".into()));
        };
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(err(format!(
                "includes nest deeper than {MAX_INCLUDE_DEPTH}; does a file include itself?"
            )));
        }
        let full = dir.join(pattern);
        let paths: Vec<PathBuf> = glob::glob(&full.to_string_lossy())
            .map_err(|e| err(format!("`{pattern}` is not a valid glob: {e}")))?
            .filter_map(Result::ok)
            .collect();
        if paths.is_empty() && d.name.eq_ignore_ascii_case("include") {
            return Err(err(format!("no file matches {}", full.display())));
        }
        for path in paths {
            self.file(&path, Some(d), depth + 1)?;
        }
        Ok(())
    }

    fn directive(&mut self, d: &Directive, dir: &Path) -> Result<(), String> {
        let name = d.name.to_ascii_lowercase();
        let args: Vec<&str> = d.args.iter().map(String::as_str).collect();
        let done = match (name.as_str(), args.as_slice()) {
            ("secrule", [vars, op]) => Some(self.rule(d, vars, op, "", dir)),
            ("secrule", [vars, op, actions]) => Some(self.rule(d, vars, op, actions, dir)),
            ("secaction", [actions]) => Some(self.action(d, actions)),
            ("secmarker", [name]) => Some(self.marker(d, name)),
            ("secdefaultaction", [actions]) => Some(self.default_action(actions)),
            (n, args) => {
                settings(&mut self.set.settings, n, args).or_else(|| self.exclusion(n, args))
            }
        };
        match done {
            Some(result) => result,
            None if WITHOUT_EFFECT.contains(&name.as_str()) => Ok(()),
            None if is_known(&name) => Err(format!(
                "takes other arguments than `{}`; see ModSecurity's reference manual",
                shorten(&d.args.join(" "))
            )),
            None => Err("the native engine does not implement this directive; use `engine = \"modsecurity\"` for this rule set, or remove it (docs/waf.md lists the directives)".into()),
        }
    }

    /// `SecRuleRemoveBy*` and `SecRuleUpdateTargetBy*`, or `None` for another directive.
    fn exclusion(&mut self, name: &str, args: &[&str]) -> Option<Result<(), String>> {
        let ex = &mut self.set.exclusions;
        let result = match (name, args) {
            ("secruleremovebyid", ids) if !ids.is_empty() => {
                action::id_ranges(&ids.join(" ")).map(|r| ex.removed_ids.extend(r))
            }
            ("secruleremovebytag", [tag]) => {
                ex.removed_tags.push(tag.to_string());
                Ok(())
            }
            ("secruleremovebymsg", [msg]) => {
                ex.removed_msgs.push(msg.to_string());
                Ok(())
            }
            ("secruleupdatetargetbyid", [ids, targets]) => self.update_by_id(ids, targets),
            ("secruleupdatetargetbytag", [tag, targets]) => variable::parse(targets).map(|t| {
                ex.targets_by_tag
                    .extend(t.into_iter().map(|t| (tag.to_string(), t)));
            }),
            _ => return None,
        };
        Some(result)
    }

    fn update_by_id(&mut self, ids: &str, targets: &str) -> Result<(), String> {
        let ranges = action::id_ranges(ids)?;
        let targets = variable::parse(targets)?;
        let ex = &mut self.set.exclusions.targets_by_id;
        for r in ranges {
            ex.extend(targets.iter().map(|t| (r, t.clone())));
        }
        Ok(())
    }

    fn rule(
        &mut self,
        d: &Directive,
        vars: &str,
        op: &str,
        actions: &str,
        dir: &Path,
    ) -> Result<(), String> {
        let targets = variable::parse(vars)?;
        let operator = operator::parse(op, dir)?;
        let actions = action::parse(actions)?;
        if let Some(parent) = self.set.rules.last_mut().filter(|r| r.open_chain()) {
            check_link(&actions)?;
            let origin = d.origin.clone();
            parent.chain.push(Link {
                origin,
                targets,
                operator,
                actions,
            });
            return Ok(());
        }
        self.check_starter(&actions)?;
        let kind = Kind::Match { targets, operator };
        self.push(d, kind, actions);
        Ok(())
    }

    fn action(&mut self, d: &Directive, actions: &str) -> Result<(), String> {
        if self.set.rules.last().is_some_and(Rule::open_chain) {
            return Err("a SecAction cannot follow `chain`: a chained rule is a SecRule".into());
        }
        let actions = action::parse(actions)?;
        if actions.chain {
            return Err("SecAction cannot start a chain".into());
        }
        self.check_starter(&actions)?;
        self.push(d, Kind::Action, actions);
        Ok(())
    }

    fn marker(&mut self, d: &Directive, name: &str) -> Result<(), String> {
        if self.set.rules.last().is_some_and(Rule::open_chain) {
            return Err("a SecMarker cannot follow `chain`".into());
        }
        self.push(d, Kind::Marker(name.to_string()), Actions::default());
        Ok(())
    }

    fn push(&mut self, d: &Directive, kind: Kind, actions: Actions) {
        let origin = d.origin.clone();
        let chain = Vec::new();
        self.set.rules.push(Rule {
            origin,
            kind,
            actions,
            chain,
        });
    }

    /// A rule that starts a chain or stands alone: it has an id no other rule has.
    fn check_starter(&mut self, a: &Actions) -> Result<(), String> {
        let id = a.id.ok_or("the rule has no id; add `id:N`")?;
        if !self.ids.insert(id) {
            return Err(format!("the id {id} is already used by another rule"));
        }
        Ok(())
    }

    /// `SecDefaultAction`: a phase and a disruptive action, without metadata or
    /// transformations' reset, once per phase.
    fn default_action(&mut self, text: &str) -> Result<(), String> {
        let a = action::parse(text)?;
        let phase = a
            .phase
            .ok_or("SecDefaultAction needs a phase (`phase:2`)")?;
        if a.disruptive.is_none() {
            return Err("SecDefaultAction needs a disruptive action (pass, deny, ...)".into());
        }
        if a.id.is_some() || a.msg.is_some() || !a.tags.is_empty() || a.chain {
            return Err("SecDefaultAction takes no id, msg, tag or chain".into());
        }
        let slot = &mut self.set.settings.defaults[usize::from(phase - 1)];
        if slot.is_some() {
            return Err(format!("phase {phase} already has a SecDefaultAction"));
        }
        *slot = Some(a);
        Ok(())
    }
}

/// A chained rule: what only a chain's first rule may say is refused (ModSecurity's
/// reference manual: disruptive actions, phase, metadata, skip and skipAfter).
fn check_link(a: &Actions) -> Result<(), String> {
    let which = [
        (a.id.is_some(), "id"),
        (a.phase.is_some(), "phase"),
        (
            a.disruptive
                .as_ref()
                .is_some_and(|d| *d != Disruptive::Pass),
            "a disruptive action",
        ),
        (a.msg.is_some(), "msg"),
        (!a.tags.is_empty(), "tag"),
        (a.severity.is_some(), "severity"),
        (a.skip.is_some(), "skip"),
        (a.skip_after.is_some(), "skipAfter"),
    ];
    match which.iter().find(|(has, _)| *has) {
        Some((_, what)) => Err(format!(
            "a chained rule cannot have {what}: put it on the chain's first rule"
        )),
        None => Ok(()),
    }
}

/// The engine's settings directives, or `None` for another directive.
fn settings(s: &mut Settings, name: &str, args: &[&str]) -> Option<Result<(), String>> {
    let result = match (name, args) {
        ("secruleengine", [v]) => Engine::parse(v).map(|v| s.engine = v),
        ("secrequestbodyaccess", [v]) => on_off(v).map(|v| s.request_body_access = v),
        ("secresponsebodyaccess", [v]) => on_off(v).map(|v| s.response_body_access = v),
        ("secrequestbodylimit", [v]) => bytes(v).map(|v| s.request_body_limit = v),
        ("secrequestbodynofileslimit", [v]) => bytes(v).map(|v| s.request_body_no_files_limit = v),
        ("secresponsebodylimit", [v]) => bytes(v).map(|v| s.response_body_limit = v),
        ("secrequestbodylimitaction", [v]) => {
            limit_action(v).map(|v| s.request_body_limit_action = v)
        }
        ("secresponsebodylimitaction", [v]) => {
            limit_action(v).map(|v| s.response_body_limit_action = v)
        }
        ("secresponsebodymimetype", types) if !types.is_empty() => {
            let list = s.response_mime_types.get_or_insert_with(Vec::new);
            for t in types.iter().flat_map(|t| t.split_whitespace()) {
                if !list.iter().any(|x| x == t) {
                    list.push(t.to_string());
                }
            }
            Ok(())
        }
        ("secresponsebodymimetypesclear", []) => {
            s.response_mime_types = Some(Vec::new());
            Ok(())
        }
        _ => return None,
    };
    Some(result)
}

fn on_off(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{v}` is not On or Off")),
    }
}

fn bytes(v: &str) -> Result<u64, String> {
    v.parse()
        .map_err(|_| format!("`{v}` is not a number of bytes"))
}

fn limit_action(v: &str) -> Result<LimitAction, String> {
    match v.to_ascii_lowercase().as_str() {
        "reject" => Ok(LimitAction::Reject),
        "processpartial" => Ok(LimitAction::ProcessPartial),
        _ => Err(format!("`{v}` is not Reject or ProcessPartial")),
    }
}

/// Whether `name` is a directive the engine implements (its arguments were wrong).
fn is_known(name: &str) -> bool {
    const KNOWN: &[&str] = &[
        "secrule",
        "secaction",
        "secmarker",
        "secdefaultaction",
        "secruleengine",
        "secrequestbodyaccess",
        "secresponsebodyaccess",
        "secrequestbodylimit",
        "secrequestbodynofileslimit",
        "secresponsebodylimit",
        "secrequestbodylimitaction",
        "secresponsebodylimitaction",
        "secresponsebodymimetype",
        "secresponsebodymimetypesclear",
        "secruleremovebyid",
        "secruleremovebytag",
        "secruleremovebymsg",
        "secruleupdatetargetbyid",
        "secruleupdatetargetbytag",
    ];
    KNOWN.contains(&name)
}
