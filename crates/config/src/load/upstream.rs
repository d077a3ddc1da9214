//! `[[upstream]]`: servers, balancing and timeouts.

use super::Cx;
use crate::DnsResolver;
use crate::hash_key::HashKey;
use crate::raw::*;
use crate::snapshot::*;
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;

impl Cx<'_> {
    /// Every `[[upstream]]`, with the index of each name.
    pub(super) fn upstreams(
        &mut self,
        raw: &[RawUpstream],
    ) -> (HashMap<String, usize>, Vec<Arc<Upstream>>) {
        let mut upstream_names = HashMap::new();
        let mut upstreams = Vec::new();
        for u in raw {
            self.unique(&mut upstream_names, &u.name, "upstream", upstreams.len());
            upstreams.push(Arc::new(self.upstream(u)));
        }
        (upstream_names, upstreams)
    }

    /// One `[[upstream]]`, its defaults applied. Always returned, mistakes and all (they are
    /// reported), so that the routes and listeners naming it are checked against it.
    pub(super) fn upstream(&mut self, raw: &RawUpstream) -> Upstream {
        let name = raw.name.get_ref().clone();
        let servers = self.upstream_servers(&name, raw);
        let balance = self.balance(raw);
        let hashing = balance == Balance::ConsistentHash;
        let hash_on = self.hash_on(&name, raw, hashing);
        let hash_balance_factor = self.hash_balance_factor(&name, raw, hashing);
        let protocol = self.upstream_protocol(raw);
        let pass_host = self.pass_host(&name, raw);
        let max_fails = self.max_fails(&name, raw);
        let sticky = raw.sticky.as_ref().map(|s| self.sticky(&name, s));
        let health_check = raw
            .health_check
            .as_ref()
            .map(|h| self.health_check(&name, h));
        let outlier = raw.outlier.as_ref().map(|o| self.outlier(&name, o));
        let retry_budget_percent = self.retry_budget_percent(&name, raw);
        let retry_budget_min_per_second = raw
            .retry_budget_min_per_second
            .as_ref()
            .map_or(10, |v| *v.get_ref());
        let (max_conns, queue, queue_timeout) = self.connection_queue(&name, raw);
        let send_proxy_protocol = self.send_proxy_protocol(&name, raw, protocol);
        let tls = raw.tls.as_ref().and_then(|t| self.upstream_tls(&name, t));
        Upstream {
            tls,
            send_proxy_protocol,
            max_conns,
            queue,
            queue_timeout,
            name,
            servers,
            balance,
            hash_on,
            hash_balance_factor,
            protocol,
            pass_host,
            connect_timeout: self
                .duration(raw.connect_timeout.as_ref())
                .unwrap_or(Duration::from_secs(5)),
            response_timeout: self
                .duration(raw.response_timeout.as_ref())
                .unwrap_or(Duration::from_secs(60)),
            max_fails,
            fail_timeout: self
                .duration(raw.fail_timeout.as_ref())
                .unwrap_or(Duration::from_secs(10)),
            keepalive: raw.keepalive.as_ref().map_or(32, |k| *k.get_ref() as usize),
            keepalive_timeout: self
                .duration(raw.keepalive_timeout.as_ref())
                .unwrap_or(Duration::from_secs(60)),
            sticky,
            health_check,
            outlier,
            retry_budget_percent,
            retry_budget_min_per_second,
        }
    }

    /// `servers`: at least one, each an address, a name to resolve or an SRV service. A
    /// server with a mistake is reported and left out.
    fn upstream_servers(&mut self, name: &str, raw: &RawUpstream) -> Vec<UpstreamServer> {
        let mut servers = Vec::new();
        if raw.servers.get_ref().is_empty() {
            self.err_at(
                &raw.servers,
                format!("upstream `{name}` has no servers"),
                "add at least one: servers = [{ address = \"127.0.0.1:9000\" }]",
            );
        }
        for s in raw.servers.get_ref() {
            let resolve = s.resolve.as_ref().is_some_and(|r| *r.get_ref());
            let server = match &s.service {
                Some(service) => self.srv_server(name, s, service, resolve),
                None => self.address_server(name, s, resolve),
            };
            servers.extend(server);
        }
        servers
    }

    /// A server at `host:port`: an address, a name resolved now, or (`resolve = true`) a name
    /// the gateway follows in DNS.
    fn address_server(
        &mut self,
        upstream: &str,
        s: &RawServer,
        resolve: bool,
    ) -> Option<UpstreamServer> {
        let text = s.address.get_ref();
        let addr = match text.parse::<SocketAddr>() {
            Ok(a) => {
                if let Some(r) = s.resolve.as_ref().filter(|_| resolve) {
                    self.err_at(
                        r,
                        format!("upstream `{upstream}`: server `{text}` is an address, there is no name to resolve"),
                        "remove resolve = true, or give the server's DNS name: \"app.internal:8080\"",
                    );
                }
                Some(a)
            }
            // Followed by the gateway: not looked up here, where a DNS server of
            // `[resolver]` may not be the system's.
            Err(_) if resolve => {
                dns_name(text).map(|(_, port)| SocketAddr::from(([0, 0, 0, 0], port)))
            }
            Err(_) if text.contains(':') => text.to_socket_addrs().ok().and_then(|mut a| a.next()),
            Err(_) => None,
        };
        let Some(addr) = addr else {
            let fix = if resolve {
                "write it as \"app.internal:8080\": a DNS name and a port"
            } else {
                "write it as \"10.0.0.5:8080\" or \"app.internal:8080\" (names are resolved when the configuration loads; add resolve = true to follow a name in DNS)"
            };
            self.err_at(
                &s.address,
                format!(
                    "upstream `{upstream}`: server address `{text}` is not a reachable host:port"
                ),
                fix,
            );
            return None;
        };
        let weight = self.server_weight(
            upstream,
            s.weight.as_ref(),
            "use a weight of 1 or more, or remove the server",
        );
        Some(UpstreamServer {
            address: ServerAddr {
                name: text.clone(),
                addr,
            },
            weight,
            resolve,
            srv: false,
        })
    }

    /// A server's `weight` (default 1): 0 would never be chosen.
    fn server_weight(
        &mut self,
        upstream: &str,
        w: Option<&Spanned<u32>>,
        help: &str,
    ) -> NonZeroU32 {
        match w {
            None => NonZeroU32::MIN,
            Some(w) => NonZeroU32::new(*w.get_ref()).unwrap_or_else(|| {
                self.err_at(
                    w,
                    format!("upstream `{upstream}`: weight 0 would never be chosen"),
                    help.to_owned(),
                );
                NonZeroU32::MIN
            }),
        }
    }

    /// `balance` (default round robin).
    fn balance(&mut self, raw: &RawUpstream) -> Balance {
        self.choice(
            raw.balance.as_ref(),
            "balance",
            &[
                ("round_robin", Balance::RoundRobin),
                ("weighted_round_robin", Balance::WeightedRoundRobin),
                ("least_conn", Balance::LeastConn),
                ("ip_hash", Balance::IpHash),
                ("consistent_hash", Balance::ConsistentHash),
                ("peak_ewma", Balance::PeakEwma),
            ],
        )
        .unwrap_or(Balance::RoundRobin)
    }

    /// `hash_on` (default the client's address): what consistent hashing keys on, so it is
    /// refused with another `balance`.
    fn hash_on(&mut self, upstream: &str, raw: &RawUpstream, hashing: bool) -> HashKey {
        match &raw.hash_on {
            None => HashKey::Client,
            Some(v) if !hashing => {
                self.err_at(
                    v,
                    format!(
                        "upstream `{upstream}`: hash_on is only used with balance = \"consistent_hash\""
                    ),
                    "add balance = \"consistent_hash\" or remove hash_on",
                );
                HashKey::Client
            }
            Some(v) => hash_key(v.get_ref()).unwrap_or_else(|| {
                self.err_at(
                    v,
                    format!(
                        "upstream `{upstream}`: hash_on = \"{}\" is not a hash key",
                        v.get_ref()
                    ),
                    "use \"header:NAME\", \"cookie:NAME\", \"query:NAME\", \"uri\" or \"client\"",
                );
                HashKey::Client
            }),
        }
    }

    /// `hash_balance_factor` (default 1.25; 0: no bound): how far above its share consistent
    /// hashing may load a server.
    fn hash_balance_factor(
        &mut self,
        upstream: &str,
        raw: &RawUpstream,
        hashing: bool,
    ) -> Option<f64> {
        match &raw.hash_balance_factor {
            None => Some(1.25),
            Some(v) if !hashing => {
                self.err_at(
                    v,
                    format!("upstream `{upstream}`: hash_balance_factor is only used with balance = \"consistent_hash\""),
                    "add balance = \"consistent_hash\" or remove hash_balance_factor",
                );
                None
            }
            Some(v) if *v.get_ref() == 0.0 => None,
            Some(v) if v.get_ref().is_finite() && *v.get_ref() >= 1.0 => Some(*v.get_ref()),
            Some(v) => {
                self.err_at(
                    v,
                    format!("upstream `{upstream}`: hash_balance_factor = {} would put every server over its bound", v.get_ref()),
                    "use a factor of 1.0 or more (1.25 lets a server take 25% above its share), or 0 for no bound",
                );
                None
            }
        }
    }

    /// `protocol` (default HTTP/1.1) spoken to the servers.
    fn upstream_protocol(&mut self, raw: &RawUpstream) -> UpstreamProtocol {
        self.choice(
            raw.protocol.as_ref(),
            "protocol",
            &[
                ("http1", UpstreamProtocol::Http1),
                ("h2", UpstreamProtocol::H2),
            ],
        )
        .unwrap_or(UpstreamProtocol::Http1)
    }

    /// `pass_host` and `upstream_host`: the Host the servers are sent, the client's by default.
    fn pass_host(&mut self, upstream: &str, raw: &RawUpstream) -> PassHost {
        #[derive(Clone, Copy)]
        enum Mode {
            Pass,
            Node,
            Rewrite,
        }
        let mode = self
            .choice(
                raw.pass_host.as_ref(),
                "pass_host",
                &[
                    ("pass", Mode::Pass),
                    ("node", Mode::Node),
                    ("rewrite", Mode::Rewrite),
                ],
            )
            .unwrap_or(Mode::Pass);
        match (mode, &raw.upstream_host) {
            (Mode::Rewrite, Some(h)) => PassHost::Rewrite(h.get_ref().clone()),
            (Mode::Rewrite, None) => {
                if let Some(p) = &raw.pass_host {
                    self.err_at(
                        p,
                        format!(
                            "upstream `{upstream}`: pass_host = \"rewrite\" needs `upstream_host`"
                        ),
                        "add upstream_host = \"the.host.to.send\"",
                    );
                }
                PassHost::Pass
            }
            (_, Some(h)) => {
                self.err_at(
                    h,
                    format!(
                        "upstream `{upstream}`: upstream_host is only used with pass_host = \"rewrite\""
                    ),
                    "add pass_host = \"rewrite\" or remove upstream_host",
                );
                PassHost::Pass
            }
            (Mode::Node, None) => PassHost::Node,
            (Mode::Pass, None) => PassHost::Pass,
        }
    }

    /// `max_fails` (default 1): failures before a server is skipped for `fail_timeout`.
    fn max_fails(&mut self, upstream: &str, raw: &RawUpstream) -> NonZeroU32 {
        match &raw.max_fails {
            None => NonZeroU32::MIN,
            Some(v) => NonZeroU32::new(*v.get_ref()).unwrap_or_else(|| {
                self.err_at(
                    v,
                    format!("upstream `{upstream}`: max_fails must be at least 1"),
                    "use 1 to skip a server after its first failure",
                );
                NonZeroU32::MIN
            }),
        }
    }

    /// `retry_budget_percent` (default 20): the share of requests that may be retries.
    fn retry_budget_percent(&mut self, upstream: &str, raw: &RawUpstream) -> u32 {
        match &raw.retry_budget_percent {
            None => 20,
            Some(p) if *p.get_ref() <= 100 => *p.get_ref(),
            Some(p) => {
                self.err_at(
                    p,
                    format!(
                        "upstream `{upstream}`: retry_budget_percent = {} is over 100",
                        p.get_ref()
                    ),
                    "use a percentage such as 20 (retries at most a fifth of the requests)",
                );
                20
            }
        }
    }

    /// `max_conns`, `queue` and `queue_timeout`: how many connections a server takes, and
    /// how many requests wait (and how long) when all are busy.
    fn connection_queue(
        &mut self,
        upstream: &str,
        raw: &RawUpstream,
    ) -> (Option<usize>, usize, Duration) {
        let max_conns = self
            .positive(
                raw.max_conns.as_ref(),
                &format!("upstream `{upstream}`: max_conns"),
            )
            .map(|n| n as usize);
        let queue = raw.queue.as_ref().map_or(0, |q| *q.get_ref() as usize);
        if let (None, Some(q)) = (max_conns, &raw.queue) {
            self.err_at(
                q,
                format!("upstream `{upstream}`: queue is only used with max_conns"),
                "add max_conns = N, or remove queue",
            );
        }
        let queue_timeout = self
            .duration(raw.queue_timeout.as_ref())
            .unwrap_or(Duration::from_secs(10));
        (max_conns, queue, queue_timeout)
    }

    /// `send_proxy_protocol`: a PROXY header per connection, which needs connections of one
    /// client each (not HTTP/2's shared ones).
    fn send_proxy_protocol(
        &mut self,
        upstream: &str,
        raw: &RawUpstream,
        protocol: UpstreamProtocol,
    ) -> Option<ProxyProtocol> {
        let send_proxy_protocol = self.choice(
            raw.send_proxy_protocol.as_ref(),
            "send_proxy_protocol",
            &[("v1", ProxyProtocol::V1), ("v2", ProxyProtocol::V2)],
        );
        if let (Some(_), UpstreamProtocol::H2, Some(at)) =
            (send_proxy_protocol, protocol, &raw.send_proxy_protocol)
        {
            self.err_at(
                at,
                format!("upstream `{upstream}`: send_proxy_protocol needs connections of one client each, and protocol = \"h2\" shares each server's connection among all clients"),
                "use protocol = \"http1\" with send_proxy_protocol, or remove send_proxy_protocol",
            );
        }
        send_proxy_protocol
    }
    fn sticky(&mut self, upstream: &str, raw: &Spanned<RawSticky>) -> Sticky {
        let cookie = match &raw.get_ref().cookie {
            None => "sluice_server".to_string(),
            Some(c) => {
                let name = c.get_ref();
                if !cookie_name(name) {
                    self.err_at(
                        c,
                        format!("upstream `{upstream}`: `{name}` is not a cookie name"),
                        "use letters, digits and - _ . only, such as \"app_server\"",
                    );
                }
                name.clone()
            }
        };
        let key = raw.get_ref().key_file.as_ref().and_then(|f| {
            let path = self.path(f.get_ref());
            match self.read_file(&path) {
                Ok(bytes) if bytes.len() >= 32 => Some(bytes),
                Ok(bytes) => {
                    self.err_at(
                        f,
                        format!(
                            "upstream `{upstream}`: sticky key_file {} holds {} bytes; 32 or more are needed",
                            path.display(),
                            bytes.len()
                        ),
                        "make one with: head -c 32 /dev/urandom > sticky.key (the same file on every gateway)",
                    );
                    None
                }
                Err(e) => {
                    self.err_at(
                        f,
                        format!("upstream `{upstream}`: cannot read sticky key_file {}: {e}", path.display()),
                        "check the path (relative paths start at the configuration file's folder)",
                    );
                    None
                }
            }
        });
        Sticky {
            cookie,
            max_age: self.duration(raw.get_ref().max_age.as_ref()),
            key,
        }
    }
}

