//! Sluice's fleet mode: many gateways, one configuration in etcd.
//!
//! A gateway whose file says `[config] source = "etcd"` keeps what belongs to its machine in
//! that file (listeners, admin, offload engines, logging) and takes what the fleet shares from
//! etcd, one JSON object per key under the prefix (see [`objects`]). It reads the prefix at one
//! revision, serves, then watches from the next revision and applies each change
//! incrementally ([`sync`], `compose`); it keeps serving its last good configuration while
//! etcd is away and can start from `cache_file` without it. The admin API writes to etcd
//! ([`store`]), so any gateway changes the fleet. Private keys stored in etcd are sealed with
//! the gateways' keyring ([`keyring`]); the fleet's session ticket keys rotate in etcd
//! (`tickets`, `rotation`). Cache purges go to every gateway through etcd ([`purge`]).
//!
//! Dependencies point one way: this crate knows `sluice-config` (to validate) and
//! `sluice-control` (to apply through the controller), nothing of serving.

pub mod acme;
mod cache;
mod compose;
pub mod etcd;
pub mod keyring;
pub mod members;
mod migrate;
pub mod objects;
pub mod purge;
mod rotation;
pub mod store;
pub mod sync;
mod tickets;

pub use etcd::Etcd;
pub use keyring::Keyring;
pub use migrate::{Pushed, pull, push};
pub use sync::Fleet;
