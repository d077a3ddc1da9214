//! Keeping a gateway's configuration in step with etcd.
//!
//! Start: read the prefix at one revision, compose, serve (or, with etcd unreachable, start
//! from `cache_file`). Then watch from the next revision and apply each batch of changes
//! through the controller, which composes incrementally (see `compose`). A watch that etcd
//! cancels because its revision was compacted away triggers a full read again. A lost etcd
//! leaves the last good configuration serving, says so in `/status` and `/metrics`, and is
//! retried with exponential back-off (100 ms to 5 s, with jitter).

use crate::compose::Composer;
use crate::etcd::{Change, Etcd};
use crate::keyring::Keyring;
use crate::objects::{Objects, Slot};
use sluice_config::{FleetSource, Snapshot};
use sluice_control::{Controller, Kind, ReloadError};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

/// A gateway's link to its fleet: the objects, their composition, the etcd connection.
pub struct Fleet {
    pub(crate) source: FleetSource,
    pub(crate) state: Mutex<State>,
    /// Held while composing (tens of milliseconds at 40,000 routes, at idle priority): apart
    /// from `state`, so that the watch, `/status` and `/metrics` never wait for it.
    pub(crate) composer: Mutex<Composer>,
    pub(crate) keyring: Keyring,
    /// The revision the gateway serves (the objects' revision at the last good apply).
    pub(crate) applied: tokio::sync::watch::Sender<i64>,
    pub(crate) etcd: Mutex<Option<Etcd>>,
    pub(crate) counters: Counters,
    /// Wakes the cache writer.
    cache_dirty: Arc<tokio::sync::Notify>,
}

/// What the fleet counts, for `/metrics`.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) changes: AtomicU64,
    pub(crate) resyncs: AtomicU64,
    pub(crate) etcd_errors: AtomicU64,
}

pub(crate) struct State {
    /// Shared with a composition in progress; a change copies it only if one is.
    pub(crate) objects: Arc<Objects>,
    /// What the last composition left out, by key, with the errors.
    pub(crate) invalid: Arc<std::collections::BTreeMap<String, Vec<serde_json::Value>>>,
    /// The ticket keys' revision the last composition wrote.
    pub(crate) ticket_revision: Option<i64>,
    /// Routes, upstreams and certificates at the last composition (counted there, off the
    /// event loop: `/status` and `/metrics` read these instead of walking 40,000 keys).
    pub(crate) counts: [usize; 3],
    pub(crate) link: Link,
    /// `"etcd"` or `"cache_file"`.
    pub(crate) started_from: &'static str,
}

/// The state of the connection to etcd, for `/status`.
pub(crate) struct Link {
    pub(crate) up: bool,
    pub(crate) since: SystemTime,
    pub(crate) last_error: Option<String>,
}

