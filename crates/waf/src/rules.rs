//! A route's rule set as libmodsecurity loads it: Sluice's engine settings and the route's
//! Core Rule Set variables, the rule set's files and inline rules, then the route's
//! exclusions and the rule that reports the anomaly score.
//!
//! Routes whose pieces are equal share one compiled set (`runtime.rs`), so a route's
//! settings cost a compile only when they differ from every other route's.

use crate::matches::SCORE_RULE;
use sluice_config::{RouteWaf, WafBodyOverLimit, WafExclusion, WafMode, WafRuleSet};
use std::fmt::Write as _;

/// What comes before the rule set's files: the engine's settings (body access and limits,
/// response inspection as the route asks, no audit log of ModSecurity's own: Sluice records the matches),
/// ModSecurity's recommended body processors (rules 200000-200003 of its
/// `modsecurity.conf-recommended`, which CRS expects), and the route's CRS variables (rule
/// 880001, in phase 1 before CRS's initialisation, which keeps values already set).
pub fn head(route: &RouteWaf) -> String {
    let limit = route.request_body_limit;
    let action = match route.body_over_limit {
        WafBodyOverLimit::Reject => "Reject",
        WafBodyOverLimit::InspectPartial => "ProcessPartial",
    };
    let p = route.paranoia_level;
    let mut s = String::new();
    let _ = write!(
        s,
        "SecRuleEngine {engine}\n\
         SecRequestBodyAccess On\n\
         SecRequestBodyLimit {limit}\n\
         SecRequestBodyNoFilesLimit {limit}\n\
         SecRequestBodyLimitAction {action}\n\
         {response}\
         SecAuditEngine Off\n\
         SecRule REQUEST_HEADERS:Content-Type \"^(?:application(?:/soap\\+|/)|text/)xml\" \"id:200000,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=XML\"\n\
         SecRule REQUEST_HEADERS:Content-Type \"^application/json\" \"id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON\"\n\
         SecRule REQBODY_ERROR \"!@eq 0\" \"id:200002,phase:2,t:none,log,deny,status:400,msg:'Failed to parse request body.',logdata:'%{{reqbody_error_msg}}',severity:2\"\n\
         SecRule MULTIPART_STRICT_ERROR \"!@eq 0\" \"id:200003,phase:2,t:none,log,deny,status:400,msg:'Multipart request body failed strict validation'\"\n\
         SecAction \"id:880001,phase:1,pass,nolog,t:none,setvar:tx.paranoia_level={p},setvar:tx.blocking_paranoia_level={p},setvar:tx.detection_paranoia_level={p},setvar:tx.inbound_anomaly_score_threshold={inbound},setvar:tx.outbound_anomaly_score_threshold={outbound}\"\n",
        engine = engine(route.mode),
        response = response(route),
        inbound = route.inbound_anomaly_threshold,
        outbound = route.outbound_anomaly_threshold,
    );
    s
}

/// The response's settings: ModSecurity's own (`SecResponseBodyAccess` and its limit) from
/// the route's, so that the engine inspects what the gateway holds back for it; a body over
/// the limit is inspected in part (`ProcessPartial`), as the gateway sends the rest on.
fn response(route: &RouteWaf) -> String {
    if !route.inspect_response {
        return "SecResponseBodyAccess Off\n".to_string();
    }
    format!(
        "SecResponseBodyAccess On\n\
         SecResponseBodyMimeType {types}\n\
         SecResponseBodyLimit {limit}\n\
         SecResponseBodyLimitAction ProcessPartial\n",
        types = route.response_mime_types.join(" "),
        limit = route.response_body_limit,
    )
}

fn engine(mode: WafMode) -> &'static str {
    match mode {
        WafMode::Block => "On",
        WafMode::Detect => "DetectionOnly",
    }
}

/// What comes after the rule set: the engine mode again (a file may have set its own), the
/// route's exclusions, and Sluice's rule that logs the inbound anomaly score when it is
/// above zero (CRS 3's `tx.anomaly_score`, CRS 4's `tx.blocking_inbound_anomaly_score`).
pub fn tail(route: &RouteWaf) -> String {
    let mut s = format!("SecRuleEngine {}\n", engine(route.mode));
    for e in &route.exclusions {
        let _ = match e {
            WafExclusion::Ids(a, b) if a == b => writeln!(s, "SecRuleRemoveById {a}"),
            WafExclusion::Ids(a, b) => writeln!(s, "SecRuleRemoveById {a}-{b}"),
            WafExclusion::Tag(tag) => writeln!(s, "SecRuleRemoveByTag \"{tag}\""),
            WafExclusion::Target(id, target) => {
                writeln!(s, "SecRuleUpdateTargetById {id} \"{target}\"")
            }
        };
    }
    let _ = writeln!(
        s,
        "SecRule TX:ANOMALY_SCORE|TX:BLOCKING_INBOUND_ANOMALY_SCORE \"@gt 0\" \"id:{SCORE_RULE},phase:2,pass,log,t:none,msg:'Sluice: inbound anomaly score',logdata:'%{{MATCHED_VAR}}'\""
    );
    s
}

/// Every piece of `route`'s rule set, in load order (equal for routes that can share one
/// compiled set).
pub fn pieces(set: &WafRuleSet, route: &RouteWaf) -> Vec<Piece> {
    let mut pieces = vec![Piece::Text {
        origin: "[route.waf] (Sluice's settings before the rules)".to_string(),
        text: head(route),
    }];
    pieces.extend(set.files.iter().cloned().map(Piece::File));
    if let Some(inline) = &set.rules {
        // Blank lines put the rules on their own line numbers in the configuration file.
        let text = format!(
            "{}{}",
            "\n".repeat(inline.line.saturating_sub(1)),
            inline.text
        );
        pieces.push(Piece::Text {
            origin: format!("{} [[waf.ruleset]] `{}` rules", inline.file, set.name),
            text,
        });
    }
    pieces.push(Piece::Text {
        origin: "[route.waf] (mode and exclusions, after the rules)".to_string(),
        text: tail(route),
    });
    pieces
}

/// One piece of a rule set, in load order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Piece {
    /// A file (ModSecurity resolves its `Include`s, with globs, relative to it).
    File(std::path::PathBuf),
    /// Directives written elsewhere; `origin` names where, for errors.
    Text {
        /// Where the text comes from ("the configuration file's line 12", "Sluice's
        /// settings for route `api`").
        origin: String,
        /// The directives.
        text: String,
    },
}