/// Parses `hash_on`: `header:NAME`, `cookie:NAME`, `query:NAME`, `uri` or `client`.
pub(super) fn hash_key(text: &str) -> Option<HashKey> {
    let named = |name: &str| {
        (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| name.to_string())
    };
    Some(match text.split_once(':') {
        None if text == "uri" => HashKey::Uri,
        None if text == "client" => HashKey::Client,
        None => return None,
        Some(("header", name)) => {
            http_token(name)?;
            HashKey::Header(name.to_ascii_lowercase())
        }
        Some(("cookie", name)) => HashKey::Cookie(named(name)?),
        Some(("query", name)) => HashKey::Query(named(name)?),
        Some(_) => return None,
    })
}

/// A header name is an RFC 9110 token.
fn http_token(name: &str) -> Option<()> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    ok.then_some(())
}

/// A cookie name we are willing to set (a conservative subset of RFC 6265's token).
fn cookie_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl Cx<'_> {
    /// A CA file's PEM, read and checked now (for `what`, such as "upstream `api`"), so that a
    /// bad one fails the load and a reload keeps the running configuration.
    pub(super) fn ca_pem(&mut self, what: &str, at: &SpannedStr) -> Option<Vec<u8>> {
        let path = self.path(at.get_ref());
        let pem = match self.read_file(&path) {
            Ok(p) => p,
            Err(e) => {
                self.err_at(
                    at,
                    format!("{what}: cannot read CA file {}: {e}", path.display()),
                    "check the path (relative paths start at the configuration file's directory)",
                );
                return None;
            }
        };
        match boring::x509::X509::stack_from_pem(&pem) {
            Ok(certs) if !certs.is_empty() => Some(pem),
            _ => {
                self.err_at(
                    at,
                    format!("{what}: {} holds no PEM certificate", path.display()),
                    "give a file with one or more -----BEGIN CERTIFICATE----- blocks",
                );
                None
            }
        }
    }

    /// `[upstream.tls]`: the CA file is read and checked now, so that a bad one fails the
    /// load (and a reload keeps the running configuration).
    fn upstream_tls(&mut self, name: &str, raw: &Spanned<RawUpstreamTls>) -> Option<UpstreamTls> {
        let t = raw.get_ref();
        let ca = match &t.ca {
            None => None,
            Some(at) => Some(self.ca_pem(&format!("upstream `{name}`"), at)?),
        };
        if let Some(at) = &t.server_name
            && (at.get_ref().is_empty() || !at.get_ref().bytes().all(|b| b.is_ascii_graphic()))
        {
            self.err_at(
                at,
                format!(
                    "upstream `{name}`: server_name `{}` is not a host name",
                    at.get_ref()
                ),
                "write the name the servers' certificates carry, such as \"api.internal\"",
            );
            return None;
        }
        let client_identity = self
            .client_identity(
                &format!("upstream `{name}`"),
                t.client_cert.as_ref(),
                t.client_key.as_ref(),
            )
            .ok()?;
        Some(UpstreamTls {
            server_name: t.server_name.as_ref().map(|s| s.get_ref().clone()),
            ca,
            verify: t.verify.as_ref().is_none_or(|v| *v.get_ref()),
            client_identity,
        })
    }
}

