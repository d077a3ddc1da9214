//! `[[upstream]]`: servers, balancing and timeouts.

use super::Cx;
use crate::raw::*;
use crate::snapshot::*;
use std::net::{SocketAddr, ToSocketAddrs};
use std::num::NonZeroU32;
use std::time::Duration;

impl Cx<'_> {
    pub(super) fn upstream(&mut self, raw: &RawUpstream) -> Upstream {
        let name = raw.name.get_ref().clone();
        let mut servers = Vec::new();
        if raw.servers.get_ref().is_empty() {
            self.err_at(
                &raw.servers,
                format!("upstream `{name}` has no servers"),
                "add at least one: servers = [{ address = \"127.0.0.1:9000\" }]",
            );
        }
        for s in raw.servers.get_ref() {
            let text = s.address.get_ref();
            let addr = match text.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) if text.contains(':') => {
                    text.to_socket_addrs().ok().and_then(|mut a| a.next())
                }
                Err(_) => None,
            };
            let Some(addr) = addr else {
                self.err_at(
                    &s.address,
                    format!("upstream `{name}`: server address `{text}` is not a reachable host:port"),
                    "write it as \"10.0.0.5:8080\" or \"app.internal:8080\" (names are resolved when the configuration loads)",
                );
                continue;
            };
            let weight = match &s.weight {
                None => NonZeroU32::MIN,
                Some(w) => NonZeroU32::new(*w.get_ref()).unwrap_or_else(|| {
                    self.err_at(
                        w,
                        format!("upstream `{name}`: weight 0 would never be chosen"),
                        "use a weight of 1 or more, or remove the server",
                    );
                    NonZeroU32::MIN
                }),
            };
            servers.push(UpstreamServer {
                address: ServerAddr {
                    name: text.clone(),
                    addr,
                },
                weight,
            });
        }
        let balance = self
            .choice(
                raw.balance.as_ref(),
                "balance",
                &[
                    ("round_robin", Balance::RoundRobin),
                    ("weighted_round_robin", Balance::WeightedRoundRobin),
                    ("least_conn", Balance::LeastConn),
                    ("ip_hash", Balance::IpHash),
                ],
            )
            .unwrap_or(Balance::RoundRobin);
        let protocol = self
            .choice(
                raw.protocol.as_ref(),
                "protocol",
                &[
                    ("http1", UpstreamProtocol::Http1),
                    ("h2", UpstreamProtocol::H2),
                ],
            )
            .unwrap_or(UpstreamProtocol::Http1);
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
        let pass_host = match (mode, &raw.upstream_host) {
            (Mode::Rewrite, Some(h)) => PassHost::Rewrite(h.get_ref().clone()),
            (Mode::Rewrite, None) => {
                if let Some(p) = &raw.pass_host {
                    self.err_at(
                        p,
                        format!("upstream `{name}`: pass_host = \"rewrite\" needs `upstream_host`"),
                        "add upstream_host = \"the.host.to.send\"",
                    );
                }
                PassHost::Pass
            }
            (_, Some(h)) => {
                self.err_at(
                    h,
                    format!(
                        "upstream `{name}`: upstream_host is only used with pass_host = \"rewrite\""
                    ),
                    "add pass_host = \"rewrite\" or remove upstream_host",
                );
                PassHost::Pass
            }
            (Mode::Node, None) => PassHost::Node,
            (Mode::Pass, None) => PassHost::Pass,
        };
        let max_fails = match &raw.max_fails {
            None => NonZeroU32::MIN,
            Some(v) => NonZeroU32::new(*v.get_ref()).unwrap_or_else(|| {
                self.err_at(
                    v,
                    format!("upstream `{name}`: max_fails must be at least 1"),
                    "use 1 to skip a server after its first failure",
                );
                NonZeroU32::MIN
            }),
        };
        Upstream {
            name,
            servers,
            balance,
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
        }
    }
}
