//! `max_connections_per_client_id`: at most N open connections per client identifier to one
//! set of brokers; a newer connection closes the oldest, as a broker's session takeover does
//! (MQTT-3.1.4-3). Brokers already do this for the devices they hold, but two connections
//! with one identifier can reach two brokers (routed by user name, after a failover, or
//! through two gateways with different rings during a rollout), and a device stuck in a
//! reconnect loop holds every connection it opened until each times out.
//!
//! This gateway's connections are counted here and the oldest is closed at once. With
//! `max_connections_store = "redis"` the fleet counts them together too: each admission adds
//! `gateway/seq` to the sorted set `sluice:mqtt:{brokers}:{client id}`, scored by admission
//! time; a Lua script removes the members beyond the newest N and publishes each on
//! `sluice:mqtt:takeover:{gateway}`, where the gateway holding it listens and closes it.
//! Admission never waits for Redis: the exchanges run in order on a queue of their own, one
//! batch at a time on the rate limits' connection. While Redis is unreachable each gateway
//! still applies the cap to its own connections; admissions the fleet did not see are
//! counted (`unshared`).

use super::RedisStore;
use futures_util::StreamExt as _;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// KEYS[1] one identifier's set; ARGV the new member, the cap, the set's lifetime in ms and
/// the channels' prefix. Scores are µs of Redis's clock, kept strictly increasing so that
/// the newest admission is never the one removed. Returns how many were removed.
const ADMIT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) >= now then now = tonumber(top[2]) + 1 end
redis.call('ZADD', KEYS[1], now, ARGV[1])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[1], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1)
  for _, m in ipairs(old) do
    local gateway, seq = string.match(m, '^(.+)/(%d+)$')
    if gateway then redis.call('PUBLISH', ARGV[4] .. gateway, seq) end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return math.max(over, 0)
"#;

/// Where each gateway hears of its connections taken over elsewhere (its name follows).
const CHANNEL: &str = "sluice:mqtt:takeover:";

/// How long an identifier's set outlives its last admission. A member whose gateway died
/// without removing it stays until then, or until newer admissions push it out; it never
/// closes a live connection in its place, being older than any admitted after it.
const SET_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest a batch of exchanges may wait for Redis before Redis counts as failed.
const ANSWER: Duration = Duration::from_secs(2);

/// The most exchanges queued for Redis; beyond it admissions go unshared (counted).
const QUEUE: usize = 65_536;

/// The gateway's open connections per client identifier, and its part in the fleet's count.
#[derive(Debug)]
pub(crate) struct Takeovers {
    /// This process's name in the fleet's sets: random, so that an upgraded gateway's old
    /// process keeps closing its own connections while the new one admits.
    gateway: String,
    next: AtomicU64,
    open: Mutex<Open>,
    /// The Redis of `[rate_limit]`, replaced when a reload changes it.
    store: watch::Sender<Option<Arc<RedisStore>>>,
    queue: Mutex<Option<mpsc::Sender<Exchange>>>,
    /// Connections closed because a newer one took over, here or on another gateway.
    taken_over: AtomicU64,
    /// Of those, the ones another gateway's admission closed (through Redis).
    by_fleet: AtomicU64,
    /// Admissions under a shared cap that the fleet did not see (Redis unreachable, queue
    /// full): only this gateway's own connections counted against them.
    unshared: AtomicU64,
}

/// (the brokers' upstream, a client identifier).
type IdKey = (Box<str>, Box<str>);

#[derive(Debug, Default)]
struct Open {
    /// (brokers, client identifier) → its connections here, oldest first.
    by_id: HashMap<IdKey, VecDeque<(u64, CancellationToken)>>,
    /// Shared admissions by sequence number, for takeovers the fleet decides.
    shared: HashMap<u64, CancellationToken>,
}

/// One exchange with Redis, in admission order.
#[derive(Debug)]
enum Exchange {
    Admit {
        key: String,
        member: String,
        max: u32,
    },
    Leave {
        key: String,
        member: String,
    },
}

/// The counts `/status` and `/metrics` show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TakeoverCounts {
    /// Connections closed because a newer one with their client identifier took over.
    pub taken_over: u64,
    /// Of those, the ones another gateway's admission closed.
    pub by_fleet: u64,
    /// Admissions under a shared cap that the fleet could not count (Redis unreachable).
    pub unshared: u64,
}

/// An admitted connection's place in the count; leaving it (drop) frees the place.
#[derive(Debug)]
pub(crate) struct Session {
    takeovers: Arc<Takeovers>,
    key: IdKey,
    seq: u64,
    shared: bool,
    /// Cancelled when a newer connection takes over (a child of the connection's own force
    /// token, so that the relay watches one token for both).
    pub(crate) token: CancellationToken,
}

