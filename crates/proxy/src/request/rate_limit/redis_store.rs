//! The shared store of `store = "redis"` limits: one GCRA script per check on one
//! multiplexed connection, reconnected in the background. The arithmetic of the limit
//! itself lives in the parent module; this is only the client.

use sluice_config::RateLimitStore;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// GCRA in Redis, for up to `want` requests at once: KEYS[1] the key; ARGV interval and
/// tolerance in µs (fractions allowed: rates above a million a second; times count from
/// 2023 so that a double keeps them to a fraction of a µs), and `want`. Grants as many as fit now (at least one, or none) and
/// returns {granted, wait before the first in µs}, or {0, retry after in µs}.
const SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end
if tat - now > tau then return {0, tat - now - tau} end
local n = math.min(want, math.floor((tau - (tat - now)) / interval) + 1)
local new = tat + n * interval
redis.call('SET', KEYS[1], string.format('%.3f', new), 'PX', math.floor((new - now) / 1000) + 1)
return {n, tat - now}
"#;

/// The gateway's connection to the shared store.
pub(crate) struct RedisStore {
    url: String,
    client: redis::Client,
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
    connecting: AtomicBool,
    up: AtomicBool,
    timeout: Duration,
    script: redis::Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .field("up", &self.up)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Starts connecting in the background; checks fall back until it is up.
    pub(crate) fn start(config: &RateLimitStore) -> Option<Arc<RedisStore>> {
        let url = config.redis.clone()?;
        let client = match redis::Client::open(url.as_str()) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(%url, error = %e, "the rate limits' Redis URL is not usable; shared limits run on the local fallback");
                return None;
            }
        };
        let store = Arc::new(RedisStore {
            url,
            client,
            conn: Mutex::new(None),
            connecting: AtomicBool::new(false),
            up: AtomicBool::new(false),
            timeout: config.redis_timeout,
            script: redis::Script::new(SCRIPT),
        });
        store.reconnect();
        Some(store)
    }

    /// Whether the last exchange with Redis worked.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn reconnect(self: &Arc<Self>) {
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.connecting.store(false, Ordering::Release);
            return;
        };
        let store = Arc::downgrade(self);
        rt.spawn(async move {
            let mut wait = Duration::from_millis(100);
            loop {
                let Some(s) = store.upgrade() else { return };
                let attempt = tokio::time::timeout(
                    Duration::from_secs(1),
                    s.client.get_multiplexed_async_connection(),
                )
                .await;
                if let Ok(Ok(conn)) = attempt {
                    *s.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
                    s.up.store(true, Ordering::Relaxed);
                    s.connecting.store(false, Ordering::Release);
                    tracing::info!(url = %s.url, "rate limits: Redis is reachable; shared limits apply");
                    return;
                }
                drop(s);
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        });
    }

    fn down(self: &Arc<Self>, why: &str) {
        *self.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if self.up.swap(false, Ordering::Relaxed) {
            tracing::warn!(url = %self.url, error = why, "rate limits: Redis failed; limiting locally at rate / expected_gateways until it is back");
        }
        self.reconnect();
    }

    /// One GCRA check in Redis for up to `want` requests: Some(Ok((granted, wait µs))) /
    /// Some(Err(retry µs)), None when Redis could not answer in time.
    pub(super) async fn check(
        self: &Arc<Self>,
        key: &str,
        interval_us: f64,
        tau_us: f64,
        want: u32,
    ) -> Option<Result<(u32, u64), u64>> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(mut conn) = conn else {
            self.reconnect();
            return None;
        };
        let mut call = self.script.key(key);
        call.arg(interval_us).arg(tau_us).arg(want);
        match tokio::time::timeout(self.timeout, call.invoke_async::<(i64, i64)>(&mut conn)).await {
            Ok(Ok((n, v))) => Some(if n >= 1 {
                Ok((n as u32, v.max(0) as u64))
            } else {
                Err(v.max(0) as u64)
            }),
            Ok(Err(e)) => {
                self.down(&e.to_string());
                None
            }
            // Slow, not necessarily down: this request decides locally; the connection stays.
            Err(_) => None,
        }
    }
}