/// The host and port of `host:port`, when the host could be a DNS name.
fn dns_name(text: &str) -> Option<(&str, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|&p| p != 0)?;
    let ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then_some((host, port))
}

impl Cx<'_> {
    /// A server that follows SRV records: `{ address = "app.internal", service = "http",
    /// resolve = true }`. Its weight multiplies the records' own.
    fn srv_server(
        &mut self,
        upstream: &str,
        s: &RawServer,
        service: &Spanned<String>,
        resolve: bool,
    ) -> Option<UpstreamServer> {
        let text = s.address.get_ref();
        let service_text = service.get_ref();
        if !resolve {
            self.err_at(
                service,
                format!("upstream `{upstream}`: service `{service_text}` needs resolve = true"),
                "add resolve = true: SRV records are followed in DNS by the gateway",
            );
            return None;
        }
        if text.contains(':') || text.parse::<std::net::IpAddr>().is_ok() || text.is_empty() {
            self.err_at(
                &s.address,
                format!("upstream `{upstream}`: with service, `{text}` must be a DNS name without a port"),
                "write the domain only, as address = \"app.internal\": the SRV records give the ports",
            );
            return None;
        }
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !service_text.split('.').all(label_ok) {
            self.err_at(
                service,
                format!("upstream `{upstream}`: service `{service_text}` is not a DNS service name"),
                "write a service such as \"http\" (asks for _http._tcp.NAME) or a full \"_grpc._tcp\"",
            );
            return None;
        }
        // NGINX Plus's rule: a service without a dot is a name under _tcp.
        let name = if service_text.contains('.') {
            format!("{service_text}.{text}")
        } else {
            format!("_{service_text}._tcp.{text}")
        };
        let weight = self.server_weight(
            upstream,
            s.weight.as_ref(),
            "use a weight of 1 or more (it multiplies the SRV records' weights), or remove the server",
        );
        Some(UpstreamServer {
            address: ServerAddr {
                name,
                addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            },
            weight,
            resolve: true,
            srv: true,
        })
    }

    /// `[resolver]`.
    pub(super) fn resolver(&mut self, raw: &RawResolver) -> DnsResolver {
        let defaults = DnsResolver::default();
        let mut servers = Vec::new();
        if let Some(list) = &raw.servers {
            for text in list.get_ref() {
                let addr = text.parse::<SocketAddr>().or_else(|_| {
                    text.parse::<std::net::IpAddr>()
                        .map(|ip| SocketAddr::new(ip, 53))
                });
                match addr {
                    Ok(a) => servers.push(a),
                    Err(_) => self.err_at(
                        list,
                        format!("[resolver] server `{text}` is not an IP address"),
                        "write each as \"10.0.0.2\" or \"10.0.0.2:53\" (a DNS server is reached by address)",
                    ),
                }
            }
            if list.get_ref().is_empty() {
                self.err_at(
                    list,
                    "[resolver] servers is empty",
                    "name at least one DNS server, or remove servers to use /etc/resolv.conf's",
                );
            }
        }
        let min_ttl = self
            .duration(raw.min_ttl.as_ref())
            .unwrap_or(defaults.min_ttl);
        let max_ttl = self
            .duration(raw.max_ttl.as_ref())
            .unwrap_or(defaults.max_ttl);
        if min_ttl > max_ttl
            && let Some(at) = raw.min_ttl.as_ref().or(raw.max_ttl.as_ref())
        {
            self.err_at(
                at,
                format!("[resolver] min_ttl ({min_ttl:?}) is above max_ttl ({max_ttl:?})"),
                "make min_ttl the shorter: names are looked up again between the two, as their TTL says",
            );
        }
        DnsResolver {
            servers,
            min_ttl,
            max_ttl,
            timeout: self
                .duration(raw.timeout.as_ref())
                .unwrap_or(defaults.timeout),
        }
    }
}
