//! The view of the call in progress, lent to the API for the call: a pointer to the
//! caller's `&mut View` in a thread-local slot, set for the length of a call ([`lend`]) and
//! taken out of the slot while an API function works on it ([`with_view`], [`try_with`]).
//!
//! A state runs one call at a time, on the thread that holds its gate, and a call runs to
//! its end or its next wait without leaving that thread, so the slot is the call's while it
//! runs. Lending a pointer rather than moving the view in and out spares a copy of the view
//! (about half a kilobyte) twice per call, and a thread-local spares the API a lookup.

#![expect(unsafe_code, reason = "a scoped thread-local holding a borrowed view")]

use crate::view::{Outside, View};
use std::cell::Cell;
use std::ptr;

thread_local! {
    /// The view lent to the call running on this thread, or null.
    static CURRENT: Cell<*mut View> = const { Cell::new(ptr::null_mut()) };
}

/// Puts a pointer back in the slot when dropped (also when unwinding).
struct Restore(*mut View);

impl Drop for Restore {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// Runs `f` (a call into Lua) with `view` lent to the API.
pub(crate) fn lend<R>(view: &mut View, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(CURRENT.with(|c| c.replace(ptr::from_mut(view))));
    f()
}

/// Runs `f` on the view of the call in progress, if there is one (the raw C functions'
/// way in: `None` sends them down the slow path, which raises the error).
pub(crate) fn try_with<R>(f: impl FnOnce(&mut View) -> R) -> Option<R> {
    let p = CURRENT.with(|c| c.replace(ptr::null_mut()));
    if p.is_null() {
        return None;
    }
    let _restore = Restore(p);
    // SAFETY: `p` came from `lend`'s `&mut View`, whose frame is below this one on this
    // thread's stack (the API runs inside the call `lend` wraps), so the view is alive and
    // not otherwise used while `lend` runs; the slot is emptied while `f` holds the
    // reference, so a nested `try_with` finds nothing instead of a second `&mut`.
    Some(f(unsafe { &mut *p }))
}

/// Runs `f` on the view of the call in progress; an error when there is none (a timer or
/// `init` code calling a request's API).
pub(crate) fn with_view<R>(f: impl FnOnce(&mut View) -> mlua::Result<R>) -> mlua::Result<R> {
    try_with(f).unwrap_or_else(|| {
        Err(mlua::Error::runtime(
            "API disabled in the current context (no request: init or a timer)",
        ))
    })
}

/// `ngx.get_phase()`: the phase of the call in progress.
pub(crate) fn phase_name(lua: &mlua::Lua) -> &'static str {
    try_with(|v| v.phase.name())
        .unwrap_or_else(|| lua.app_data_ref::<Outside>().map_or("init", |o| o.0.get()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Facts;
    use sluice_config::LuaPhase;

    fn view() -> View {
        View::new(
            LuaPhase::Access,
            Facts {
                route: "r".into(),
                client: "127.0.0.1:1".parse().unwrap(),
                local: "127.0.0.1:2".parse().unwrap(),
                scheme: "http",
                request_id: None,
                request_uri: None,
                arrived: std::time::Instant::now(),
            },
        )
    }

    #[test]
    fn a_lent_view_is_changed_in_place_and_only_while_lent() {
        let mut v = view();
        assert!(try_with(|_| ()).is_none(), "nothing lent");
        lend(&mut v, || {
            with_view(|v| {
                v.status = 204;
                // Nested: the view is taken out of the slot, never lent twice.
                assert!(try_with(|_| ()).is_none());
                Ok(())
            })
            .unwrap();
            assert_eq!(try_with(|v| v.status), Some(204), "back in the slot");
        });
        assert_eq!(v.status, 204);
        assert!(
            try_with(|_| ()).is_none(),
            "the slot is empty after the call"
        );
        // A lend inside a lend (a state's call from a call: not made, but safe) restores.
        let mut w = view();
        lend(&mut v, || {
            lend(&mut w, || {
                with_view(|w| {
                    w.status = 500;
                    Ok(())
                })
                .unwrap()
            });
            assert_eq!(try_with(|v| v.status), Some(204));
        });
        assert_eq!(w.status, 500);
        // A panic inside a lend leaves the slot as it was.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lend(&mut v, || panic!("boom"))
        }));
        assert!(r.is_err());
        assert!(try_with(|_| ()).is_none());
    }
}
