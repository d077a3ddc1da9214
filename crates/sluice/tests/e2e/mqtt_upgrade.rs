//! Devices' connections across `sluice reload` and `sluice upgrade`: subscribers connected
//! before both, one on the MQTT listener (`mosquitto_sub`) and one over WebSocket on an HTTP
//! route (paho), keep their one connection (and so their broker session) and receive QoS 1,
//! QoS 2 and retained messages published after them through the new process; the old process
//! keeps relaying them beyond `shutdown_timeout` and exits once they have ended.

use crate::cli;
use crate::mqtt::Mosquitto;
use crate::support::free_port;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A subscriber child and its output lines: its payloads, and a line with `connect_marker`
/// for each connection it made.
struct Subscriber {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    connect_marker: &'static str,
}

/// paho over a WebSocket to `/mqtt` as `ws-keeper`, subscribed to `plant/#` with QoS 2:
/// prints `connected` on each CONNACK (paho reconnects by itself) and each payload.
const WS_SUBSCRIBER: &str = r#"
import sys
import paho.mqtt.client as mqtt
c = mqtt.Client(client_id="ws-keeper", transport="websockets", protocol=mqtt.MQTTv311)
c.ws_set_options(path="/mqtt")
def connected(cl, u, f, rc):
    print("connected", rc, flush=True)
    cl.subscribe("plant/#", qos=2)
c.on_connect = connected
c.on_message = lambda cl, u, m: print(m.payload.decode(), flush=True)
c.connect("127.0.0.1", int(sys.argv[1]), keepalive=30)
c.loop_forever()
"#;

impl Subscriber {
    /// `mosquitto_sub -d` on the MQTT listener (its debug lines name each CONNECT sent).
    fn start(port: u16) -> Subscriber {
        let mut command = Command::new("mosquitto_sub");
        command
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-i", "keeper", "-q", "2", "-t", "plant/#", "-d", "-k", "30"]);
        Subscriber::spawn(command, "sending CONNECT")
    }

    /// paho over WebSocket through the HTTP listener at `web`.
    fn over_websocket(web: std::net::SocketAddr) -> Subscriber {
        let mut command = Command::new("/usr/bin/python3");
        command.args(["-c", WS_SUBSCRIBER, &web.port().to_string()]);
        Subscriber::spawn(command, "connected")
    }

    fn spawn(mut command: Command, connect_marker: &'static str) -> Subscriber {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto-clients and python3-paho-mqtt (scripts/test-deps installs them)");
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
            connect_marker,
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

    /// Whether the payload `text` has arrived, already or within `wait`: messages from two
    /// publishers (here QoS 2 and QoS 1) may reach a subscriber in either order.
    fn got(&mut self, text: &str, wait: Duration) -> bool {
        self.seen.iter().any(|l| l == text) || self.receives(text, wait)
    }

    fn connects(&self) -> usize {
        self.seen
            .iter()
            .filter(|l| l.contains(self.connect_marker))
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
hash_balance_factor = 0
servers = [{{ address = "{}" }}]
[[upstream]]
name = "web"
servers = [{{ address = "127.0.0.1:9" }}]
[[route]]
name = "web"
upstream = "web"
[[route]]
name = "devices-ws"
path_exact = "/mqtt"
upstream = "brokers"
[route.mqtt]
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
    let mut ws = Subscriber::over_websocket(gw.http);
    // Published until both subscriptions are in place (a message before one is not kept).
    let subscribed = (0..25).any(|_| {
        publish(port, "p0", "1", "m0", &[]);
        let tcp = sub.receives("m0", Duration::from_millis(200));
        tcp && ws.receives("m0", Duration::from_millis(200))
    });
    assert!(
        subscribed,
        "the subscribers never both got m0: {:?} {:?}",
        sub.seen, ws.seen
    );

    let out = cli::reload_cmd(&pid_file);
    assert!(out.status.success(), "{out:?}");
    publish(port, "p1", "1", "m1", &[]);
    assert!(
        sub.receives("m1", Duration::from_secs(15)),
        "{:?}",
        sub.seen
    );
    assert!(ws.receives("m1", Duration::from_secs(15)), "{:?}", ws.seen);

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
    for s in [&mut sub, &mut ws] {
        assert!(s.got("m2", Duration::from_secs(15)), "{:?}", s.seen);
        assert!(s.got("m3", Duration::from_secs(15)), "{:?}", s.seen);
        assert_eq!(
            s.connects(),
            1,
            "one connection throughout, never a reconnect: {:?}",
            s.seen
        );
    }
    // A subscriber after the upgrade reaches the broker through the new process and gets
    // the retained message.
    let late = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-i", "late"])
        .args(["-t", "plant/7", "-C", "1", "-W", "5"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&late.stdout).trim(), "m2");

    // The WebSocket device alone keeps the old process relaying.
    drop(sub);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        gw.child.try_wait().unwrap().is_none(),
        "the old process still relays the WebSocket device"
    );
    publish(port, "p4", "1", "m4", &[]);
    assert!(ws.receives("m4", Duration::from_secs(15)), "{:?}", ws.seen);
    assert_eq!(ws.connects(), 1, "{:?}", ws.seen);
    drop(ws);
    assert_eq!(
        gw.child.wait().unwrap().code(),
        Some(0),
        "the old process exits once its last device connection has ended"
    );
    drop(broker);
}
