//! How a listener's connections end at shutdown or when a reload removes it: given time to
//! finish, then told to close, then left to the process's exit.

use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long connections that were told to close get to do so.
const FORCED_CLOSE: Duration = Duration::from_secs(5);

/// Waits up to `within` for `tasks` to end, then cancels `force` and waits up to
/// [`FORCED_CLOSE`] for them to close; whether they ended in time. One whose task is held by
/// a call that never returns (a Lua call stuck in a C function, docs/lua.md) cannot close:
/// it is left to the process's exit.
pub(super) async fn drain(tasks: TaskTracker, force: CancellationToken, within: Duration) -> bool {
    if tokio::time::timeout(within, tasks.wait()).await.is_ok() {
        return true;
    }
    force.cancel();
    if tokio::time::timeout(FORCED_CLOSE, tasks.wait())
        .await
        .is_err()
    {
        eprintln!(
            "sluice: {} connections did not close when told to (a task held by a call that does not return); left to the exit",
            tasks.len()
        );
    }
    false
}
