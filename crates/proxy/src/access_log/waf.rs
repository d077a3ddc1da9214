//! The WAF's audit record of a request (`[route.waf]`): what the rules did and which
//! matched, in the access log line, the request log and what log shipping sends.

use sluice_waf::{Match, Verdict};

/// What the WAF did with a request, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WafRecord {
    /// `"block"`, `"detect"` (forwarded with matches), `"open"` (saturated, forwarded
    /// uninspected) or `"closed"` (saturated, refused).
    pub(crate) action: &'static str,
    /// CRS's inbound anomaly score, where the rules reported it.
    pub(crate) anomaly_score: Option<u32>,
    /// The rules that matched (data truncated by `sluice-waf`).
    pub(crate) matches: Vec<Match>,
    /// Why, where no rule says it: `"body_over_limit"` (the body was larger than
    /// `request_body_limit` with `body_over_limit = "reject"`: refused with 413 in mode
    /// `block`, forwarded uninspected past the limit in mode `detect`). A 413 without it
    /// came from the listener's `max_body_bytes`, not the WAF.
    pub(crate) reason: Option<&'static str>,
}

impl WafRecord {
    pub(crate) fn new(action: &'static str, verdict: Verdict) -> Box<Self> {
        Box::new(WafRecord {
            action,
            anomaly_score: verdict.anomaly_score,
            matches: verdict.matches,
            reason: None,
        })
    }

    /// ` waf=block rules=942100,949110 score=10` for the text line.
    pub(crate) fn push_text(&self, out: &mut String) {
        out.push_str(" waf=");
        out.push_str(self.action);
        for (i, m) in self.matches.iter().enumerate() {
            out.push_str(if i == 0 { " rules=" } else { "," });
            out.push_str(itoa::Buffer::new().format(m.id));
        }
        if let Some(score) = self.anomaly_score {
            out.push_str(" score=");
            out.push_str(itoa::Buffer::new().format(score));
        }
        if let Some(reason) = self.reason {
            out.push_str(" reason=");
            out.push_str(reason);
        }
    }

    /// `,"waf":{"action":...,"anomaly_score":...,"matches":[{"id":..,"msg":..,"data":..,
    /// "severity":..}]}` for the JSON line, with `"reason"` after the action where there is
    /// one (left out otherwise: most records have none).
    pub(crate) fn push_json(&self, out: &mut String, push_str: fn(&mut String, &str)) {
        out.push_str(",\"waf\":{\"action\":\"");
        out.push_str(self.action);
        out.push('"');
        if let Some(reason) = self.reason {
            out.push_str(",\"reason\":\"");
            out.push_str(reason);
            out.push('"');
        }
        out.push_str(",\"anomaly_score\":");
        match self.anomaly_score {
            Some(s) => out.push_str(itoa::Buffer::new().format(s)),
            None => out.push_str("null"),
        }
        out.push_str(",\"matches\":[");
        for (i, m) in self.matches.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"id\":");
            out.push_str(itoa::Buffer::new().format(m.id));
            out.push_str(",\"msg\":");
            push_str(out, &m.msg);
            out.push_str(",\"data\":");
            push_str(out, &m.data);
            out.push_str(",\"severity\":");
            match m.severity {
                Some(s) => out.push_str(itoa::Buffer::new().format(s)),
                None => out.push_str("null"),
            }
            out.push('}');
        }
        out.push_str("]}");
    }
}