impl Takeovers {
    pub(crate) fn new() -> Arc<Takeovers> {
        // Unique enough among a fleet's processes: a randomly keyed hash of the process id
        // and the time.
        let id = {
            use std::hash::{BuildHasher as _, Hasher as _};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            h.finish()
        };
        Arc::new(Takeovers {
            gateway: format!("{id:016x}"),
            next: AtomicU64::new(1),
            open: Mutex::default(),
            store: watch::Sender::new(None),
            queue: Mutex::new(None),
            taken_over: AtomicU64::new(0),
            by_fleet: AtomicU64::new(0),
            unshared: AtomicU64::new(0),
        })
    }

    /// Uses `store` for shared caps from now on (at start and at each reload), when
    /// `snapshot` has one: the takeover listener subscribes at once, so that the first
    /// takeover aimed at this gateway is heard.
    pub(crate) fn use_store(
        self: &Arc<Self>,
        store: Option<Arc<RedisStore>>,
        snapshot: &sluice_config::Snapshot,
    ) {
        let shared = |m: &sluice_config::MqttProxy| {
            m.max_connections_per_client_id.is_some_and(|c| c.shared)
        };
        let listeners = snapshot.listeners.iter().any(|l| match &l.kind {
            sluice_config::ListenerKind::Mqtt(m) => shared(m),
            _ => false,
        });
        let routes = (snapshot.routes.iter()).any(|r| r.mqtt.as_deref().is_some_and(shared));
        let store = store.filter(|_| listeners || routes);
        let start = store.is_some();
        self.store.send_if_modified(|old| {
            let same = match (old.as_ref(), store.as_ref()) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            *old = store;
            !same
        });
        if start {
            self.start();
        }
    }

    pub(crate) fn counts(&self) -> TakeoverCounts {
        TakeoverCounts {
            taken_over: self.taken_over.load(Ordering::Relaxed),
            by_fleet: self.by_fleet.load(Ordering::Relaxed),
            unshared: self.unshared.load(Ordering::Relaxed),
        }
    }

    /// Counts a new connection of `client_id` to `brokers`, closing the oldest beyond
    /// `cap` here at once (and, shared, beyond it in the fleet once Redis has it). `force`:
    /// the connection's own force token, the session's token's parent.
    pub(crate) fn admit(
        self: &Arc<Self>,
        brokers: &str,
        client_id: &str,
        cap: sluice_config::ClientIdCap,
        force: &CancellationToken,
    ) -> Session {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let token = force.child_token();
        let key = (Box::from(brokers), Box::from(client_id));
        let mut closed = Vec::new();
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let held = open.by_id.entry(key.clone()).or_default();
            held.push_back((seq, token.clone()));
            while held.len() > cap.max as usize {
                if let Some((_, t)) = held.pop_front() {
                    closed.push(t);
                }
            }
            if cap.shared {
                open.shared.insert(seq, token.clone());
            }
        }
        for t in closed {
            self.take_over(&t, false);
        }
        if cap.shared {
            let admit = Exchange::Admit {
                key: redis_key(brokers, client_id),
                member: self.member(seq),
                max: cap.max,
            };
            if !self.send(admit) {
                self.unshared.fetch_add(1, Ordering::Relaxed);
            }
        }
        Session {
            takeovers: self.clone(),
            key,
            seq,
            shared: cap.shared,
            token,
        }
    }

    /// Closes a connection a newer one took over (once: a connection closed by the gateway
    /// itself is not counted). Counted first, so that whoever sees it closed sees it counted.
    fn take_over(&self, token: &CancellationToken, by_fleet: bool) {
        if token.is_cancelled() {
            return;
        }
        self.taken_over.fetch_add(1, Ordering::Relaxed);
        if by_fleet {
            self.by_fleet.fetch_add(1, Ordering::Relaxed);
        }
        token.cancel();
    }

    /// A takeover another gateway's admission decided (a message on this gateway's channel).
    fn taken_over_by_fleet(&self, payload: &[u8]) {
        let Some(seq) = std::str::from_utf8(payload)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            return;
        };
        let token = self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shared
            .get(&seq)
            .cloned();
        if let Some(t) = token {
            self.take_over(&t, true);
        }
    }

    /// Queues an exchange with Redis; false when there is no Redis to share with or the
    /// queue is full.
    fn send(&self, exchange: Exchange) -> bool {
        if self.store.borrow().is_none() {
            return false;
        }
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue
            .as_ref()
            .is_some_and(|tx| tx.try_send(exchange).is_ok())
    }

    /// Starts the queue's worker and the takeover listener, once.
    fn start(self: &Arc<Self>) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.is_some() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        rt.spawn(exchange_all(Arc::downgrade(self), rx));
        rt.spawn(listen(
            Arc::downgrade(self),
            self.store.subscribe(),
            format!("{CHANNEL}{}", self.gateway),
        ));
        *queue = Some(tx);
    }

    /// A connection's name in the fleet's sets: this gateway's, then its sequence number.
    fn member(&self, seq: u64) -> String {
        format!("{}/{seq}", self.gateway)
    }

    fn leave(&self, session: &Session) {
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(held) = open.by_id.get_mut(&session.key) {
                held.retain(|(s, _)| *s != session.seq);
                if held.is_empty() {
                    open.by_id.remove(&session.key);
                }
            }
            if session.shared {
                open.shared.remove(&session.seq);
            }
        }
        if session.shared {
            let _ = self.send(Exchange::Leave {
                key: redis_key(&session.key.0, &session.key.1),
                member: self.member(session.seq),
            });
        }
    }

    /// How many of `brokers`' connections with `client_id` this gateway holds.
    #[cfg(test)]
    fn held(&self, brokers: &str, client_id: &str) -> usize {
        let open = self.open.lock().unwrap();
        open.by_id
            .get(&(Box::from(brokers), Box::from(client_id)))
            .map_or(0, VecDeque::len)
    }
}

