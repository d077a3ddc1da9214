//! `kind = "mqtt"` listeners and what `[route.mqtt]` shares with them: the CONNECT's limits,
//! the admission of devices and the brokers' hash ring.

use crate::load::Cx;
use crate::raw::*;
use crate::snapshot::*;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// An MQTT listener's (or route's) brokers are on a hash ring: a device returns to the
    /// broker that holds its session only if its key always hashes to the same one, so the
    /// ring must not bound loads (`hash_balance_factor`, on by default, moves a device off a
    /// busier broker), and a health check must be one a broker answers (an HTTP one marks
    /// every broker down). `owner`: "listener `devices`"; `at`: where its upstream is named;
    /// `raw`: the upstream as written, for where to point.
    pub(in crate::load) fn mqtt_brokers_hashed(
        &mut self,
        owner: &str,
        at: usize,
        brokers: &Upstream,
        raw: &RawUpstream,
    ) {
        let name = &brokers.name;
        if brokers.balance != Balance::ConsistentHash {
            self.err(
                at,
                format!("{owner}: MQTT sends each device to the broker its client identifier hashes to, and upstream `{name}` does not hash"),
                format!("give upstream `{name}` balance = \"consistent_hash\" and hash_balance_factor = 0 (so that load never moves a device off its broker)"),
            );
            return;
        }
        if let Some(factor) = brokers.hash_balance_factor {
            let said = raw.hash_balance_factor.as_ref().map(|f| f.span().start);
            self.err(
                said.unwrap_or(raw.name.span().start),
                format!(
                    "{owner}: upstream `{name}` bounds each broker's load (hash_balance_factor = {factor}{}), which sends a device to another broker, away from its session, whenever its own is busier than its share",
                    if said.is_none() { ", the default" } else { "" }
                ),
                format!("set hash_balance_factor = 0 in upstream `{name}` (no bound: a device always reaches the broker its key hashes to while that broker is up)"),
            );
        }
        if let (Some(HealthProbe::Http { .. }), Some(check)) = (
            brokers.health_check.as_ref().map(|h| &h.probe),
            &raw.health_check,
        ) {
            self.err_at(
                check,
                format!("{owner}: upstream `{name}`'s health check sends HTTP requests, which an MQTT broker does not answer, so every broker would be marked down"),
                "set type = \"tcp\" in [upstream.health_check] (a broker that accepts a connection is up)",
            );
        }
    }

    /// A `kind = "mqtt"` listener's settings; `upstream` is `None` when it is missing or
    /// another of the listener's keys has a mistake (reported).
    pub(super) fn mqtt_kind(
        &mut self,
        name: &str,
        raw: &RawListener,
        upstream: Option<usize>,
        idle_timeout: Duration,
    ) -> Option<ListenerKind> {
        if let Some(p) = &raw.passthrough {
            self.err_at(
                p,
                format!("listener `{name}`: an MQTT listener reads each CONNECT, so it cannot pass TLS through"),
                "remove passthrough (terminate TLS here with [listener.tls], or use a kind = \"tcp\" listener)",
            );
            return None;
        }
        let mqtt = raw.mqtt.as_ref().map(Spanned::get_ref);
        let settings = self.mqtt_settings(mqtt.map(|m| MqttConnectKeys {
            connect_timeout: m.connect_timeout.as_ref(),
            max_connect_size: m.max_connect_size.as_ref(),
            route_by: m.route_by.as_ref(),
            client_id_pattern: m.client_id_pattern.as_ref(),
        }));
        let auth = self.mqtt_auth(
            &format!("listener `{name}` [listener.mqtt.auth]"),
            name,
            mqtt.and_then(|m| m.auth.as_ref()),
        );
        let before = self.errors.len();
        let certificate_identity = self.choice(
            mqtt.and_then(|m| m.certificate_identity.as_ref()),
            "certificate_identity",
            &[
                ("client_id", MqttRouteBy::ClientId),
                ("username", MqttRouteBy::Username),
            ],
        );
        if let Some(at) = mqtt.and_then(|m| m.certificate_identity.as_ref()) {
            self.mqtt_certificates_required(name, raw, at);
        }
        let rate_per_client = mqtt.and_then(|m| m.rate_per_client.as_ref()).map(|r| {
            self.mqtt_rate(
                &format!("listener `{name}` [listener.mqtt.rate_per_client]"),
                r,
            )
        });
        let rate_per_client_id = mqtt.and_then(|m| m.rate_per_client_id.as_ref()).map(|r| {
            let owner = format!("listener `{name}` [listener.mqtt.rate_per_client_id]");
            self.mqtt_rate(&owner, r)
        });
        let max_connections_per_client_id = self.mqtt_client_id_cap(
            &format!("listener `{name}`"),
            mqtt.and_then(|m| m.max_connections_per_client_id.as_ref()),
            mqtt.and_then(|m| m.max_connections_store.as_ref()),
        );
        if self.errors.len() != before {
            return None;
        }
        let (
            Some(upstream),
            Some((connect_timeout, max_connect_size, route_by, client_id_pattern)),
            Ok(auth),
        ) = (upstream, settings, auth)
        else {
            return None;
        };
        Some(ListenerKind::Mqtt(MqttProxy {
            upstream,
            connect_timeout,
            max_connect_size,
            route_by,
            client_id_pattern,
            auth,
            certificate_identity,
            rate_per_client,
            rate_per_client_id,
            max_connections_per_client_id,
            idle_timeout,
        }))
    }

    /// `max_connections_per_client_id` and `max_connections_store` of `[listener.mqtt]` or
    /// `[route.mqtt]`; `None` when there is no cap or a mistake (reported).
    pub(in crate::load) fn mqtt_client_id_cap(
        &mut self,
        owner: &str,
        max: Option<&Spanned<u32>>,
        store: Option<&SpannedStr>,
    ) -> Option<crate::ClientIdCap> {
        let shared = self.choice(
            store,
            "max_connections_store",
            &[("local", false), ("redis", true)],
        );
        let Some(max) = max else {
            if let Some(s) = store {
                self.err_at(
                    s,
                    format!("{owner}: max_connections_store says where a cap is counted, and there is no cap"),
                    "add max_connections_per_client_id = 1 (or remove max_connections_store)",
                );
            }
            return None;
        };
        if *max.get_ref() == 0 {
            self.err_at(
                max,
                format!("{owner}: max_connections_per_client_id = 0 would refuse every device"),
                "use 1 (one connection per client identifier, as brokers keep one session) or more",
            );
            return None;
        }
        let shared = shared.unwrap_or(false);
        if let (true, Some(s)) = (shared, store) {
            self.redis_users.push(s.span().start);
        }
        Some(crate::ClientIdCap {
            max: *max.get_ref(),
            shared,
        })
    }

    /// `certificate_identity` binds a CONNECT field to the certificate, so every device must
    /// present one: `[listener.tls] client_auth = "required"`.
    fn mqtt_certificates_required(&mut self, name: &str, raw: &RawListener, at: &SpannedStr) {
        let required = raw
            .tls
            .as_ref()
            .and_then(|t| t.client_auth.as_ref())
            .is_some_and(|m| m.get_ref() == "required");
        if !required {
            self.err_at(
                at,
                format!("listener `{name}`: certificate_identity needs every device to present a client certificate"),
                "set [listener.tls] client_ca = \"devices-ca.pem\" and client_auth = \"required\"",
            );
        }
    }

    /// One of an MQTT listener's connection rates: `[route.rate_limit]`'s `rate`, `burst` and
    /// `store`; its key is the address or identifier, and a connection is never delayed.
    pub(in crate::load) fn mqtt_rate(
        &mut self,
        owner: &str,
        raw: &Spanned<RawRateLimit>,
    ) -> crate::RateLimit {
        if let Some(k) = &raw.get_ref().key {
            self.err_at(
                k,
                format!("{owner}: `key` does not apply; the table's name says what is limited"),
                "remove key (rate_per_client: by address; rate_per_client_id: by client identifier)",
            );
        }
        if let Some(n) = &raw.get_ref().nodelay {
            self.err_at(
                n,
                format!("{owner}: `nodelay` does not apply; a connection over the rate is refused, never delayed"),
                "remove nodelay",
            );
        }
        if let Some(l) = &raw.get_ref().limit {
            self.err_at(
                l,
                format!("{owner}: `limit` does not apply; a connection's rate is checked before its credentials"),
                "remove limit",
            );
        }
        let mut limit = self.rate_limit(owner, raw);
        limit.key = None;
        limit.nodelay = true;
        limit
    }

    /// `[listener.mqtt.auth]`: `[route.auth]`'s `basic` and `jwt`, which read what a
    /// CONNECT carries (its user name and password); the other methods read HTTP.
    pub(in crate::load) fn mqtt_auth(
        &mut self,
        owner: &str,
        name: &str,
        raw: Option<&Spanned<RawAuth>>,
    ) -> Result<Option<std::sync::Arc<crate::RouteAuth>>, ()> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let r = raw.get_ref();
        let http_only = [
            ("cert", r.cert.is_some()),
            ("keys", r.keys.is_some()),
            ("forward", r.forward.is_some()),
        ];
        let mut ok = true;
        for (method, given) in http_only {
            if given {
                ok = false;
                self.err_at(
                    raw,
                    format!("{owner}: `{method}` reads HTTP requests, not a CONNECT"),
                    "use basic = { htpasswd = \"…\" } (the CONNECT's user name and password) or jwt = { … } (the password is the token)",
                );
            }
        }
        let auth = self.auth(owner, name, raw);
        match (ok, auth) {
            (true, Some(a)) => Ok(Some(std::sync::Arc::new(a))),
            _ => Err(()),
        }
    }

    /// `[listener.mqtt]`, with its defaults: the CONNECT's time and size limits and what
    /// routes a device. `None` when it has a mistake (reported).
    pub(in crate::load) fn mqtt_settings(
        &mut self,
        raw: Option<MqttConnectKeys<'_>>,
    ) -> Option<(Duration, usize, MqttRouteBy, Option<IdPattern>)> {
        let raw = raw.as_ref();
        let before = self.errors.len();
        let timeout = self
            .duration(raw.and_then(|m| m.connect_timeout))
            .unwrap_or(Duration::from_secs(10));
        let size = self
            .size(raw.and_then(|m| m.max_connect_size))
            .unwrap_or(64 << 10);
        let route_by = self
            .choice(
                raw.and_then(|m| m.route_by),
                "route_by",
                &[
                    ("client_id", MqttRouteBy::ClientId),
                    ("username", MqttRouteBy::Username),
                ],
            )
            .unwrap_or(MqttRouteBy::ClientId);
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        let pattern = raw.and_then(|m| m.client_id_pattern).and_then(|p| {
            regex::Regex::new(p.get_ref())
                .map_err(|e| {
                    self.err_at(
                        p,
                        format!("client_id_pattern does not compile: {e}"),
                        "fix the regular expression (Rust regex syntax), anchored as \"^dev-[0-9a-f]{8}$\"",
                    );
                })
                .ok()
                .map(IdPattern)
        });
        (self.errors.len() == before).then_some((timeout, size, route_by, pattern))
    }
}

/// The `[listener.mqtt]` (or `[route.mqtt]`) keys that concern the CONNECT itself.
pub(in crate::load) struct MqttConnectKeys<'a> {
    pub(in crate::load) connect_timeout: Option<&'a SpannedStr>,
    pub(in crate::load) max_connect_size: Option<&'a Spanned<RawSize>>,
    pub(in crate::load) route_by: Option<&'a SpannedStr>,
    pub(in crate::load) client_id_pattern: Option<&'a SpannedStr>,
}
