//! Binary upgrade without dropping a connection, NGINX's USR2 way: the running process
//! starts the binary now at its path with the same arguments, handing over its listening
//! sockets as inherited descriptors (named in `SLUICE_LISTEN_FDS`; the admin listener's and
//! the demo origin's too). The new process serves on them and, once ready, writes `ready` to a pipe (`SLUICE_READY_FD`); then the old one stops
//! accepting, drains within `shutdown_timeout` and exits. Both accept from the same sockets in
//! between, so no connection attempt is refused. A new binary that fails to start (bad
//! configuration, crash) closes the pipe without `ready`: the old one keeps serving and says
//! why. The child also gets `SLUICE_GENERATION` (one more than ours): QUIC connection IDs
//! carry its lowest bit, so that each process keeps its own QUIC connections on the shared
//! UDP port (see `sluice_proxy`'s `http3::steering`). `sluice upgrade` sends SIGUSR2 and waits for the outcome, written beside the pid file
//! (`<pid file>.upgrade`).

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use std::io::Read as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Listening sockets handed over: `name=fd,name=fd` (the admin listener's name is `@admin`).
const LISTEN_FDS: &str = "SLUICE_LISTEN_FDS";
/// The write end of the readiness pipe.
const READY_FD: &str = "SLUICE_READY_FD";
/// How many upgrades led to this process (0 for one started by hand): QUIC connection IDs
/// carry its lowest bit, so that datagrams find their process while two share a UDP port.
const GENERATION: &str = "SLUICE_GENERATION";
/// The name the admin listener's socket is handed over under.
pub(crate) const ADMIN: &str = "@admin";
/// The name the demo origin's socket is handed over under.
pub(crate) const DEMO: &str = "@demo";
/// How long the new binary may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a process started by an upgrade received from its parent.
#[derive(Debug, Default)]
pub(crate) struct Inherited {
    /// Listening sockets by listener name.
    pub(crate) sockets: Vec<(String, std::net::TcpListener)>,
    ready: Option<OwnedFd>,
}

/// This process's generation, once read from the environment (the next one is one more).
static THIS_GENERATION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Inherited {
    /// Takes the sockets and the readiness pipe named in the environment (and removes the
    /// variables, so they do not leak into anything this process starts).
    pub(crate) fn from_env() -> anyhow::Result<Inherited> {
        let mut out = Inherited::default();
        if let Some(list) = std::env::var_os(LISTEN_FDS) {
            for item in list.to_string_lossy().split(',').filter(|s| !s.is_empty()) {
                let (name, fd) = item
                    .rsplit_once('=')
                    .and_then(|(n, fd)| Some((n.to_owned(), fd.parse::<RawFd>().ok()?)))
                    .with_context(|| format!("{LISTEN_FDS}: `{item}` is not name=fd"))?;
                let socket = owned_fd(fd)?;
                out.sockets
                    .push((name, std::net::TcpListener::from(socket)));
            }
        }
        if let Some(fd) = std::env::var_os(READY_FD) {
            let fd: RawFd = fd
                .to_string_lossy()
                .parse()
                .with_context(|| format!("{READY_FD} is not a descriptor"))?;
            out.ready = Some(owned_fd(fd)?);
        }
        let generation = match std::env::var_os(GENERATION) {
            Some(g) => g
                .to_string_lossy()
                .parse()
                .with_context(|| format!("{GENERATION} is not a number"))?,
            None => 0,
        };
        THIS_GENERATION.store(generation, std::sync::atomic::Ordering::Relaxed);
        sluice_proxy::set_quic_generation(generation);
        // SAFETY (of the environment change): called at start, before this process starts
        // any thread that reads the environment.
        unsafe_env_remove();
        Ok(out)
    }

    /// Whether this process was started by an upgrade.
    pub(crate) fn is_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// The socket handed over for `name`, if any.
    pub(crate) fn take(&mut self, name: &str) -> Option<std::net::TcpListener> {
        let i = self.sockets.iter().position(|(n, _)| n == name)?;
        Some(self.sockets.swap_remove(i).1)
    }

    /// Tells the parent this process serves: it stops accepting and drains.
    pub(crate) fn ready(&mut self) {
        if let Some(fd) = self.ready.take() {
            let mut pipe = std::fs::File::from(fd);
            let _ = std::io::Write::write_all(&mut pipe, b"ready\n");
        }
    }
}

#[expect(unsafe_code, reason = "set_var/remove_var are unsafe in edition 2024")]
fn unsafe_env_remove() {
    // SAFETY: runs on the main thread at start-up, before the runtime or any other thread
    // exists, so nothing reads the environment concurrently.
    unsafe {
        std::env::remove_var(LISTEN_FDS);
        std::env::remove_var(READY_FD);
        std::env::remove_var(GENERATION);
    }
}

/// Takes ownership of descriptor `fd` inherited from the parent, after checking it is open.
#[expect(
    unsafe_code,
    reason = "adopting an inherited descriptor needs from_raw_fd"
)]
fn owned_fd(fd: RawFd) -> anyhow::Result<OwnedFd> {
    // SAFETY: fcntl(F_GETFD) only queries the descriptor table.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        bail!("inherited descriptor {fd} is not open");
    }
    // SAFETY: the parent handed this descriptor to us alone (named once in the environment),
    // it is open (checked above) and nothing else in this process refers to it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Mark it close-on-exec again: it is ours now, not for whatever we start.
    // SAFETY: F_SETFD on a descriptor we own.
    unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(owned)
}

