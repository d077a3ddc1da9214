//! `[resolver]` as the data plane reads it: where and how often servers with `resolve = true`
//! are looked up (the loader is `load/upstream.rs`'s `Cx::resolver`).

use std::net::SocketAddr;
use std::time::Duration;

/// `[resolver]`: how upstreams with `resolve = true` are looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsResolver {
    /// DNS servers; empty: those of `/etc/resolv.conf`.
    pub servers: Vec<SocketAddr>,
    /// Lower bound of the time between two resolutions of a name.
    pub min_ttl: Duration,
    /// Upper bound of it (a name is looked up again at least this often).
    pub max_ttl: Duration,
    /// Deadline of one resolution.
    pub timeout: Duration,
}

impl Default for DnsResolver {
    fn default() -> Self {
        DnsResolver {
            servers: Vec::new(),
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(60),
            timeout: Duration::from_secs(5),
        }
    }
}
