//! Reload orchestration: read the source, validate, apply, remember the outcome.

use crate::outcome::{ReloadError, ReloadOutcome};
use crate::shared::{SharedObjects, compose_blocking};
use sluice_config::{CertCache, LoadError, Snapshot, load_file_cached, load_str_cached};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// What [`Target::apply`] returns.
pub type TargetFuture<'a> = Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;

/// The running data plane, as the control plane sees it.
pub trait Target: Send + Sync {
    /// Serves `snapshot` from now on, or fails and changes nothing. `Ok` carries a one-line
    /// summary of what changed (for the log and the API); `Err` says why it could not be
    /// applied (a port in use, an engine that would not start).
    fn apply(&self, snapshot: Arc<Snapshot>) -> TargetFuture<'_>;
}

/// Where the configuration is read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A TOML file, read again on every reload.
    File(PathBuf),
    /// Configuration text held in memory (the embedded default, filled in at start): a
    /// reload reads the same text again. Relative paths start at `base_dir`.
    Text {
        /// The text.
        text: String,
        /// How errors name it.
        name: String,
        /// Where relative paths start.
        base_dir: PathBuf,
        /// Where the first admin API edit saves the configuration; from then on that file is
        /// the source (and `sluice run` resumes from it). `None`: edits are refused.
        autosave: Option<PathBuf>,
    },
}

impl Source {
    /// How the source is named in logs and `/status`.
    pub fn describe(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Text { name, .. } => name.clone(),
        }
    }
}

/// The last reload attempt that failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// When.
    pub at: SystemTime,
    /// Why.
    pub error: ReloadError,
}

/// What `/status` says about the configuration.
#[derive(Debug, Clone)]
pub struct Status {
    /// Where it comes from.
    pub source: String,
    /// The revision serving.
    pub revision: String,
    /// When that revision was loaded.
    pub loaded_at: SystemTime,
    /// The last failed attempt, if any since start.
    pub last_failure: Option<Failure>,
    /// Reloads applied since start (an unchanged configuration counts too).
    pub reloads_ok: u64,
    /// Reloads refused since start.
    pub reloads_failed: u64,
}

/// Owns the configuration source and serializes every change to the running gateway.
pub struct Controller {
    /// Changes once: the embedded default becomes its autosave file at the first edit.
    pub(crate) source: Mutex<Source>,
    /// SHA-256 of the text the running configuration was loaded from: an edit refuses a
    /// file changed by hand since (412), rather than apply what nobody reloaded.
    pub(crate) loaded_text: Mutex<Option<u64>>,
    target: Arc<dyn Target>,
    certs: Arc<CertCache>,
    /// One change at a time: a reload or an edit reads, validates and applies under it.
    pub(crate) serial: tokio::sync::Mutex<()>,
    status: Mutex<Status>,
    /// Fleet mode: where the shared objects come from.
    pub(crate) shared: std::sync::OnceLock<Arc<dyn SharedObjects>>,
    ok: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// Loads `source` for the first start, filling `certs`.
    pub fn load(source: &Source, certs: &CertCache) -> Result<Snapshot, LoadError> {
        match source {
            Source::File(path) => load_file_cached(path, certs),
            Source::Text {
                text,
                name,
                base_dir,
                ..
            } => load_str_cached(text, name, base_dir, certs),
        }
    }

