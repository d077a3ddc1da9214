//! TLS handshakes as a class of work of their own, below requests on established
//! connections.
//!
//! Under a storm of new RSA connections, requests on connections already open used to wait
//! behind handshake work on the event loop: the private-key operation (even offloaded, its
//! pool thread shares the core and holds it for its time slice) and the handshake's own
//! steps (key exchange, HKDF, record set-up, 0.1-0.3 ms each). Measured on one core, keep-alive
//! p99 went from 0.6 ms idle to 7-8 ms (31x in the worst run); a cap on handshakes in
//! progress alone got it to 4-5 ms, a lower-priority pool alone made it worse (starved jobs
//! fell back onto the event loop). HAProxy runs handshakes as "heavy" tasklets with a
//! budget of their own per loop turn for the same reason.
//!
//! Here the whole handshake (the TLS state machine and every private-key job it starts)
//! runs on a runtime of its own whose threads the kernel schedules below the serving ones.
//! By default (`share_percent = 1`) they sit 19 nice levels below (weight 15 against 1024):
//! a serving thread that wakes preempts them almost at once, they run on every cycle
//! established traffic leaves, so a storm with little else to do runs at full speed, and they
//! keep about 1.4% of a contended core, so that new connections still make progress when
//! something else saturates the host. `SCHED_IDLE` (`share_percent = 0`) measured the same
//! p99 on one core with established traffic at 1,000 req/s (0.54-0.60 ms under an RSA storm,
//! 0.23 idle) but gives no share at all: during a CI run that compiled beside the benchmark,
//! its handshakes stalled for minutes. A larger share costs p99: at nice +10
//! (`share_percent = 10`) 1.99 ms, because EEVDF lets a running task of that weight finish
//! more of its slice before a waking one preempts it.
//! The connection's socket moves to the handshake runtime's reactor for the handshake and
//! back after it ([`Homed`], two `epoll_ctl(2)` each way): left on the serving reactor, each
//! readiness event crossed threads (the serving thread woke the handshake thread), which
//! cost an ECDSA handshake 22 µs more system time (134 against 112 µs, `bench/run`).
//!
//! Handing a handshake off costs too: the socket's two moves, a wake-up of a handshake thread
//! and one back, on a core the serving thread shares. While handshakes are rare that is
//! pure cost: on the site mix (100 new connections a second beside 3,300 requests) handing
//! every one off spent 106 µs of gateway CPU per request against 97 with all of them on the
//! event loop, and its p99 was worse (4.5 ms against 3.9). So each handshake is placed by
//! how many are in progress when it starts ([`HandshakeScheduler::hand_off`]): on the event
//! loop while it is alone, handed off once `2 x CPUs` (at least 4) are in progress, and kept
//! handed off until it is alone again (hysteresis), as the seeds' QAT deployments poll their
//! cards heuristically by load. A storm fills the count within its first accept batch.
//!
//! A bounded number of handshakes are in progress at once: the accept loop of a TLS listener
//! takes a permit before it accepts, so a storm larger than that waits in the kernel's listen
//! backlog, not in the gateway's memory; a handshake still unfinished after the listener's
//! `header_read_timeout` is dropped and counted as expired.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Where TLS handshakes run, and how many at once.
#[derive(Debug)]
pub struct HandshakeScheduler {
    /// The handshake threads; `None` when `isolate = false` (handshakes on the event loop).
    runtime: Option<tokio::runtime::Runtime>,
    permits: Arc<Semaphore>,
    limit: usize,
    priority: Priority,
    expired: AtomicU64,
    /// Whether handshakes are being handed off now (see [`HandshakeScheduler::hand_off`]).
    handing_off: AtomicBool,
    /// In progress at which handshakes start being handed off.
    hand_off_at: usize,
    /// Handshakes placed on the handshake threads, and on the event loop.
    handed_off: AtomicU64,
    kept_on_loop: AtomicU64,
}