impl Session {
    /// Whether a newer connection took this one's place (rather than the gateway closing it).
    pub(crate) fn taken_over(&self, force: &CancellationToken) -> bool {
        self.token.is_cancelled() && !force.is_cancelled()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.takeovers.leave(self);
    }
}

fn redis_key(brokers: &str, client_id: &str) -> String {
    format!("sluice:mqtt:{brokers}:{client_id}")
}

/// Runs the queued exchanges in order, each batch at once on the store's multiplexed
/// connection (sent in queue order, answered in that order).
async fn exchange_all(takeovers: Weak<Takeovers>, mut rx: mpsc::Receiver<Exchange>) {
    let script = redis::Script::new(ADMIT);
    let lifetime = SET_LIFETIME.as_millis() as u64;
    let mut batch = Vec::with_capacity(256);
    while rx.recv_many(&mut batch, 256).await > 0 {
        let Some(t) = takeovers.upgrade() else { return };
        let store = t.store.borrow().clone();
        let conn = store.as_ref().and_then(RedisStore::connection);
        let (Some(store), Some(conn)) = (store, conn) else {
            t.unshared
                .fetch_add(batch_admits(&batch), Ordering::Relaxed);
            batch.clear();
            continue;
        };
        let admits = batch_admits(&batch);
        let calls = batch.drain(..).map(|e| {
            let mut conn = conn.clone();
            let script = &script;
            async move {
                let admit = matches!(e, Exchange::Admit { .. });
                let r = match e {
                    Exchange::Admit { key, member, max } => {
                        let mut call = script.key(key);
                        call.arg(member).arg(max).arg(lifetime).arg(CHANNEL);
                        call.invoke_async::<i64>(&mut conn).await.map(drop)
                    }
                    Exchange::Leave { key, member } => redis::cmd("ZREM")
                        .arg(key)
                        .arg(member)
                        .query_async::<i64>(&mut conn)
                        .await
                        .map(drop),
                };
                (admit, r)
            }
        });
        let results = tokio::time::timeout(ANSWER, futures_util::future::join_all(calls)).await;
        let Ok(results) = results else {
            t.unshared.fetch_add(admits, Ordering::Relaxed);
            store.failed("no answer to the MQTT takeovers' exchanges within 2 s");
            continue;
        };
        let mut failed = None;
        for (admit, r) in results {
            if let Err(e) = r {
                if admit {
                    t.unshared.fetch_add(1, Ordering::Relaxed);
                }
                failed = Some(e);
            }
        }
        if let Some(e) = failed {
            store.failed(&e.to_string());
        }
    }
}

fn batch_admits(batch: &[Exchange]) -> u64 {
    batch
        .iter()
        .filter(|e| matches!(e, Exchange::Admit { .. }))
        .count() as u64
}