impl Fleet {
    /// Reads the fleet's objects: from etcd, or from `cache_file` when etcd cannot be reached.
    /// Fails when neither has them.
    pub async fn start(
        source: FleetSource,
        file: &Path,
        local_text: String,
    ) -> Result<Arc<Fleet>, String> {
        let base_dir = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let composer = Composer::new(
            &source.prefix,
            &file.display().to_string(),
            base_dir,
            Keyring::new(source.keyring.clone()),
            local_text,
        )
        .map_err(|e| format!("creating the private directory for the fleet's certificates: {e}"))?;
        let read = async {
            let etcd = Etcd::connect(&source).await?;
            let objects = etcd.load_all().await?;
            Ok::<_, String>((etcd, objects))
        }
        .await;
        let (etcd, objects, started_from, link) = match read {
            Ok((etcd, objects)) => {
                tracing::info!(
                    revision = objects.revision,
                    objects = objects.slots.len(),
                    "read the fleet's configuration from etcd"
                );
                (
                    Some(etcd),
                    objects,
                    "etcd",
                    Link {
                        up: true,
                        since: SystemTime::now(),
                        last_error: None,
                    },
                )
            }
            Err(e) => {
                let Some(cache) = &source.cache_file else {
                    return Err(format!(
                        "{e}; and no [config] cache_file to start from: start etcd, or set cache_file so that a gateway can start while etcd is down"
                    ));
                };
                let objects = crate::cache::read(cache, &source.prefix)
                    .map_err(|c| format!("{e}; and the cache file cannot be used either: {c}"))?;
                tracing::warn!(error = %e, cache = %cache.display(), revision = objects.revision, "etcd is unreachable; starting from the cache file, and retrying etcd in the background");
                (
                    None,
                    objects,
                    "cache_file",
                    Link {
                        up: false,
                        since: SystemTime::now(),
                        last_error: Some(e),
                    },
                )
            }
        };
        let revision = objects.revision;
        Ok(Arc::new(Fleet {
            keyring: Keyring::new(source.keyring.clone()),
            source,
            state: Mutex::new(State {
                objects: Arc::new(objects),
                invalid: Arc::default(),
                ticket_revision: None,
                counts: [0; 3],
                link,
                started_from,
            }),
            composer: Mutex::new(composer),
            applied: tokio::sync::watch::channel(revision).0,
            etcd: Mutex::new(etcd),
            counters: Counters::default(),
            cache_dirty: Arc::new(tokio::sync::Notify::new()),
        }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration to start with.
    pub fn initial(&self) -> Result<Snapshot, ReloadError> {
        self.compose_now(None)
    }

    /// Composes the current objects (with `local_text` when a reload read the file again),
    /// and keeps what the composition left out for `/status`.
    pub(crate) fn compose_now(&self, local_text: Option<String>) -> Result<Snapshot, ReloadError> {
        let objects = self.lock().objects.clone();
        let mut composer = self.composer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(text) = local_text {
            composer.set_local(text);
        }
        let result = composer.compose(&objects);
        let invalid = Arc::new(composer.invalid());
        let tickets = composer.ticket_revision();
        drop(composer);
        let counts = [Kind::Route, Kind::Upstream, Kind::Certificate].map(|k| objects.count(k));
        let mut st = self.lock();
        st.invalid = invalid;
        st.ticket_revision = tickets;
        st.counts = counts;
        result
    }

    /// The etcd connection, made on first use.
    pub(crate) async fn client(&self) -> Result<Etcd, String> {
        if let Some(c) = self.etcd.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let c = Etcd::connect(&self.source).await?;
        *self.etcd.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        Ok(c)
    }

    /// Starts syncing with etcd, rotating the fleet's ticket keys, and writing the cache
    /// file, for as long as `controller` lives. `tickets_changed` is called when the fleet's
    /// ticket keys changed on disk (listeners re-read them).
    pub fn spawn(
        self: &Arc<Self>,
        controller: Weak<Controller>,
        tickets_changed: Arc<dyn Fn() + Send + Sync>,
    ) {
        let started_from_cache = self.lock().started_from == "cache_file";
        tokio::spawn(
            self.clone()
                .sync(controller.clone(), started_from_cache, tickets_changed),
        );
        tokio::spawn(crate::cache::writer(
            Arc::downgrade(self),
            self.cache_dirty.clone(),
        ));
        if !self.source.keyring.is_empty() {
            tokio::spawn(crate::rotation::run(Arc::downgrade(self), controller));
        } else {
            tracing::info!(
                "no [config] keyring: session ticket keys stay per gateway (a client resumes only on the gateway that issued its ticket)"
            );
        }
        // The start's configuration is good: keep it for a start without etcd.
        self.cache_dirty.notify_one();
    }

    async fn sync(
        self: Arc<Self>,
        controller: Weak<Controller>,
        mut full: bool,
        tickets_changed: Arc<dyn Fn() + Send + Sync>,
    ) {
        let mut backoff = Duration::from_millis(100);
        let mut tickets_seen = self.lock().ticket_revision;
        loop {
            let result = self
                .session(
                    &controller,
                    &mut full,
                    &mut backoff,
                    &mut tickets_seen,
                    &*tickets_changed,
                )
                .await;
            let Err(e) = result else { return };
            if controller.upgrade().is_none() {
                return;
            }
            self.counters.etcd_errors.fetch_add(1, Ordering::Relaxed);
            self.link_down(&e);
            // Jittered (half to all of the back-off): a fleet that lost etcd together does not come
            // back in step.
            let wait = backoff.mul_f64(0.5 + jitter() * 0.5);
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// One connected stretch: a full read if needed, then the watch until it fails.
    async fn session(
        &self,
        controller: &Weak<Controller>,
        full: &mut bool,
        backoff: &mut Duration,
        tickets_seen: &mut Option<i64>,
        tickets_changed: &(dyn Fn() + Send + Sync),
    ) -> Result<(), String> {
        let etcd = self.client().await?;
        if *full {
            let objects = etcd.load_all().await?;
            tracing::info!(
                revision = objects.revision,
                objects = objects.slots.len(),
                "read the fleet's configuration from etcd (full)"
            );
            self.lock().objects = Arc::new(objects);
            *full = false;
            self.apply(controller, tickets_seen, tickets_changed).await;
        }
        let from = self.lock().objects.revision + 1;
        let mut watch = etcd.watch(from).await?;
        self.link_up();
        *backoff = Duration::from_millis(100);
        loop {
            let Some(resp) = watch
                .message()
                .await
                .map_err(|e| format!("etcd watch: {e}"))?
            else {
                return Err("etcd ended the watch".into());
            };
            if controller.upgrade().is_none() {
                return Ok(());
            }
            if resp.canceled() || resp.compact_revision() > 0 {
                *full = true;
                self.counters.resyncs.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    compacted = resp.compact_revision(),
                    reason = resp.cancel_reason(),
                    "the watch's revision was compacted away; reading the whole configuration again"
                );
                return Err(format!(
                    "watch cancelled (compacted at {}); resyncing",
                    resp.compact_revision()
                ));
            }
            let changes = crate::etcd::changes(etcd.prefix(), &resp);
            // What this response proves the gateway has seen: its events' revisions. Not the
            // header's: a watch's `created` answer carries etcd's current revision even when the
            // next message cancels the watch as compacted, and a cache written in between would
            // claim a revision whose changes it never held.
            let revision = resp
                .events()
                .iter()
                .filter_map(|e| e.kv())
                .map(|kv| kv.mod_revision())
                .max()
                .unwrap_or(0);
            {
                let mut st = self.lock();
                let objects = Arc::make_mut(&mut st.objects);
                for c in &changes {
                    match c {
                        Change::Put(slot, stored) => {
                            objects.slots.insert(slot.clone(), stored.clone());
                        }
                        Change::Delete(slot) => {
                            objects.slots.remove(slot);
                        }
                    }
                }
                if revision > objects.revision {
                    objects.revision = revision;
                }
            }
            if !changes.is_empty() {
                self.counters.changes.fetch_add(1, Ordering::Relaxed);
                self.apply(controller, tickets_seen, tickets_changed).await;
            }
        }
    }

    /// Composes and applies the current objects; a refusal leaves the old configuration.
    async fn apply(
        &self,
        controller: &Weak<Controller>,
        tickets_seen: &mut Option<i64>,
        tickets_changed: &(dyn Fn() + Send + Sync),
    ) {
        let Some(controller) = controller.upgrade() else {
            return;
        };
        let revision = self.lock().objects.revision;
        // The controller logs and keeps a refusal for /status.
        if controller.refresh().await.is_ok() {
            self.applied.send_replace(revision);
            self.cache_dirty.notify_one();
        }
        let tickets = self.lock().ticket_revision;
        if tickets != *tickets_seen {
            *tickets_seen = tickets;
            tickets_changed();
        }
    }

    fn link_up(&self) {
        let mut st = self.lock();
        if !st.link.up {
            tracing::info!("etcd is reachable again; changes flow");
            st.link = Link {
                up: true,
                since: SystemTime::now(),
                last_error: None,
            };
        }
    }

    fn link_down(&self, e: &str) {
        let mut st = self.lock();
        if st.link.up {
            tracing::error!(error = %e, "lost etcd; serving the last good configuration and retrying");
            st.link.since = SystemTime::now();
        }
        st.link.up = false;
        st.link.last_error = Some(e.to_owned());
    }
}

/// A number in [0, 1) from the clock (enough to spread retries apart).
fn jitter() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

/// Unix seconds.
pub(crate) fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The slot of a kind and name (for the store's operations).
pub(crate) fn slot(kind: sluice_control::Kind, name: &str) -> Slot {
    Slot::Object(kind, name.to_owned())
}

impl crate::cache::Cached for Fleet {
    fn cache_target(&self) -> Option<(std::path::PathBuf, String)> {
        let path = self.source.cache_file.clone()?;
        Some((path, self.source.prefix.clone()))
    }

    fn objects(&self) -> Arc<Objects> {
        self.lock().objects.clone()
    }
}

impl crate::rotation::Rotated for Fleet {
    fn rotation(&self) -> Duration {
        self.source.ticket_key_rotation
    }

    fn keyring(&self) -> Keyring {
        Keyring::new(self.source.keyring.clone())
    }

    fn prefix(&self) -> &str {
        &self.source.prefix
    }

    fn ticket_keys(&self) -> Option<crate::objects::Stored> {
        self.lock().objects.slots.get(&Slot::TicketKeys).cloned()
    }

    async fn client(&self) -> Result<Etcd, String> {
        Fleet::client(self).await
    }
}
