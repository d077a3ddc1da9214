//! Upstream servers that follow DNS (`resolve = true`): NGINX Plus's `server … resolve` and
//! Envoy's `STRICT_DNS`.
//!
//! A group is held in an [`UpstreamSlot`]: the definition as configured (`base`, where a
//! `resolve` server is one entry) and the group serving now, built from `base` with that
//! entry replaced by one server per A/AAAA record. A task per slot looks every name up
//! again when its TTL runs out (kept between `[resolver] min_ttl` and `max_ttl`); when the
//! set of addresses changes it builds the next group from the last one — servers that stay
//! keep their passive-health, outlier and latency state and their idle connections — and
//! swaps it in. Requests hold the group they started with, so one in flight finishes on the
//! servers it was sent to. A failed lookup (timeout, SERVFAIL, NXDOMAIN, no records) keeps
//! the last good addresses, counted and shown on `/status`, and is retried after `min_ttl`.
//!
//! The lookups use hickory's resolver (`[resolver] servers`, or `/etc/resolv.conf`'s), not
//! the system's `getaddrinfo`: that one blocks a thread and hides the TTL.

use crate::upstreams::upstream::{DnsReport, UpstreamGroup};
use arc_swap::ArcSwap;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use sluice_config::{DnsResolver, ServerAddr, Upstream, UpstreamServer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// One address a followed name has now; an SRV record also gives it a weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Found {
    pub(crate) addr: SocketAddr,
    pub(crate) weight: Option<NonZeroU32>,
}

/// The resolver of `[resolver]`, shared by every slot built under that configuration.
pub(crate) struct Resolver {
    pub(crate) config: DnsResolver,
    inner: TokioResolver,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// A resolver for `config`: its servers, or the system's when it names none.
    pub(crate) fn new(config: &DnsResolver) -> Result<Self, String> {
        let provider = TokioRuntimeProvider::default();
        let mut builder = if config.servers.is_empty() {
            TokioResolver::builder(provider).map_err(|e| {
                format!("cannot read the system's DNS configuration (/etc/resolv.conf): {e}; name DNS servers in [resolver] servers")
            })?
        } else {
            let servers = config
                .servers
                .iter()
                .map(|a| {
                    let mut s = NameServerConfig::udp_and_tcp(a.ip());
                    for c in &mut s.connections {
                        c.port = a.port();
                    }
                    s
                })
                .collect();
            TokioResolver::builder_with_config(ResolverConfig::from_name_servers(servers), provider)
        };
        let opts = builder.options_mut();
        opts.timeout = config.timeout;
        // The answer's TTL decides when to ask again, within our bounds: the cache must not
        // hold an answer past `max_ttl`, nor a failure past `min_ttl`.
        opts.positive_max_ttl = Some(config.max_ttl);
        opts.negative_max_ttl = Some(config.min_ttl);
        opts.ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
        let inner = builder
            .build()
            .map_err(|e| format!("cannot set up the DNS resolver: {e}"))?;
        Ok(Resolver {
            config: config.clone(),
            inner,
        })
    }

