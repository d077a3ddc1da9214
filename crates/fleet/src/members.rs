//! The gateways of a fleet, as they announce themselves, so that one gateway's admin API can
//! ask the others (the request log searched across the fleet).
//!
//! Each gateway writes `{prefix}/gateways/{name}` = `{"name", "admin", "since"}` under a
//! lease of [`TTL`] that it keeps alive; a gateway that stops (or loses etcd) disappears
//! when its lease ends. A gateway that cannot reach etcd tries again every few seconds.

use crate::Fleet;
use crate::etcd::Etcd;
use etcd_client::{GetOptions, PutOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A member's lease: a gateway gone is forgotten this long after.
pub const TTL: Duration = Duration::from_secs(15);

/// One gateway of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its name (the host name, with the admin port when several share a host).
    pub name: String,
    /// Its admin listener, `http://host:port` or `https://…`.
    pub admin: String,
}

impl Fleet {
    /// Announces this gateway as `name` with its admin listener at `admin` for as long as the
    /// task runs (it is detached: the process's life).
    pub fn announce(self: &Arc<Self>, name: String, admin: String) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            loop {
                match fleet.client().await {
                    Ok(etcd) => {
                        if let Err(e) = hold(&etcd, &name, &admin).await {
                            tracing::debug!(error = %e, "fleet members: announcing again");
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "fleet members: etcd unreachable"),
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    }

    /// The gateways announced now.
    pub async fn members(&self) -> Result<Vec<Member>, String> {
        let etcd = self.client().await?;
        let dir = format!("{}/gateways/", etcd.prefix());
        let mut client = etcd.client.clone();
        let resp = etcd
            .timed(
                "read",
                client.get(dir.clone(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| parse(kv.value()))
            .collect())
    }
}

fn parse(value: &[u8]) -> Option<Member> {
    let v: Value = serde_json::from_slice(value).ok()?;
    Some(Member {
        name: v["name"].as_str()?.to_owned(),
        admin: v["admin"].as_str()?.to_owned(),
    })
}

/// Puts this gateway's key under a fresh lease and keeps the lease alive; returns when it
/// could not (etcd gone, the lease lost).
async fn hold(etcd: &Etcd, name: &str, admin: &str) -> Result<(), String> {
    let mut client = etcd.client.clone();
    let lease = etcd
        .timed("lease", client.lease_grant(TTL.as_secs() as i64, None))
        .await?
        .id();
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let key = format!("{}/gateways/{name}", etcd.prefix());
    let value = json!({ "name": name, "admin": admin, "since": since }).to_string();
    etcd.timed(
        "put",
        client.put(key, value, Some(PutOptions::new().with_lease(lease))),
    )
    .await?;
    let (mut keeper, mut answers) = etcd.timed("lease", client.lease_keep_alive(lease)).await?;
    loop {
        tokio::time::sleep(TTL / 3).await;
        etcd.timed("lease", keeper.keep_alive()).await?;
        match tokio::time::timeout(Duration::from_secs(5), answers.message()).await {
            // A TTL of 0: the lease is gone (etcd restarted without it, or it expired).
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
            Ok(Ok(Some(_))) => return Err("the lease expired".into()),
            Ok(Ok(None)) => return Err("the keep-alive stream ended".into()),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("no keep-alive answer within 5 s".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_read_from_their_json_and_junk_is_skipped() {
        assert_eq!(
            parse(br#"{"name":"edge-1","admin":"http://10.0.0.5:9901","since":1}"#),
            Some(Member {
                name: "edge-1".into(),
                admin: "http://10.0.0.5:9901".into()
            })
        );
        assert_eq!(parse(b"{}"), None);
        assert_eq!(parse(b"not json"), None);
    }
}
