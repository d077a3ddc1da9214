//! The seam for a configuration whose shared part lives elsewhere (fleet mode, etcd).
//!
//! In fleet mode the local file keeps what belongs to one machine and a [`SharedObjects`]
//! store supplies the fleet's routes, upstreams, certificates and settings. The controller
//! still serializes every change: a reload of the local file and a change from the store both
//! compose under its lock, so one can never overwrite the other with an older view.

use crate::edit::{EditError, Kind};
use crate::outcome::ReloadError;
use serde_json::Value;
use sluice_config::Snapshot;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future of the store's write operations.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, EditError>> + Send + 'a>>;

/// What a store write returns: the object as stored, whether it was created, its `ETag`.
#[derive(Debug, Clone)]
pub struct StoredObject {
    /// The object as stored (JSON, the TOML table's keys).
    pub object: Value,
    /// Created (201) rather than replaced (200).
    pub created: bool,
    /// The object's version, quoted, for `ETag` (etcd's `mod_revision`).
    pub etag: String,
}

/// The fleet's shared objects, as the controller and the admin API see them.
pub trait SharedObjects: Send + Sync {
    /// The serving configuration: the local file's text (`Some`: a reload read it again;
    /// `None`: the text composed last) with the shared objects. Blocking: it may parse
    /// certificates. An object that is invalid alone is left out and reported by the store;
    /// an error is returned only when the local part is wrong.
    /// Takes the store by `Arc`: the work may run on another thread (at idle priority).
    fn compose(self: Arc<Self>, local_text: Option<String>) -> Result<Snapshot, ReloadError>;
    /// `GET /api/v1/config`.
    fn config(&self) -> Result<Value, EditError>;
    /// `GET /api/v1/{kind}/{name}`: the object and its `ETag`.
    fn object(&self, kind: Kind, name: &str) -> Result<(Value, String), EditError>;
    /// `PUT`: validates, then writes to the store if `if_match` (an `ETag`) still holds.
    fn put<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
        body: Value,
        if_match: Option<&'a str>,
    ) -> StoreFuture<'a, StoredObject>;
    /// `DELETE`; returns the store's revision after it.
    fn delete<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
        if_match: Option<&'a str>,
    ) -> StoreFuture<'a, String>;
    /// Purges `host` and `path` (or every URL under `path` with `prefix`), as of `at`, from
    /// the cache of every gateway that shares these objects.
    fn purge_cache<'a>(
        &'a self,
        host: &'a str,
        path: &'a str,
        prefix: bool,
        at: std::time::SystemTime,
    ) -> StoreFuture<'a, ()>;
    /// The gateways that share these objects and announced their admin listener:
    /// `(name, admin URL)` each (this one included).
    fn members(&self) -> StoreFuture<'_, Vec<(String, String)>>;
    /// The `fleet` object of `/status`.
    fn status(&self) -> Value;
    /// The store's families in `/metrics`.
    fn metrics(&self, out: &mut String);
}

/// [`SharedObjects::compose`] on a blocking thread.
pub(crate) async fn compose_blocking(
    store: Arc<dyn SharedObjects>,
    local_text: Option<String>,
) -> Result<Arc<Snapshot>, ReloadError> {
    tokio::task::spawn_blocking(move || store.compose(local_text))
        .await
        .map_err(|e| ReloadError::Apply(format!("composing the configuration failed: {e}")))?
        .map(Arc::new)
}
