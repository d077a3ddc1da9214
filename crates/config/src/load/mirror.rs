//! `[[route.mirror]]`.

use super::Cx;
use crate::policy::Mirror;
use crate::raw::*;
use std::collections::HashMap;
use std::time::Duration;

/// Copies in flight to one mirror at most, by default.
const MAX_IN_FLIGHT: u32 = 64;
/// The default deadline of a copy.
const TIMEOUT: Duration = Duration::from_secs(1);
/// The default largest body copied (Envoy's and Istio's 1 MiB, but counted, not silent).
const BODY_LIMIT: u64 = 1 << 20;

impl Cx<'_> {
    pub(super) fn mirrors(
        &mut self,
        raw: &RawRoute,
        upstream_names: &HashMap<String, usize>,
        is_broken: &dyn Fn(&str, &str) -> bool,
    ) -> Vec<Mirror> {
        let route = raw.name.get_ref();
        let mut out = Vec::new();
        for m in raw.mirror.iter().flatten() {
            let r = m.get_ref();
            let name = r.upstream.get_ref();
            let upstream = upstream_names.get(name).copied();
            if upstream.is_none() && !is_broken("upstream", name) {
                self.err_at(
                    &r.upstream,
                    format!("route `{route}` mirrors to upstream `{name}`, which is not defined"),
                    "fix the name or add an [[upstream]] with it",
                );
            }
            let per_million = match &r.percent {
                None => 1_000_000,
                Some(p) if (0.0..=100.0).contains(p.get_ref()) => {
                    (p.get_ref() * 10_000.0).round() as u32
                }
                Some(p) => {
                    self.err_at(
                        p,
                        format!(
                            "route `{route}`: mirror percent {} is not a percentage",
                            p.get_ref()
                        ),
                        "use 0 to 100, fractions allowed (such as 0.5)",
                    );
                    0
                }
            };
            let headers = self.header_match(route, "mirror", r.header.as_ref());
            let max_in_flight = match &r.max_in_flight {
                None => MAX_IN_FLIGHT,
                Some(n) if *n.get_ref() > 0 => *n.get_ref(),
                Some(n) => {
                    self.err_at(
                        n,
                        format!("route `{route}`: mirror max_in_flight must be at least 1"),
                        "give the most copies in flight at once, such as 64; to stop mirroring, remove the [[route.mirror]]",
                    );
                    1
                }
            };
            let request_headers = self.header_edits(
                r.request_headers.as_ref(),
                &format!("route `{route}`: mirror request_headers"),
            );
            let body_limit = self.size(r.body_limit.as_ref()).unwrap_or(BODY_LIMIT);
            let timeout = self.duration(r.timeout.as_ref()).unwrap_or(TIMEOUT);
            if let Some(u) = upstream {
                out.push(Mirror {
                    upstream: u,
                    upstream_name: name.clone(),
                    per_million,
                    headers,
                    body_limit,
                    timeout,
                    max_in_flight,
                    request_headers,
                });
            }
        }
        out
    }
}