/// How the handshake threads sit below the serving ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// `SCHED_IDLE`: only cycles the serving threads leave (`share_percent = 0`).
    Idle,
    /// This many nice levels below the serving threads: the kernel keeps them about the
    /// configured share of a contended core.
    Nice(i32),
}

impl Priority {
    /// `"idle"` or `"nice+N"`, as `/status` shows it.
    pub fn describe(self) -> String {
        match self {
            Priority::Idle => "idle".to_owned(),
            Priority::Nice(n) => format!("nice+{n}"),
        }
    }
}

/// A place among the handshakes in progress; given back when dropped.
pub(crate) type HandshakePermit = OwnedSemaphorePermit;

/// The handshake scheduler's figures for `/metrics` and `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeStats {
    /// Handshakes in progress now.
    pub in_progress: usize,
    /// The most at once.
    pub limit: usize,
    /// Handshakes dropped because they were not finished within the listener's
    /// `header_read_timeout`.
    pub expired: u64,
    /// How the handshake threads sit below the serving ones; `None` when handshakes run on
    /// the event loop.
    pub priority: Option<Priority>,
    /// Handshakes run on the handshake threads.
    pub handed_off: u64,
    /// Handshakes run on the event loop (all of them when not isolated; else those that
    /// started alone while few were in progress).
    pub kept_on_loop: u64,
}

impl HandshakeScheduler {
    /// Starts the handshake threads `config` asks for (one per CPU this process may use).
    pub fn start(config: &sluice_config::Handshakes) -> std::io::Result<Arc<Self>> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let priority = match config.share_percent {
            0 => Priority::Idle,
            p => Priority::Nice(nice_for_share(p)),
        };
        let runtime = if config.isolate {
            Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(cpus)
                    .thread_name("sluice-handshake")
                    .on_thread_start(move || lower_priority(priority))
                    .enable_all()
                    .build()?,
            )
        } else {
            None
        };
        let limit = config.max_in_progress.unwrap_or(128 * cpus);
        Ok(Arc::new(HandshakeScheduler {
            runtime,
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            priority,
            expired: AtomicU64::new(0),
            handing_off: AtomicBool::new(false),
            hand_off_at: (2 * cpus).max(4),
            handed_off: AtomicU64::new(0),
            kept_on_loop: AtomicU64::new(0),
        }))
    }

    /// Where the handshake starting now runs: on the handshake threads (`true`) or on the
    /// caller's event loop. Not isolated: always the loop. Isolated: on the loop while it is
    /// the only one in progress, handed off from `hand_off_at` in progress until one is
    /// alone again. Call it holding the handshake's permit (which it counts). Counted.
    pub(crate) fn hand_off(&self) -> bool {
        let off = self.runtime.is_some() && {
            let in_progress = self.limit - self.permits.available_permits();
            let was = self.handing_off.load(Ordering::Relaxed);
            let now = if was {
                in_progress > 1
            } else {
                in_progress >= self.hand_off_at
            };
            if now != was {
                self.handing_off.store(now, Ordering::Relaxed);
            }
            now
        };
        let count = if off {
            &self.handed_off
        } else {
            &self.kept_on_loop
        };
        count.fetch_add(1, Ordering::Relaxed);
        off
    }

    /// Waits until there is a place among the handshakes in progress, without taking it (the
    /// accept loop calls it before it accepts, so that a storm waits in the listen backlog).
    pub(crate) async fn room(&self) {
        drop(self.permit().await);
    }

    /// Takes a place among the handshakes in progress, waiting for one.
    pub(crate) async fn permit(&self) -> HandshakePermit {
        self.permits
            .clone()
            .acquire_owned()
            .await
            .expect("the handshake semaphore is never closed")
    }

    /// Runs `handshake` on the handshake threads when `off` ([`Self::hand_off`]; here when
    /// not, or when handshakes are not isolated) and returns what it returned; `None` when
    /// the scheduler is shutting down. Dropping the returned future abandons the handshake.
    pub(crate) async fn run<F>(&self, handshake: F, off: bool) -> Option<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Some(rt) = self.runtime.as_ref().filter(|_| off) else {
            return Some(handshake.await);
        };
        let mut task = AbortOnDrop(rt.spawn(handshake));
        (&mut task.0).await.ok()
    }

    /// Whether handshakes run on threads of their own (else on the caller's).
    pub(crate) fn isolated(&self) -> bool {
        self.runtime.is_some()
    }

    /// Counts a handshake dropped for taking longer than its deadline.
    pub(crate) fn expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }

    /// Figures for `/metrics` and `/status`.
    pub fn stats(&self) -> HandshakeStats {
        HandshakeStats {
            in_progress: self.limit - self.permits.available_permits(),
            limit: self.limit,
            expired: self.expired.load(Ordering::Relaxed),
            priority: self.isolated().then_some(self.priority),
            handed_off: self.handed_off.load(Ordering::Relaxed),
            kept_on_loop: self.kept_on_loop.load(Ordering::Relaxed),
        }
    }
}

