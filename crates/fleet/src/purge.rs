//! Cache purges that reach every gateway of a fleet.
//!
//! A purge through any gateway's admin API is written to etcd under `{prefix}/purge/` with a
//! lease of [`KEEP`]; every gateway watches that directory and purges its own cache when a key
//! appears. A gateway whose watch broke reads the directory again and applies what is there
//! (purging twice is harmless; a purge missed would serve an old page). A gateway that starts
//! has an empty cache: it applies nothing already there, only what comes after.

use crate::etcd::Etcd;
use etcd_client::{EventType, GetOptions, PutOptions, WatchOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long a purge's key lives: longer than any watch takes to come back.
pub const KEEP: Duration = Duration::from_secs(300);

/// What a gateway does with a purge: `(host, path, prefix)`.
pub type OnPurge = Arc<dyn Fn(&str, &str, bool) + Send + Sync>;

/// One purge as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purge {
    /// The request's Host.
    pub host: String,
    /// The path (with query), or the prefix.
    pub path: String,
    /// `path` is a prefix.
    pub prefix: bool,
}

impl Purge {
    fn to_json(&self) -> String {
        json!({ "host": self.host, "path": self.path, "prefix": self.prefix }).to_string()
    }

    fn from_json(value: &[u8]) -> Option<Purge> {
        let v: Value = serde_json::from_slice(value).ok()?;
        Some(Purge {
            host: v["host"].as_str()?.to_owned(),
            path: v["path"].as_str()?.to_owned(),
            prefix: v["prefix"].as_bool()?,
        })
    }
}

/// Writes `purge` for every gateway (this one's own cache hears of it through its watch too).
pub async fn publish(etcd: &Etcd, purge: &Purge) -> Result<(), String> {
    let mut client = etcd.client.clone();
    let lease = etcd
        .timed("lease", client.lease_grant(KEEP.as_secs() as i64, None))
        .await?;
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let key = format!("{}/purge/{nanos:032}-{:08x}", etcd.prefix(), rand_u32());
    etcd.timed(
        "put",
        client.put(
            key,
            purge.to_json(),
            Some(PutOptions::new().with_lease(lease.id())),
        ),
    )
    .await?;
    Ok(())
}

fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    boring::rand::rand_bytes(&mut b).map_or(0, |()| u32::from_le_bytes(b))
}

/// Follows `{prefix}/purge/` for as long as the task runs, calling `on_purge` for each purge
/// written after it started (and, after a broken watch, for each one still kept).
pub async fn follow(etcd: Etcd, on_purge: OnPurge) {
    let dir = format!("{}/purge/", etcd.prefix());
    let mut first = true;
    loop {
        let mut client = etcd.client.clone();
        let Ok(resp) = etcd
            .timed(
                "read",
                client.get(dir.clone(), Some(GetOptions::new().with_prefix())),
            )
            .await
        else {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        };
        if !first {
            for kv in resp.kvs() {
                if let Some(p) = Purge::from_json(kv.value()) {
                    on_purge(&p.host, &p.path, p.prefix);
                }
            }
        }
        first = false;
        let revision = resp.header().map_or(0, |h| h.revision());
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let Ok(mut stream) = etcd
            .timed("watch", client.watch(dir.clone(), Some(opts)))
            .await
        else {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        };
        while let Ok(Some(resp)) = stream.message().await {
            if resp.canceled() {
                break;
            }
            for event in resp.events() {
                if event.event_type() != EventType::Put {
                    continue;
                }
                match event.kv().and_then(|kv| Purge::from_json(kv.value())) {
                    Some(p) => on_purge(&p.host, &p.path, p.prefix),
                    None => tracing::warn!("an unreadable cache purge in etcd; ignored"),
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl crate::Fleet {
    /// Purges every gateway's cache ([`publish`]).
    pub async fn purge(&self, purge: &Purge) -> Result<(), String> {
        let etcd = self.client().await?;
        publish(&etcd, purge).await
    }

    /// Follows the fleet's purges ([`follow`]) until the task is aborted; waits for etcd
    /// while it is away.
    pub fn follow_purges(self: &Arc<Self>, on_purge: OnPurge) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            loop {
                match fleet.client().await {
                    Ok(etcd) => return follow(etcd, on_purge).await,
                    Err(e) => {
                        tracing::debug!(error = %e, "cache purges: etcd unreachable; trying again");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_reads_back_from_its_value() {
        let p = Purge {
            host: "a.example".into(),
            path: "/static/".into(),
            prefix: true,
        };
        assert_eq!(Purge::from_json(p.to_json().as_bytes()), Some(p));
        assert_eq!(Purge::from_json(br#"{"host": "a"}"#), None);
        assert_eq!(Purge::from_json(b"not json"), None);
    }
}
