//! The etcd operations fleet mode needs, on the `etcd-client` crate: read the prefix at one
//! revision, watch it from the next, and conditional writes on a key's `mod_revision`.

use crate::objects::{Objects, Slot, Stored};
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions,
    Identity, PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};
use sluice_config::FleetSource;
use std::time::Duration;

/// Keys read per request of a full read (etcd answers a large prefix in pages).
const PAGE: i64 = 1000;

/// A connection to the fleet's etcd, scoped to its prefix.
#[derive(Clone)]
pub struct Etcd {
    pub(crate) client: Client,
    prefix: String,
    timeout: Duration,
}

/// What a conditional write found.
#[derive(Debug)]
pub enum Write {
    /// Written at this revision; `created`: the key did not exist before.
    Done {
        /// The store's revision after the write (the object's new `mod_revision`).
        revision: i64,
        /// The key was new.
        created: bool,
    },
    /// The key's `mod_revision` is not the one expected (it is this one now; 0: absent).
    Conflict(i64),
}

impl Etcd {
    /// Connects (lazily: an unreachable etcd fails the first request, not this).
    pub async fn connect(source: &FleetSource) -> Result<Etcd, String> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(source.timeout)
            .with_timeout(source.timeout)
            .with_keep_alive(Duration::from_secs(10), source.timeout);
        if let Some((user, password)) = &source.user {
            opts = opts.with_user(user.clone(), password.clone());
        }
        let tls = source.ca_pem.is_some()
            || source.client_identity.is_some()
            || source.endpoints.iter().any(|e| e.starts_with("https://"));
        if tls {
            let mut t = TlsOptions::new();
            if let Some(ca) = &source.ca_pem {
                t = t.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &source.client_identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(t);
        }
        let client = tokio::time::timeout(
            source.timeout,
            Client::connect(&source.endpoints, Some(opts)),
        )
        .await
        .map_err(|_| format!("connecting to etcd {:?} timed out", source.endpoints))?
        .map_err(|e| format!("connecting to etcd {:?}: {e}", source.endpoints))?;
        Ok(Etcd {
            client,
            prefix: source.prefix.clone(),
            timeout: source.timeout,
        })
    }

    /// A plain connection (no TLS, no user) to `endpoints` (`host:port` or URLs): what the
    /// command line and tests use.
    pub async fn connect_to(endpoints: &str, prefix: &str) -> Result<Etcd, String> {
        let source = FleetSource {
            endpoints: endpoints
                .split(',')
                .map(|e| {
                    let e = e.trim();
                    if e.contains("://") {
                        e.to_owned()
                    } else {
                        format!("http://{e}")
                    }
                })
                .collect(),
            prefix: prefix.trim_end_matches('/').to_owned(),
            cache_file: None,
            ca_pem: None,
            client_identity: None,
            user: None,
            keyring: Vec::new(),
            ticket_key_rotation: Duration::from_secs(3600),
            timeout: Duration::from_secs(10),
        };
        Etcd::connect(&source).await
    }

