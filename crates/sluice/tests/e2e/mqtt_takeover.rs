//! `max_connections_per_client_id` end to end: two gateways, each in front of its own
//! Debian mosquitto broker (so that no broker sees both connections and takes one over
//! itself), sharing the cap through a real redis-server. A device's newer connection
//! through either gateway closes its older one, on the same gateway at once and on the other
//! through Redis; other identifiers are untouched; with Redis gone each gateway still caps
//! its own connections and counts the admissions the fleet did not see, and sharing resumes
//! when Redis is back.

use crate::mqtt::{CONNACK_OK, Mosquitto, config, connect, lines};
use crate::support::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A device connected as `id` (3.1.1, keep alive 60), its CONNACK read.
async fn device(gw: SocketAddr, id: &str) -> TcpStream {
    let mut s = TcpStream::connect(gw).await.unwrap();
    s.write_all(&connect(id)).await.unwrap();
    let mut ack = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut ack))
        .await
        .expect("a CONNACK within 5 s")
        .unwrap();
    assert_eq!(ack, CONNACK_OK, "{id} admitted");
    s
}

/// Whether the gateway closed the device's connection within `secs`.
async fn closed_within(s: &mut TcpStream, secs: u64) -> bool {
    let mut b = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(secs), s.read(&mut b)).await;
    matches!(read, Ok(Ok(0) | Err(_)))
}

/// The connection still relays: a PINGREQ gets the broker's PINGRESP.
async fn pings(s: &mut TcpStream) -> bool {
    if s.write_all(&[0xc0, 0x00]).await.is_err() {
        return false;
    }
    let mut b = [0u8; 2];
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut b)).await;
    matches!(read, Ok(Ok(_))) && b == [0xd0, 0x00]
}

/// How many connections the fleet's set holds for `id`.
fn members(redis: &Redis, id: &str) -> usize {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "ZCARD"])
        .arg(format!("sluice:mqtt:brokers:{id}"))
        .output()
        .expect("redis-cli (Debian's redis-tools, with redis-server)");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// How many gateways listen for takeovers in `redis`.
fn listening(redis: &Redis) -> usize {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "PUBSUB", "CHANNELS"])
        .arg("sluice:mqtt:takeover:*")
        .output()
        .expect("redis-cli (Debian's redis-tools, with redis-server)");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Whether `/metrics` shows `line` within 10 s (a connection is counted as its task ends,
/// just after its socket closes).
async fn metric(gw: &TestGateway, line: &str) -> bool {
    let (admin, _task) = admin_for(gw).await;
    for _ in 0..200 {
        let metrics = crate::auth::get(admin, "/metrics", &[]).await.body;
        if metrics.lines().any(|l| l == line) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_connection_closes_the_older_one_across_the_fleet() {
    let mut redis = Redis::start().await;
    let (b1, b2) = (Mosquitto::start().await, Mosquitto::start().await);
    let cap = "max_connections_per_client_id = 1\nmax_connections_store = \"redis\"\n";
    let toml = |broker: &Mosquitto| {
        let store = format!("[rate_limit]\nredis = \"{}\"\n", redis.url());
        store + &config(&[broker], cap)
    };
    let a = TestGateway::start_logged(&toml(&b1), tempfile::tempdir().unwrap()).await;
    let b = TestGateway::start_logged(&toml(&b2), tempfile::tempdir().unwrap()).await;
    let (at_a, at_b) = (a.addr("devices"), b.addr("devices"));
    wait_until(|| listening(&redis) == 2).await;

    let mut other = device(at_a, "dev-2").await;
    let mut first = device(at_a, "dev-1").await;
    // The fleet orders connections as Redis receives them (admission does not wait for it):
    // the first must be there before the second for the second to be the newer.
    wait_until(|| members(&redis, "dev-1") == 1).await;
    let mut second = device(at_b, "dev-1").await;
    assert!(
        closed_within(&mut first, 10).await,
        "gateway A closes dev-1's older connection when B admits a newer one"
    );
    assert!(pings(&mut second).await, "the newer one relays");
    assert!(metric(&a, "sluice_mqtt_takeovers_total{by=\"fleet\"} 1").await);
    assert!(
        metric(
            &a,
            "sluice_mqtt_connections_total{outcome=\"taken_over\"} 1"
        )
        .await
    );
    wait_until(|| (lines(a.dir()).iter()).any(|l| l["path"] == "dev-1" && l["status"] == 409))
        .await;

    // On one gateway the oldest closes at once; Redis's word about it then changes nothing.
    let mut third = device(at_b, "dev-1").await;
    assert!(
        closed_within(&mut second, 10).await,
        "B closes its own older one"
    );
    assert!(pings(&mut third).await);
    assert!(metric(&b, "sluice_mqtt_takeovers_total{by=\"gateway\"} 1").await);
    assert!(metric(&b, "sluice_mqtt_takeovers_total{by=\"fleet\"} 0").await);
    assert!(pings(&mut other).await, "another identifier is untouched");

    // Redis gone: each gateway still caps its own devices, and counts what it did not share.
    redis.kill();
    let mut alone = device(at_a, "dev-3").await;
    let mut newer = device(at_a, "dev-3").await;
    assert!(
        closed_within(&mut alone, 10).await,
        "the cap holds on A alone"
    );
    assert!(pings(&mut newer).await);
    let (admin, _task) = admin_for(&a).await;
    let unshared = |body: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix("sluice_mqtt_unshared_admissions_total "))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut seen = 0;
    for _ in 0..100 {
        seen = unshared(&crate::auth::get(admin, "/metrics", &[]).await.body);
        if seen >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen >= 1, "admissions the fleet did not see are counted");

    // Redis back: sharing resumes once both gateways have reconnected (each admission
    // while a gateway still holds a dead connection goes unshared, so try a few devices).
    redis.restart().await;
    wait_until(|| listening(&redis) == 2).await;
    let mut resumed = false;
    for round in 0..20 {
        let id = format!("dev-back-{round}");
        let mut older = device(at_a, &id).await;
        let mut shared = false;
        for _ in 0..40 {
            shared = members(&redis, &id) == 1;
            if shared {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !shared {
            continue; // A's store still reconnecting: this admission went unshared
        }
        let _newer = device(at_b, &id).await;
        if closed_within(&mut older, 5).await {
            resumed = true;
            break;
        }
    }
    assert!(resumed, "the fleet's cap applies again after Redis returns");
}
