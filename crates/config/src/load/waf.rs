//! `[waf]` and `[route.waf]`: rule files resolved against the configuration's directory,
//! inline rules kept with their line, the route's CRS settings checked.

use super::Cx;
use crate::raw::*;
use crate::waf::*;
use std::collections::HashSet;
use toml::Spanned;

impl Cx<'_> {
    /// `[waf]`, with its defaults where absent.
    pub(super) fn waf_settings(&mut self, raw: Option<&RawWaf>) -> WafSettings {
        let mut s = WafSettings::default();
        let Some(raw) = raw else {
            return s;
        };
        if let Some(t) = &raw.threads {
            match *t.get_ref() {
                0 => self.err_at(
                    t,
                    "[waf] threads = 0",
                    "give it at least 1 (default: one per core)",
                ),
                n => s.threads = n,
            }
        }
        s.queue = 256 * s.threads;
        if let Some(q) = &raw.queue {
            match *q.get_ref() {
                0 => self.err_at(
                    q,
                    "[waf] queue = 0",
                    "give it at least 1 (default: 256 per thread)",
                ),
                n => s.queue = n,
            }
        }
        if let Some(p) = &raw.inline_percent {
            match *p.get_ref() {
                n @ 0..=100 => s.inline_percent = n,
                n => self.err_at(
                    p,
                    format!("[waf] inline_percent = {n}"),
                    "give a percent from 0 (every inspection on the WAF's threads) to 100",
                ),
            }
        }
        let mut names = HashSet::new();
        for r in raw.ruleset.iter().flatten() {
            let r = r.get_ref();
            let name = r.name.get_ref();
            if !names.insert(name.clone()) {
                self.err_at(
                    &r.name,
                    format!("[[waf.ruleset]] `{name}` is defined twice"),
                    "give each rule set its own name",
                );
                continue;
            }
            let files: Vec<_> = r
                .files
                .iter()
                .flatten()
                .map(|f| self.path(f.get_ref()))
                .collect();
            let rules = r.rules.as_ref().map(|text| self.waf_inline(text));
            if files.is_empty() && rules.is_none() {
                self.err_at(
                    &r.name,
                    format!("[[waf.ruleset]] `{name}` has no rules"),
                    "add files = [\"/etc/modsecurity/crs/crs-setup.conf\", \"/usr/share/modsecurity-crs/rules/*.conf\"] (Debian's modsecurity-crs) and/or rules = '''SecRule ...'''",
                );
                continue;
            }
            let engine = self
                .choice(
                    r.engine.as_ref(),
                    "engine",
                    &[
                        ("modsecurity", WafEngine::ModSecurity),
                        ("native", WafEngine::Native),
                    ],
                )
                .unwrap_or_default();
            s.rulesets.push(WafRuleSet {
                name: name.clone(),
                files,
                rules,
                engine,
            });
        }
        s
    }

    fn waf_inline(&mut self, text: &Spanned<String>) -> WafInline {
        let start = text.span().start;
        let mut line = self.loc.line(start);
        if self.loc.opens_multiline(start) {
            line += 1;
        }
        WafInline {
            text: text.get_ref().clone(),
            file: self.loc.file().to_string(),
            line,
        }
    }

    /// `[route.waf]`; `None` when it has a mistake (reported).
    pub(super) fn route_waf(
        &mut self,
        route: &str,
        raw: &Spanned<RawRouteWaf>,
    ) -> Option<RouteWaf> {
        let before = self.errors.len();
        let r = raw.get_ref();
        let d = RouteWaf::new(r.ruleset.get_ref().clone());
        let at = format!("route `{route}` [route.waf]");
        let mode = self.choice(
            r.mode.as_ref(),
            "mode",
            &[("block", WafMode::Block), ("detect", WafMode::Detect)],
        );
        let paranoia_level = r
            .paranoia_level
            .as_ref()
            .map_or(d.paranoia_level, |p| *p.get_ref());
        if let Some(p) = &r.paranoia_level
            && !(1..=4).contains(p.get_ref())
        {
            self.err_at(
                p,
                format!("{at}: paranoia_level {} is not a level", p.get_ref()),
                "the Core Rule Set's levels are 1 to 4",
            );
        }
        let mut exclusions = Vec::new();
        for e in r.exclusions.iter().flatten() {
            match parse_exclusion(e.get_ref()) {
                Some(x) => exclusions.push(x),
                None => self.err_at(
                    e,
                    format!("{at}: exclusion `{}` is not an exclusion", e.get_ref()),
                    "write a rule id \"942100\", a range \"942100-942199\", a tag \"tag:attack-sqli\" or a rule's target \"942100 !ARGS:password\"",
                ),
            }
        }
        let request_body_limit = self
            .size(r.request_body_limit.as_ref())
            .unwrap_or(d.request_body_limit);
        let body_over_limit = self.choice(
            r.body_over_limit.as_ref(),
            "body_over_limit",
            &[
                ("reject", WafBodyOverLimit::Reject),
                ("inspect_partial", WafBodyOverLimit::InspectPartial),
            ],
        );
        let on_overload = self.choice(
            r.on_overload.as_ref(),
            "on_overload",
            &[("closed", WafOverload::Closed), ("open", WafOverload::Open)],
        );
        let response_body_limit = self
            .size(r.response_body_limit.as_ref())
            .unwrap_or(d.response_body_limit);
        let response_mime_types = self.mime_types(r.response_mime_types.as_deref(), &at);
        (self.errors.len() == before).then(|| RouteWaf {
            mode: mode.unwrap_or(d.mode),
            paranoia_level,
            inbound_anomaly_threshold: r
                .inbound_anomaly_threshold
                .as_ref()
                .map_or(d.inbound_anomaly_threshold, |t| *t.get_ref()),
            outbound_anomaly_threshold: r
                .outbound_anomaly_threshold
                .as_ref()
                .map_or(d.outbound_anomaly_threshold, |t| *t.get_ref()),
            exclusions,
            request_body_limit,
            body_over_limit: body_over_limit.unwrap_or(d.body_over_limit),
            on_overload: on_overload.unwrap_or(d.on_overload),
            inspect_response: r
                .inspect_response
                .as_ref()
                .map_or(d.inspect_response, |i| *i.get_ref()),
            response_body_limit,
            response_mime_types,
            ..d
        })
    }
}

