use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

pub(super) fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
fn check_reports_every_error_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    std::fs::write(
        &path,
        "[[listener]]\nname = \"web\"\naddress = \"localhost:http\"\n\n[[route]]\nname = \"r\"\nupstrem = \"x\"\n\n[[route]]\nname = \"s\"\nupstream = \"nowhere\"\n",
    )
    .unwrap();
    let out = sluice()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    assert!(
        err.contains(&format!(
            "{file}:3:11: listener `web`: `localhost:http` is not an ip:port address"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:7:1: unknown field `upstrem`")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:11:12: route `s` sends to upstream `nowhere`"
        )),
        "{err}"
    );
    assert!(err.contains("help:"), "{err}");
    assert!(err.contains("3 errors"), "{err}");
}

#[test]
fn check_refuses_a_world_readable_key_and_accepts_a_good_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    crate::support::write_cert(
        dir.path(),
        "site",
        sluice_tls::selfsigned::KeyKind::EcdsaP256,
        &["site.test"],
    );
    let key = dir.path().join("site.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = dir.path().join("site.toml");
    std::fs::write(
        &path,
        "[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:8443\"\n[listener.tls]\n[[certificate]]\nname = \"site\"\ncert = \"site.crt\"\nkey = \"site.key\"\n",
    )
    .unwrap();
    let out = sluice()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("readable by group or others")
            && err.contains(&format!("chmod 600 {}", key.display())),
        "{err}"
    );

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = sluice()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No `engines` line: the chain this machine would run, and why.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let expect = if crate::offload::cpu_has_ifma() {
        "private-key engines on this machine: mb, inline (chosen at start: this CPU has AVX-512 IFMA"
    } else {
        "private-key engines on this machine: inline (chosen at start: this CPU has no AVX-512 IFMA"
    };
    assert!(stdout.contains(expect), "{stdout}");
}

