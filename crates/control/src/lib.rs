//! Sluice's control plane: where the configuration comes from and how a change reaches the
//! running gateway.
//!
//! Every path ends the same way: load and validate the whole configuration (the same three
//! stages as `sluice check`), then hand the immutable [`Snapshot`] to the data plane, which
//! swaps it in atomically and keeps what did not change. A configuration with any error is
//! never applied; the running one keeps serving and the errors are kept for `/status`.
//!
//! Dependencies point one way: this crate knows `sluice-config` and nothing of serving. The
//! data plane is reached through the [`Target`] trait, which the binary implements with the
//! gateway; the admin listener calls [`Controller`] and only speaks HTTP itself.

mod controller;
mod edit;
mod edits;
mod outcome;
mod shared;

pub use controller::{Controller, Failure, Source, Status, Target, TargetFuture};
pub use edit::{EditError, Kind, locate};
pub use edits::{Written, check_name};
pub use outcome::{ReloadError, ReloadOutcome};
pub use shared::{SharedObjects, StoreFuture, StoredObject};

#[cfg(test)]
mod tests;
