//! A listener's `kind`: what it speaks (HTTP, bytes over TCP or MQTT) and where a TCP
//! listener sends its connections.

use crate::load::Cx;
use crate::pattern::HostPattern;
use crate::raw::*;
use crate::snapshot::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use toml::Spanned;

/// What `kind` names, which decides the listener's other keys.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Http,
    Tcp,
    Mqtt,
}

impl Cx<'_> {
    /// `kind`, `upstream`, `passthrough` and `idle_timeout`: what a listener speaks.
    pub(super) fn listener_kind(
        &mut self,
        name: &str,
        raw: &RawListener,
        upstream_names: &HashMap<String, usize>,
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<ListenerKind> {
        let kind = self.kind(name, raw);
        if kind == Kind::Http {
            self.check_no_tcp_keys(name, raw);
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
        let upstream = match &raw.upstream {
            Some(u) => {
                let g = self.tcp_upstream(name, u, upstream_names, broken);
                ok &= g.is_some();
                g
            }
            None => None,
        };
        let passthrough = self.passthrough(name, raw, kind, upstream_names, broken);
        ok &= passthrough.is_some();
        let idle_timeout = self
            .duration(raw.idle_timeout.as_ref())
            .unwrap_or(Duration::from_secs(600));
        if kind == Kind::Mqtt {
            return self.mqtt_kind(name, raw, upstream.filter(|_| ok), idle_timeout);
        }
        ok.then_some(ListenerKind::Tcp(TcpProxy {
            upstream,
            passthrough: passthrough?,
            idle_timeout,
        }))
    }

    /// `kind` (default HTTP); `[listener.mqtt]` belongs to MQTT listeners only.
    fn kind(&mut self, name: &str, raw: &RawListener) -> Kind {
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
        kind
    }

    /// An HTTP listener routes by `[[route]]`: the keys that send connections as bytes are
    /// refused there.
    fn check_no_tcp_keys(&mut self, name: &str, raw: &RawListener) {
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
    }

    /// The index of the upstream `at` names; `None` when it is not defined (reported
    /// unless that upstream failed to parse).
    fn tcp_upstream(
        &mut self,
        name: &str,
        at: &Spanned<String>,
        upstream_names: &HashMap<String, usize>,
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<usize> {
        let found = upstream_names.get(at.get_ref()).copied();
        if found.is_none()
            && !broken
                .get("upstream")
                .is_some_and(|s| s.contains(at.get_ref()))
        {
            let mut known: Vec<&str> = upstream_names.keys().map(String::as_str).collect();
            known.sort_unstable();
            self.err_at(
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
    }

    /// `passthrough`: the upstream each TLS server name goes to, exact names first; empty
    /// when unset, which needs an `upstream`. `None` when it has a mistake (reported).
    fn passthrough(
        &mut self,
        name: &str,
        raw: &RawListener,
        kind: Kind,
        upstream_names: &HashMap<String, usize>,
        broken: &HashMap<&'static str, HashSet<String>>,
    ) -> Option<Vec<(HostPattern, usize)>> {
        let Some(table) = &raw.passthrough else {
            if raw.upstream.is_none() {
                self.err(
                    raw.name.span().start,
                    format!("listener `{name}` is kind = \"{}\" but has no upstream", if kind == Kind::Mqtt { "mqtt" } else { "tcp" }),
                    "add upstream = \"NAME\" (an [[upstream]] group), or passthrough = { \"name.example\" = \"NAME\" }",
                );
                return None;
            }
            return Some(Vec::new());
        };
        let mut ok = true;
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
        let mut passthrough = Vec::new();
        for (host, target) in table.get_ref() {
            let pattern = match HostPattern::parse(host) {
                Ok(p) => Some(p),
                Err(e) => {
                    ok = false;
                    self.err_at(target, format!("listener `{name}`: passthrough: {e}"), "");
                    None
                }
            };
            let g = self.tcp_upstream(name, target, upstream_names, broken);
            ok &= g.is_some();
            if let (Some(p), Some(g)) = (pattern, g) {
                passthrough.push((p, g));
            }
        }
        // Exact names first, so that `a.example.com` wins over `*.example.com`.
        passthrough.sort_by_key(|(p, _)| matches!(p, HostPattern::Wildcard(_)));
        ok.then_some(passthrough)
    }
}