/// Listens on `channel` for this gateway's connections that the fleet took over, on a
/// connection of its own, made again after a failure or when the store changes. Takeovers
/// published while it is not subscribed are lost (those connections stay until they end).
async fn listen(
    takeovers: Weak<Takeovers>,
    mut store: watch::Receiver<Option<Arc<RedisStore>>>,
    channel: String,
) {
    loop {
        let current = store.borrow_and_update().clone();
        let Some(redis) = current else {
            if store.changed().await.is_err() {
                return;
            }
            continue;
        };
        let subscribed = tokio::time::timeout(Duration::from_secs(2), async {
            let mut pubsub = redis.pubsub().await?;
            pubsub.subscribe(&channel).await?;
            redis::RedisResult::Ok(pubsub)
        })
        .await;
        let Ok(Ok(pubsub)) = subscribed else {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                r = store.changed() => if r.is_err() { return },
            }
            continue;
        };
        let mut messages = pubsub.into_on_message();
        loop {
            tokio::select! {
                m = messages.next() => match m {
                    Some(m) => {
                        let Some(t) = takeovers.upgrade() else { return };
                        t.taken_over_by_fleet(m.get_payload_bytes());
                    }
                    None => break,
                },
                r = store.changed() => {
                    if r.is_err() {
                        return;
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::ClientIdCap;

    const LOCAL: ClientIdCap = ClientIdCap {
        max: 1,
        shared: false,
    };
    const SHARED: ClientIdCap = ClientIdCap {
        max: 1,
        shared: true,
    };

    #[test]
    fn a_newer_connection_closes_the_oldest_beyond_the_cap() {
        let t = Takeovers::new();
        let brokers = "brokers";
        let force = CancellationToken::new();
        let first = t.admit(brokers, "dev-1", LOCAL, &force);
        let other = t.admit(brokers, "dev-2", LOCAL, &force);
        assert!(!first.token.is_cancelled());
        let second = t.admit(brokers, "dev-1", LOCAL, &force);
        assert!(first.taken_over(&force), "the older dev-1 is closed");
        assert!(!second.token.is_cancelled() && !other.token.is_cancelled());
        assert_eq!(t.held("brokers", "dev-1"), 1);
        assert_eq!(t.counts().taken_over, 1);
        drop(first);
        assert_eq!(t.held("brokers", "dev-1"), 1, "the newer one still counts");
        drop(second);
        assert_eq!(t.held("brokers", "dev-1"), 0);
    }

    #[test]
    fn the_cap_counts_per_broker_set_and_allows_n() {
        let t = Takeovers::new();
        let (a, b) = ("a", "b");
        let force = CancellationToken::new();
        let two = ClientIdCap {
            max: 2,
            shared: false,
        };
        let s1 = t.admit(a, "dev", two, &force);
        let s2 = t.admit(a, "dev", two, &force);
        let elsewhere = t.admit(b, "dev", two, &force);
        assert!(
            ![&s1, &s2, &elsewhere]
                .iter()
                .any(|s| s.token.is_cancelled())
        );
        let s3 = t.admit(a, "dev", two, &force);
        assert!(s1.taken_over(&force));
        assert!(!s2.token.is_cancelled() && !s3.token.is_cancelled());
        assert!(!elsewhere.token.is_cancelled());
    }

    #[test]
    fn a_gateway_shutdown_is_not_a_takeover() {
        let t = Takeovers::new();
        let brokers = "brokers";
        let force = CancellationToken::new();
        let s = t.admit(brokers, "dev-1", LOCAL, &force);
        force.cancel();
        assert!(s.token.is_cancelled(), "the relay sees the gateway's close");
        assert!(!s.taken_over(&force));
        let _newer = t.admit(brokers, "dev-1", LOCAL, &CancellationToken::new());
        assert_eq!(t.counts().taken_over, 0, "already closed: not counted");
    }

    #[test]
    fn a_shared_cap_without_redis_applies_here_and_is_counted_unshared() {
        let t = Takeovers::new();
        let brokers = "brokers";
        let force = CancellationToken::new();
        let first = t.admit(brokers, "dev-1", SHARED, &force);
        let _second = t.admit(brokers, "dev-1", SHARED, &force);
        assert!(first.taken_over(&force));
        assert_eq!(t.counts().unshared, 2);
    }

    #[test]
    fn the_fleets_message_closes_the_named_connection_once() {
        let t = Takeovers::new();
        let brokers = "brokers";
        let force = CancellationToken::new();
        let s = t.admit(brokers, "dev-1", SHARED, &force);
        t.taken_over_by_fleet(b"999");
        t.taken_over_by_fleet(b"not a number");
        assert!(
            !s.token.is_cancelled(),
            "another sequence number closes nothing"
        );
        t.taken_over_by_fleet(s.seq.to_string().as_bytes());
        t.taken_over_by_fleet(s.seq.to_string().as_bytes());
        assert!(s.taken_over(&force));
        assert_eq!(t.counts().by_fleet, 1);
        assert_eq!(t.counts().taken_over, 1);
    }
}
