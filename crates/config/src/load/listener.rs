//! `[[listener]]`: where Sluice accepts connections and how it reads requests there. What a
//! listener speaks is decided in [`kind`], MQTT's settings in [`mqtt`] and TLS in [`tls`].

use super::{Cx, RawConfig};
use crate::client_tls::ClientAuth;
use crate::paths::{EscapedSlashes, PathPolicy};
use crate::policy::IpNet;
use crate::quic::{QuicRetry, QuicSettings};
use crate::raw::*;
use crate::snapshot::*;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

mod kind;
pub(super) mod mqtt;
mod tls;

impl Cx<'_> {
    /// Every `[[listener]]`, with the index of each name; each binds an address of its own,
    /// and an MQTT listener's brokers are on a hash ring.
    pub(super) fn listeners(
        &mut self,
        raw: &RawConfig,
        cert_names: &HashMap<String, usize>,
        upstream_names: &HashMap<String, usize>,
        upstreams: &[Arc<Upstream>],
    ) -> (HashMap<String, usize>, Vec<Listener>) {
        let mut listener_names = HashMap::new();
        let mut addresses: HashMap<SocketAddr, String> = HashMap::new();
        let mut listeners = Vec::new();
        for l in &raw.listeners {
            self.unique(&mut listener_names, &l.name, "listener", listeners.len());
            let Some(listener) = self.listener(
                l,
                cert_names,
                &raw.certificates,
                &raw.broken,
                upstream_names,
            ) else {
                continue;
            };
            if let ListenerKind::Mqtt(m) = &listener.kind {
                let at = l
                    .upstream
                    .as_ref()
                    .map_or(l.name.span().start, |u| u.span().start);
                let owner = format!("listener `{}`", l.name.get_ref());
                let (u, raw_u) = (&upstreams[m.upstream], &raw.upstreams[m.upstream]);
                self.mqtt_brokers_hashed(&owner, at, u, raw_u);
            }
            self.check_address_free(l, &listener, &mut addresses);
            listeners.push(listener);
        }
        // A listener that failed to parse has been reported already.
        if raw.listeners.is_empty() && !raw.broken.contains_key("listener") {
            self.err(
                0,
                "the configuration has no [[listener]], so Sluice would accept nothing",
                "add one, for example:\n      [[listener]]\n      name = \"http\"\n      address = \"127.0.0.1:8080\"",
            );
        }
        (listener_names, listeners)
    }

    /// Two listeners cannot bind one address; `addresses` holds the ones bound so far.
    fn check_address_free(
        &mut self,
        raw: &RawListener,
        listener: &Listener,
        addresses: &mut HashMap<SocketAddr, String>,
    ) {
        // Port 0 asks the OS for a free port, so it can never clash.
        let clash = (listener.address.port() != 0)
            .then(|| addresses.insert(listener.address, listener.name.clone()))
            .flatten();
        if let Some(other) = clash {
            self.err_at(
                &raw.address,
                format!(
                    "listener `{}` binds {}, which listener `{other}` already binds",
                    listener.name, listener.address
                ),
                "give each listener its own address or port",
            );
        }
    }

    /// Passthrough hands the client's own TLS to the server: wrapping it in TLS again would
    /// reach no server that could read it.
    pub(super) fn check_passthrough_tls(
        &mut self,
        raw: &RawConfig,
        listeners: &[Listener],
        upstreams: &[Arc<Upstream>],
    ) {
        for l in listeners {
            let raw_l = raw.listeners.iter().find(|r| *r.name.get_ref() == l.name);
            let (ListenerKind::Tcp(t), Some(raw_l)) = (&l.kind, raw_l) else {
                continue;
            };
            for (_, g) in &t.passthrough {
                let u = &upstreams[*g];
                if u.tls.is_some()
                    && let Some(at) = &raw_l.passthrough
                {
                    self.err_at(
                        at,
                        format!(
                            "listener `{}` passes TLS through to upstream `{}`, which has [upstream.tls]",
                            l.name, u.name
                        ),
                        "remove [upstream.tls] from that upstream (the client's TLS goes through as it is), or terminate TLS here with [listener.tls]",
                    );
                }
            }
        }
    }

    /// One `[[listener]]`; `None` when it has a mistake (reported).
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
        let address = self.listener_address(&name, raw);
        let (h2, http1) = self.http_protocols(&name, raw);
        let mut tls = raw
            .tls
            .as_ref()
            .and_then(|t| self.listener_tls(&name, t, cert_names, raw_certs, broken));
        let max_header_bytes = self.max_header_bytes(&name, raw);
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
        self.check_proxy_protocol_peers(&name, raw, &trusted_proxies);
        let http3 = self.http3(&name, raw, kind.as_ref());
        if let (Some(t), Some(raw_tls)) = (&mut tls, &raw.tls) {
            t.client_auth = self.listener_client_auth(&name, raw, raw_tls, kind.as_ref(), http3);
            if t.client_auth.is_none() {
                self.check_client_auth_has_ca(&name, t, cert_names, raw_certs);
            }
        }
        let keepalive_timeout = self
            .duration(raw.keepalive_timeout.as_ref())
            .unwrap_or(Duration::from_secs(75));
        let quic = self.quic(&name, raw, keepalive_timeout);
        let kind = kind?;
        let (max_connections, max_connections_per_client) = self.connection_caps(&name, raw);
        let address = address?;
        let mut listener = Listener {
            http3,
            quic,
            kind,
            proxy_protocol,
            trusted_proxies,
            acl,
            request_id: raw.request_id.as_ref().is_none_or(|v| *v.get_ref()),
            max_connections,
            max_connections_per_client,
            name,
            address,
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
            listener.tls = Some(tls?);
        }
        Some(listener)
    }

    /// `address`: the ip:port the listener binds.
    fn listener_address(&mut self, name: &str, raw: &RawListener) -> Option<SocketAddr> {
        self.ip_port(
            &raw.address,
            &format!("listener `{name}`:"),
            "write it as \"127.0.0.1:8443\", \"0.0.0.0:443\" or \"[::]:443\"",
        )
    }

    /// `protocols`: whether HTTP/2 and HTTP/1.1 are served (both by default).
    fn http_protocols(&mut self, name: &str, raw: &RawListener) -> (bool, bool) {
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
        (h2, http1)
    }

    /// `max_header_bytes`: 1k to 1m, default 32k (NGINX's).
    fn max_header_bytes(&mut self, name: &str, raw: &RawListener) -> u64 {
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
        max_header_bytes
    }

    /// A PROXY protocol header names the client, so only `trusted_proxies` may send one.
    fn check_proxy_protocol_peers(
        &mut self,
        name: &str,
        raw: &RawListener,
        trusted_proxies: &[IpNet],
    ) {
        if let Some(at) = raw.proxy_protocol.as_ref().filter(|v| *v.get_ref())
            && trusted_proxies.is_empty()
        {
            self.err_at(
                at,
                format!("listener `{name}`: proxy_protocol = true but no peer may send the header"),
                "list the load balancers that send it: trusted_proxies = [\"10.0.0.0/8\"] (connections from any other address are closed)",
            );
        }
    }

    /// `http3`: HTTP/3 over QUIC beside TCP, which needs TLS and an HTTP listener.
    fn http3(&mut self, name: &str, raw: &RawListener, kind: Option<&ListenerKind>) -> bool {
        let http3 = raw.http3.as_ref().is_some_and(|v| *v.get_ref());
        if let Some(at) = raw.http3.as_ref().filter(|v| *v.get_ref()) {
            if raw.tls.is_none() {
                self.err_at(
                    at,
                    format!("listener `{name}`: http3 = true needs TLS (QUIC is always encrypted)"),
                    "add a [listener.tls] section with its certificates, or remove http3",
                );
            } else if kind.is_some_and(|k| *k != ListenerKind::Http) {
                self.err_at(
                    at,
                    format!("listener `{name}`: http3 = true on a kind = \"tcp\" listener"),
                    "HTTP/3 is served by HTTP listeners; remove http3 here",
                );
            }
        }
        http3
    }

    /// `[listener.tls] client_ca` and `client_auth`: client certificates, asked for on HTTP
    /// and MQTT listeners only, and forwarded in a header on HTTP ones only. `None` when
    /// none are asked for, or on a mistake (reported).
    fn listener_client_auth(
        &mut self,
        name: &str,
        raw: &RawListener,
        raw_tls: &RawListenerTls,
        kind: Option<&ListenerKind>,
        http3: bool,
    ) -> Option<Arc<ClientAuth>> {
        let tcp = kind.is_some_and(|k| matches!(k, ListenerKind::Tcp(_)));
        let mqtt = kind.is_some_and(|k| matches!(k, ListenerKind::Mqtt(_)));
        match self.client_auth(name, raw_tls, http3) {
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
            Ok(auth) => return auth,
            Err(()) => {}
        }
        None
    }

    /// A certificate that asks for client certificates needs its listener's CAs: checked
    /// for the certificates of `tls`, a listener that asks for none.
    fn check_client_auth_has_ca(
        &mut self,
        name: &str,
        tls: &TlsListener,
        cert_names: &HashMap<String, usize>,
        raw_certs: &[RawCertificate],
    ) {
        for c in raw_certs {
            let served = cert_names
                .get(c.name.get_ref())
                .is_some_and(|i| tls.certificates.contains(i));
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

    /// `quic_retry`, `quic_idle_timeout` (default the keep-alive timeout) and
    /// `quic_max_streams` (default 100): HTTP/3's connection settings.
    fn quic(&mut self, name: &str, raw: &RawListener, keepalive_timeout: Duration) -> QuicSettings {
        QuicSettings {
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
        }
    }

    /// `max_connections` and `max_connections_per_client`: optional caps, at least 1.
    fn connection_caps(&mut self, name: &str, raw: &RawListener) -> (Option<usize>, Option<u32>) {
        let max_connections = self
            .positive(
                raw.max_connections.as_ref(),
                &format!("listener `{name}`: max_connections"),
            )
            .map(|n| n as usize);
        let max_connections_per_client = self.positive(
            raw.max_connections_per_client.as_ref(),
            &format!("listener `{name}`: max_connections_per_client"),
        );
        (max_connections, max_connections_per_client)
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