    /// The servers an SRV name gives: each target of the lowest priority present, at the
    /// record's port and weight (RFC 2782's order: higher priorities are backups, which the
    /// group's own retries and passive health play the part of), and how long the answers hold.
    async fn lookup_srv(&self, name: &str) -> Result<(Vec<Found>, Duration), String> {
        use hickory_resolver::proto::rr::RData;
        let fqdn = if name.ends_with('.') {
            name.to_owned()
        } else {
            format!("{name}.")
        };
        let answer = tokio::time::timeout(self.config.timeout, self.inner.srv_lookup(fqdn))
            .await
            .map_err(|_| format!("no answer within {:?}", self.config.timeout))?
            .map_err(|e| e.to_string())?;
        let mut ttl = answer
            .valid_until()
            .saturating_duration_since(Instant::now());
        let records: Vec<_> = answer
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::SRV(srv) if !srv.target.is_root() => Some(srv.clone()),
                _ => None,
            })
            .collect();
        let Some(best) = records.iter().map(|r| r.priority).min() else {
            return Err("the name has no SRV record".into());
        };
        let mut found = Vec::new();
        let mut failed = None;
        for r in records.iter().filter(|r| r.priority == best) {
            let weight = NonZeroU32::new(u32::from(r.weight)).unwrap_or(NonZeroU32::MIN);
            match self.lookup(&r.target.to_utf8(), r.port).await {
                Ok((addrs, t)) => {
                    ttl = ttl.min(t);
                    found.extend(addrs.into_iter().map(|addr| Found {
                        addr,
                        weight: Some(weight),
                    }));
                }
                Err(e) => failed = Some(format!("target {}: {e}", r.target)),
            }
        }
        // A target that does not resolve leaves the others serving; none at all is a failure.
        if found.is_empty() {
            return Err(failed.unwrap_or_else(|| "no target resolved".into()));
        }
        found.sort();
        found.dedup_by_key(|f| f.addr);
        Ok((found, ttl))
    }

    /// Every address of `host` with `port`, sorted, and how long the answer holds.
    async fn lookup(&self, host: &str, port: u16) -> Result<(Vec<SocketAddr>, Duration), String> {
        // A trailing dot: the name as written, not tried under the search domains first.
        let fqdn = if host.ends_with('.') {
            host.to_owned()
        } else {
            format!("{host}.")
        };
        let answer = tokio::time::timeout(self.config.timeout, self.inner.lookup_ip(fqdn))
            .await
            .map_err(|_| format!("no answer within {:?}", self.config.timeout))?
            .map_err(|e| e.to_string())?;
        let ttl = answer
            .valid_until()
            .saturating_duration_since(Instant::now());
        let mut addrs: Vec<SocketAddr> =
            answer.iter().map(|ip| SocketAddr::new(ip, port)).collect();
        addrs.sort();
        addrs.dedup();
        if addrs.is_empty() {
            return Err("the name has no A or AAAA record".into());
        }
        Ok((addrs, ttl))
    }
}

/// One upstream group as configured and as it serves now.
pub(crate) struct UpstreamSlot {
    /// As configured: a `resolve` server is one entry.
    pub(crate) base: Arc<Upstream>,
    group: ArcSwap<UpstreamGroup>,
    /// Present when a server follows DNS.
    dns: Option<Follow>,
}

impl std::fmt::Debug for UpstreamSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSlot")
            .field("name", &self.base.name)
            .field("group", &self.group.load())
            .finish_non_exhaustive()
    }
}

