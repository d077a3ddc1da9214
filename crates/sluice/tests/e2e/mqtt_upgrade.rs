//! Devices' connections across `sluice reload` and `sluice upgrade`: a subscriber connected
//! before both keeps its one connection (and so its broker session) and receives QoS 1, QoS 2
//! and retained messages published after them through the new process; the old process
//! keeps relaying it beyond `shutdown_timeout` and exits once it has ended.

use crate::cli;
use crate::mqtt::Mosquitto;
use crate::support::free_port;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A `mosquitto_sub -d` child and its output lines (debug lines name each CONNECT sent).
struct Subscriber {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Subscriber {
    fn start(port: u16) -> Subscriber {
        let mut child = Command::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-i", "keeper", "-q", "2", "-t", "plant/#", "-d", "-k", "30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto-clients is needed (scripts/test-deps installs it)");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Subscriber {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Whether the payload `text` arrives within `wait`.
    fn receives(&mut self, text: &str, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line == text;
                    self.seen.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }

    fn connects(&self) -> usize {
        self.seen
            .iter()
            .filter(|l| l.contains("sending CONNECT"))
            .count()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mosquitto_pub` of `text` to `plant/7` with QoS `qos` (and `extra`), through `port`.
fn publish(port: u16, id: &str, qos: &str, text: &str, extra: &[&str]) {
    let out = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-i", id])
        .args(["-q", qos, "-t", "plant/7", "-m", text])
        .args(extra)
        .output()
        .expect("mosquitto-clients is needed (scripts/test-deps installs it)");
    assert!(
        out.status.success(),
        "publishing {text}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn config(broker: &Mosquitto, port: u16) -> String {
    format!(
        r#"[global]
shutdown_timeout = "1s"
[log]
access_log = "off"
[admin]
address = "127.0.0.1:0"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
servers = [{{ address = "{}" }}]
[[upstream]]
name = "web"
servers = [{{ address = "127.0.0.1:9" }}]
[[route]]
name = "web"
upstream = "web"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[listener]]
name = "devices"
address = "127.0.0.1:{port}"
kind = "mqtt"
upstream = "brokers"
"#,
        broker.addr()
    )
}

#[test]
fn a_subscriber_keeps_its_connection_and_messages_across_reload_and_upgrade() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(Mosquitto::start());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, config(&broker, port)).unwrap();
    let pid_file = dir.path().join("sluice.pid");
    let mut gw = cli::start_from(cli::sluice(), &path, &pid_file);
    assert!(
        gw.banner
            .iter()
            .any(|l| l.trim_start().starts_with("devices")
                && l.contains(&format!("mqtt://127.0.0.1:{port}/"))
                && l.contains("MQTT to the brokers of upstream brokers")),
        "the banner names the MQTT listener as such: {:?}",
        gw.banner
    );
    let mut sub = Subscriber::start(port);
    // Published until the subscription is in place (a message before it is not kept).
    let subscribed = (0..25).any(|_| {
        publish(port, "p0", "1", "m0", &[]);
        sub.receives("m0", Duration::from_millis(200))
    });
    assert!(subscribed, "the subscriber never got m0: {:?}", sub.seen);

    let out = cli::reload_cmd(&pid_file);
    assert!(out.status.success(), "{out:?}");
    publish(port, "p1", "1", "m1", &[]);
    assert!(sub.receives("m1", Duration::from_secs(5)), "{:?}", sub.seen);

    let out = cli::upgrade_cmd(&pid_file);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let new_pid = cli::pid_in(&pid_file).expect("the new process wrote the pid file");
    let _stop_new = cli::StopOnDrop(new_pid);
    assert_ne!(new_pid, gw.child.id());
    // Past the old process's shutdown_timeout: requests would have been closed by now.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        gw.child.try_wait().unwrap().is_none(),
        "the old process still relays the subscriber's connection"
    );
    publish(port, "p2", "2", "m2", &["-r"]);
    publish(port, "p3", "1", "m3", &[]);
    assert!(sub.receives("m2", Duration::from_secs(5)), "{:?}", sub.seen);
    assert!(sub.receives("m3", Duration::from_secs(5)), "{:?}", sub.seen);
    assert_eq!(
        sub.connects(),
        1,
        "one connection throughout, never a reconnect: {:?}",
        sub.seen
    );
    // A subscriber after the upgrade reaches the broker through the new process and gets
    // the retained message.
    let late = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-i", "late"])
        .args(["-t", "plant/7", "-C", "1", "-W", "5"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&late.stdout).trim(), "m2");

    drop(sub);
    assert_eq!(
        gw.child.wait().unwrap().code(),
        Some(0),
        "the old process exits once its last device connection has ended"
    );
    drop(broker);
}
