//! ACME certificates in a fleet, through its etcd: one gateway orders a certificate at a
//! time, every gateway answers the CA's challenges, every gateway serves the result.
//!
//! - `{prefix}/acme/lock/{name}`: created in a transaction only when absent, under a lease
//!   (30 s, kept alive while the order runs): the gateway that created it orders. A gateway
//!   that dies mid-order loses the lease, and with it the lock and its published answers.
//! - `{prefix}/acme/challenges/{id}`: an answer (`{"http": {token, key_authorization}}` or
//!   `{"tls_alpn": {host, digest}}`) under the orderer's lease; every gateway gives it.
//! - `{prefix}/acme/certificates/{name}`: `{cert_pem, key_sealed}`, the key sealed with the
//!   fleet's keyring as every private key in etcd is; every gateway checks, stores and serves
//!   it ([`sluice_acme::adopt`]).

use crate::Keyring;
use crate::etcd::Etcd;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use serde_json::{Value, json};
use sluice_acme::{Answer, BoxFuture, Coordinator, Orders, Shared, Turn};
use std::collections::HashMap;
use std::time::Duration;

/// The lock's lease: long enough to ride out a slow etcd, short enough that a dead orderer's
/// turn passes quickly.
const LEASE_TTL: i64 = 30;

/// The fleet's etcd as the ACME coordinator.
pub struct EtcdCoordinator {
    etcd: Etcd,
    keyring: Keyring,
    /// Who holds a lock (written into it, for an operator reading etcd).
    holder: String,
}

impl EtcdCoordinator {
    /// A coordinator on `etcd`, sealing keys with `keyring`.
    pub fn new(etcd: Etcd, keyring: Keyring) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        EtcdCoordinator {
            etcd,
            keyring,
            holder: format!("{}:{}", host.trim(), std::process::id()),
        }
    }

    fn key(&self, rest: &str) -> String {
        format!("{}/acme/{rest}", self.etcd.prefix())
    }
}

impl Coordinator for EtcdCoordinator {
    fn shared<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Shared>, String>> {
        Box::pin(async move {
            let mut client = self.etcd.client.clone();
            let key = self.key(&format!("certificates/{name}"));
            let resp = self
                .etcd
                .timed("read", client.get(key.clone(), None))
                .await?;
            let Some(kv) = resp.kvs().first() else {
                return Ok(None);
            };
            match read(self.etcd.prefix(), &key, kv.value()) {
                Some(Said::Certificate {
                    cert_pem,
                    key_sealed,
                    ..
                }) => {
                    let key_pem = self.keyring.open(&key_sealed, &format!("acme/{name}"))?;
                    Ok(Some((cert_pem, key_pem)))
                }
                _ => Err(format!(
                    "{key} does not hold a certificate and a sealed key"
                )),
            }
        })
    }