/// What following DNS knows and counted for one group.
struct Follow {
    resolver: Arc<Resolver>,
    /// The last good addresses of each name (`host:port` as configured).
    resolved: Mutex<BTreeMap<String, Vec<Found>>>,
    lookups: AtomicU64,
    failures: AtomicU64,
    changes: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl UpstreamSlot {
    /// A slot serving `base`; its group is built and its health checks started. A server
    /// that follows DNS is looked up first (through `resolver`), or takes the addresses
    /// `seed` (the slot a reload replaces) last had for the same name.
    pub(crate) async fn start(
        base: Arc<Upstream>,
        resolver: Option<&Arc<Resolver>>,
        seed: Option<&UpstreamSlot>,
    ) -> Arc<UpstreamSlot> {
        let follows = base.servers.iter().any(|s| s.resolve);
        // What the replaced slot knew and counted carries on (counters stay monotonic).
        let before = seed.and_then(|s| s.dns.as_ref());
        let count = |c: fn(&Follow) -> &AtomicU64| {
            AtomicU64::new(before.map_or(0, |f| c(f).load(Ordering::Relaxed)))
        };
        let dns = match resolver {
            Some(r) if follows => Some(Follow {
                resolver: r.clone(),
                // The names this definition still follows.
                resolved: Mutex::new(
                    before
                        .map(|f| lock(&f.resolved).clone())
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(name, _)| {
                            base.servers
                                .iter()
                                .any(|s| s.resolve && s.address.name == *name)
                        })
                        .collect(),
                ),
                lookups: count(|f| &f.lookups),
                failures: count(|f| &f.failures),
                changes: count(|f| &f.changes),
                last_error: Mutex::new(before.and_then(|f| lock(&f.last_error).clone())),
            }),
            _ => None,
        };
        let mut next = dns
            .as_ref()
            .map_or(Duration::ZERO, |f| f.resolver.config.min_ttl);
        if let Some(f) = &dns {
            // A name the replaced slot did not have is looked up before serving.
            let unseeded = base
                .servers
                .iter()
                .any(|s| s.resolve && !lock(&f.resolved).contains_key(&s.address.name));
            if unseeded {
                next = f.refresh(&base).await;
            }
        }
        let config = match &dns {
            Some(f) => Arc::new(expand(&base, &lock(&f.resolved))),
            None => base.clone(),
        };
        let group = Arc::new(UpstreamGroup::new(config, None));
        crate::upstreams::health::start(&group);
        let slot = Arc::new(UpstreamSlot {
            base,
            group: ArcSwap::new(group),
            dns,
        });
        if slot.dns.is_some()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(follow(Arc::downgrade(&slot), next));
        }
        slot
    }

    /// The group serving now; a request keeps the one it got for all its attempts.
    pub(crate) fn group(&self) -> Arc<UpstreamGroup> {
        self.group.load_full()
    }

    /// Whether this slot can serve `base` under `resolver` as it is.
    pub(crate) fn serves(&self, base: &Arc<Upstream>, resolver: &DnsResolver) -> bool {
        (Arc::ptr_eq(&self.base, base) || *self.base == **base)
            && self
                .dns
                .as_ref()
                .is_none_or(|f| f.resolver.config == *resolver)
    }

    /// What following DNS shows; `None` for a group that follows no name.
    pub(crate) fn dns_report(&self) -> Option<DnsReport> {
        let f = self.dns.as_ref()?;
        Some(DnsReport {
            names: lock(&f.resolved)
                .iter()
                .map(|(n, a)| (n.clone(), a.iter().map(|f| f.addr).collect()))
                .collect(),
            lookups: f.lookups.load(Ordering::Relaxed),
            failures: f.failures.load(Ordering::Relaxed),
            changes: f.changes.load(Ordering::Relaxed),
            last_error: lock(&f.last_error).clone(),
        })
    }

    /// Looks the names up again; when their addresses changed, builds the next group from
    /// the current one and swaps it in. Returns when to look again.
    async fn refresh(&self) -> Duration {
        let Some(f) = &self.dns else {
            return Duration::MAX;
        };
        let before = lock(&f.resolved).clone();
        let next = f.refresh(&self.base).await;
        let after = lock(&f.resolved).clone();
        if after != before {
            f.changes.fetch_add(1, Ordering::Relaxed);
            let old = self.group();
            let group = Arc::new(UpstreamGroup::new(
                Arc::new(expand(&self.base, &after)),
                Some(&old),
            ));
            crate::upstreams::health::start(&group);
            let (added, removed) = diff(&before, &after);
            tracing::info!(upstream = %self.base.name, ?added, ?removed, servers = group.servers.len(), "upstream servers changed in DNS");
            self.group.store(group);
        }
        next
    }
}

