//! The raw schema of the web application firewall: `[waf]` and `[route.waf]`.

use super::size::RawSize;
use serde::Deserialize;
use toml::Spanned;

type SpannedStr = Spanned<String>;

/// `[waf]`: the rule sets routes name, and the threads that evaluate them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWaf {
    /// `[[waf.ruleset]]`.
    pub ruleset: Option<Vec<Spanned<RawWafRuleSet>>>,
    /// Threads evaluating rules (default one per core).
    pub threads: Option<Spanned<usize>>,
    /// Requests waiting for inspection before the WAF counts as saturated (default 256 per
    /// thread).
    pub queue: Option<Spanned<usize>>,
    /// Percent of an event-loop thread's time that native-engine inspections of requests
    /// without a body may take on that thread instead of the WAF's threads (default 0).
    pub inline_percent: Option<Spanned<u32>>,
}

/// `[[waf.ruleset]]`: ModSecurity rules from files and/or inline.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWafRuleSet {
    /// What `[route.waf] ruleset` names.
    pub name: SpannedStr,
    /// Rule files in load order (`crs-setup.conf`, then `rules/*.conf`), or a file that
    /// `Include`s them (Debian's `owasp-crs.load` uses Apache's `IncludeOptional`, which
    /// libmodsecurity does not read).
    pub files: Option<Vec<SpannedStr>>,
    /// `SecRule` and other directives, after the files.
    pub rules: Option<SpannedStr>,
    /// `"modsecurity"` (default) or `"native"`.
    pub engine: Option<SpannedStr>,
}

/// `[route.waf]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteWaf {
    /// The `[[waf.ruleset]]` that inspects this route's requests.
    pub ruleset: SpannedStr,
    /// `"block"` (default) or `"detect"`.
    pub mode: Option<SpannedStr>,
    /// The Core Rule Set's paranoia level, 1 to 4 (default 1).
    pub paranoia_level: Option<Spanned<u8>>,
    /// CRS's inbound anomaly score threshold (default 5).
    pub inbound_anomaly_threshold: Option<Spanned<u32>>,
    /// CRS's outbound anomaly score threshold (default 4).
    pub outbound_anomaly_threshold: Option<Spanned<u32>>,
    /// Rules left out (`"942100"`, `"942100-942199"`, `"tag:attack-sqli"`) or a target left
    /// out of one rule (`"942100 !ARGS:password"`).
    pub exclusions: Option<Vec<SpannedStr>>,
    /// Bytes of request body inspected (default `"128k"`).
    pub request_body_limit: Option<Spanned<RawSize>>,
    /// `"reject"` (default: 413) or `"inspect_partial"`.
    pub body_over_limit: Option<SpannedStr>,
    /// Responses inspected too (phases 3 and 4; default `false`).
    pub inspect_response: Option<Spanned<bool>>,
    /// Bytes of response body inspected (default `"512k"`).
    pub response_body_limit: Option<Spanned<RawSize>>,
    /// Media types whose response bodies are inspected (default `["text/plain",
    /// "text/html", "text/xml"]`).
    pub response_mime_types: Option<Vec<SpannedStr>>,
    /// `"closed"` (default: 503) or `"open"` (forwarded uninspected, counted).
    pub on_overload: Option<SpannedStr>,
}
