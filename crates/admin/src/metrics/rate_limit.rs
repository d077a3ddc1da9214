//! `sluice_rate_limit_*`: each limited route's decisions, and the shared limits' Redis.

use crate::Sources;
use crate::exposition::{Exposition, Kind};

/// The routes' families (none while no route has a limit), then Redis's (none while no
/// limit is shared).
pub(super) fn metrics(out: &mut Exposition, s: &Sources) {
    let limits = s.gateway.rate_limits();
    if !limits.is_empty() {
        let name = "sluice_rate_limit_requests_total";
        out.family(
            name,
            Kind::Counter,
            "Requests checked by a route's rate limit: passed, delayed (within the burst, spaced out at the rate) or rejected (429).",
        );
        for (route, counts, _, _) in &limits {
            for (result, v) in ["passed", "delayed", "rejected"].iter().zip(counts) {
                out.sample(name, &[("route", route.as_str()), ("result", *result)], v);
            }
        }
        out.family_by(
            "sluice_rate_limit_fallback_total",
            Kind::Counter,
            "Shared-limit checks decided locally (rate / expected_gateways) because Redis did not answer in time.",
            "route",
            limits.iter().map(|(route, _, fell, _)| (route.as_str(), fell)),
        );
        out.family_by(
            "sluice_rate_limit_redis_calls_total",
            Kind::Counter,
            "Calls to Redis by shared limits (one per lease of nodelay limits, else one per request).",
            "route",
            limits.iter().map(|(route, _, _, calls)| (route.as_str(), calls)),
        );
    }
    let Some(store) = s.gateway.rate_limit_redis() else {
        return;
    };
    out.single(
        "sluice_rate_limit_redis_up",
        Kind::Gauge,
        "Whether the shared rate limits' Redis answers (1) or the local fallback decides (0).",
        u8::from(store.up),
    );
    out.single(
        "sluice_rate_limit_redis_outages_total",
        Kind::Counter,
        "Times the shared rate limits' Redis became unreachable (a failed first connection included); each began a stretch of local fallback.",
        store.outages,
    );
}