impl Follow {
    /// Looks up every `resolve` name of `base` once, keeping the last good addresses of a
    /// name whose lookup fails; returns when to look again.
    async fn refresh(&self, base: &Upstream) -> Duration {
        let bounds = (self.resolver.config.min_ttl, self.resolver.config.max_ttl);
        let mut next = bounds.1;
        let mut failed = None;
        let mut seen = Vec::new();
        for s in &base.servers {
            if !s.resolve || seen.contains(&&s.address.name) {
                continue;
            }
            seen.push(&s.address.name);
            let name = s.dns_name();
            if !s.srv && name.is_none() {
                continue;
            }
            self.lookups.fetch_add(1, Ordering::Relaxed);
            let answer = match name {
                None => self.resolver.lookup_srv(&s.address.name).await,
                Some((host, port)) => self.resolver.lookup(host, port).await.map(|(addrs, ttl)| {
                    let found = addrs
                        .into_iter()
                        .map(|addr| Found { addr, weight: None })
                        .collect();
                    (found, ttl)
                }),
            };
            match answer {
                Ok((found, ttl)) => {
                    next = next.min(ttl.clamp(bounds.0, bounds.1));
                    lock(&self.resolved).insert(s.address.name.clone(), found);
                }
                Err(e) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    let kept = lock(&self.resolved)
                        .get(&s.address.name)
                        .map_or(0, Vec::len);
                    let first = lock(&self.last_error).is_none();
                    if first {
                        tracing::warn!(upstream = %base.name, name = %s.address.name, error = %e, kept_addresses = kept, "DNS lookup of an upstream server failed; keeping its last good addresses and trying again");
                    } else {
                        tracing::debug!(upstream = %base.name, name = %s.address.name, error = %e, "DNS lookup failed again");
                    }
                    failed = Some(format!("{}: {e}", s.address.name));
                    next = bounds.0;
                }
            }
        }
        let mut last = lock(&self.last_error);
        if failed.is_none() && last.is_some() {
            tracing::info!(upstream = %base.name, "DNS lookups of upstream servers succeed again");
        }
        *last = failed;
        next
    }
}

/// Looks the slot's names up again each time their answers run out, until the slot is gone.
async fn follow(slot: Weak<UpstreamSlot>, mut wait: Duration) {
    loop {
        tokio::time::sleep(wait).await;
        let Some(slot) = slot.upgrade() else { return };
        wait = slot.refresh().await;
    }
}

/// `base` with each `resolve` server replaced by one server per address it has now (none
/// while a name has never resolved); an SRV record's weight times the server's own.
pub(crate) fn expand(base: &Upstream, resolved: &BTreeMap<String, Vec<Found>>) -> Upstream {
    let mut servers = Vec::with_capacity(base.servers.len());
    for s in &base.servers {
        if !s.resolve {
            servers.push(s.clone());
            continue;
        }
        for found in resolved.get(&s.address.name).into_iter().flatten() {
            let a = found.addr;
            servers.push(UpstreamServer {
                address: ServerAddr {
                    name: format!("{} ({a})", s.address.name),
                    addr: a,
                },
                weight: found
                    .weight
                    .map_or(s.weight, |w| w.saturating_mul(s.weight)),
                resolve: false,
                srv: false,
            });
        }
    }
    Upstream {
        servers,
        ..base.clone()
    }
}