#[test]
fn run_serves_a_config_file_and_exits_0_on_sigterm() {
    let origin_rt = tokio::runtime::Runtime::new().unwrap();
    let origin = origin_rt.block_on(crate::support::Origin::start("file-origin"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(
        &path,
        format!(
            "[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\n[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"o\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"r\"\nupstream = \"o\"\n",
            origin.addr
        ),
    )
    .unwrap();
    let mut gw = start(&path, &dir.path().join("sluice.pid"));
    let body = origin_rt.block_on(async {
        crate::support::http1_get(gw.http, "x", "/whoami")
            .await
            .body
    });
    assert_eq!(body, "file-origin");
    let killed = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = gw.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// A `sluice run` child and the addresses its banner printed.
pub(super) struct Running {
    pub(super) child: std::process::Child,
    pub(super) http: std::net::SocketAddr,
    /// The admin listener, where the configuration has one.
    admin: Option<std::net::SocketAddr>,
    /// The banner's lines, up to "Stop with".
    pub(super) banner: Vec<String>,
}

impl Running {
    /// The admin listener's address (the configuration must have one).
    pub(super) fn admin(&self) -> std::net::SocketAddr {
        self.admin.expect("the banner names the admin listener")
    }
}

impl Drop for Running {
    /// A test that fails half-way leaves no gateway behind (a no-op once it has exited).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &std::path::Path, pid_file: &std::path::Path) -> Running {
    start_from(sluice(), config, pid_file)
}

/// `sluice run` from the binary `command` runs.
pub(super) fn start_from(
    mut command: Command,
    config: &std::path::Path,
    pid_file: &std::path::Path,
) -> Running {
    let mut child = command
        .args(["run", "--config"])
        .arg(config)
        .arg("--pid-file")
        .arg(pid_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut http, mut admin, mut banner) = (None, None, Vec::new());
    for line in stdout.by_ref().take(12) {
        let line = line.unwrap();
        banner.push(line.clone());
        let addr = || {
            line.split("://")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .and_then(|a| a.parse().ok())
        };
        if line.trim_start().starts_with("http ") {
            http = addr();
        } else if line.trim_start().starts_with("admin ") {
            admin = addr();
        }
        if line.starts_with("Stop with") {
            break;
        }
    }
    // Keep reading, so that whatever the gateway (or a process it upgrades to) prints later
    // finds a reader.
    std::thread::spawn(move || for _ in stdout {});
    Running {
        child,
        http: http.expect("the banner names the listener"),
        admin,
        banner,
    }
}

pub(super) fn reload_cmd(pid_file: &std::path::Path) -> std::process::Output {
    sluice()
        .args(["reload", "--pid-file"])
        .arg(pid_file)
        .output()
        .unwrap()
}

/// `sluice upgrade --pid-file PID_FILE`, run to its end.
pub(super) fn upgrade_cmd(pid_file: &std::path::Path) -> std::process::Output {
    sluice()
        .args(["upgrade", "--pid-file"])
        .arg(pid_file)
        .output()
        .unwrap()
}

async fn post_reload(admin: std::net::SocketAddr, token: Option<&str>) -> crate::support::Got {
    let mut req = http::Request::post("/api/v1/reload").header("host", "admin");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    crate::support::http1_send(tokio::net::TcpStream::connect(admin).await.unwrap(), req).await
}

#[test]
fn reload_by_sighup_sluice_reload_and_the_admin_api_keeps_the_old_config_on_errors() {
    use std::os::unix::fs::PermissionsExt;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, b) = rt.block_on(async {
        (
            crate::support::Origin::start("A").await,
            crate::support::Origin::start("B").await,
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let token = "reload-test-token-0123456789";
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, token).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = dir.path().join("gw.toml");
    let config = |origin: std::net::SocketAddr, extra: &str| {
        format!(
            "# comment\n[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\ntoken_file = \"admin.token\"\n[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"o\"\nservers = [{{ address = \"{origin}\" }}]\n[[route]]\nname = \"r\"\nupstream = \"o\"\n{extra}"
        )
    };
    std::fs::write(&path, config(a.addr, "")).unwrap();
    let pid_file = dir.path().join("sluice.pid");
    let mut gw = start(&path, &pid_file);
    let whoami = || {
        rt.block_on(crate::support::http1_get(gw.http, "x", "/whoami"))
            .body
    };
    assert_eq!(whoami(), "A");

    // `sluice reload`: a good change applies.
    std::fs::write(&path, config(b.addr, "")).unwrap();
    let out = reload_cmd(&pid_file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("reloaded: revision "), "{stdout}");
    assert_eq!(whoami(), "B");

    // A broken file: exit 1, every error at its line, the old configuration serving.
    std::fs::write(
        &path,
        config(
            b.addr,
            "[[route]]\nname = \"bad\"\nupstream = \"missing\"\nmethod = [\"GET\"]\n",
        ),
    )
    .unwrap();
    let out = reload_cmd(&pid_file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let file = path.display().to_string();
    assert!(
        stderr.contains(&format!(
            "{file}:18:12: route `bad` sends to upstream `missing`"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{file}:19:1: unknown field `method`")),
        "{stderr}"
    );
    assert_eq!(whoami(), "B");

    // The admin API: no token, 401; with it, the same errors as JSON (422).
    let denied = rt.block_on(post_reload(gw.admin(), None));
    assert_eq!(denied.status, 401, "{}", denied.body);
    let refused = rt.block_on(post_reload(gw.admin(), Some(token)));
    assert_eq!(refused.status, 422, "{}", refused.body);
    let v: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    let lines: Vec<u64> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![18, 19], "{v}");
    let status: serde_json::Value = serde_json::from_str(
        &rt.block_on(crate::support::http1_get(gw.admin(), "admin", "/status"))
            .body,
    )
    .unwrap();
    assert_eq!(status["config"]["reloads"]["failed"], 2, "{status}");
    assert_eq!(
        status["config"]["last_failure"]["errors"][0]["line"], 18,
        "{status}"
    );
    let metrics = rt
        .block_on(crate::support::http1_get(gw.admin(), "admin", "/metrics"))
        .body;
    assert!(
        metrics.contains("sluice_config_reloads_total{result=\"failed\"} 2"),
        "{metrics}"
    );

    // Fixed, through the API.
    std::fs::write(&path, config(a.addr, "")).unwrap();
    let ok = rt.block_on(post_reload(gw.admin(), Some(token)));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(whoami(), "A");

    // A plain SIGHUP does the same (the record shows one more reload: `sluice reload` made two).
    std::fs::write(&path, config(b.addr, "")).unwrap();
    let record = format!("{}.reload", pid_file.display());
    let seq = || {
        std::fs::read(&record)
            .ok()
            .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r).ok())
            .and_then(|v| v["seq"].as_u64())
    };
    assert_eq!(seq(), Some(2));
    let hup = Command::new("kill")
        .args(["-HUP", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    rt.block_on(crate::support::wait_until(|| seq() == Some(3)));
    assert_eq!(whoami(), "B");

    let killed = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(gw.child.wait().unwrap().code(), Some(0));
    assert!(!pid_file.exists(), "the pid file is removed at exit");
}

#[test]
fn default_config_writes_a_file_that_checks_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let out = sluice()
        .args(["default-config", "--state-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains("{state_dir}") && !text.contains("{demo_origin}"),
        "{text}"
    );
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, &text).unwrap();
    let out = sluice()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("admin.token").exists());
}

pub(super) fn pid_in(pid_file: &std::path::Path) -> Option<u32> {
    std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

/// Stops a gateway that is not our child (an upgrade's new process) when the test ends,
/// passed or not.
pub(super) struct StopOnDrop(pub(super) u32);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

pub(super) fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A copy of this build's binary at `to` whose build label (`/status` `build`) reads `label`:
/// the bytes after the marker rewritten in place, as a packager stamps a build.
fn stamped_copy(to: &std::path::Path, label: &str) {
    use sluice_admin::build_label::{LABEL_LEN, MARKER};
    use std::os::unix::fs::PermissionsExt;
    let mut bytes = std::fs::read(env!("CARGO_BIN_EXE_sluice")).unwrap();
    let at = bytes
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .expect("the binary carries its build label")
        + MARKER.len();
    assert!(label.len() < LABEL_LEN);
    let slot = &mut bytes[at..at + LABEL_LEN];
    slot.fill(0);
    slot[..label.len()].copy_from_slice(label.as_bytes());
    std::fs::write(to, bytes).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The build label `/status` reports on `admin`.
fn build_of(rt: &tokio::runtime::Runtime, admin: std::net::SocketAddr) -> String {
    let status = rt.block_on(crate::support::http1_get(admin, "admin", "/status"));
    assert_eq!(status.status, 200);
    let v: serde_json::Value = serde_json::from_str(&status.body).unwrap();
    v["build"].as_str().unwrap().to_owned()
}

#[test]
fn upgrade_replaces_the_binary_on_disk_and_hands_the_sockets_to_it_without_failing_a_request() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let origin = rt.block_on(crate::support::Origin::start("A"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    let config = format!(
        "[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\n[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"o\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"r\"\nupstream = \"o\"\n",
        origin.addr
    );
    std::fs::write(&path, &config).unwrap();
    let pid_file = dir.path().join("sluice.pid");
    // The gateway runs from a binary of its own in the test's folder, which the upgrade
    // replaces on disk as a package upgrade does.
    let bin = dir.path().join("sluice");
    stamped_copy(&bin, "before-upgrade");
    let mut gw = start_from(Command::new(&bin), &path, &pid_file);
    let old_pid = gw.child.id();
    assert_eq!(build_of(&rt, gw.admin()), "before-upgrade");

    // Load: a new connection per request, for as long as the upgrade takes.
    let (ok, failed, stop) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let (o, f, s, http) = (ok.clone(), failed.clone(), stop.clone(), gw.http);
    let load = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            // Bounded: at most 100,000 requests even if nobody stops it.
            for _ in 0..100_000 {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let got = async {
                    let tcp = tokio::net::TcpStream::connect(http).await.ok()?;
                    let (mut sender, conn) =
                        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                            .await
                            .ok()?;
                    tokio::spawn(conn);
                    let req = http::Request::get("/whoami")
                        .header("host", "x")
                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                        .unwrap();
                    let resp = sender.send_request(req).await.ok()?;
                    Some(crate::support::collect(resp).await)
                }
                .await;
                match got {
                    Some(g) if g.status == 200 && g.body == "A" => o.fetch_add(1, Ordering::SeqCst),
                    _ => f.fetch_add(1, Ordering::SeqCst),
                };
            }
        });
    });
    rt.block_on(crate::support::wait_until(|| {
        ok.load(Ordering::SeqCst) >= 20
    }));

    // The new version lands next to the old and is renamed over it: the running process's
    // /proc/self/exe now reads "… (deleted)", and the upgrade must start the new file.
    let staged = dir.path().join("sluice.new");
    stamped_copy(&staged, "after-upgrade");
    std::fs::rename(&staged, &bin).unwrap();
    let out = upgrade_cmd(&pid_file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("upgraded: pid "), "{stdout}");
    assert_eq!(
        gw.child.wait().unwrap().code(),
        Some(0),
        "the old process drained and exited"
    );
    let new_pid = pid_in(&pid_file).expect("the new process wrote the pid file");
    let _stop_new = StopOnDrop(new_pid);
    assert_ne!(new_pid, old_pid);
    let after = ok.load(Ordering::SeqCst);
    rt.block_on(crate::support::wait_until(|| {
        ok.load(Ordering::SeqCst) >= after + 20
    }));
    stop.store(true, Ordering::SeqCst);
    load.join().unwrap();
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "no request failed across the upgrade"
    );
    assert_eq!(
        build_of(&rt, gw.admin()),
        "after-upgrade",
        "the new binary serves, on the admin listener handed over too"
    );

    // A new binary that cannot start (its configuration is broken) leaves this one serving.
    std::fs::write(&path, format!("{config}bogus = 1\n")).unwrap();
    let out = upgrade_cmd(&pid_file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("exited before it was ready"), "{stderr}");
    assert_eq!(pid_in(&pid_file), Some(new_pid));
    let got = rt.block_on(crate::support::http1_get(gw.http, "x", "/whoami"));
    assert_eq!(got.body, "A");

    // The new process is not our child: stop it by its pid.
    assert!(
        Command::new("kill")
            .args(["-TERM", &new_pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    rt.block_on(crate::support::wait_until(|| !alive(new_pid)));
}

#[test]
fn completions_load_in_bash_and_complete_a_command_and_the_man_pages_name_each_option() {
    let out = sluice().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sluice.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    // What bash does on `sluice upg<TAB>` and `sluice run --pid<TAB>`.
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let program = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; _sluice sluice '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            words.join(" "),
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let out = Command::new("bash")
            .args(["-c", &program])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(complete("sluice upg").trim(), "upgrade");
    assert!(
        complete("sluice run --pid")
            .lines()
            .any(|l| l == "--pid-file"),
        "{}",
        complete("sluice run --pid")
    );

    let man = dir.path().join("man");
    let out = sluice().arg("manpages").arg(&man).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    for command in ["run", "reload", "upgrade", "check", "completions"] {
        let page = std::fs::read_to_string(man.join(format!("sluice-{command}.1")))
            .unwrap_or_else(|e| panic!("sluice-{command}.1: {e}"));
        assert!(
            page.starts_with(&format!(
                ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH sluice-{command} 1"
            )),
            "{page}"
        );
    }
    let run = std::fs::read_to_string(man.join("sluice-run.1")).unwrap();
    assert!(run.contains("\\-\\-pid\\-file"), "{run}");
    let top = std::fs::read_to_string(man.join("sluice.1")).unwrap();
    assert!(top.contains("sluice\\-upgrade(1)"), "{top}");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-keyserver"))
        .arg("--manpage")
        .arg(&man)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        std::fs::read_to_string(man.join("sluice-keyserver.1"))
            .unwrap()
            .contains("\\-\\-config")
    );
}
