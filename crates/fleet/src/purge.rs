//! Cache purges that reach every gateway of a fleet.
//!
//! A purge through any gateway's admin API is written to etcd under `{prefix}/purge/`, one key
//! per purged URL or prefix (a later purge of the same target replaces it, so the directory is
//! bounded by the targets, not the purges), with the time it was issued and a lease of
//! [`KEEP`]. Every gateway watches that directory and purges its own cache when a key appears
//! (as of the moment it arrives: everything it holds of the target was fetched before).
//! Purges are records with a time (`sluice_cache::purge`), so applying one again is harmless
//! and spares what was fetched after it: a gateway whose watch broke, and a gateway that
//! starts (its disk tier may hold entries from before a purge it did not see), apply every
//! purge still kept, as of the time each was issued. A gateway cannot know the purges older
//! than [`KEEP`]: when it starts it distrusts its disk entries fetched before that
//! (`run.rs`).

use crate::etcd::Etcd;
use etcd_client::{EventType, GetOptions, PutOptions, WatchOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a purge's key lives in etcd: how long a gateway may be down and still learn of
/// every purge when it returns.
pub const KEEP: Duration = Duration::from_secs(24 * 3600);

/// What a gateway does with a purge: `(host, path, prefix, as of)`.
pub type OnPurge = Arc<dyn Fn(&str, &str, bool, SystemTime) + Send + Sync>;

/// Called each time every purge kept in etcd has been applied (after the first read, and
/// after each read that follows a broken watch).
pub type OnSynced = Arc<dyn Fn() + Send + Sync>;

/// One purge as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purge {
    /// The request's Host.
    pub host: String,
    /// The path (with query), or the prefix.
    pub path: String,
    /// `path` is a prefix.
    pub prefix: bool,
    /// When it was issued (the issuing gateway's clock).
    pub at: SystemTime,
}

impl Purge {
    fn to_json(&self) -> String {
        let at = self
            .at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        json!({ "host": self.host, "path": self.path, "prefix": self.prefix, "at_ns": at })
            .to_string()
    }

    fn from_json(value: &[u8]) -> Option<Purge> {
        let v: Value = serde_json::from_slice(value).ok()?;
        Some(Purge {
            host: v["host"].as_str()?.to_owned(),
            path: v["path"].as_str()?.to_owned(),
            prefix: v["prefix"].as_bool()?,
            at: UNIX_EPOCH + Duration::from_nanos(v["at_ns"].as_u64()?),
        })
    }

    /// Its key's last part: the same for every purge of one target (FNV-1a of the target).
    fn slot(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in [
            self.host.as_bytes(),
            b"\0",
            self.path.as_bytes(),
            &[u8::from(self.prefix)],
        ]
        .concat()
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
}

/// Writes `purge` for every gateway (this one's own cache hears of it through its watch too).
pub async fn publish(etcd: &Etcd, purge: &Purge) -> Result<(), String> {
    let mut client = etcd.client.clone();
    let lease = etcd
        .timed("lease", client.lease_grant(KEEP.as_secs() as i64, None))
        .await?;
    let key = format!("{}/purge/{}", etcd.prefix(), purge.slot());
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

/// Follows `{prefix}/purge/` for as long as the task runs, calling `on_purge` for each purge
/// kept when it starts (and again after a broken watch) as of the time it was issued, and for
/// each written after that as of the moment it arrives.
pub async fn follow(etcd: Etcd, on_purge: OnPurge, on_synced: OnSynced) {
    let dir = format!("{}/purge/", etcd.prefix());
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
        for kv in resp.kvs() {
            if let Some(p) = Purge::from_json(kv.value()) {
                on_purge(&p.host, &p.path, p.prefix, p.at);
            }
        }
        on_synced();
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
                    Some(p) => on_purge(&p.host, &p.path, p.prefix, p.at.max(SystemTime::now())),
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
    pub fn follow_purges(
        self: &Arc<Self>,
        on_purge: OnPurge,
        on_synced: OnSynced,
    ) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            loop {
                match fleet.client().await {
                    Ok(etcd) => return follow(etcd, on_purge, on_synced).await,
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
            at: UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789),
        };
        assert_eq!(Purge::from_json(p.to_json().as_bytes()), Some(p.clone()));
        let later = Purge {
            at: SystemTime::now(),
            ..p.clone()
        };
        assert_eq!(later.slot(), p.slot(), "one key per target");
        let other = Purge {
            prefix: false,
            ..p.clone()
        };
        assert_ne!(other.slot(), p.slot());
        assert_eq!(Purge::from_json(br#"{"host": "a"}"#), None);
        assert_eq!(Purge::from_json(b"not json"), None);
    }
}
