//! Keeps the gateway's sockets and timers served while one worker thread is held by a task
//! that does not return.
//!
//! Tokio's worker threads take turns at its I/O driver: a thread with nothing to run waits
//! in `epoll_wait` if no other does, and otherwise sleeps until it is woken. A thread that
//! comes out of the driver with events runs the tasks they woke without waking another
//! thread to take the driver. If one of those tasks then never returns (a Lua call held
//! inside a C function that no budget interrupts, `docs/lua.md`), no thread waits in the
//! driver and the sleeping ones are never woken: every connection of the gateway stalls,
//! not only the one whose request is stuck (tokio-rs/tokio#4730, seen here with a
//! backtracking Lua pattern on a 2-CPU machine). A task spawned from outside the runtime
//! wakes a sleeping worker thread, which then takes the driver. So a thread spawns an empty
//! task every [`EVERY`], one at a time: when the runtime is healthy it runs at once, and
//! when a stuck thread had the driver, the stall lasts at most that long.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the runtime is given a task from outside.
pub(crate) const EVERY: Duration = Duration::from_millis(50);

/// Starts the thread that keeps `runtime`'s driver taken; it ends with the process.
pub(crate) fn watch(runtime: tokio::runtime::Handle) -> std::io::Result<()> {
    let ran = Arc::new(AtomicBool::new(true));
    std::thread::Builder::new()
        .name("sluice-liveness".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EVERY);
                // One at a time: while the last has not run (every thread busy), another
                // would only queue behind it.
                if ran.swap(false, Ordering::AcqRel) {
                    let ran = ran.clone();
                    drop(runtime.spawn(async move { ran.store(true, Ordering::Release) }));
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::mpsc;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    /// A runtime of two worker threads whose one task blocks its thread for good, right
    /// after a timer woke it on the thread that had the driver; `watch` or not. Then a
    /// server on the same runtime is asked for an answer: whether one came.
    fn answered_with_one_thread_stuck(watched: bool) -> bool {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        if watched {
            super::watch(runtime.handle().clone()).expect("thread");
        }
        let (release, held) = mpsc::channel::<()>();
        let (ready, listening) = mpsc::channel();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ready.send(listener.local_addr().unwrap()).unwrap();
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move { drop(s.write_all(b"ok").await) });
            }
        });
        let at = listening.recv().expect("listening");
        // Let both threads go idle, then wake the blocker from the driver's thread.
        std::thread::sleep(Duration::from_millis(200));
        runtime.spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Held until the test ends: a task stuck in a call that does not return.
            let _ = held.recv();
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut answer = String::new();
        let asked = std::net::TcpStream::connect(at).and_then(|mut s| {
            // Nothing sent: the server closes with nothing unread, a FIN and not a reset.
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.read_to_string(&mut answer)
        });
        let _ = release.send(());
        runtime.shutdown_background();
        asked.is_ok() && answer == "ok"
    }

    #[test]
    fn a_thread_stuck_after_the_driver_woke_it_does_not_stall_the_others() {
        assert!(answered_with_one_thread_stuck(true));
    }
}
