//! `[upstream.health_check]` (active checks) and `[upstream.outlier]` (ejection from live
//! traffic).

use super::Cx;
use crate::raw::*;
use crate::snapshot::*;
use std::num::NonZeroU32;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// `[upstream.health_check]`: how each server is probed, and how often.
    pub(super) fn health_check(
        &mut self,
        upstream: &str,
        raw: &Spanned<RawHealthCheck>,
    ) -> HealthCheck {
        let r = raw.get_ref();
        let kind = self
            .choice(
                r.kind.as_ref(),
                "type",
                &[("http", ProbeKind::Http), ("tcp", ProbeKind::Tcp)],
            )
            .unwrap_or(ProbeKind::Http);
        let probe = match kind {
            ProbeKind::Tcp => {
                self.check_no_http_probe_keys(upstream, r);
                HealthProbe::Tcp
            }
            ProbeKind::Http => self.http_probe(upstream, raw),
        };
        let interval = self
            .duration(r.interval.as_ref())
            .unwrap_or(Duration::from_secs(5));
        let timeout = self
            .duration(r.timeout.as_ref())
            .unwrap_or(Duration::from_secs(2).min(interval));
        if let Some(t) = &r.timeout
            && timeout > interval
        {
            self.err_at(
                t,
                format!("upstream `{upstream}`: a health check timeout of {timeout:?} is longer than its interval of {interval:?}"),
                "make the timeout shorter than the interval",
            );
        }
        let healthy = self.check_count(upstream, &r.healthy, "healthy", 2);
        let unhealthy = self.check_count(upstream, &r.unhealthy, "unhealthy", 3);
        HealthCheck {
            probe,
            interval,
            timeout,
            healthy,
            unhealthy,
        }
    }

    /// A TCP check only connects: the keys of an HTTP request are refused.
    fn check_no_http_probe_keys(&mut self, upstream: &str, r: &RawHealthCheck) {
        for (field, set) in [
            ("path", r.path.as_ref().map(Spanned::span)),
            ("host", r.host.as_ref().map(Spanned::span)),
            ("body", r.body.as_ref().map(Spanned::span)),
            (
                "statuses",
                r.statuses
                    .as_ref()
                    .and_then(|s| s.first())
                    .map(Spanned::span),
            ),
        ] {
            if let Some(span) = set {
                self.err(
                    span.start,
                    format!("upstream `{upstream}`: health_check `{field}` is for HTTP checks, and this one is type = \"tcp\""),
                    format!("remove `{field}`, or use type = \"http\""),
                );
            }
        }
    }

    /// An HTTP check: the request (`path`, `host`) and what answer passes (`statuses`,
    /// `body`).
    fn http_probe(&mut self, upstream: &str, raw: &Spanned<RawHealthCheck>) -> HealthProbe {
        let r = raw.get_ref();
        let path = match &r.path {
            None => "/".to_string(),
            Some(p)
                if p.get_ref().starts_with('/') && !p.get_ref().contains(char::is_whitespace) =>
            {
                p.get_ref().clone()
            }
            Some(p) => {
                self.err_at(
                    p,
                    format!(
                        "upstream `{upstream}`: health_check path `{}` is not a path",
                        p.get_ref()
                    ),
                    "write it from the root, such as \"/healthz\"",
                );
                "/".to_string()
            }
        };
        HealthProbe::Http {
            path,
            host: r.host.as_ref().map(|h| h.get_ref().clone()),
            statuses: self.passing_statuses(upstream, raw),
            body: r.body.as_ref().map(|b| b.get_ref().clone()),
        }
    }

    /// `statuses` (default 200-399): the status ranges a passing check answers with.
    fn passing_statuses(
        &mut self,
        upstream: &str,
        raw: &Spanned<RawHealthCheck>,
    ) -> Vec<(u16, u16)> {
        match &raw.get_ref().statuses {
            None => vec![(200, 399)],
            Some(list) if list.is_empty() => {
                self.err_at(
                    raw,
                    format!("upstream `{upstream}`: health_check statuses is empty, so no check could pass"),
                    "list at least one, such as statuses = [\"2xx\"]",
                );
                vec![(200, 399)]
            }
            Some(list) => list
                .iter()
                .filter_map(|s| {
                    let range = status_range(s.get_ref());
                    if range.is_none() {
                        self.err_at(
                            s,
                            format!(
                                "upstream `{upstream}`: `{}` is not a status, range or class",
                                s.get_ref()
                            ),
                            "use \"200\", \"200-399\" or \"2xx\"",
                        );
                    }
                    range
                })
                .collect(),
        }
    }

    /// `healthy` or `unhealthy`: how many checks in a row change a server's state.
    fn check_count(
        &mut self,
        upstream: &str,
        v: &Option<Spanned<u32>>,
        field: &str,
        default: u32,
    ) -> NonZeroU32 {
        match v {
            None => NonZeroU32::new(default).expect("defaults are positive"),
            Some(n) => NonZeroU32::new(*n.get_ref()).unwrap_or_else(|| {
                self.err_at(
                    n,
                    format!("upstream `{upstream}`: health_check `{field}` must be at least 1"),
                    "use 1 to act on a single check",
                );
                NonZeroU32::MIN
            }),
        }
    }
}

