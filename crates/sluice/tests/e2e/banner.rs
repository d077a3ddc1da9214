//! The commands `sluice run` prints at start, run exactly as printed (through `sh -c`), on the
//! embedded default a newcomer gets from `scripts/run`, under load. The default binds fixed
//! ports (8443, 8080, its demo origin's 8081 and the admin's 9901): no other test uses them,
//! and the test says so when something else holds one (a gateway started by `scripts/run`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

const PORTS: [u16; 4] = [8443, 8080, 8081, 9901];

/// The lines of one banner, read from the gateway's stdout (which also carries its access log
/// and, after an upgrade, the new process's banner and log).
fn next_banner(lines: &mpsc::Receiver<String>) -> Vec<String> {
    let mut banner = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a banner within 60 s");
        if line.starts_with("Sluice ") && line.contains(" is running") {
            banner.clear();
        }
        let last = line.starts_with("Stop with");
        banner.push(line);
        if last && banner[0].starts_with("Sluice ") {
            return banner;
        }
    }
}

/// The command the banner prints between `after` and `until` (or to the end of its line).
fn command_in(banner: &[String], after: &str, until: Option<&str>) -> String {
    let line = banner
        .iter()
        .find(|l| l.contains(after))
        .unwrap_or_else(|| panic!("the banner prints `{after}`: {banner:#?}"));
    let rest = &line[line.find(after).unwrap() + after.len()..];
    until
        .and_then(|u| rest.find(u).map(|i| &rest[..i]))
        .unwrap_or(rest)
        .trim()
        .to_owned()
}

/// Runs a printed command as a user would, pasted into a shell with the test's own PATH
/// (which does not name this build's folder: the banner must print a path that works).
fn sh(command: &str) -> std::process::Output {
    let out = Command::new("sh").args(["-c", command]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "`{command}`: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `/status` document of the admin listener the default configuration places on 9901.
fn status(rt: &tokio::runtime::Runtime) -> serde_json::Value {
    let got = rt.block_on(crate::support::http1_get(
        "127.0.0.1:9901".parse().unwrap(),
        "admin",
        "/status",
    ));
    assert_eq!(got.status, 200, "{}", got.body);
    serde_json::from_str(&got.body).unwrap()
}

fn reloads_ok(rt: &tokio::runtime::Runtime) -> u64 {
    status(rt)["config"]["reloads"]["ok"].as_u64().unwrap()
}

/// Polls `cond` every 20 ms from a plain thread; panics after 10 s (a bound, not a timing
/// assertion).
fn wait_for(mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("condition not reached within 10 s");
}

/// `GET /api/status` on a new connection to the default's HTTP listener; `None` when the
/// connection or the exchange fails (counted as a failed request, never a panic).
async fn demo_status() -> Option<crate::support::Got> {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect("127.0.0.1:8080")
            .await
            .ok()?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .ok()?;
        tokio::spawn(conn);
        let req = http::Request::get("/api/status")
            .header("host", "localhost")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.ok()?;
        Some(crate::support::collect(resp).await)
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

#[test]
fn every_command_the_banner_prints_works_on_the_embedded_default_under_load() {
    for port in PORTS {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken: the embedded default binds 8443, 8080, 8081 and 9901 \
             (stop a gateway started by scripts/run, then run this test again)"
        );
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--state-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let _stop_first = crate::cli::StopOnDrop(child.id());
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    // Reads to the end, so that the access log (stdout on the default) never blocks a writer.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let banner = next_banner(&lines);
    assert!(
        banner[0].contains("embedded default configuration"),
        "{banner:#?}"
    );

    // The page the banner offers.
    let curl = command_in(&banner, "try: ", None);
    let page = sh(&curl);
    assert!(
        String::from_utf8_lossy(&page.stdout).contains("<title>Sluice demo origin</title>"),
        "`{curl}` fetched the demo page"
    );

    // Load: new connections through the HTTP listener to the demo origin, for as long as the
    // commands take; bounded in count.
    let (ok, failed, stop) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let load: Vec<_> = (0..2)
        .map(|_| {
            let (o, f, s) = (ok.clone(), failed.clone(), stop.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(async {
                    for _ in 0..100_000 {
                        if s.load(Ordering::SeqCst) {
                            break;
                        }
                        match demo_status().await {
                            Some(got)
                                if got.status == 200 && got.body.contains("sluice-demo-origin") =>
                            {
                                o.fetch_add(1, Ordering::SeqCst);
                            }
                            other => {
                                f.fetch_add(1, Ordering::SeqCst);
                                eprintln!(
                                    "failed request: {:?}",
                                    other.map(|g| (g.status, g.body))
                                );
                            }
                        }
                    }
                });
            })
        })
        .collect();
    let progress = || {
        let from = ok.load(Ordering::SeqCst);
        wait_for(|| ok.load(Ordering::SeqCst) >= from + 20);
    };
    progress();

    // `kill -HUP <pid>`, then `sluice reload --pid-file …`: each reloads the embedded default.
    let hup = command_in(&banner, "Reload with: ", Some(" (or "));
    assert!(hup.starts_with("kill -HUP "), "{hup}");
    sh(&hup);
    wait_for(|| reloads_ok(&rt) == 1);
    progress();
    let reload = command_in(&banner, "(or ", Some(");"));
    let sluice = env!("CARGO_BIN_EXE_sluice");
    assert!(
        reload.starts_with(&format!("{sluice} reload --pid-file ")),
        "{reload}"
    );
    sh(&reload);
    assert_eq!(reloads_ok(&rt), 2);
    progress();

    // `sluice upgrade --pid-file …`: the new process takes the sockets, the demo origin's
    // included, and this one drains and exits.
    let upgrade = command_in(&banner, "upgrade the binary with: ", None);
    assert!(
        upgrade.starts_with(&format!("{sluice} upgrade --pid-file ")),
        "{upgrade}"
    );
    let out = sh(&upgrade);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("upgraded: pid "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        child.wait().unwrap().code(),
        Some(0),
        "the old process drained and exited"
    );
    let banner = next_banner(&lines);
    let stop_cmd = command_in(&banner, "Stop with Ctrl-C, or: ", None);
    let new_pid: u32 = stop_cmd
        .strip_prefix("kill -TERM ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{stop_cmd}"));
    let _stop_new = crate::cli::StopOnDrop(new_pid);
    assert_ne!(new_pid, child.id());
    progress();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sluice.pid"))
            .unwrap()
            .trim(),
        new_pid.to_string(),
        "the pid file names the new process"
    );

    // The new process's banner works as well: a reload, the page, then the stop.
    sh(&command_in(&banner, "Reload with: ", Some(" (or ")));
    wait_for(|| reloads_ok(&rt) == 1);
    progress();
    stop.store(true, Ordering::SeqCst);
    for l in load {
        l.join().unwrap();
    }
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "no request failed across reloads and the upgrade ({} served); the gateways said: {}",
        ok.load(Ordering::SeqCst),
        std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default()
    );
    assert!(
        String::from_utf8_lossy(&sh(&command_in(&banner, "try: ", None)).stdout)
            .contains("<title>Sluice demo origin</title>")
    );
    sh(&stop_cmd);
    wait_for(|| !crate::cli::alive(new_pid));
}
