//! The shared store of `store = "redis"` limits: one GCRA script per check on one
//! multiplexed connection, reconnected in the background. The arithmetic of the limit
//! itself lives in the parent module; this is only the client.

use sluice_config::RateLimitStore;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// The URL as `/status` shows it: any password replaced by `***`.
    shown: String,
    /// What it was started for (a reload keeps it while this stays).
    config: RateLimitStore,
    client: Connect,
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
    connecting: AtomicBool,
    up: AtomicBool,
    /// Times Redis became unreachable (or was at start): each began a stretch of local
    /// fallback.
    outages: AtomicU64,
    timeout: Duration,
    script: redis::Script,
}

/// How a connection to Redis is made.
enum Connect {
    /// `redis://`: the crate's own TCP connection.
    Plain(redis::Client),
    /// `rediss://`: TCP, then TLS with BoringSSL (the stack the rest of Sluice uses, with
    /// Redis's certificate verified against `redis_ca` or the system's roots), then the
    /// crate's protocol over that stream.
    Tls {
        host: String,
        port: u16,
        connector: boring::ssl::SslConnector,
        info: redis::RedisConnectionInfo,
    },
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.shown)
            .field("up", &self.up)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Starts connecting in the background; checks fall back until it is up.
    pub(crate) fn start(config: &RateLimitStore) -> Option<Arc<RedisStore>> {
        let url = config.redis.clone()?;
        let shown = redact(&url);
        let client = match Connect::new(&url, config.redis_tls.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(url = %shown, error = %e, "the rate limits' Redis URL is not usable; shared limits run on the local fallback");
                return None;
            }
        };
        let store = Arc::new(RedisStore {
            url,
            shown,
            config: config.clone(),
            client,
            conn: Mutex::new(None),
            connecting: AtomicBool::new(false),
            up: AtomicBool::new(false),
            outages: AtomicU64::new(0),
            timeout: config.redis_timeout,
            script: redis::Script::new(SCRIPT),
        });
        store.reconnect();
        Some(store)
    }

    /// Whether this store is the one `config` asks for (same URL and TLS settings).
    pub(crate) fn serves(&self, config: &RateLimitStore) -> bool {
        config.redis.as_deref() == Some(self.url.as_str())
            && config.redis_tls == self.config.redis_tls
    }

    /// Whether it reaches Redis over TLS.
    pub(crate) fn tls(&self) -> bool {
        matches!(self.client, Connect::Tls { .. })
    }

    /// Times Redis became unreachable, the first failed connection at start included.
    pub(crate) fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// Whether the last exchange with Redis worked.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// The URL, any password replaced by `***`.
    pub(crate) fn shown_url(&self) -> &str {
        &self.shown
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
            let mut first = true;
            loop {
                let Some(s) = store.upgrade() else { return };
                let attempt =
                    tokio::time::timeout(Duration::from_secs(1), s.client.connect()).await;
                match attempt {
                    Ok(Ok(conn)) => {
                        *s.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
                        s.up.store(true, Ordering::Relaxed);
                        s.connecting.store(false, Ordering::Release);
                        tracing::info!(url = %s.shown, tls = s.tls(), "rate limits: Redis is reachable; shared limits apply");
                        return;
                    }
                    // Logged once per outage: `down` logged the one that ended a
                    // connection; a gateway that never reached Redis logs its first try.
                    failed if first && s.outages() == 0 => {
                        let why = match failed {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer within 1 s".to_owned(),
                        };
                        s.outages.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(url = %s.shown, error = %why, "rate limits: cannot reach Redis; limiting locally at rate / expected_gateways until it answers (retrying)");
                    }
                    _ => {}
                }
                first = false;
                drop(s);
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        });
    }

    fn down(self: &Arc<Self>, why: &str) {
        *self.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if self.up.swap(false, Ordering::Relaxed) {
            self.outages.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(url = %self.shown, error = why, "rate limits: Redis failed; limiting locally at rate / expected_gateways until it is back");
        }
        self.reconnect();
    }

    /// The connection, for another user of the store (`takeover`); `None` while Redis is
    /// unreachable (a reconnection is under way).
    pub(crate) fn connection(self: &Arc<Self>) -> Option<redis::aio::MultiplexedConnection> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if conn.is_none() {
            self.reconnect();
        }
        conn
    }

    /// Another user's exchange failed: the connection is dropped and made again.
    pub(crate) fn failed(self: &Arc<Self>, why: &str) {
        self.down(why);
    }

    /// A connection of its own for subscriptions (RESP2 pub/sub), made as the shared one is.
    pub(crate) async fn pubsub(&self) -> redis::RedisResult<redis::aio::PubSub> {
        match &self.client {
            Connect::Plain(client) => client.get_async_pubsub().await,
            Connect::Tls {
                host,
                port,
                connector,
                info,
            } => redis::aio::PubSub::new(info, tls_stream(host, *port, connector).await?).await,
        }
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

impl Connect {
    fn new(url: &str, tls: Option<&sluice_config::RedisTls>) -> Result<Connect, String> {
        let Some(tls) = tls else {
            return redis::Client::open(url)
                .map(Connect::Plain)
                .map_err(|e| e.to_string());
        };
        let parsed = redis::parse_redis_url(url).ok_or("not a Redis URL")?;
        let host = parsed.host_str().ok_or("no host")?;
        // `[::1]` in a URL; the address and the name checked in the certificate are `::1`.
        let host = host.trim_matches(['[', ']']).to_owned();
        let port = parsed.port().unwrap_or(6379);
        // The same settings over a plain URL: the crate, built without TLS of its own, reads
        // the password, user and database from it.
        let plain = format!("redis{}", &url["rediss".len()..]);
        let info = redis::Client::open(plain.as_str())
            .map_err(|e| e.to_string())?
            .get_connection_info()
            .redis_settings()
            .clone();
        let connector = connector(tls).map_err(|e| format!("TLS settings: {e}"))?;
        Ok(Connect::Tls {
            host,
            port,
            connector,
            info,
        })
    }

    async fn connect(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        match self {
            Connect::Plain(client) => client.get_multiplexed_async_connection().await,
            Connect::Tls {
                host,
                port,
                connector,
                info,
            } => {
                let (conn, driver) = redis::aio::MultiplexedConnection::new_with_config(
                    info,
                    tls_stream(host, *port, connector).await?,
                    redis::AsyncConnectionConfig::new(),
                )
                .await?;
                tokio::spawn(driver);
                Ok(conn)
            }
        }
    }
}

/// `rediss://`: a TCP connection to `host` with TLS over it, Redis's certificate verified.
async fn tls_stream(
    host: &str,
    port: u16,
    connector: &boring::ssl::SslConnector,
) -> redis::RedisResult<tokio_boring::SslStream<tokio::net::TcpStream>> {
    let io = |e: String| redis::RedisError::from(std::io::Error::other(e));
    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
    let _ = tcp.set_nodelay(true);
    let config = connector.configure().map_err(|e| io(e.to_string()))?;
    // Verifies the certificate's chain and that it names `host` (an IP address against its
    // IP entries).
    tokio_boring::connect(config, host, tcp)
        .await
        .map_err(|e| io(format!("TLS handshake with Redis: {e}")))
}

/// A TLS client for Redis: peer verification on, TLS 1.2 at least, the client certificate
/// when one is configured.
fn connector(
    tls: &sluice_config::RedisTls,
) -> Result<boring::ssl::SslConnector, boring::error::ErrorStack> {
    use boring::ssl::{SslConnector, SslMethod, SslVersion};
    let mut b = SslConnector::builder(SslMethod::tls())?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    if tls.ca.is_empty() {
        b.set_default_verify_paths()?;
    } else {
        for ca in &tls.ca {
            b.cert_store_mut().add_cert(ca.clone())?;
        }
    }
    if let Some((chain, key)) = &tls.client {
        b.set_certificate(&chain[0])?;
        for c in &chain[1..] {
            b.add_extra_chain_cert(c.clone())?;
        }
        b.set_private_key(key)?;
        b.check_private_key()?;
    }
    Ok(b.build())
}

/// `url` with its password (if any) replaced by `***`, for logs and `/status`.
fn redact(url: &str) -> String {
    match redis::parse_redis_url(url) {
        Some(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Some(_) => url.to_owned(),
        None => "(not a URL)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs_or_status() {
        assert_eq!(
            redact("rediss://:s3cret@redis.internal:6380/2"),
            "rediss://:***@redis.internal:6380/2"
        );
        assert_eq!(
            redact("redis://user:pw@127.0.0.1:6379/"),
            "redis://user:***@127.0.0.1:6379/"
        );
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }
}
