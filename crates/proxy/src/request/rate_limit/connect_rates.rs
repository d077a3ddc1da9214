//! An MQTT listener's (or `[route.mqtt]` route's) connection rates (`rate_per_client` by
//! address, `rate_per_client_id` by client identifier): the routes' GCRA limiter, in this
//! gateway's memory or shared by the fleet through Redis, kept across reloads while a rate
//! stays so that a reload resets no device's allowance.
//!
//! A device with an empty client identifier is its connection (the broker assigns it an
//! identifier of its own), so it has no identifier's allowance to spend: only its address's
//! applies. One bucket for every such device would refuse the fleet's unnamed devices as
//! one.

use super::{RateLimiter, RedisStore, Verdict};
use sluice_config::{Listener, ListenerKind, MqttProxy, RateLimit, RateLimitStore};
use std::net::IpAddr;
use std::sync::Arc;

/// A listener's two limiters (either may be absent).
#[derive(Debug, Default)]
pub(crate) struct ConnectRates {
    per_client: Option<Arc<RateLimiter>>,
    per_client_id: Option<Arc<RateLimiter>>,
}

impl ConnectRates {
    /// The listener's limiters: the old ones where their rate (and store) did not change.
    pub(crate) fn build(
        listener: &Listener,
        old: Option<&ConnectRates>,
        store: &RateLimitStore,
        redis: Option<&Arc<RedisStore>>,
    ) -> Option<Arc<ConnectRates>> {
        let ListenerKind::Mqtt(mqtt) = &listener.kind else {
            return None;
        };
        Self::build_for(&listener.name, mqtt, old, store, redis)
    }

    /// The limiters of `mqtt`, named `owner` in the store (a listener's or a route's name).
    pub(crate) fn build_for(
        owner: &str,
        mqtt: &MqttProxy,
        old: Option<&ConnectRates>,
        store: &RateLimitStore,
        redis: Option<&Arc<RedisStore>>,
    ) -> Option<Arc<ConnectRates>> {
        if mqtt.rate_per_client.is_none() && mqtt.rate_per_client_id.is_none() {
            return None;
        }
        let one = |config: &Option<RateLimit>,
                   kept: Option<&Arc<RateLimiter>>,
                   what: &str|
         -> Option<Arc<RateLimiter>> {
            let config = config.clone()?;
            let redis = redis.filter(|_| config.shared);
            match kept {
                Some(k) if k.config == config && k.shares(redis) => Some(k.clone()),
                _ => Some(Arc::new(RateLimiter::new(
                    &format!("mqtt:{owner}:{what}"),
                    config,
                    store,
                    redis.cloned(),
                ))),
            }
        };
        Some(Arc::new(ConnectRates {
            per_client: one(
                &mqtt.rate_per_client,
                old.and_then(|o| o.per_client.as_ref()),
                "client",
            ),
            per_client_id: one(
                &mqtt.rate_per_client_id,
                old.and_then(|o| o.per_client_id.as_ref()),
                "client_id",
            ),
        }))
    }

    /// Whether a new connection from `client` as `client_id` is within both rates (each
    /// counts it; an empty identifier has no allowance of its own, see the module's docs).
    pub(crate) async fn admit(&self, client: IpAddr, client_id: &str) -> bool {
        if let Some(l) = &self.per_client
            && matches!(
                l.check(crate::hash::hash_ip(client)).await,
                Verdict::Reject(_)
            )
        {
            return false;
        }
        if let Some(l) = &self.per_client_id
            && !client_id.is_empty()
            && matches!(
                l.check(crate::hash::hash64(0, client_id.as_bytes())).await,
                Verdict::Reject(_)
            )
        {
            return false;
        }
        true
    }
}