impl Drop for HandshakeScheduler {
    fn drop(&mut self) {
        // Dropping a runtime blocks until its tasks end, which must not happen inside
        // another runtime's task (where the gateway may be dropped).
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A client socket that can move from one runtime's reactor to another's: registered with
/// the handshake runtime while its handshake runs (its readiness then wakes the handshake
/// thread directly, with no hop through the serving thread), and with the serving runtime
/// after. Each move is two `epoll_ctl(2)` calls.
#[derive(Debug)]
pub(crate) struct Homed(Option<tokio::net::TcpStream>);

impl Homed {
    pub(crate) fn new(tcp: tokio::net::TcpStream) -> Self {
        Homed(Some(tcp))
    }

    /// Registers the socket with the reactor of the runtime this is called in.
    pub(crate) fn rehome(&mut self) -> std::io::Result<()> {
        let tcp = self
            .0
            .take()
            .ok_or_else(|| std::io::Error::other("socket lost in a move"))?;
        self.0 = Some(tokio::net::TcpStream::from_std(tcp.into_std()?)?);
        Ok(())
    }

    fn tcp(
        self: std::pin::Pin<&mut Self>,
    ) -> std::io::Result<std::pin::Pin<&mut tokio::net::TcpStream>> {
        match &mut self.get_mut().0 {
            Some(t) => Ok(std::pin::Pin::new(t)),
            None => Err(std::io::Error::other("socket lost in a move")),
        }
    }
}

impl sluice_tls::ReadReady for Homed {
    fn poll_read_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match &self.0 {
            Some(t) => t.poll_read_ready(cx),
            None => std::task::Poll::Ready(Err(std::io::Error::other("socket lost in a move"))),
        }
    }
}

impl tokio::io::AsyncRead for Homed {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.tcp()?.poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Homed {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.tcp()?.poll_write(cx, buf)
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.tcp()?.poll_flush(cx)
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.tcp()?.poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.tcp()?.poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
}

/// Aborts the handshake task when the connection that waits for it goes away.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The nice value whose CFS weight gives a thread about `percent` of a core against one
/// thread at nice 0 (weights from the kernel's `sched_prio_to_weight`).
pub(crate) fn nice_for_share(percent: u32) -> i32 {
    const WEIGHTS: [u32; 20] = [
        1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
    ];
    let share = |w: u32| f64::from(w) * 100.0 / f64::from(1024 + w);
    let want = f64::from(percent);
    (0..20)
        .min_by(|&a, &b| {
            (share(WEIGHTS[a]) - want)
                .abs()
                .total_cmp(&(share(WEIGHTS[b]) - want).abs())
        })
        .map_or(10, |n| n as i32)
}

/// Moves the calling thread below the serving threads: to `SCHED_IDLE`, or `by` nice levels
/// below where it is (at most 19; Linux keeps a nice value per thread), so that the share
/// holds whatever nice the process runs at. Lowering a priority needs no privilege; a
/// failure leaves the thread as it was, logged.
#[expect(
    unsafe_code,
    reason = "sched_setscheduler(2) and setpriority(2) for the calling thread"
)]
pub(crate) fn lower_priority(priority: Priority) {
    let rc = match priority {
        Priority::Idle => {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: pid 0 is the calling thread; `param` is a live sched_param.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) }
        }
        Priority::Nice(by) => {
            let nice = (current_nice() + by).min(19);
            // SAFETY: gettid and setpriority take no pointers; they act on the calling
            // thread only.
            unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, nice)
            }
        }
    };
    if rc != 0 {
        tracing::warn!(
            priority = %priority.describe(),
            error = %std::io::Error::last_os_error(),
            "could not lower a background thread's priority; its work competes with established traffic"
        );
    }
}