impl Cx<'_> {
    /// `response_mime_types`: each a `type/subtype` in lower case (libmodsecurity compares
    /// them so); the default where the key is absent.
    fn mime_types(&mut self, raw: Option<&[SpannedStr]>, at: &str) -> Vec<String> {
        let Some(raw) = raw else {
            return DEFAULT_RESPONSE_MIME_TYPES.map(String::from).to_vec();
        };
        let mut types = Vec::new();
        for t in raw {
            let v = t.get_ref();
            let well_formed = v.split_once('/').is_some_and(|(a, b)| {
                let token = |s: &str| {
                    !s.is_empty()
                        && s.bytes().all(|c| {
                            c.is_ascii_lowercase()
                                || c.is_ascii_digit()
                                || b"!#$&^_.+-".contains(&c)
                        })
                };
                token(a) && token(b)
            });
            if well_formed {
                types.push(v.clone());
            } else {
                self.err_at(
                    t,
                    format!("{at}: response_mime_types: `{v}` is not a media type"),
                    "write a type/subtype in lower case without parameters, such as \"text/html\"",
                );
            }
        }
        types
    }

    /// A route's `ruleset` names a `[[waf.ruleset]]`.
    pub(super) fn waf_ruleset_exists(
        &mut self,
        route: &str,
        name: &str,
        at: &Spanned<RawRouteWaf>,
        waf: &WafSettings,
    ) {
        if !waf.rulesets.iter().any(|r| r.name == name) {
            let known: Vec<_> = waf
                .rulesets
                .iter()
                .map(|r| format!("`{}`", r.name))
                .collect();
            self.err_at(
                &at.get_ref().ruleset,
                format!("route `{route}` [route.waf]: ruleset `{name}` is not defined"),
                if known.is_empty() {
                    "define it: [[waf.ruleset]] name = \"crs\" files = [\"/etc/modsecurity/crs/crs-setup.conf\", \"/usr/share/modsecurity-crs/rules/*.conf\"]".to_string()
                } else {
                    format!("the rule sets are {}", known.join(", "))
                },
            );
        }
    }
}

/// `"942100"`, `"942100-942199"`, `"tag:NAME"` or `"942100 !ARGS:password"`.
pub(crate) fn parse_exclusion(text: &str) -> Option<WafExclusion> {
    let id = |s: &str| s.parse::<u32>().ok().filter(|n| *n > 0);
    let text = text.trim();
    if let Some(tag) = text.strip_prefix("tag:") {
        let ok = !tag.is_empty()
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_/.:".contains(c));
        return ok.then(|| WafExclusion::Tag(tag.to_string()));
    }
    if let Some((rule, target)) = text.split_once(' ') {
        let target = target.trim();
        let target = target.strip_prefix('!').unwrap_or(target);
        let (collection, key) = target.split_once(':').unwrap_or((target, ""));
        let ok = !collection.is_empty()
            && collection
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_')
            && key
                .chars()
                .all(|c| !c.is_whitespace() && c != '"' && c != '\'' && c != ',' && c != '|');
        return (ok && id(rule).is_some())
            .then(|| WafExclusion::Target(id(rule).unwrap_or(0), format!("!{target}")));
    }
    match text.split_once('-') {
        Some((a, b)) => match (id(a), id(b)) {
            (Some(a), Some(b)) if a <= b => Some(WafExclusion::Ids(a, b)),
            _ => None,
        },
        None => id(text).map(|n| WafExclusion::Ids(n, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_read_as_modsecurity_writes_them() {
        assert_eq!(
            parse_exclusion("942100"),
            Some(WafExclusion::Ids(942100, 942100))
        );
        assert_eq!(
            parse_exclusion("942100-942199"),
            Some(WafExclusion::Ids(942100, 942199))
        );
        assert_eq!(
            parse_exclusion("tag:attack-sqli"),
            Some(WafExclusion::Tag("attack-sqli".into()))
        );
        assert_eq!(
            parse_exclusion("942100 !ARGS:password"),
            Some(WafExclusion::Target(942100, "!ARGS:password".into()))
        );
        assert_eq!(
            parse_exclusion("942100 REQUEST_COOKIES"),
            Some(WafExclusion::Target(942100, "!REQUEST_COOKIES".into()))
        );
        for bad in [
            "",
            "0",
            "x",
            "942199-942100",
            "tag:",
            "942100 args",
            "942100 !ARGS:a\"b",
            "tag:a b",
        ] {
            assert_eq!(parse_exclusion(bad), None, "{bad:?}");
        }
    }
}
