//! MQTT over WebSocket on an HTTP route (`[route.mqtt]`), with paho's Python client over
//! `websockets` and Debian's mosquitto behind: a device publishes and receives QoS 1 through
//! the route, reaches the same broker as a device with the same identifier on the MQTT
//! listener, a CONNECT the route refuses gets its CONNACK inside the WebSocket, and a request
//! that is not an upgrade gets 426.

use crate::mqtt::{Mosquitto, config, lines};
use crate::support::*;
use std::net::SocketAddr;

/// paho (MQTT 3.1.1 over a WebSocket to `path`): connects as `id`; with CONNACK 0 it
/// subscribes to `ws/ID`, publishes `over-ws` there with QoS 1 and waits for it. Prints
/// `connack N`, then `got PAYLOAD` for what arrived.
const CLIENT: &str = r#"
import sys, time
import paho.mqtt.client as mqtt
port, path, cid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
got, rc = [], {}
c = mqtt.Client(client_id=cid, transport="websockets", protocol=mqtt.MQTTv311)
c.ws_set_options(path=path)
c.on_connect = lambda cl, u, f, r: rc.setdefault("rc", r)
c.on_message = lambda cl, u, m: got.append(m.payload.decode())
c.connect("127.0.0.1", port, keepalive=30)
c.loop_start()
deadline = time.time() + 5
while "rc" not in rc and time.time() < deadline:
    time.sleep(0.02)
print("connack", rc.get("rc"), flush=True)
if rc.get("rc") == 0:
    c.subscribe("ws/" + cid, qos=1)
    time.sleep(0.3)
    c.publish("ws/" + cid, "over-ws", qos=1).wait_for_publish()
    while not got and time.time() < deadline:
        time.sleep(0.02)
    for g in got:
        print("got", g, flush=True)
    c.disconnect()
c.loop_stop()
"#;

fn paho(web: SocketAddr, id: &str) -> String {
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", CLIENT, &web.port().to_string(), "/mqtt", id])
        .output()
        .expect("Debian's python3 with python3-paho-mqtt (scripts/test-deps installs it)");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_over_websocket_reaches_its_broker_as_over_tcp() {
    let brokers = [Mosquitto::start().await, Mosquitto::start().await];
    let text = config(&brokers.iter().collect::<Vec<_>>(), "")
        + r#"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[route]]
name = "devices-ws"
path_exact = "/mqtt"
upstream = "brokers"
[route.mqtt]
client_id_pattern = "^ws-"
"#;
    let gw = TestGateway::start_logged(&text, tempfile::tempdir().unwrap()).await;
    let web = gw.addr("web");
    let said = paho(web, "ws-dev-1");
    assert!(said.contains("connack 0"), "{said}");
    assert!(said.contains("got over-ws"), "QoS 1 there and back: {said}");
    // The same identifier over the MQTT listener: the same broker.
    let out = crate::mqtt::publish(&gw.addr("devices").port().to_string(), "ws-dev-1", &[]);
    assert!(out.status.success(), "{out:?}");
    let said = paho(web, "bad-id");
    assert!(
        said.contains("connack 2"),
        "identifier rejected, in the WebSocket: {said}"
    );
    let plain = http1_get(web, "gw", "/mqtt").await;
    assert_eq!(plain.status, 426, "{}", plain.body);
    assert_eq!(plain.headers["upgrade"], "websocket");

    wait_until(|| {
        lines(gw.dir())
            .iter()
            .filter(|l| l["method"] == "MQTT")
            .count()
            >= 3
    })
    .await;
    let all = lines(gw.dir());
    let mqtt: Vec<_> = all.iter().filter(|l| l["method"] == "MQTT").collect();
    let over_ws = mqtt
        .iter()
        .find(|l| l["protocol"] == "mqtt-ws" && l["path"] == "ws-dev-1")
        .expect("the WebSocket device's line");
    let over_tcp = mqtt
        .iter()
        .find(|l| l["protocol"] == "mqtt" && l["path"] == "ws-dev-1")
        .expect("the TCP device's line");
    assert_eq!(over_ws["status"], 200, "{over_ws}");
    assert_eq!(
        over_ws["upstream"], over_tcp["upstream"],
        "one identifier, one broker: {mqtt:#?}"
    );
    assert!(
        mqtt.iter()
            .any(|l| l["protocol"] == "mqtt-ws" && l["status"] == 400),
        "the refused identifier: {mqtt:#?}"
    );
    assert!(
        all.iter()
            .any(|l| l["method"] == "GET" && l["status"] == 101),
        "the upgrade's own line: {all:#?}"
    );
    let counts = gw.gateway().metrics().snapshot().mqtt;
    let at = |name: &str| {
        sluice_proxy::MQTT_OUTCOMES
            .iter()
            .position(|o| *o == name)
            .unwrap()
    };
    assert_eq!(counts[at("proxied")], 2);
    assert_eq!(counts[at("client_id_not_valid")], 1);
}