    /// A controller for a gateway already serving `current`, loaded from `source` with
    /// `certs`.
    pub fn new(
        source: Source,
        target: Arc<dyn Target>,
        certs: Arc<CertCache>,
        current: &Snapshot,
    ) -> Self {
        Controller {
            status: Mutex::new(Status {
                source: source.describe(),
                revision: current.revision.clone(),
                loaded_at: SystemTime::now(),
                last_failure: None,
                reloads_ok: 0,
                reloads_failed: 0,
            }),
            loaded_text: Mutex::new(source_text(&source).ok().map(|t| text_hash(&t))),
            source: Mutex::new(source),
            target,
            certs,
            serial: tokio::sync::Mutex::new(()),
            shared: std::sync::OnceLock::new(),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Where the configuration comes from.
    pub fn source(&self) -> Source {
        self.source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the source again, validates it and applies it. Any error leaves the running
    /// configuration as it is; the error is logged, counted and kept for [`Controller::status`].
    pub async fn reload(&self) -> Result<ReloadOutcome, ReloadError> {
        let _serial = self.serial.lock().await;
        let result = self.reload_locked().await;
        self.record(&result);
        result
    }

    /// Counts an attempt to change the running configuration, logs it, and keeps it for
    /// `/status`.
    pub(crate) fn record(&self, result: &Result<ReloadOutcome, ReloadError>) {
        let mut status = self.lock_status();
        match result {
            Ok(outcome) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                if outcome.revision != status.revision {
                    status.revision = outcome.revision.clone();
                    status.loaded_at = SystemTime::now();
                }
                tracing::info!(revision = %outcome.revision, previous = %outcome.previous, changes = %outcome.summary, "configuration reloaded");
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                status.last_failure = Some(Failure {
                    at: SystemTime::now(),
                    error: e.clone(),
                });
                let details: Vec<String> = e.errors().iter().map(|c| c.to_string()).collect();
                tracing::error!(error = %e, "configuration reload failed\n{}", details.join("\n"));
            }
        }
        status.source = self.source().describe();
        status.reloads_ok = self.ok.load(Ordering::Relaxed);
        status.reloads_failed = self.failed.load(Ordering::Relaxed);
    }

    async fn reload_locked(&self) -> Result<ReloadOutcome, ReloadError> {
        let source = self.source();
        let text = source_text(&source).map_err(ReloadError::Read)?;
        let (name, base_dir) = naming(&source);
        let snapshot = match self.shared() {
            Some(store) => compose_blocking(store.clone(), Some(text.clone())).await?,
            None => self.validate(text.clone(), name, base_dir).await?,
        };
        let outcome = self.apply(snapshot).await?;
        *self.loaded_text.lock().unwrap_or_else(|e| e.into_inner()) = Some(text_hash(&text));
        Ok(outcome)
    }

    /// Loads `text` with the certificate cache, on a blocking thread (it reads files and may
    /// parse keys).
    pub(crate) async fn validate(
        &self,
        text: String,
        name: String,
        base_dir: PathBuf,
    ) -> Result<Arc<Snapshot>, ReloadError> {
        let certs = self.certs.clone();
        let loaded =
            tokio::task::spawn_blocking(move || load_str_cached(&text, &name, &base_dir, &certs))
                .await
                .map_err(|e| ReloadError::Apply(format!("the loader failed: {e}")))?;
        match loaded {
            Ok(s) => Ok(Arc::new(s)),
            Err(LoadError::Invalid(errors)) => Err(ReloadError::Invalid(errors)),
            Err(e) => Err(ReloadError::Read(e.to_string())),
        }
    }

    pub(crate) async fn apply(
        &self,
        snapshot: Arc<Snapshot>,
    ) -> Result<ReloadOutcome, ReloadError> {
        let previous = self.lock_status().revision.clone();
        let revision = snapshot.revision.clone();
        let summary = self
            .target
            .apply(snapshot)
            .await
            .map_err(ReloadError::Apply)?;
        Ok(ReloadOutcome {
            revision,
            previous,
            summary,
        })
    }

    /// The configuration's state for `/status`.
    pub fn status(&self) -> Status {
        self.lock_status().clone()
    }

    pub(crate) fn lock_status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The source's current text.
pub(crate) fn source_text(source: &Source) -> Result<String, String> {
    match source {
        Source::File(path) => std::fs::read_to_string(path).map_err(|e| {
            format!(
                "cannot read configuration file {}: {e}; check the path and its permissions",
                path.display()
            )
        }),
        Source::Text { text, .. } => Ok(text.clone()),
    }
}

/// How errors name the source, and where its relative paths start.
pub(crate) fn naming(source: &Source) -> (String, PathBuf) {
    match source {
        Source::File(path) => (
            path.display().to_string(),
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."))
                .to_path_buf(),
        ),
        Source::Text { name, base_dir, .. } => (name.clone(), base_dir.clone()),
    }
}

/// Tells texts apart (not a security boundary: it detects edits made by hand).
pub(crate) fn text_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Fleet mode: the store of the shared objects.
impl Controller {
    /// Makes `store` the source of the shared objects from now on (fleet mode).
    pub fn set_shared(&self, store: Arc<dyn SharedObjects>) {
        let _ = self.shared.set(store);
    }

    /// The shared objects' store, in fleet mode.
    pub fn shared(&self) -> Option<&Arc<dyn SharedObjects>> {
        self.shared.get()
    }

    /// Composes the configuration again from the store's current objects and applies it: what
    /// the store calls after a change arrived. Serialized with reloads and edits.
    pub async fn refresh(&self) -> Result<ReloadOutcome, ReloadError> {
        let _serial = self.serial.lock().await;
        let result = async {
            let store = self
                .shared()
                .cloned()
                .ok_or_else(|| ReloadError::Read("no shared store in this gateway".into()))?;
            let snapshot = compose_blocking(store, None).await?;
            self.apply(snapshot).await
        }
        .await;
        self.record(&result);
        result
    }
}
