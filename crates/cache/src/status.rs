//! RFC 9211 `Cache-Status`: how this cache handled a request, as a structured field member
//! (`sluice; hit; ttl=42`, `sluice; fwd=miss; fwd-status=200; stored`), beside the short
//! status header (`X-Cache: HIT`) the route may name.

use crate::counters::Outcome;

/// The member's name: this cache (RFC 9211 §2: the cache's identifier).
pub const CACHE_NAME: &str = "sluice";

/// What a response's `Cache-Status` member says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStatus {
    /// How the request was answered.
    pub outcome: Outcome,
    /// The status the origin answered a forwarded request with (`fwd-status`).
    pub fwd_status: Option<u16>,
    /// The response was stored (or is being: it streams into the store).
    pub stored: bool,
    /// The entry's freshness left, in seconds (`ttl`; negative: stale).
    pub ttl: Option<i64>,
    /// Why the request went upstream without the cache (`fwd`): `bypass`, `method` or
    /// `request` (RFC 9211 §2.2).
    pub fwd: Option<&'static str>,
}

impl CacheStatus {
    /// A status with `outcome` and nothing else said.
    pub fn of(outcome: Outcome) -> Self {
        CacheStatus {
            outcome,
            fwd_status: None,
            stored: false,
            ttl: None,
            fwd: None,
        }
    }

    /// The member as field text.
    pub fn value(&self) -> String {
        let mut v = String::from(CACHE_NAME);
        match self.outcome {
            // Served from the store: fresh, or stale while it is revalidated (negative ttl).
            Outcome::Hit | Outcome::Stale => v.push_str("; hit"),
            Outcome::Miss => v.push_str("; fwd=miss"),
            // Stored but stale: forwarded to validate it (RFC 9211 §2.2 `stale`).
            Outcome::Revalidated | Outcome::Expired => v.push_str("; fwd=stale"),
            Outcome::Bypass => {
                v.push_str("; fwd=");
                v.push_str(self.fwd.unwrap_or("bypass"));
            }
        }
        if let Some(s) = self.fwd_status {
            v.push_str(&format!("; fwd-status={s}"));
        }
        if let Some(t) = self.ttl {
            v.push_str(&format!("; ttl={t}"));
        }
        if self.stored {
            v.push_str("; stored");
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_reads_as_rfc_9211_says() {
        let hit = CacheStatus {
            ttl: Some(42),
            ..CacheStatus::of(Outcome::Hit)
        };
        assert_eq!(hit.value(), "sluice; hit; ttl=42");
        let stale = CacheStatus {
            ttl: Some(-3),
            ..CacheStatus::of(Outcome::Stale)
        };
        assert_eq!(stale.value(), "sluice; hit; ttl=-3");
        let miss = CacheStatus {
            fwd_status: Some(200),
            stored: true,
            ..CacheStatus::of(Outcome::Miss)
        };
        assert_eq!(miss.value(), "sluice; fwd=miss; fwd-status=200; stored");
        let revalidated = CacheStatus {
            fwd_status: Some(304),
            ..CacheStatus::of(Outcome::Revalidated)
        };
        assert_eq!(revalidated.value(), "sluice; fwd=stale; fwd-status=304");
        let method = CacheStatus {
            fwd: Some("method"),
            fwd_status: Some(201),
            ..CacheStatus::of(Outcome::Bypass)
        };
        assert_eq!(method.value(), "sluice; fwd=method; fwd-status=201");
        assert_eq!(
            CacheStatus::of(Outcome::Bypass).value(),
            "sluice; fwd=bypass"
        );
        // Every value is a valid header value.
        for v in [hit, stale, miss, revalidated, method] {
            assert!(http::HeaderValue::from_str(&v.value()).is_ok());
        }
    }
}
