//! The schedule of the fleet's session ticket keys: every gateway checks it, the first to
//! write wins (a transaction on the key's `mod_revision`), the others see the new keys
//! through their watch. See `tickets` for the keys' order.

use crate::etcd::{Etcd, Write};
use crate::keyring::Keyring;
use crate::objects::{Slot, Stored};
use sluice_control::Controller;
use std::sync::Weak;
use std::time::{Duration, SystemTime};

/// What the rotation reads from the fleet (implemented by `sync::Fleet`; a trait so that
/// this module does not depend on the one that starts it).
pub(crate) trait Rotated: Send + Sync {
    /// `ticket_key_rotation`.
    fn rotation(&self) -> Duration;
    /// The gateways' keyring.
    fn keyring(&self) -> Keyring;
    /// The key prefix in etcd.
    fn prefix(&self) -> &str;
    /// The ticket keys as stored now, if any.
    fn ticket_keys(&self) -> Option<Stored>;
    /// A connected etcd client.
    fn client(&self) -> impl std::future::Future<Output = Result<Etcd, String>> + Send;
}

/// Creates the fleet's ticket keys if etcd has none, and rotates them when due, until the
/// gateway stops.
pub(crate) async fn run<F: Rotated>(fleet: Weak<F>, controller: Weak<Controller>) {
    loop {
        let Some(f) = fleet.upgrade() else { return };
        if controller.upgrade().is_none() {
            return;
        }
        let rotation = f.rotation();
        // Often enough to rotate close to the schedule, seldom enough to cost nothing.
        let check = (rotation / 4).clamp(Duration::from_millis(500), Duration::from_secs(60));
        if let Err(e) = step(&*f, rotation).await {
            tracing::warn!(error = %e, "session ticket key rotation did not run; retrying");
        }
        drop(f);
        tokio::time::sleep(check).await;
    }
}

async fn step<F: Rotated>(f: &F, rotation: Duration) -> Result<(), String> {
    let keyring = f.keyring();
    let context = Slot::TicketKeys.key(f.prefix());
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let current = f.ticket_keys();
    let created = current.is_none();
    let (value, expect) = match current {
        None => (crate::tickets::initial(&keyring, &context, now)?, 0),
        Some(stored) => {
            let value = stored.json().map_err(|e| format!("{context}: {e}"))?;
            match crate::tickets::rotated(
                value,
                &keyring,
                &context,
                now,
                rotation.as_secs().max(1),
            )? {
                Some(next) => (next, stored.mod_revision),
                None => return Ok(()),
            }
        }
    };
    let etcd = f.client().await?;
    match etcd.put_if(&Slot::TicketKeys, &value, Some(expect)).await? {
        Write::Done { revision, .. } => {
            let did = if created { "created" } else { "rotated" };
            tracing::info!(revision, "{did} the fleet's session ticket keys");
        }
        // Another gateway rotated first: its keys arrive through the watch.
        Write::Conflict(_) => {}
    }
    Ok(())
}