/// Addresses in `after` and not `before`, and the other way round.
fn diff(
    before: &BTreeMap<String, Vec<Found>>,
    after: &BTreeMap<String, Vec<Found>>,
) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    let all = |m: &BTreeMap<String, Vec<Found>>| -> Vec<SocketAddr> {
        m.values().flatten().map(|f| f.addr).collect()
    };
    let (b, a) = (all(before), all(after));
    (
        a.iter().filter(|x| !b.contains(x)).copied().collect(),
        b.iter().filter(|x| !a.contains(x)).copied().collect(),
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses as an A/AAAA lookup finds them (no weight of their own).
    fn plain(addrs: &[SocketAddr]) -> Vec<Found> {
        addrs
            .iter()
            .map(|&addr| Found { addr, weight: None })
            .collect()
    }

    fn base() -> Upstream {
        let snapshot = sluice_config::load_str(
            "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"u\"\nservers = [{ address = \"app.example:8080\", resolve = true, weight = 3 }, { address = \"127.0.0.1:9000\" }]\n[[route]]\nname = \"r\"\nupstream = \"u\"\n",
            "test.toml",
            std::path::Path::new("."),
        )
        .expect("valid");
        (*snapshot.upstreams[0]).clone()
    }

    #[test]
    fn a_followed_name_becomes_one_server_per_address_with_its_weight() {
        let base = base();
        let a: SocketAddr = "10.0.0.1:8080".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:8080".parse().unwrap();
        let resolved = BTreeMap::from([("app.example:8080".to_owned(), plain(&[a, b]))]);
        let u = expand(&base, &resolved);
        let got: Vec<(SocketAddr, u32, bool)> = u
            .servers
            .iter()
            .map(|s| (s.address.addr, s.weight.get(), s.resolve))
            .collect();
        assert_eq!(
            got,
            vec![
                (a, 3, false),
                (b, 3, false),
                ("127.0.0.1:9000".parse().unwrap(), 1, false)
            ]
        );
        assert_eq!(
            u.servers[1].address.name,
            "app.example:8080 (10.0.0.2:8080)"
        );
        // Never resolved: no server from it, the fixed one stays.
        assert_eq!(expand(&base, &BTreeMap::new()).servers.len(), 1);
    }

    #[test]
    fn a_server_that_stays_through_a_dns_change_keeps_its_passive_health() {
        let base = base();
        let (a, b, c): (SocketAddr, SocketAddr, SocketAddr) = (
            "10.0.0.1:8080".parse().unwrap(),
            "10.0.0.2:8080".parse().unwrap(),
            "10.0.0.3:8080".parse().unwrap(),
        );
        let before = BTreeMap::from([("app.example:8080".to_owned(), plain(&[a, b]))]);
        let old = UpstreamGroup::new(Arc::new(expand(&base, &before)), None);
        // b fails (max_fails defaults to 1) and is skipped for fail_timeout.
        old.mark_failed(1);
        let now = old.now_ms();
        assert!(!old.servers[1].available(now));
        old.mark_failed(0);
        let after = BTreeMap::from([("app.example:8080".to_owned(), plain(&[b, c]))]);
        let new = UpstreamGroup::new(Arc::new(expand(&base, &after)), Some(&old));
        let now = new.now_ms();
        let state: Vec<(SocketAddr, bool)> = new
            .servers
            .iter()
            .map(|s| (s.addr, s.available(now)))
            .collect();
        // b is still down; c is new and up; a is gone with its mark.
        assert_eq!(
            state,
            vec![
                (b, false),
                (c, true),
                ("127.0.0.1:9000".parse().unwrap(), true)
            ]
        );
    }

    #[test]
    fn added_and_removed_addresses_are_told_apart() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let c: SocketAddr = "10.0.0.3:1".parse().unwrap();
        let before = BTreeMap::from([("n:1".to_owned(), plain(&[a, b]))]);
        let after = BTreeMap::from([("n:1".to_owned(), plain(&[b, c]))]);
        assert_eq!(diff(&before, &after), (vec![c], vec![a]));
    }

    #[test]
    fn srv_records_give_the_ports_and_their_weights_times_the_servers_own() {
        let snapshot = sluice_config::load_str(
            "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"u\"\nservers = [{ address = \"app.example\", service = \"http\", resolve = true, weight = 2 }]\n[[route]]\nname = \"r\"\nupstream = \"u\"\n",
            "test.toml",
            std::path::Path::new("."),
        )
        .expect("valid");
        let base = (*snapshot.upstreams[0]).clone();
        assert_eq!(base.servers[0].address.name, "_http._tcp.app.example");
        assert_eq!(base.servers[0].dns_name(), None, "not an A/AAAA name");
        let (a, b): (SocketAddr, SocketAddr) = (
            "10.0.0.1:8001".parse().unwrap(),
            "10.0.0.2:8002".parse().unwrap(),
        );
        let resolved = BTreeMap::from([(
            "_http._tcp.app.example".to_owned(),
            vec![
                Found {
                    addr: a,
                    weight: NonZeroU32::new(10),
                },
                Found {
                    addr: b,
                    weight: NonZeroU32::new(30),
                },
            ],
        )]);
        let got: Vec<(SocketAddr, u32)> = expand(&base, &resolved)
            .servers
            .iter()
            .map(|s| (s.address.addr, s.weight.get()))
            .collect();
        assert_eq!(got, vec![(a, 20), (b, 60)]);
    }

    #[test]
    fn only_a_server_with_resolve_is_followed() {
        let base = base();
        assert_eq!(base.servers[0].dns_name(), Some(("app.example", 8080)));
        assert_eq!(base.servers[1].dns_name(), None);
    }
}