    fn acquire<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn Turn>>, String>> {
        Box::pin(async move {
            let mut client = self.etcd.client.clone();
            let lease = self
                .etcd
                .timed("lease", client.lease_grant(LEASE_TTL, None))
                .await?
                .id();
            let lock = self.key(&format!("lock/{name}"));
            let txn = Txn::new()
                .when([Compare::create_revision(lock.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    lock,
                    self.holder.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let won = self.etcd.timed("lock", client.txn(txn)).await?.succeeded();
            if !won {
                let _ = self.etcd.timed("lease", client.lease_revoke(lease)).await;
                return Ok(None);
            }
            let keeper = tokio::spawn(keep_alive(self.etcd.clone(), lease));
            tracing::info!(certificate = %name, holder = %self.holder, "this gateway orders for the fleet");
            Ok(Some(Box::new(EtcdTurn {
                etcd: self.etcd.clone(),
                keyring: self.keyring.clone(),
                name: name.to_owned(),
                lease,
                keeper,
            }) as Box<dyn Turn>))
        })
    }
}

/// Renews the lease every third of its life until aborted.
async fn keep_alive(etcd: Etcd, lease: i64) {
    let mut client = etcd.client.clone();
    let Ok((mut keeper, mut answers)) = client.lease_keep_alive(lease).await else {
        return;
    };
    loop {
        if keeper.keep_alive().await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), answers.message()).await;
        tokio::time::sleep(Duration::from_secs(LEASE_TTL as u64 / 3)).await;
    }
}

struct EtcdTurn {
    etcd: Etcd,
    keyring: Keyring,
    name: String,
    lease: i64,
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for EtcdTurn {
    fn drop(&mut self) {
        // The lock and the published answers go with the lease.
        self.keeper.abort();
        let (etcd, lease) = (self.etcd.clone(), self.lease);
        tokio::spawn(async move {
            let mut client = etcd.client.clone();
            let _ = etcd.timed("lease", client.lease_revoke(lease)).await;
        });
    }
}

impl Turn for EtcdTurn {
    fn publish<'a>(&'a self, answer: &'a Answer) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let (id, value) = match answer {
                Answer::Http {
                    token,
                    key_authorization,
                } => (
                    format!("http-{token}"),
                    json!({"http": {"token": token, "key_authorization": key_authorization}}),
                ),
                Answer::TlsAlpn { host, digest } => (
                    format!("tls-alpn-{host}"),
                    json!({"tls_alpn": {"host": host, "digest": hex(digest)}}),
                ),
            };
            let key = format!("{}/acme/challenges/{id}", self.etcd.prefix());
            let mut client = self.etcd.client.clone();
            let opts = PutOptions::new().with_lease(self.lease);
            self.etcd
                .timed("put", client.put(key, value.to_string(), Some(opts)))
                .await
                .map(drop)
        })
    }

    fn share<'a>(
        &'a self,
        chain_pem: &'a str,
        key_pem: &'a [u8],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let context = format!("acme/{}", self.name);
            let sealed = self.keyring.seal(key_pem, &context)?;
            let value = json!({"cert_pem": chain_pem, "key_sealed": sealed});
            let key = format!("{}/acme/certificates/{}", self.etcd.prefix(), self.name);
            let mut client = self.etcd.client.clone();
            self.etcd
                .timed("put", client.put(key, value.to_string(), None))
                .await
                .map(drop)
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    s.len()
        .is_multiple_of(2)
        .then(|| {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .flatten()
}

/// What a key under `{prefix}/acme/` asks of this gateway.
enum Said {
    Answer(Answer),
    Certificate {
        name: String,
        cert_pem: String,
        key_sealed: String,
    },
}

fn read(prefix: &str, key: &str, value: &[u8]) -> Option<Said> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("/acme/")?;
    let v: Value = serde_json::from_slice(value).ok()?;
    if rest.starts_with("challenges/") {
        if let Some(h) = v.get("http") {
            return Some(Said::Answer(Answer::Http {
                token: h["token"].as_str()?.to_owned(),
                key_authorization: h["key_authorization"].as_str()?.to_owned(),
            }));
        }
        let t = v.get("tls_alpn")?;
        return Some(Said::Answer(Answer::TlsAlpn {
            host: t["host"].as_str()?.to_owned(),
            digest: unhex(t["digest"].as_str()?)?,
        }));
    }
    let name = rest.strip_prefix("certificates/")?;
    Some(Said::Certificate {
        name: name.to_owned(),
        cert_pem: v["cert_pem"].as_str()?.to_owned(),
        key_sealed: v["key_sealed"].as_str()?.to_owned(),
    })
}

