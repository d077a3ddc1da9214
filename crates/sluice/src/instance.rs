//! How tools find a running gateway and learn what a signal did: the pid file, and beside it
//! the outcome of the last reload (`<pid file>.reload`, JSON), which `sluice reload` waits for
//! after sending SIGHUP. Also the embedded default's admin token.

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sluice_control::{ReloadError, ReloadOutcome};
use sluice_proxy::ApplyReport;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// This process's pid file and reload record.
#[derive(Debug)]
pub(crate) struct Instance {
    pid_file: PathBuf,
    record_file: PathBuf,
    seq: AtomicU64,
}

/// A file beside the pid file, `<pid file><suffix>` (the outcome records of reloads and
/// upgrades).
pub(crate) fn beside(pid_file: &Path, suffix: &str) -> PathBuf {
    let mut p = pid_file.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees
/// half of it.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

pub(crate) fn read_pid(pid_file: &Path) -> Option<i32> {
    std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

/// Sends `signal` to `pid`; `Ok(false)` when no such process exists.
#[expect(unsafe_code, reason = "kill(2) has no safe wrapper in std")]
pub(crate) fn send_signal(pid: i32, signal: i32) -> std::io::Result<bool> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(e)
    }
}

impl Instance {
    /// Writes this process's pid to `pid_file`. When another live process holds it, this
    /// one writes none (and says so): `sluice reload` then reaches the other one, as before;
    /// unless `takeover` (this process upgrades the one named there).
    pub(crate) fn create(pid_file: &Path, takeover: bool) -> anyhow::Result<Option<Arc<Self>>> {
        if let Some(pid) = read_pid(pid_file)
            && !takeover
            && pid != std::process::id() as i32
            && send_signal(pid, 0).unwrap_or(true)
        {
            eprintln!(
                "sluice: warning: the pid file {} belongs to another running sluice (pid {pid}); this one writes none, so `sluice reload` cannot find it: give it its own with --pid-file",
                pid_file.display()
            );
            return Ok(None);
        }
        if let Some(dir) = pid_file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        write_atomic(pid_file, format!("{}\n", std::process::id()).as_bytes())
            .with_context(|| format!("writing the pid file {}", pid_file.display()))?;
        let record_file = beside(pid_file, ".reload");
        let _ = std::fs::remove_file(&record_file);
        Ok(Some(Arc::new(Instance {
            pid_file: pid_file.to_path_buf(),
            record_file,
            seq: AtomicU64::new(0),
        })))
    }

    /// Leaves the outcome of a reload for `sluice reload`.
    pub(crate) fn record(&self, record: &ReloadRecord) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let mut v = record.0.clone();
        v["seq"] = json!(seq);
        v["pid"] = json!(std::process::id());
        if let Err(e) = write_atomic(&self.record_file, format!("{v}\n").as_bytes()) {
            tracing::warn!(path = %self.record_file.display(), error = %e, "cannot write the reload outcome");
        }
    }

    /// Removes the pid file and the reload record, if they are still ours (after an upgrade
    /// they belong to the new process).
    pub(crate) fn remove(&self) {
        if read_pid(&self.pid_file) == Some(std::process::id() as i32) {
            let _ = std::fs::remove_file(&self.pid_file);
            let _ = std::fs::remove_file(&self.record_file);
        }
    }
}

/// A reload's outcome as written for `sluice reload`.
#[derive(Debug)]
pub(crate) struct ReloadRecord(Value);

impl ReloadRecord {
    pub(crate) fn of(result: &Result<ReloadOutcome, ReloadError>) -> Self {
        ReloadRecord(match result {
            Ok(o) => json!({
                "result": "ok", "revision": o.revision, "previous": o.previous, "changes": o.summary,
            }),
            Err(e) => json!({
                "result": "failed",
                "error": e.to_string(),
                "errors": e.errors().iter().map(ToString::to_string).collect::<Vec<_>>(),
            }),
        })
    }
}

/// One line saying what a reload changed.
pub(crate) fn describe(r: &ApplyReport) -> String {
    if r.unchanged {
        return "nothing changed".to_owned();
    }
    let mut parts = Vec::new();
    if !r.listeners_added.is_empty() {
        parts.push(format!("listeners added: {}", r.listeners_added.join(", ")));
    }
    if !r.listeners_removed.is_empty() {
        parts.push(format!(
            "listeners draining: {}",
            r.listeners_removed.join(", ")
        ));
    }
    if !r.tls_rebuilt.is_empty() {
        parts.push(format!("TLS rebuilt: {}", r.tls_rebuilt.join(", ")));
    }
    parts.push(format!(
        "upstreams: {} kept, {} new",
        r.upstreams_kept, r.upstreams_new
    ));
    if r.routers_built > 0 {
        parts.push(format!("routing tables built: {}", r.routers_built));
    }
    if r.routers_updated > 0 {
        parts.push(format!("routing tables updated: {}", r.routers_updated));
    }
    if r.crypto_engines_rebuilt {
        parts.push("crypto engines rebuilt".to_owned());
    }
    if r.compress_engines_rebuilt {
        parts.push("compression engines rebuilt".to_owned());
    }
    parts.join("; ")
}

/// `sluice reload`: SIGHUP to the instance of `pid_file`, then its outcome. Exit status 1
/// when the reload failed (the old configuration keeps serving).
pub(crate) fn reload(pid_file: &Path, timeout: Duration) -> anyhow::Result<bool> {
    let pid = read_pid(pid_file).with_context(|| {
        format!(
            "no running sluice found through {} (start one with `sluice run`, or give --pid-file)",
            pid_file.display()
        )
    })?;
    let record_file = beside(pid_file, ".reload");
    let seq_of = |v: &Value| v["seq"].as_u64().unwrap_or(0);
    let read_record =
        || -> Option<Value> { serde_json::from_slice(&std::fs::read(&record_file).ok()?).ok() };
    let before = read_record().map_or(0, |v| seq_of(&v));
    if !send_signal(pid, libc::SIGHUP).context("sending SIGHUP")? {
        bail!(
            "the pid file {} names pid {pid}, which is not running",
            pid_file.display()
        );
    }
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = read_record().filter(|v| seq_of(v) > before) {
            if v["result"] == "ok" {
                println!(
                    "reloaded: revision {} (was {}): {}",
                    v["revision"].as_str().unwrap_or("?"),
                    v["previous"].as_str().unwrap_or("?"),
                    v["changes"].as_str().unwrap_or("")
                );
                return Ok(true);
            }
            eprintln!(
                "reload failed: {}",
                v["error"].as_str().unwrap_or("unknown error")
            );
            for e in v["errors"].as_array().into_iter().flatten() {
                eprintln!("{}", e.as_str().unwrap_or(""));
            }
            return Ok(false);
        }
        if Instant::now() > deadline {
            bail!(
                "pid {pid} did not report a reload within {}s; see its log",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The embedded default's admin token: `<state dir>/admin.token`, generated once (mode 0600).
pub(crate) fn ensure_admin_token(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("admin.token");
    if path.exists() {
        return Ok(path);
    }
    let mut raw = [0u8; 32];
    boring::rand::rand_bytes(&mut raw).context("generating the admin token")?;
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing the admin token {}", path.display()))?;
    f.write_all(format!("{token}\n").as_bytes())?;
    Ok(path)
}