/// A duplicate of `fd` without close-on-exec, so that a child inherits it.
#[expect(
    unsafe_code,
    reason = "dup(2) has no safe wrapper that clears FD_CLOEXEC"
)]
fn inheritable(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: dup(2) on a descriptor the caller keeps open for the duration of this call;
    // the duplicate is a new descriptor we take ownership of below. dup does not copy
    // FD_CLOEXEC, which is the point.
    let new = unsafe { libc::dup(fd) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned by dup and belongs to no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// The binary to start: the path this one was started from (after an upgrade, the path holds
/// the new file; `/proc/self/exe` would name the deleted old one).
fn binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("finding this binary's path")?;
    let text = exe.to_string_lossy();
    Ok(match text.strip_suffix(" (deleted)") {
        Some(p) => PathBuf::from(p),
        None => exe,
    })
}

/// Runs the upgrade from the old process's side. `Ok` once the new process is ready (the
/// caller then drains and exits); `Err` says why it is not, and this process keeps serving.
pub(crate) async fn hand_over(sockets: Vec<(String, RawFd)>) -> anyhow::Result<u32> {
    let mut keep = Vec::new();
    let mut names = Vec::new();
    for (name, fd) in sockets {
        let dup = inheritable(fd).with_context(|| format!("duplicating listener `{name}`"))?;
        names.push(format!("{name}={}", dup.as_raw_fd()));
        keep.push(dup);
    }
    let (mut reader, writer) = std::io::pipe().context("creating the readiness pipe")?;
    let writer_fd = inheritable(writer.as_raw_fd())?;
    drop(writer);
    let mut child = std::process::Command::new(binary()?)
        .args(std::env::args_os().skip(1))
        .env(LISTEN_FDS, names.join(","))
        .env(READY_FD, writer_fd.as_raw_fd().to_string())
        .env(
            GENERATION,
            (THIS_GENERATION.load(std::sync::atomic::Ordering::Relaxed) + 1).to_string(),
        )
        .spawn()
        .context("starting the new binary")?;
    // Only the child holds the write end and the duplicates now: EOF on the pipe means it
    // is gone.
    drop(writer_fd);
    drop(keep);
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            match reader.read(&mut byte) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    buf.push(byte[0]);
                    if buf.ends_with(b"ready\n") {
                        return Ok(());
                    }
                }
            }
        }
        let status = child.try_wait().ok().flatten().or_else(|| {
            std::thread::sleep(Duration::from_millis(200));
            child.try_wait().ok().flatten()
        });
        Err(match status {
            Some(s) => {
                format!("the new binary exited before it was ready ({s}); see its messages above")
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                "the new binary did not become ready; it was stopped".to_owned()
            }
        })
    })
    .await
    .context("waiting for the new binary")?;
    match waited {
        Ok(()) => Ok(pid),
        Err(why) => bail!("{why}; this process keeps serving"),
    }
}

/// Leaves the outcome of an upgrade for `sluice upgrade`.
pub(crate) fn record(pid_file: &Path, outcome: &anyhow::Result<u32>) {
    let v = match outcome {
        Ok(pid) => json!({ "from": std::process::id(), "result": "ok", "pid": pid }),
        Err(e) => {
            json!({ "from": std::process::id(), "result": "failed", "error": format!("{e:#}") })
        }
    };
    let path = crate::instance::beside(pid_file, ".upgrade");
    if let Err(e) = crate::instance::write_atomic(&path, format!("{v}\n").as_bytes()) {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the upgrade outcome");
    }
}

/// `sluice upgrade`: SIGUSR2 to the instance of `pid_file`, then the outcome. Exit status 1
/// when the new binary did not take over (the old one keeps serving).
pub(crate) fn upgrade(pid_file: &Path, timeout: Duration) -> anyhow::Result<bool> {
    let pid = crate::instance::read_pid(pid_file)
        .with_context(|| format!("no running sluice found through {}", pid_file.display()))?;
    let record = crate::instance::beside(pid_file, ".upgrade");
    let _ = std::fs::remove_file(&record);
    if !crate::instance::send_signal(pid, libc::SIGUSR2).context("sending SIGUSR2")? {
        bail!(
            "the pid file {} names pid {pid}, which is not running",
            pid_file.display()
        );
    }
    let deadline = Instant::now() + timeout;
    loop {
        let outcome: Option<Value> = std::fs::read(&record)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(v) = outcome.filter(|v| v["from"] == pid) {
            if v["result"] == "ok" {
                println!(
                    "upgraded: pid {} serves now; pid {pid} is draining",
                    v["pid"]
                );
                return Ok(true);
            }
            eprintln!(
                "upgrade failed: {}",
                v["error"].as_str().unwrap_or("unknown error")
            );
            return Ok(false);
        }
        if Instant::now() > deadline {
            bail!(
                "pid {pid} did not report an upgrade within {}s; see its log",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}
