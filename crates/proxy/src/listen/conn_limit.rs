//! Connection limits at accept: `max_connections` per listener and
//! `max_connections_per_client` per client address. A connection over either is closed
//! at once (before TLS, before any read) and counted; its slot is freed when it ends.
//!
//! The address is the TCP peer's: headers are not read yet at accept, so behind a load
//! balancer that does not send the PROXY protocol this limits the balancer's connections.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SHARDS: usize = 16;

/// Why a connection was refused, as `/metrics` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Listener,
    Client,
}

/// The open connections of one running listener.
#[derive(Debug, Default)]
pub(crate) struct ConnCounts {
    open: AtomicUsize,
    per_client: [Mutex<HashMap<IpAddr, u32>>; SHARDS],
}

/// Holds a connection's place until it ends.
#[derive(Debug)]
pub(crate) struct ConnSlot {
    counts: Arc<ConnCounts>,
    client: Option<IpAddr>,
}

impl ConnCounts {
    fn shard(&self, ip: IpAddr) -> &Mutex<HashMap<IpAddr, u32>> {
        let h = crate::hash::hash_ip(ip);
        &self.per_client[(h as usize) % SHARDS]
    }

    /// Admits a connection from `peer` under the listener's limits (`None`: unlimited).
    pub(crate) fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        max: Option<usize>,
        per_client: Option<u32>,
    ) -> Result<ConnSlot, Refusal> {
        let open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        if max.is_some_and(|m| open > m) {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Listener);
        }
        let client = match per_client {
            None => None,
            Some(limit) => {
                let mut map = self.shard(peer).lock().unwrap_or_else(|e| e.into_inner());
                let n = map.entry(peer).or_insert(0);
                if *n >= limit {
                    drop(map);
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    return Err(Refusal::Client);
                }
                *n += 1;
                Some(peer)
            }
        };
        Ok(ConnSlot {
            counts: self.clone(),
            client,
        })
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.counts.open.fetch_sub(1, Ordering::AcqRel);
        if let Some(ip) = self.client {
            let mut map = self
                .counts
                .shard(ip)
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(n) = map.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_hold_and_slots_come_back() {
        let c = Arc::new(ConnCounts::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = c.admit(a, Some(3), Some(2)).unwrap();
        let second = c.admit(a, Some(3), Some(2)).unwrap();
        assert_eq!(c.admit(a, Some(3), Some(2)).unwrap_err(), Refusal::Client);
        let third = c.admit(b, Some(3), Some(2)).unwrap();
        assert_eq!(c.admit(b, Some(3), Some(2)).unwrap_err(), Refusal::Listener);
        drop(first);
        assert!(c.admit(a, Some(3), Some(2)).is_ok(), "a slot came back");
        drop((second, third));
        assert_eq!(c.open.load(Ordering::Relaxed), 0);
        assert!(
            c.per_client.iter().all(|s| s.lock().unwrap().is_empty()),
            "no entry left behind"
        );
    }
}