    /// The prefix these keys live under.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) async fn timed<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, String> {
        tokio::time::timeout(self.timeout, f)
            .await
            .map_err(|_| format!("etcd {what}: no answer within {:?}", self.timeout))?
            .map_err(|e| format!("etcd {what}: {e}"))
    }

    /// Every key under the prefix, at one revision (paged).
    pub async fn load_all(&self) -> Result<Objects, String> {
        let dir = format!("{}/", self.prefix);
        let end = range_end(dir.as_bytes());
        let mut from = dir.into_bytes();
        let mut objects = Objects::default();
        loop {
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if objects.revision > 0 {
                opts = opts.with_revision(objects.revision);
            }
            let mut client = self.client.clone();
            let resp = self
                .timed("read", client.get(from.clone(), Some(opts)))
                .await?;
            if objects.revision == 0 {
                objects.revision = resp.header().map_or(0, |h| h.revision());
            }
            for kv in resp.kvs() {
                if let Some(slot) = kv.key_str().ok().and_then(|k| Slot::parse(&self.prefix, k)) {
                    objects
                        .slots
                        .insert(slot, Stored::from_bytes(kv.value(), kv.mod_revision()));
                }
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(objects),
            }
        }
    }

    /// Watches the prefix from `revision` on.
    pub async fn watch(&self, revision: i64) -> Result<WatchStream, String> {
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision)
            .with_progress_notify();
        let mut client = self.client.clone();
        self.timed(
            "watch",
            client.watch(format!("{}/", self.prefix), Some(opts)),
        )
        .await
    }

    /// Puts `value` at `slot` if its `mod_revision` is `expect` (0: absent; `None`: any).
    pub async fn put_if(
        &self,
        slot: &Slot,
        value: &serde_json::Value,
        expect: Option<i64>,
    ) -> Result<Write, String> {
        let key = slot.key(&self.prefix);
        let put = TxnOp::put(
            key.clone(),
            value.to_string(),
            Some(PutOptions::new().with_prev_key()),
        );
        self.conditional(&key, put, expect).await
    }

    /// Deletes `slot` if its `mod_revision` is `expect` (`None`: any).
    pub async fn delete_if(&self, slot: &Slot, expect: Option<i64>) -> Result<Write, String> {
        let key = slot.key(&self.prefix);
        let delete = TxnOp::delete(key.clone(), Some(DeleteOptions::new().with_prev_key()));
        self.conditional(&key, delete, expect).await
    }

    async fn conditional(
        &self,
        key: &str,
        op: TxnOp,
        expect: Option<i64>,
    ) -> Result<Write, String> {
        let compare: Vec<Compare> = expect
            .map(|rev| vec![Compare::mod_revision(key, CompareOp::Equal, rev)])
            .unwrap_or_default();
        let txn = Txn::new()
            .when(compare)
            .and_then(vec![op])
            .or_else(vec![TxnOp::get(key, None)]);
        let mut client = self.client.clone();
        let resp = self.timed("write", client.txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let responses = resp.op_responses();
        if !resp.succeeded() {
            let now = responses
                .iter()
                .find_map(|r| match r {
                    TxnOpResponse::Get(g) => {
                        Some(g.kvs().first().map_or(0, |kv| kv.mod_revision()))
                    }
                    _ => None,
                })
                .unwrap_or(0);
            return Ok(Write::Conflict(now));
        }
        let created = responses.iter().any(|r| match r {
            TxnOpResponse::Put(p) => p.prev_key().is_none(),
            TxnOpResponse::Delete(d) => d.deleted() == 0,
            _ => false,
        });
        Ok(Write::Done { revision, created })
    }

    /// Several puts in one transaction (`sluice config push`).
    pub async fn put_many(&self, items: &[(Slot, serde_json::Value)]) -> Result<i64, String> {
        let ops: Vec<TxnOp> = items
            .iter()
            .map(|(slot, v)| TxnOp::put(slot.key(&self.prefix), v.to_string(), None))
            .collect();
        let mut client = self.client.clone();
        let resp = self
            .timed("write", client.txn(Txn::new().and_then(ops)))
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Puts raw bytes at `key` under the prefix (tests: values that are not JSON).
    pub async fn put_raw(&self, key: &str, value: &[u8]) -> Result<i64, String> {
        let mut client = self.client.clone();
        let resp = self
            .timed(
                "write",
                client.put(format!("{}/{key}", self.prefix), value.to_vec(), None),
            )
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Compacts etcd's history up to `revision` (tests and the benchmark).
    pub async fn compact(&self, revision: i64) -> Result<(), String> {
        let mut client = self.client.clone();
        self.timed("compact", client.compact(revision, None))
            .await
            .map(|_| ())
    }
}

/// One change from a watch.
pub(crate) enum Change {
    Put(Slot, Stored),
    Delete(Slot),
}

/// The changes of one watch response under `prefix`.
pub(crate) fn changes(prefix: &str, resp: &etcd_client::WatchResponse) -> Vec<Change> {
    resp.events()
        .iter()
        .filter_map(|e| {
            let kv = e.kv()?;
            let slot = Slot::parse(prefix, kv.key_str().ok()?)?;
            Some(match e.event_type() {
                EventType::Put => {
                    Change::Put(slot, Stored::from_bytes(kv.value(), kv.mod_revision()))
                }
                EventType::Delete => Change::Delete(slot),
            })
        })
        .collect()
}

/// The end of the key range of everything that starts with `prefix`.
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
