//! A rule's match, read from the line libmodsecurity logs for it (the text ModSecurity-nginx
//! writes to NGINX's error log: `ModSecurity: Warning. Matched "..." [file "..."] [line
//! "..."] [id "942100"] [msg "..."] [data "..."] [severity "2"] ...`).

/// The most bytes of matched data kept in a record (ModSecurity's own `data` is the
/// attacker's input: it is truncated before it reaches logs and dashboards).
pub const MAX_DATA: usize = 200;

/// The rule id of Sluice's own rule that reports CRS's inbound anomaly score (in the rule
/// set's last piece; see `rules.rs`).
pub(crate) const SCORE_RULE: u32 = 880_009;

/// One rule that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// The rule's `id`.
    pub id: u32,
    /// Its `msg`.
    pub msg: String,
    /// Its `data` (`logdata`), at most [`MAX_DATA`] bytes.
    pub data: String,
    /// Its `severity` (0 emergency .. 7 debug; CRS: 2 critical, 3 error, 4 warning, 5 notice).
    pub severity: Option<u8>,
}

impl Match {
    /// The match a log line describes; `None` for a line without a rule id.
    pub fn parse(line: &str) -> Option<Match> {
        let id = field(line, "id")?.parse().ok()?;
        let mut data = field(line, "data").unwrap_or("").to_string();
        if data.len() > MAX_DATA {
            let mut cut = MAX_DATA;
            while !data.is_char_boundary(cut) {
                cut -= 1;
            }
            data.truncate(cut);
            data.push('…');
        }
        Some(Match {
            id,
            msg: field(line, "msg").unwrap_or("").to_string(),
            data,
            severity: field(line, "severity").and_then(|s| s.parse().ok()),
        })
    }
}

/// The value of `[key "value"]` in `line` (up to the next `"] [` or the closing `"]`).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let open = format!("[{key} \"");
    let start = line.find(&open)? + open.len();
    let rest = &line[start..];
    let end = rest.find("\"] [").or_else(|| rest.rfind("\"]"))?;
    Some(&rest[..end])
}

/// CRS's inbound anomaly score, where the matches say it: Sluice's score rule's data, or
/// the blocking evaluation's "(Total Score: N)".
pub(crate) fn anomaly_score(matches: &[Match]) -> Option<u32> {
    let mut score = None;
    for m in matches {
        let found = if m.id == SCORE_RULE {
            m.data.trim().parse().ok()
        } else {
            m.msg.split_once("Total Score: ").and_then(|(_, rest)| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
        };
        score = score.max(found);
    }
    score
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "ModSecurity: Warning. Matched \"Operator `Rx' with parameter `x' against variable `ARGS:q' (Value: `1' or '1'='1' ) [file \"/usr/share/modsecurity-crs/rules/REQUEST-942-APPLICATION-ATTACK-SQLI.conf\"] [line \"45\"] [id \"942100\"] [rev \"\"] [msg \"SQL Injection Attack Detected via libinjection\"] [data \"Matched Data: s&sos found within ARGS:q: 1' or \\\"1\\\"]=1\"] [severity \"2\"] [ver \"OWASP_CRS/3.3.4\"] [maturity \"0\"] [accuracy \"0\"] [tag \"attack-sqli\"] [hostname \"127.0.0.1\"] [uri \"/\"] [unique_id \"1\"] [ref \"v8,10\"]";

    #[test]
    fn a_crs_line_gives_its_rule_message_and_data() {
        let m = Match::parse(LINE).expect("a match");
        assert_eq!(m.id, 942100);
        assert_eq!(m.msg, "SQL Injection Attack Detected via libinjection");
        assert_eq!(
            m.data,
            "Matched Data: s&sos found within ARGS:q: 1' or \\\"1\\\"]=1"
        );
        assert_eq!(m.severity, Some(2));
        assert_eq!(Match::parse("ModSecurity: no rule here"), None);
    }

    #[test]
    fn long_data_is_cut_on_a_character() {
        let line = format!("[id \"1\"] [data \"{}\"] [severity \"2\"]", "é".repeat(300));
        let m = Match::parse(&line).expect("a match");
        assert!(
            m.data.len() <= MAX_DATA + '…'.len_utf8(),
            "{}",
            m.data.len()
        );
        assert!(m.data.ends_with('…'));
    }

    #[test]
    fn the_score_comes_from_the_score_rule_or_the_blocking_message() {
        let m = |id, msg: &str, data: &str| Match {
            id,
            msg: msg.into(),
            data: data.into(),
            severity: None,
        };
        assert_eq!(anomaly_score(&[m(942100, "SQLi", "x")]), None);
        assert_eq!(anomaly_score(&[m(SCORE_RULE, "", "10")]), Some(10));
        assert_eq!(
            anomaly_score(&[m(
                949110,
                "Inbound Anomaly Score Exceeded (Total Score: 15)",
                ""
            )]),
            Some(15)
        );
    }
}
