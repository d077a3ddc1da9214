//! The web application firewall's settings: `[waf]` with its named rule sets, and each
//! route's `[route.waf]`. Rules are kept as paths and text here; `sluice-waf` compiles them
//! with the engine each set names (`sluice check` reports a broken rule by file and line).

use std::path::PathBuf;

/// `[waf]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WafSettings {
    /// `[[waf.ruleset]]`, by name.
    pub rulesets: Vec<WafRuleSet>,
    /// Threads that evaluate rules (default: one per core), at the scheduler's idle priority
    /// so that inspection never delays a route without a WAF.
    pub threads: usize,
    /// Requests accepted for inspection and not yet evaluated before the WAF counts as
    /// saturated (a route's `on_overload` decides then).
    pub queue: usize,
    /// `inline_percent`: the share of each event-loop thread's time (0-100) that the native
    /// engine's inspections of requests without a body (heads up to 4 KiB) may take on that
    /// thread, saving the hand-off to a WAF thread and back; past it they go to the WAF's
    /// threads. 0: every inspection on the WAF's threads. Default
    /// [`DEFAULT_INLINE_PERCENT`] (its doc says why).
    pub inline_percent: u32,
}

/// `[waf] inline_percent`'s default. On the Intel host's `bench/waf`, side by side, 50, 75
/// and 100 cost the same per native-engine GET (every bodiless inspection ran on the loop) and
/// 0 cost 1.7 times as much (the hand-off to a WAF thread and back outweighs the inspection);
/// under a flood of GETs a plain route's p99 rose as much inline as on the WAF's threads
/// (the flood's own requests hold the loop). The share still bounds what a flood of costly
/// heads (a crafted one can keep PCRE2 backtracking) takes: half of each loop thread is left
/// to other routes. docs/waf.md, "Where an inspection runs", has the figures.
pub const DEFAULT_INLINE_PERCENT: u32 = 50;

impl Default for WafSettings {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        WafSettings {
            rulesets: Vec::new(),
            threads,
            queue: 256 * threads,
            inline_percent: DEFAULT_INLINE_PERCENT,
        }
    }
}

/// `[[waf.ruleset]]`: ModSecurity rules, from files (with their `Include`s) then inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WafRuleSet {
    /// What routes name in `[route.waf] ruleset`.
    pub name: String,
    /// Rule files in load order (globs as ModSecurity's `Include` takes them).
    pub files: Vec<PathBuf>,
    /// `rules = '''...'''`, loaded after the files.
    pub rules: Option<WafInline>,
    /// `engine`: which engine evaluates the set.
    pub engine: WafEngine,
}

/// `[[waf.ruleset]] engine`: what evaluates a rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WafEngine {
    /// libmodsecurity 3: every SecLang feature it has, at about ten times the native
    /// engine's CPU; the oracle the native engine's verdicts are tested against.
    ModSecurity,
    /// Sluice's own SecLang engine (`sluice_waf::native`, the default): the Core Rule Set's
    /// verdicts at a tenth of libmodsecurity's CPU; refuses at load, with file and line,
    /// what it does not implement (then name `"modsecurity"`).
    #[default]
    Native,
}

/// Rules written in the configuration file, with where they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WafInline {
    /// The rules' text.
    pub text: String,
    /// The configuration file.
    pub file: String,
    /// The line of the file the text's first line is on.
    pub line: usize,
}

/// What a route does with a request the rules would deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WafMode {
    /// Answer with the rules' status (403 by default); nothing reaches the upstream.
    Block,
    /// Record and count, and forward (ModSecurity's `DetectionOnly`).
    Detect,
}

/// What a route does with a request the WAF cannot inspect in time (its queue is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WafOverload {
    /// Forward it uninspected, counted.
    Open,
    /// Refuse it (503), counted.
    Closed,
}

/// What a route does with a request body larger than `request_body_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WafBodyOverLimit {
    /// 413 (ModSecurity's `SecRequestBodyLimitAction Reject`) in mode `block`; in mode
    /// `detect`, inspected in part and recorded, as detection refuses nothing (libmodsecurity
    /// does not enforce `Reject` in `DetectionOnly` either).
    Reject,
    /// Inspect the first `request_body_limit` bytes and forward the whole body, counted
    /// (`ProcessPartial`).
    InspectPartial,
}

/// An exclusion of `[route.waf] exclusions`, as ModSecurity's directives take them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WafExclusion {
    /// `"942100"` or `"942100-942199"`: `SecRuleRemoveById`.
    Ids(u32, u32),
    /// `"tag:attack-sqli"`: `SecRuleRemoveByTag`.
    Tag(String),
    /// `"942100 !ARGS:password"`: `SecRuleUpdateTargetById`, the target no longer inspected.
    Target(u32, String),
}

/// `[route.waf]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteWaf {
    /// `[[waf.ruleset]]` name.
    pub ruleset: String,
    /// Block or detect (default block).
    pub mode: WafMode,
    /// The Core Rule Set's paranoia level (1-4; default 1): `tx.paranoia_level` and CRS 4's
    /// `tx.blocking_paranoia_level`.
    pub paranoia_level: u8,
    /// CRS's inbound anomaly score threshold (default 5: one critical match).
    pub inbound_anomaly_threshold: u32,
    /// CRS's outbound anomaly score threshold (default 4).
    pub outbound_anomaly_threshold: u32,
    /// Rules and targets left out for this route.
    pub exclusions: Vec<WafExclusion>,
    /// Bytes of request body inspected (default 128k, ModSecurity's recommended).
    pub request_body_limit: u64,
    /// A larger body: reject (default) or inspect its start.
    pub body_over_limit: WafBodyOverLimit,
    /// The WAF saturated: refuse (default) or forward uninspected.
    pub on_overload: WafOverload,
    /// Responses inspected too (phases 3 and 4; default off, as ModSecurity's recommended
    /// `SecResponseBodyAccess Off` for NGINX).
    pub inspect_response: bool,
    /// Bytes of a response body held back and inspected (default 512k, ModSecurity's
    /// recommended `SecResponseBodyLimit`); beyond them it is sent on uninspected.
    pub response_body_limit: u64,
    /// The media types whose bodies are inspected (ModSecurity's recommended
    /// `SecResponseBodyMimeType text/plain text/html text/xml`); other bodies pass as they come.
    pub response_mime_types: Vec<String>,
}

impl RouteWaf {
    /// What `[route.waf]` with only `ruleset = NAME` means: the defaults each field names
    /// (block at paranoia level 1, thresholds 5 and 4, ModSecurity's recommended body
    /// limits and response types, a saturated WAF refusing, responses not inspected). The
    /// loader starts from it, so a default is written once.
    pub fn new(ruleset: impl Into<String>) -> RouteWaf {
        RouteWaf {
            ruleset: ruleset.into(),
            mode: WafMode::Block,
            paranoia_level: 1,
            inbound_anomaly_threshold: 5,
            outbound_anomaly_threshold: 4,
            exclusions: Vec::new(),
            request_body_limit: 128 << 10,
            body_over_limit: WafBodyOverLimit::Reject,
            on_overload: WafOverload::Closed,
            inspect_response: false,
            response_body_limit: 512 << 10,
            response_mime_types: DEFAULT_RESPONSE_MIME_TYPES.map(String::from).to_vec(),
        }
    }
}

/// ModSecurity's recommended `SecResponseBodyMimeType`.
pub const DEFAULT_RESPONSE_MIME_TYPES: [&str; 3] = ["text/plain", "text/html", "text/xml"];