/// The calling thread's scheduling policy (tests).
#[cfg(test)]
#[expect(unsafe_code, reason = "sched_getscheduler(2) for the calling thread")]
fn current_policy() -> i32 {
    // SAFETY: pid 0 is the calling thread.
    unsafe { libc::sched_getscheduler(0) }
}

/// The calling thread's nice value.
#[expect(unsafe_code, reason = "getpriority(2) for the calling thread")]
fn current_nice() -> i32 {
    // SAFETY: as in `lower_priority`.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_map_to_the_nice_values_the_kernel_weighs_that_way() {
        assert_eq!(nice_for_share(50), 0);
        assert_eq!(nice_for_share(25), 5);
        assert_eq!(nice_for_share(10), 10);
        assert_eq!(nice_for_share(5), 13);
        assert_eq!(nice_for_share(1), 19);
    }

    /// Where `run` ran: thread, its name, nice value and scheduling policy.
    async fn where_it_ran(
        s: &HandshakeScheduler,
    ) -> (std::thread::ThreadId, Option<String>, i32, i32) {
        let here = async {
            let t = std::thread::current();
            (
                t.id(),
                t.name().map(str::to_owned),
                current_nice(),
                current_policy(),
            )
        };
        s.run(here, true).await.unwrap()
    }

    #[tokio::test]
    async fn share_zero_runs_handshakes_on_idle_policy_threads_of_their_own() {
        let s = HandshakeScheduler::start(&sluice_config::Handshakes {
            share_percent: 0,
            ..Default::default()
        })
        .unwrap();
        let (thread, name, _, policy) = where_it_ran(&s).await;
        assert_ne!(
            thread,
            std::thread::current().id(),
            "not on the caller's thread"
        );
        assert_eq!(name.as_deref(), Some("sluice-handshake"));
        assert_eq!(policy, libc::SCHED_IDLE);
        assert_eq!(
            current_policy(),
            libc::SCHED_OTHER,
            "the caller is untouched"
        );
        assert_eq!(s.stats().priority, Some(Priority::Idle));
    }

    #[tokio::test]
    async fn a_share_puts_them_nice_levels_below_the_caller() {
        let s = HandshakeScheduler::start(&sluice_config::Handshakes {
            isolate: true,
            share_percent: 10,
            max_in_progress: Some(2),
        })
        .unwrap();
        let (_, _, nice, policy) = where_it_ran(&s).await;
        assert_eq!(policy, libc::SCHED_OTHER);
        assert_eq!(
            nice,
            (current_nice() + 10).min(19),
            "ten nice levels below the caller's priority"
        );
        assert_eq!(s.stats().priority, Some(Priority::Nice(10)));
    }

    #[tokio::test]
    async fn permits_bound_the_handshakes_in_progress() {
        let s = HandshakeScheduler::start(&sluice_config::Handshakes {
            isolate: false,
            share_percent: 10,
            max_in_progress: Some(2),
        })
        .unwrap();
        let a = s.permit().await;
        let _b = s.permit().await;
        assert_eq!(s.stats().in_progress, 2);
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), s.permit()).await;
        assert!(third.is_err(), "a third waits");
        drop(a);
        let _c = s.permit().await;
        assert_eq!((s.stats().in_progress, s.stats().limit), (2, 2));
        // Not isolated: the handshake runs on the caller's thread.
        let here = std::thread::current().id();
        assert_eq!(
            s.run(async { std::thread::current().id() }, true).await,
            Some(here)
        );
        assert_eq!(s.stats().priority, None);
    }

    #[tokio::test]
    async fn a_homed_socket_moves_to_the_handshake_threads_and_back_and_keeps_its_bytes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let s = HandshakeScheduler::start(&sluice_config::Handshakes::default()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        client.write_all(b"hello").await.unwrap();
        // Read and answer on the handshake threads, their reactor driving the socket.
        let mut homed = s
            .run(
                async move {
                    let mut h = Homed::new(tcp);
                    h.rehome().unwrap();
                    let mut got = [0u8; 5];
                    h.read_exact(&mut got).await.unwrap();
                    assert_eq!(&got, b"hello");
                    h.write_all(b"there").await.unwrap();
                    h
                },
                true,
            )
            .await
            .unwrap();
        let mut got = [0u8; 5];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"there");
        // Back on this runtime, after the handshake runtime is gone.
        drop(s);
        homed.rehome().unwrap();
        client.write_all(b"again").await.unwrap();
        homed.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"again");
    }

    #[tokio::test]
    async fn an_abandoned_handshake_is_aborted() {
        let s = HandshakeScheduler::start(&sluice_config::Handshakes::default()).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let guard = SetOnDrop(dropped.clone());
        let pending = s.run(
            async move {
                let _guard = guard;
                let _ = rx.await;
            },
            true,
        );
        let _ = tokio::time::timeout(std::time::Duration::from_millis(20), pending).await;
        for _ in 0..100 {
            if dropped.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(dropped.load(Ordering::SeqCst), "the task was aborted");
        drop(tx);
    }

    #[tokio::test]
    async fn a_lone_handshake_stays_on_the_loop_and_a_crowd_is_handed_off_until_alone() {
        let s = HandshakeScheduler::start(&sluice_config::Handshakes::default()).unwrap();
        let first = s.permit().await;
        assert!(!s.hand_off(), "alone: on the event loop");
        let here = std::thread::current().id();
        let ran = s.run(async { std::thread::current().id() }, false).await;
        assert_eq!(ran, Some(here), "not handed off: run here");
        let mut crowd = vec![first];
        while crowd.len() + 1 < s.hand_off_at {
            crowd.push(s.permit().await);
            assert!(
                !s.hand_off(),
                "{} in progress: still on the loop",
                crowd.len()
            );
        }
        crowd.push(s.permit().await);
        assert!(s.hand_off(), "{} in progress: handed off", crowd.len());
        let ran = s.run(async { std::thread::current().id() }, true).await;
        assert_ne!(ran, Some(here), "handed off: on the handshake threads");
        // Hysteresis: handed off until one is alone again.
        crowd.truncate(2);
        assert!(s.hand_off(), "two in progress: still handed off");
        crowd.truncate(1);
        assert!(!s.hand_off(), "alone again: back on the loop");
        let stats = s.stats();
        assert_eq!(stats.handed_off, 2);
        assert_eq!(stats.kept_on_loop, s.hand_off_at as u64);
    }

    #[tokio::test]
    async fn not_isolated_every_handshake_is_on_the_loop() {
        let s = HandshakeScheduler::start(&sluice_config::Handshakes {
            isolate: false,
            ..Default::default()
        })
        .unwrap();
        let _crowd: Vec<_> = futures_util::future::join_all((0..8).map(|_| s.permit())).await;
        assert!(!s.hand_off());
        assert_eq!(s.stats().kept_on_loop, 1);
    }
}
