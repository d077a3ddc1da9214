//! `[[listener]]` and `[listener.tls]`.

use super::Cx;
use crate::paths::{EscapedSlashes, PathPolicy};
use crate::quic::{QuicRetry, QuicSettings};
use crate::raw::*;
use crate::snapshot::*;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    pub(super) fn listener(
        &mut self,
        raw: &RawListener,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
        broken: &HashMap<&'static str, HashSet<String>>,
        upstream_names: &HashMap<String, usize>,
    ) -> Option<Listener> {
        let name = raw.name.get_ref().clone();
        let kind = self.listener_kind(&name, raw, upstream_names, broken);
        let proxy_protocol = raw.proxy_protocol.as_ref().is_some_and(|v| *v.get_ref());
        let address = match raw.address.get_ref().parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.err_at(
                    &raw.address,
                    format!(
                        "listener `{name}`: `{}` is not an ip:port address",
                        raw.address.get_ref()
                    ),
                    "write it as \"127.0.0.1:8443\", \"0.0.0.0:443\" or \"[::]:443\"",
                );
                None
            }
        };
        let (mut h2, mut http1) = (true, true);
        if let Some(protocols) = &raw.protocols {
            h2 = false;
            http1 = false;
            for p in protocols.get_ref() {
                match p.as_str() {
                    "h2" => h2 = true,
                    "http/1.1" => http1 = true,
                    other => self.err_at(
                        protocols,
                        format!("listener `{name}`: `protocols` contains \"{other}\", which this build does not support"),
                        "use \"h2\" and \"http/1.1\"",
                    ),
                }
            }
            if !h2 && !http1 {
                self.err_at(
                    protocols,
                    format!("listener `{name}`: `protocols` is empty"),
                    "list \"h2\", \"http/1.1\" or both",
                );
            }
        }
        let tls = raw
            .tls
            .as_ref()
            .and_then(|t| self.listener_tls(&name, t, cert_names, raw_certs, broken));
        let max_header_bytes = self
            .size(raw.max_header_bytes.as_ref())
            .unwrap_or(32 * 1024);
        if let Some(v) = &raw.max_header_bytes
            && !(1024..=1 << 20).contains(&max_header_bytes)
        {
            self.err_at(
                v,
                format!("listener `{name}`: max_header_bytes must be between 1k and 1m"),
                "NGINX's default is 32k",
            );
        }
        let max_header_fields = self.max_header_fields(&name, raw);
        let trusted_proxies = self.cidrs(
            raw.trusted_proxies.as_ref(),
            &format!("listener `{name}`: trusted_proxies"),
        );
        let acl = self.acl(
            raw.allow.as_ref(),
            raw.deny.as_ref(),
            &format!("listener `{name}`"),
        );
        if let Some(at) = raw.proxy_protocol.as_ref().filter(|v| *v.get_ref())
            && trusted_proxies.is_empty()
        {
            self.err_at(
                at,
                format!("listener `{name}`: proxy_protocol = true but no peer may send the header"),
                "list the load balancers that send it: trusted_proxies = [\"10.0.0.0/8\"] (connections from any other address are closed)",
            );
        }
        let http3 = raw.http3.as_ref().is_some_and(|v| *v.get_ref());
        if let Some(at) = raw.http3.as_ref().filter(|v| *v.get_ref()) {
            if raw.tls.is_none() {
                self.err_at(
                    at,
                    format!("listener `{name}`: http3 = true needs TLS (QUIC is always encrypted)"),
                    "add a [listener.tls] section with its certificates, or remove http3",
                );
            } else if kind.as_ref().is_some_and(|k| *k != ListenerKind::Http) {
                self.err_at(
                    at,
                    format!("listener `{name}`: http3 = true on a kind = \"tcp\" listener"),
                    "HTTP/3 is served by HTTP listeners; remove http3 here",
                );
            }
        }
        let mut tls = tls;
        if let (Some(t), Some(raw_tls)) = (&mut tls, &raw.tls) {
            let tcp = kind
                .as_ref()
                .is_some_and(|k| matches!(k, ListenerKind::Tcp(_)));
            let mqtt = kind
                .as_ref()
                .is_some_and(|k| matches!(k, ListenerKind::Mqtt(_)));
            match self.client_auth(&name, raw_tls, http3) {
                Ok(Some(_)) if tcp => self.err_at(
                    raw_tls.client_auth.as_ref().or(raw_tls.client_ca.as_ref()).unwrap_or(&raw.name),
                    format!("listener `{name}`: client certificates on a kind = \"tcp\" listener"),
                    "ask for client certificates on HTTP listeners (their routes decide what a certificate allows) or MQTT listeners",
                ),
                Ok(Some(auth)) if mqtt && auth.forward_client_cert => self.err(
                    raw_tls
                        .forward_client_cert
                        .as_ref()
                        .map_or(raw.name.span().start, |f| f.span().start),
                    format!("listener `{name}`: forward_client_cert adds an HTTP header, and an MQTT listener relays bytes"),
                    "remove forward_client_cert (certificate_identity in [listener.mqtt] binds a device to its certificate)",
                ),
                Ok(auth) => t.client_auth = auth,
                Err(()) => {}
            }
            if t.client_auth.is_none() {
                // A certificate that asks for client certificates needs its listener's CAs.
                for c in raw_certs {
                    let served = cert_names
                        .get(c.name.get_ref())
                        .is_some_and(|i| t.certificates.contains(i));
                    if let Some(at) = c
                        .client_auth
                        .as_ref()
                        .filter(|m| served && m.get_ref() != "off")
                    {
                        self.err_at(
                            at,
                            format!(
                                "certificate `{}` sets client_auth, but listener `{name}` has no client_ca",
                                c.name.get_ref()
                            ),
                            "give the listener's [listener.tls] client_ca (and client_auth, \"off\" for its other names)",
                        );
                    }
                }
            }
        }
        let keepalive_timeout = self
            .duration(raw.keepalive_timeout.as_ref())
            .unwrap_or(Duration::from_secs(75));
        let quic = QuicSettings {
            retry: self
                .choice(
                    raw.quic_retry.as_ref(),
                    "quic_retry",
                    &[
                        ("auto", QuicRetry::Auto),
                        ("always", QuicRetry::Always),
                        ("off", QuicRetry::Off),
                    ],
                )
                .unwrap_or(QuicRetry::Auto),
            idle_timeout: self
                .duration(raw.quic_idle_timeout.as_ref())
                .unwrap_or(keepalive_timeout),
            max_streams: self
                .positive(
                    raw.quic_max_streams.as_ref(),
                    &format!("listener `{name}`: quic_max_streams"),
                )
                .unwrap_or(100),
        };
        let listener = Listener {
            http3,
            quic,
            kind: kind?,
            proxy_protocol,
            trusted_proxies,
            acl,
            request_id: raw.request_id.as_ref().is_none_or(|v| *v.get_ref()),
            max_connections: self
                .positive(
                    raw.max_connections.as_ref(),
                    &format!("listener `{name}`: max_connections"),
                )
                .map(|n| n as usize),
            max_connections_per_client: self.positive(
                raw.max_connections_per_client.as_ref(),
                &format!("listener `{name}`: max_connections_per_client"),
            ),
            name,
            address: address?,
            h2,
            http1,
            header_read_timeout: self
                .duration(raw.header_read_timeout.as_ref())
                .unwrap_or(Duration::from_secs(30)),
            keepalive_timeout,
            max_header_bytes: max_header_bytes as usize,
            max_header_fields,
            max_body_bytes: self.size(raw.max_body_bytes.as_ref()).unwrap_or(10 << 20),
            forwarded_header: raw.forwarded_header.unwrap_or(false),
            underscores_in_headers: raw
                .underscores_in_headers
                .as_ref()
                .is_some_and(|b| *b.get_ref()),
            paths: self.path_policy(raw),
            tls: None,
        };
        if raw.tls.is_some() {
            return Some(Listener {
                tls: Some(tls?),
                ..listener
            });
        }
        Some(listener)
    }

    /// `merge_slashes` and `escaped_slashes`: how the listener normalizes request paths.
    fn path_policy(&mut self, raw: &RawListener) -> PathPolicy {
        let default = PathPolicy::default();
        PathPolicy {
            merge_slashes: raw
                .merge_slashes
                .as_ref()
                .map_or(default.merge_slashes, |b| *b.get_ref()),
            escaped_slashes: self
                .choice(
                    raw.escaped_slashes.as_ref(),
                    "escaped_slashes",
                    &[
                        ("reject", EscapedSlashes::Reject),
                        ("keep", EscapedSlashes::Keep),
                        ("decode", EscapedSlashes::Decode),
                    ],
                )
                .unwrap_or(default.escaped_slashes),
        }
    }

    /// `kind`, `upstream`, `passthrough` and `idle_timeout`: what a listener speaks.
    fn listener_kind(
        &mut self,
        name: &str,
        raw: &RawListener,
        upstream_names: &HashMap<String, usize>,
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<ListenerKind> {
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Kind {
            Http,
            Tcp,
            Mqtt,
        }
        let kind = self
            .choice(
                raw.kind.as_ref(),
                "kind",
                &[
                    ("http", Kind::Http),
                    ("tcp", Kind::Tcp),
                    ("mqtt", Kind::Mqtt),
                ],
            )
            .unwrap_or(Kind::Http);
        if let Some(m) = raw.mqtt.as_ref().filter(|_| kind != Kind::Mqtt) {
            self.err_at(
                m,
                format!("listener `{name}`: [listener.mqtt] is for kind = \"mqtt\" listeners"),
                "add kind = \"mqtt\", or remove [listener.mqtt]",
            );
        }
        if let Kind::Http = kind {
            let tcp_only: [(&str, Option<usize>); 3] = [
                ("upstream", raw.upstream.as_ref().map(|v| v.span().start)),
                (
                    "passthrough",
                    raw.passthrough.as_ref().map(|v| v.span().start),
                ),
                (
                    "idle_timeout",
                    raw.idle_timeout.as_ref().map(|v| v.span().start),
                ),
            ];
            for (key, at) in tcp_only {
                if let Some(at) = at {
                    self.err(
                        at,
                        format!("listener `{name}`: `{key}` is for kind = \"tcp\" listeners; HTTP listeners route by [[route]]"),
                        "add kind = \"tcp\" to proxy this listener's connections as bytes, or remove it and add a [[route]]",
                    );
                }
            }
            return Some(ListenerKind::Http);
        }
        let mut ok = true;
        if let Some(p) = &raw.protocols {
            ok = false;
            self.err_at(
                p,
                format!("listener `{name}`: `protocols` is for HTTP listeners; a TCP listener passes whatever its clients speak"),
                "remove protocols",
            );
        }
        let group = |cx: &mut Self, at: &Spanned<String>| -> Option<usize> {
            let found = upstream_names.get(at.get_ref()).copied();
            if found.is_none()
                && !broken
                    .get("upstream")
                    .is_some_and(|s| s.contains(at.get_ref()))
            {
                let mut known: Vec<&str> = upstream_names.keys().map(String::as_str).collect();
                known.sort_unstable();
                cx.err_at(
                    at,
                    format!(
                        "listener `{name}` names upstream `{}`, which is not defined",
                        at.get_ref()
                    ),
                    if known.is_empty() {
                        "define it with [[upstream]] name = \"…\" and servers = [\"10.0.0.1:5432\"]"
                            .to_owned()
                    } else {
                        format!("use one of: {}", known.join(", "))
                    },
                );
            }
            found
        };
        let upstream = match &raw.upstream {
            Some(u) => {
                let g = group(self, u);
                ok &= g.is_some();
                g
            }
            None => None,
        };
        let mut passthrough = Vec::new();
        if let Some(table) = &raw.passthrough {
            if raw.tls.is_some() {
                ok = false;
                self.err_at(
                    table,
                    format!("listener `{name}` both terminates TLS ([listener.tls]) and passes it through (passthrough)"),
                    "keep [listener.tls] to terminate TLS here, or passthrough to let the servers terminate it",
                );
            }
            if table.get_ref().is_empty() {
                ok = false;
                self.err_at(
                    table,
                    format!("listener `{name}`: passthrough lists no server name"),
                    "map names to upstreams: passthrough = { \"a.example.com\" = \"origin-a\", \"*.example.org\" = \"origin-b\" }",
                );
            }
            for (host, target) in table.get_ref() {
                let pattern = match crate::HostPattern::parse(host) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        ok = false;
                        self.err_at(target, format!("listener `{name}`: passthrough: {e}"), "");
                        None
                    }
                };
                let g = group(self, target);
                ok &= g.is_some();
                if let (Some(p), Some(g)) = (pattern, g) {
                    passthrough.push((p, g));
                }
            }
            // Exact names first, so that `a.example.com` wins over `*.example.com`.
            passthrough.sort_by_key(|(p, _)| matches!(p, crate::HostPattern::Wildcard(_)));
        } else if raw.upstream.is_none() {
            ok = false;
            self.err(
                raw.name.span().start,
                format!("listener `{name}` is kind = \"{}\" but has no upstream", if kind == Kind::Mqtt { "mqtt" } else { "tcp" }),
                "add upstream = \"NAME\" (an [[upstream]] group), or passthrough = { \"name.example\" = \"NAME\" }",
            );
        }
        let idle_timeout = self
            .duration(raw.idle_timeout.as_ref())
            .unwrap_or(Duration::from_secs(600));
        if kind == Kind::Mqtt {
            return self.mqtt_kind(name, raw, upstream.filter(|_| ok), idle_timeout);
        }
        ok.then_some(ListenerKind::Tcp(TcpProxy {
            upstream,
            passthrough,
            idle_timeout,
        }))
    }

    /// An MQTT listener's (or route's) brokers are on a hash ring: a device returns to the
    /// broker that holds its session only if its key always hashes to the same one, so the
    /// ring must not bound loads (`hash_balance_factor`, on by default, moves a device off a
    /// busier broker), and a health check must be one a broker answers (an HTTP one marks
    /// every broker down). `owner`: "listener `devices`"; `at`: where its upstream is named;
    /// `raw`: the upstream as written, for where to point.
    pub(super) fn mqtt_brokers_hashed(
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
    fn mqtt_kind(
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
    pub(super) fn mqtt_client_id_cap(
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
    pub(super) fn mqtt_rate(
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
    pub(super) fn mqtt_auth(
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
    pub(super) fn mqtt_settings(
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

    pub(super) fn listener_tls(
        &mut self,
        listener: &str,
        raw: &RawListenerTls,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<TlsListener> {
        let is_broken = |kind: &str, n: &str| broken.get(kind).is_some_and(|set| set.contains(n));
        let defined = || {
            let names: Vec<&str> = raw_certs
                .iter()
                .map(|c| c.name.get_ref().as_str())
                .collect();
            if names.is_empty() {
                "none are defined yet".to_owned()
            } else {
                format!("defined: {}", names.join(", "))
            }
        };
        let mut ok = true;
        let certificates: Vec<usize> = match &raw.certificates {
            Some(list) => list
                .iter()
                .filter_map(|n| {
                    let found = cert_names.get(n.get_ref()).copied();
                    if found.is_none() {
                        ok = false;
                        if is_broken("certificate", n.get_ref()) {
                            return None;
                        }
                        let msg = format!(
                            "listener `{listener}` uses certificate `{}`, which is not defined",
                            n.get_ref()
                        );
                        self.err_at(
                            n,
                            msg,
                            format!(
                                "add a [[certificate]] with that name or fix the name ({})",
                                defined()
                            ),
                        );
                    }
                    found
                })
                .collect(),
            None => (0..raw_certs.len()).collect(),
        };
        if certificates.is_empty() && ok {
            self.err(
                0,
                format!("HTTPS listener `{listener}` has no certificate"),
                "add a [[certificate]] (cert and key files) or remove [listener.tls]",
            );
            return None;
        }
        let default_certificate = match &raw.default_certificate {
            None => certificates.first().copied(),
            Some(n) => match cert_names.get(n.get_ref()) {
                Some(i) if certificates.contains(i) => Some(*i),
                Some(_) => {
                    self.err_at(n, format!("listener `{listener}`: default_certificate `{}` is not in its `certificates` list", n.get_ref()), "add it to `certificates` or pick one from that list");
                    None
                }
                None => {
                    self.err_at(
                        n,
                        format!(
                            "listener `{listener}`: default_certificate `{}` is not defined",
                            n.get_ref()
                        ),
                        defined(),
                    );
                    None
                }
            },
        };
        let unknown_sni = self
            .choice(
                raw.unknown_sni.as_ref(),
                "unknown_sni",
                &[
                    ("default", UnknownSni::Default),
                    ("reject", UnknownSni::Reject),
                ],
            )
            .unwrap_or(UnknownSni::Default);
        let versions = [("1.2", TlsVersion::V1_2), ("1.3", TlsVersion::V1_3)];
        let min_version = self
            .choice(raw.min_version.as_ref(), "min_version", &versions)
            .unwrap_or(TlsVersion::V1_2);
        let max_version = self
            .choice(raw.max_version.as_ref(), "max_version", &versions)
            .unwrap_or(TlsVersion::V1_3);
        if min_version > max_version
            && let Some(v) = &raw.min_version
        {
            self.err_at(
                v,
                format!("listener `{listener}`: min_version is above max_version"),
                "make min_version at most max_version",
            );
        }
        let ticket_key_file = raw.ticket_key_file.as_ref().and_then(|f| {
            let path = self.path(f.get_ref());
            match self.read_file(&path) {
                Ok(bytes) if !bytes.is_empty() && bytes.len() % 80 == 0 => Some(path),
                Ok(bytes) => {
                    self.err_at(f, format!("listener `{listener}`: ticket key file {} is {} bytes, not a multiple of 80", path.display(), bytes.len()), "write one or more 80-byte keys, newest first, e.g. `openssl rand 80 > ticket.key` (NGINX's format)");
                    None
                }
                Err(e) => {
                    self.err_at(f, format!("listener `{listener}`: cannot read ticket key file {}: {e}", path.display()), "check the path and permissions");
                    None
                }
            }
        });
        let ticket_key_rotation = self
            .duration(raw.ticket_key_rotation.as_ref())
            .unwrap_or(Duration::from_secs(3600));
        if raw.ticket_key_file.is_some() && ticket_key_file.is_none() {
            ok = false;
        }
        let rsa_key_exchange = raw.rsa_key_exchange.as_ref().is_some_and(|r| *r.get_ref());
        if rsa_key_exchange
            && min_version == TlsVersion::V1_3
            && let Some(r) = &raw.rsa_key_exchange
        {
            self.err_at(
                r,
                format!("listener `{listener}`: rsa_key_exchange needs TLS 1.2, but min_version is 1.3"),
                "set min_version = \"1.2\" or remove rsa_key_exchange (TLS 1.3 has no RSA key exchange)",
            );
            ok = false;
        }
        let groups = raw.groups.as_ref().and_then(|g| self.groups(g, listener));
        if raw.groups.is_some() && groups.is_none() {
            ok = false;
        }
        if !ok {
            return None;
        }
        Some(TlsListener {
            certificates,
            default_certificate: default_certificate?,
            unknown_sni,
            min_version,
            max_version,
            session_tickets: raw.session_tickets.unwrap_or(true),
            ticket_key_file,
            ticket_key_rotation,
            rsa_key_exchange,
            groups,
            client_auth: None,
        })
    }

    /// `[listener.tls] groups`: every name known (any spelling OpenSSL accepts, mapped to
    /// BoringSSL's), none twice, at least one.
    fn groups(&mut self, list: &Spanned<Vec<String>>, listener: &str) -> Option<Vec<&'static str>> {
        let known = || {
            KNOWN_GROUPS
                .iter()
                .map(|(n, _)| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if list.get_ref().is_empty() {
            self.err_at(
                list,
                format!(
                    "listener `{listener}`: groups is empty, so no key exchange could be agreed"
                ),
                format!(
                    "name at least one of {}, or remove groups for the default ({})",
                    known(),
                    DEFAULT_GROUPS.join(", ")
                ),
            );
            return None;
        }
        let mut out: Vec<&'static str> = Vec::new();
        let mut ok = true;
        for name in list.get_ref() {
            let found = KNOWN_GROUPS.iter().find(|(n, aliases)| {
                n.eq_ignore_ascii_case(name) || aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
            });
            match found {
                Some((n, _)) if out.contains(n) => {
                    self.err_at(
                        list,
                        format!("listener `{listener}`: groups names {n} twice (as \"{name}\")"),
                        "name each group once, in preference order",
                    );
                    ok = false;
                }
                Some((n, _)) => out.push(n),
                None => {
                    self.err_at(
                        list,
                        format!("listener `{listener}`: groups names \"{name}\", which is not a key-exchange group this build has"),
                        format!("use {} (OpenSSL's spellings prime256v1, secp384r1, ... work too)", known()),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }
}

/// The `[listener.mqtt]` (or `[route.mqtt]`) keys that concern the CONNECT itself.
pub(super) struct MqttConnectKeys<'a> {
    pub(super) connect_timeout: Option<&'a SpannedStr>,
    pub(super) max_connect_size: Option<&'a Spanned<RawSize>>,
    pub(super) route_by: Option<&'a SpannedStr>,
    pub(super) client_id_pattern: Option<&'a SpannedStr>,
}

impl Cx<'_> {
    /// `max_header_fields`: 1 to [`crate::snapshot::MAX_HEADER_FIELDS_LIMIT`], default
    /// [`crate::snapshot::DEFAULT_MAX_HEADER_FIELDS`].
    fn max_header_fields(&mut self, name: &str, raw: &RawListener) -> usize {
        let Some(v) = &raw.max_header_fields else {
            return crate::snapshot::DEFAULT_MAX_HEADER_FIELDS;
        };
        let n = usize::try_from(*v.get_ref()).unwrap_or(usize::MAX);
        if !(1..=crate::snapshot::MAX_HEADER_FIELDS_LIMIT).contains(&n) {
            self.err_at(
                v,
                format!(
                    "listener `{name}`: max_header_fields must be between 1 and {}",
                    crate::snapshot::MAX_HEADER_FIELDS_LIMIT
                ),
                "the default is 100 (Apache's, Envoy's and hyper's limit); max_header_bytes bounds the head's size too",
            );
        }
        n
    }
}