/// Follows `{prefix}/acme/` for as long as the gateway runs: gives the answers other
/// gateways' orders publish and takes the certificates they obtain. Re-reads everything
/// after a broken watch.
pub async fn follow(etcd: Etcd, keyring: Keyring, orders: Orders) {
    let prefix = etcd.prefix().to_owned();
    let dir = format!("{prefix}/acme/");
    // Answers given now, by key, to withdraw when their key goes.
    let mut given: HashMap<String, Answer> = HashMap::new();
    let take = |key: &str, value: &[u8], given: &mut HashMap<String, Answer>| match read(
        &prefix, key, value,
    ) {
        Some(Said::Answer(a)) => match sluice_acme::answer(&a) {
            Ok(()) => {
                given.insert(key.to_owned(), a);
            }
            Err(e) => tracing::warn!(key, error = %e, "cannot give a fleet ACME challenge answer"),
        },
        Some(Said::Certificate {
            name,
            cert_pem,
            key_sealed,
        }) => {
            let adopted = keyring
                .open(&key_sealed, &format!("acme/{name}"))
                .and_then(|key_pem| sluice_acme::adopt(&orders, &name, &cert_pem, &key_pem));
            if let Err(e) = adopted {
                tracing::warn!(certificate = %name, error = %e, "cannot take the fleet's ACME certificate");
            }
        }
        None => {}
    };
    loop {
        let mut client = etcd.client.clone();
        let opts = GetOptions::new().with_prefix();
        let read_all = etcd
            .timed("read", client.get(dir.clone(), Some(opts)))
            .await;
        let Ok(resp) = read_all else {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        };
        let revision = resp.header().map_or(0, |h| h.revision());
        let present: Vec<String> = resp
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok().map(str::to_owned))
            .collect();
        given.retain(|k, a| {
            let keep = present.contains(k);
            if !keep {
                sluice_acme::withdraw(a);
            }
            keep
        });
        for kv in resp.kvs() {
            if let Ok(key) = kv.key_str() {
                take(key, kv.value(), &mut given);
            }
        }
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
                let Some(kv) = event.kv() else { continue };
                let Ok(key) = kv.key_str() else { continue };
                match event.event_type() {
                    EventType::Put => take(key, kv.value(), &mut given),
                    EventType::Delete => {
                        if let Some(a) = given.remove(key) {
                            sluice_acme::withdraw(&a);
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl crate::Fleet {
    /// The fleet's etcd as the ACME manager's coordinator.
    pub async fn acme_coordinator(&self) -> Result<EtcdCoordinator, String> {
        Ok(EtcdCoordinator::new(
            self.client().await?,
            self.keyring.clone(),
        ))
    }

    /// Follows what other gateways' ACME orders publish ([`follow`]), until aborted.
    pub async fn follow_acme(&self, orders: Orders) -> Result<tokio::task::JoinHandle<()>, String> {
        let etcd = self.client().await?;
        Ok(tokio::spawn(follow(etcd, self.keyring.clone(), orders)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_certificates_read_back_from_their_keys() {
        let a = read(
            "/s",
            "/s/acme/challenges/http-t1",
            br#"{"http": {"token": "t1", "key_authorization": "t1.k"}}"#,
        );
        assert!(matches!(a, Some(Said::Answer(Answer::Http { ref token, .. })) if token == "t1"));
        let d = vec![1u8, 0xab, 0xff];
        let value = json!({"tls_alpn": {"host": "a.example", "digest": hex(&d)}}).to_string();
        let b = read(
            "/s",
            "/s/acme/challenges/tls-alpn-a.example",
            value.as_bytes(),
        );
        assert!(
            matches!(b, Some(Said::Answer(Answer::TlsAlpn { ref digest, .. })) if *digest == d)
        );
        let c = read(
            "/s",
            "/s/acme/certificates/site",
            br#"{"cert_pem": "P", "key_sealed": "S"}"#,
        );
        assert!(matches!(c, Some(Said::Certificate { ref name, .. }) if name == "site"));
        assert!(read("/s", "/s/acme/lock/site", b"host:1").is_none());
        assert!(read("/s", "/other/acme/certificates/x", b"{}").is_none());
        assert_eq!(unhex("0g"), None);
    }
}