/// A health check's `type`.
#[derive(Clone, Copy, PartialEq)]
enum ProbeKind {
    Http,
    Tcp,
}

impl Cx<'_> {
    pub(super) fn outlier(&mut self, upstream: &str, raw: &Spanned<RawOutlier>) -> Outlier {
        let r = raw.get_ref();
        let consecutive_failures = match &r.consecutive_failures {
            None => NonZeroU32::new(5).expect("positive"),
            Some(n) => NonZeroU32::new(*n.get_ref()).unwrap_or_else(|| {
                self.err_at(
                    n,
                    format!(
                        "upstream `{upstream}`: outlier consecutive_failures must be at least 1"
                    ),
                    "use 5 (Envoy's default), or remove [upstream.outlier]",
                );
                NonZeroU32::MIN
            }),
        };
        let base_ejection = self
            .duration(r.base_ejection.as_ref())
            .unwrap_or(Duration::from_secs(30));
        let max_ejection = self
            .duration(r.max_ejection.as_ref())
            .unwrap_or(Duration::from_secs(300).max(base_ejection));
        if let Some(m) = &r.max_ejection
            && max_ejection < base_ejection
        {
            self.err_at(
                m,
                format!("upstream `{upstream}`: max_ejection {max_ejection:?} is shorter than base_ejection {base_ejection:?}"),
                "make max_ejection at least base_ejection",
            );
        }
        let max_ejected_percent = match &r.max_ejected_percent {
            None => 50,
            Some(p) if *p.get_ref() <= 100 => *p.get_ref(),
            Some(p) => {
                self.err_at(
                    p,
                    format!(
                        "upstream `{upstream}`: max_ejected_percent = {} is over 100",
                        p.get_ref()
                    ),
                    "use a percentage from 0 to 100 (one server can always be ejected)",
                );
                50
            }
        };
        Outlier {
            consecutive_failures,
            base_ejection,
            max_ejection,
            max_ejected_percent,
        }
    }
}

/// `"204"`, `"200-399"` or `"2xx"` as an inclusive range.
fn status_range(s: &str) -> Option<(u16, u16)> {
    let code = |t: &str| t.parse::<u16>().ok().filter(|c| (100..=599).contains(c));
    if let Some(class) = s.strip_suffix("xx") {
        let c = class.parse::<u16>().ok().filter(|c| (1..=5).contains(c))?;
        return Some((c * 100, c * 100 + 99));
    }
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (code(a.trim())?, code(b.trim())?);
            (a <= b).then_some((a, b))
        }
        None => code(s).map(|c| (c, c)),
    }
}
