//! The service manager's side of `sluice run`: systemd's readiness protocol (sd_notify(3)),
//! for a unit with `Type=notify` (packaging/sluice.service). Without `NOTIFY_SOCKET` in the
//! environment every call is a no-op, so a gateway run by hand or by another supervisor
//! behaves as before.
//!
//! A binary upgrade under systemd: the new process is started by the old one inside the
//! service's cgroup; once it serves it says `MAINPID=<its pid>` and `READY=1` (the unit needs
//! `NotifyAccess=all` for a process other than the main one to be heard), so that systemd
//! follows it and does not take the old process's exit for the service's end.

use sd_notify::NotifyState;

/// Sends `states`; a failure is logged (a manager that went away must not stop a gateway).
fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "could not notify the service manager (NOTIFY_SOCKET)");
    }
}

/// The gateway serves: `READY=1`, and after an upgrade `MAINPID=` this process.
pub(crate) fn ready(after_upgrade: bool, status: &str) {
    let pid = std::process::id();
    let mut states = vec![NotifyState::Ready, NotifyState::Status(status)];
    if after_upgrade {
        states.push(NotifyState::MainPid(pid));
    }
    send(&states);
}

/// A reload starts: `RELOADING=1` with the monotonic time systemd wants beside it.
pub(crate) fn reloading() {
    let mut states = vec![NotifyState::Reloading];
    if let Ok(now) = NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    send(&states);
}

/// A reload ended, applied or refused (the old configuration serves): `READY=1` again.
pub(crate) fn reloaded(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// The gateway drains and stops.
pub(crate) fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}
