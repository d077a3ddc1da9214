//! systemd's readiness protocol (sd_notify(3)) as a `Type=notify` unit hears it: the test
//! binds the datagram socket systemd would and hands it over in `NOTIFY_SOCKET`. (systemd
//! itself does not run as PID 1 where the tests run; `scripts/package --test` starts the
//! packaged unit where it does.)

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

/// The next message on the notify socket, as `KEY=value` lines.
fn next(socket: &UnixDatagram) -> Vec<String> {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification within 30 s");
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_notify_unit_hears_ready_reloading_the_new_main_pid_after_an_upgrade_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(
        &path,
        "[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\n[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"o\"\nservers = [{ address = \"127.0.0.1:9\" }]\n[[route]]\nname = \"r\"\nupstream = \"o\"\n",
    )
    .unwrap();
    let pid_file = dir.path().join("sluice.pid");
    let mut command = crate::cli::sluice();
    command.env("NOTIFY_SOCKET", &socket_path);
    let mut gw = crate::cli::start_from(command, &path, &pid_file);

    let ready = next(&socket);
    assert!(ready.contains(&"READY=1".to_owned()), "{ready:?}");
    assert!(
        ready.iter().any(|l| l.starts_with("STATUS=serving ")),
        "{ready:?}"
    );
    assert!(
        !ready.iter().any(|l| l.starts_with("MAINPID=")),
        "systemd started this one itself: {ready:?}"
    );

    // ExecReload's `sluice reload`: RELOADING=1 with the monotonic time, then READY=1 again.
    let out = crate::cli::sluice()
        .args(["reload", "--pid-file"])
        .arg(&pid_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let reloading = next(&socket);
    assert!(
        reloading.contains(&"RELOADING=1".to_owned()),
        "{reloading:?}"
    );
    assert!(
        reloading.iter().any(|l| l
            .strip_prefix("MONOTONIC_USEC=")
            .is_some_and(|v| v.parse::<u64>().is_ok())),
        "{reloading:?}"
    );
    let reloaded = next(&socket);
    assert!(reloaded.contains(&"READY=1".to_owned()), "{reloaded:?}");
    assert!(
        reloaded.contains(&"STATUS=reloaded".to_owned()),
        "{reloaded:?}"
    );

    // A binary upgrade: the new process names itself the main one, and the old one, which
    // drains and exits, never says STOPPING (systemd would stop the service).
    let out = crate::cli::upgrade_cmd(&pid_file);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(gw.child.wait().unwrap().code(), Some(0));
    let new_pid = crate::cli::pid_in(&pid_file).unwrap();
    let _stop_new = crate::cli::StopOnDrop(new_pid);
    let handed = next(&socket);
    assert!(handed.contains(&"READY=1".to_owned()), "{handed:?}");
    assert!(handed.contains(&format!("MAINPID={new_pid}")), "{handed:?}");
    // Everything the old process sent is queued by now (it has exited).
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(!text.contains("STOPPING=1"), "after the upgrade: {text}");
    }
    socket.set_nonblocking(false).unwrap();

    // systemctl stop: SIGTERM, and STOPPING=1 from the (new) main process.
    assert!(
        Command::new("kill")
            .args(["-TERM", &new_pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let stopping = next(&socket);
    assert!(stopping.contains(&"STOPPING=1".to_owned()), "{stopping:?}");
}
