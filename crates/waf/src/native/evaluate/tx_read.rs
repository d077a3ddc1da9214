//! A rule link that reads one TX value and nothing else: CRS's paranoia-level gates
//! (`TX:EXECUTING_PARANOIA_LEVEL "@lt 2"`, two or four in each of its files, 62 run on a
//! GET at paranoia level 1) and its initialization's defaults (`&TX:name "@eq 0"`).
//!
//! Why: through the general path (targets, their values, exclusions, prefilter, memo,
//! events) such a link cost about 940 instructions where it does not match and more where
//! it does; the gates alone were 7% of a benign GET's (CRS 3.3.4, callgrind). Here it is a
//! TX lookup and the operator. What it changes is the general path's, in the same order:
//! on a match MATCHED_VAR(S) get the value as the rule named it and the link's `setvar`s
//! run; without one the matched variables are cleared. A transaction with a
//! `ctl:ruleRemoveTarget*` takes the general path, which applies them.

use super::{Link, NativeRules};
use crate::native::plan::TxRead;
use crate::native::ruleset::Rule;
use crate::native::transaction::Transaction;

impl NativeRules {
    /// [`NativeRules::link`] of a link that reads `read` (`None` where the transaction
    /// calls for the general path).
    pub(super) fn tx_link(
        &self,
        t: &mut Transaction,
        rule: &Rule,
        link: &Link<'_>,
        read: &TxRead,
    ) -> Option<bool> {
        if !t.removed_targets_by_id.is_empty() || !t.removed_targets_by_tag.is_empty() {
            return None;
        }
        let at = (self.id, read.n);
        let value = if read.counted {
            Some(t.tx_count(at, &read.written, &read.key))
        } else {
            t.tx_value(at, &read.written, &read.key)
        };
        let hit = value
            .filter(|v| link.plan.matcher.matches(&v.bytes, None, None) != link.operator.negated);
        let Some(v) = hit.map(|v| v.into_owned()) else {
            t.matched_vars.clear();
            return Some(false);
        };
        t.matched(v);
        self.setvars(t, rule, link.actions);
        Some(true)
    }
}

#[cfg(all(test, feature = "modsecurity"))]
mod tests {
    use crate::native::{NativeRules, load};
    use crate::rules::pieces;
    use crate::tests::{get, route};
    use crate::{Rules, inspect};
    use sluice_config::{WafInline, WafRuleSet};
    use std::sync::Arc;

    /// Every shape of a TX read the shortcut takes, beside its neighbours that read what
    /// it leaves behind: a match and none, negated, counted (named as written), a key
    /// absent, a chained read, a `skipAfter` gate, and MATCHED_VARS cleared by a read that
    /// did not match. Each rule logs what it saw; libmodsecurity's log is the answer.
    const RULES: &str = r#"
SecAction "id:1,phase:1,pass,nolog,setvar:tx.level=2,setvar:tx.Mixed_Case=7"
SecRule TX:LEVEL "@lt 3" "id:10,phase:1,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule TX:level "!@lt 3" "id:11,phase:1,pass,log,logdata:'%{MATCHED_VAR_NAME}'"
SecRule TX:level "!@eq 3" "id:12,phase:1,pass,log,logdata:'%{MATCHED_VAR_NAME}'"
SecRule &TX:Absent "@eq 0" "id:13,phase:1,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule &TX:MIXED_case "!@eq 0" "id:14,phase:1,pass,log,logdata:'%{MATCHED_VAR_NAME}',setvar:tx.seen=%{MATCHED_VAR}"
SecRule TX:absent "!@eq 1" "id:15,phase:1,pass,log"
SecRule TX:seen "@eq 1" "id:16,phase:1,pass,log,logdata:'%{MATCHED_VAR_NAME}'"
SecRule TX:level "@gt 5" "id:17,phase:1,pass,log"
SecRule MATCHED_VARS "@rx ." "id:18,phase:1,pass,log,logdata:'%{MATCHED_VAR}'"
SecRule REQUEST_METHOD "@streq GET" "id:19,phase:1,pass,log,chain,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule TX:level "@ge 2" "setvar:tx.chained=1"
SecRule TX:chained "@eq 1" "id:20,phase:1,pass,log"
SecRule TX:level "@lt 5" "id:21,phase:1,pass,nolog,skipAfter:END"
SecRule REQUEST_METHOD "@rx ." "id:22,phase:1,pass,log"
SecMarker END
SecRule TX:level "@lt 5" "id:23,phase:1,pass,log,logdata:'%{MATCHED_VAR}'"
"#;

    #[test]
    fn a_tx_read_matches_names_and_clears_as_libmodsecurity_s() {
        let set = WafRuleSet {
            engine: sluice_config::WafEngine::ModSecurity,
            name: "tx".into(),
            files: Vec::new(),
            rules: Some(WafInline {
                text: RULES.to_string(),
                file: "evaluate/tx_read.rs".into(),
                line: 1,
            }),
        };
        let pieces = pieces(&set, &route());
        let oracle = Arc::new(Rules::build(&pieces).expect("libmodsecurity loads the rules"));
        let native = NativeRules::new(load(&pieces).expect("the native loader reads them"))
            .expect("the native engine builds them");
        let shortcuts = native
            .plan
            .links
            .iter()
            .flatten()
            .filter(|l| l.tx.is_some())
            .count();
        assert!(shortcuts >= 12, "{shortcuts} links read TX alone");
        let request = get("/");
        let (want, _) = inspect(&oracle, &request, false);
        let got = native.inspect(&request);
        let ids: Vec<u32> = want.matches.iter().map(|m| m.id).collect();
        assert_eq!(
            ids,
            [10, 12, 13, 14, 16, 19, 20, 23],
            "libmodsecurity's own"
        );
        let logged = |m: &[crate::Match]| -> Vec<(u32, String)> {
            m.iter().map(|m| (m.id, m.data.clone())).collect()
        };
        assert_eq!(logged(&got.matches), logged(&want.matches));
    }
}
