//! `kind = "tcp"` listeners, passthrough, the PROXY protocol: what loads and what is refused.

use super::{errors, said_at};
use crate::{HostPattern, ListenerKind, ProxyProtocol, load_str};
use std::path::Path;
use std::time::Duration;

const UPSTREAMS: &str = r#"
[[upstream]]
name = "db"
servers = [{ address = "127.0.0.1:5432" }]
send_proxy_protocol = "v2"
[[upstream]]
name = "b"
servers = [{ address = "127.0.0.1:8443" }]
"#;

#[test]
fn tcp_and_passthrough_listeners_load_with_their_groups() {
    let src = format!(
        r#"
[[listener]]
name = "db"
address = "127.0.0.1:5433"
kind = "tcp"
upstream = "db"
idle_timeout = "1h"
proxy_protocol = true
trusted_proxies = ["10.0.0.0/8"]
[[listener]]
name = "pass"
address = "127.0.0.1:443"
kind = "tcp"
passthrough = {{ "*.example.com" = "b", "a.example.com" = "db" }}
{UPSTREAMS}"#
    );
    let dir = tempfile::tempdir().unwrap();
    let s = load_str(&src, "t.toml", dir.path()).unwrap();
    let ListenerKind::Tcp(db) = &s.listeners[0].kind else {
        panic!("{:?}", s.listeners[0].kind)
    };
    assert_eq!(
        (db.upstream, db.idle_timeout),
        (Some(0), Duration::from_secs(3600))
    );
    assert!(db.passthrough.is_empty());
    assert!(s.listeners[0].proxy_protocol);
    let ListenerKind::Tcp(pass) = &s.listeners[1].kind else {
        panic!()
    };
    assert_eq!(pass.upstream, None);
    assert_eq!(
        pass.passthrough,
        vec![
            (HostPattern::Exact("a.example.com".into()), 0),
            (HostPattern::Wildcard("example.com".into()), 1)
        ],
        "exact names before wildcards"
    );
    assert_eq!(
        pass.idle_timeout,
        Duration::from_secs(600),
        "NGINX's proxy_timeout"
    );
    assert!(!s.listeners[1].proxy_protocol);
    assert_eq!(s.upstreams[0].send_proxy_protocol, Some(ProxyProtocol::V2));
    assert_eq!(s.upstreams[1].send_proxy_protocol, None);
}

#[test]
fn a_broken_layer4_configuration_says_what_to_write() {
    let src = broken_layer4_configuration();
    let dir = tempfile::tempdir().unwrap();
    let errs = errors(&src, dir.path());
    let at = |needle: &str| said_at(&errs, &src, needle);
    assert!(
        at("name = \"no-upstream\"").contains("has no upstream"),
        "{errs:#?}"
    );
    assert!(
        at("upstream = \"dbb\"").contains("use one of: b, db, h2, v3"),
        "{errs:#?}"
    );
    assert!(
        at("passthrough = {").contains("both terminates TLS"),
        "{errs:#?}"
    );
    assert!(
        at("# on an HTTP listener").contains("for kind = \"tcp\" listeners"),
        "{errs:#?}"
    );
    assert!(
        at("proxy_protocol = true").contains("trusted_proxies = ["),
        "{errs:#?}"
    );
    assert!(at("kind = \"udp\"").contains("\"http\""), "{errs:#?}");
    assert!(
        at("send_proxy_protocol = \"v1\"").contains("use protocol = \"http1\""),
        "{errs:#?}"
    );
    assert!(
        at("send_proxy_protocol = \"v3\"").contains("v2"),
        "{errs:#?}"
    );
    assert!(
        at("listeners = [\"fine-tcp\"]").contains("does not route requests"),
        "{errs:#?}"
    );
}

/// A configuration with one mistake of each kind a layer-4 listener or upstream can make.
fn broken_layer4_configuration() -> String {
    format!(
        r#"
[[listener]]
name = "no-upstream"
address = "127.0.0.1:1"
kind = "tcp"
[[listener]]
name = "misspelt"
address = "127.0.0.1:2"
kind = "tcp"
upstream = "dbb"
[[listener]]
name = "both"
address = "127.0.0.1:3"
kind = "tcp"
passthrough = {{ "a.test" = "db" }}
[listener.tls]
[[listener]]
name = "http-with-upstream"
address = "127.0.0.1:4"
upstream = "b" # on an HTTP listener
[[listener]]
name = "untrusting"
address = "127.0.0.1:5"
proxy_protocol = true
[[listener]]
name = "bad-kind"
address = "127.0.0.1:6"
kind = "udp"
[[upstream]]
name = "h2"
servers = [{{ address = "127.0.0.1:9" }}]
protocol = "h2"
send_proxy_protocol = "v1"
[[upstream]]
name = "v3"
servers = [{{ address = "127.0.0.1:9" }}]
send_proxy_protocol = "v3"
[[listener]]
name = "fine-tcp"
address = "127.0.0.1:7"
kind = "tcp"
upstream = "b"
[[route]]
name = "r"
listeners = ["fine-tcp"]
upstream = "h2"
{UPSTREAMS}"#
    )
}

#[test]
fn upstream_tls_loads_its_ca_and_refuses_what_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    super::write_cert(dir.path(), "ca", "ca.test");
    std::fs::write(dir.path().join("not-pem.txt"), "hello").unwrap();
    let good = r#"
[[listener]]
name = "t"
address = "127.0.0.1:1"
kind = "tcp"
upstream = "s"
[[upstream]]
name = "s"
servers = [{ address = "127.0.0.1:9" }]
[upstream.tls]
server_name = "db.internal"
ca = "ca.crt"
[[upstream]]
name = "system-roots"
servers = [{ address = "127.0.0.1:9" }]
[upstream.tls]
verify = false
"#;
    let s = load_str(good, "t.toml", dir.path()).unwrap();
    let tls = s.upstreams[0].tls.as_ref().unwrap();
    assert_eq!(tls.server_name.as_deref(), Some("db.internal"));
    assert!(
        tls.ca
            .as_ref()
            .unwrap()
            .starts_with(b"-----BEGIN CERTIFICATE-----")
    );
    assert!(tls.verify);
    let open = s.upstreams[1].tls.as_ref().unwrap();
    assert_eq!((open.ca.is_none(), open.verify), (true, false));

    let bad = r#"
[[listener]]
name = "pass"
address = "127.0.0.1:1"
kind = "tcp"
passthrough = { "a.test" = "s" }
[[upstream]]
name = "s"
servers = [{ address = "127.0.0.1:9" }]
[upstream.tls]
ca = "missing.pem"
[[upstream]]
name = "junk"
servers = [{ address = "127.0.0.1:9" }]
[upstream.tls]
ca = "not-pem.txt"
"#;
    let errs = errors(bad, dir.path());
    let at = |needle: &str| said_at(&errs, bad, needle);
    assert!(
        at("ca = \"missing.pem\"").contains("cannot read CA file"),
        "{errs:#?}"
    );
    assert!(
        at("ca = \"not-pem.txt\"").contains("holds no PEM certificate"),
        "{errs:#?}"
    );
    // The passthrough check needs the upstream loaded: with the CA fixed it is the error left.
    let bad = bad
        .replace("missing.pem", "ca.crt")
        .replace("not-pem.txt", "ca.crt");
    let errs = errors(&bad, dir.path());
    assert!(
        said_at(&errs, &bad, "passthrough = {").contains("which has [upstream.tls]"),
        "{errs:#?}"
    );
}

#[test]
fn mqtt_listeners_load_with_their_defaults_and_their_mistakes_are_named() {
    let brokers = r#"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{ address = "127.0.0.1:1883" }, { address = "127.0.0.1:1884" }]
"#;
    let dir = tempfile::tempdir().unwrap();
    mqtt_listeners_load_with_their_defaults(dir.path(), brokers);
    mqtt_listener_mistakes_are_named(dir.path(), brokers);
}

/// Two MQTT listeners, one with the defaults and one with every setting.
fn mqtt_listeners_load_with_their_defaults(dir: &Path, brokers: &str) {
    let src = format!(
        r#"
[[listener]]
name = "devices"
address = "127.0.0.1:1883"
kind = "mqtt"
upstream = "brokers"
[[listener]]
name = "by-user"
address = "127.0.0.1:1884"
kind = "mqtt"
upstream = "brokers"
idle_timeout = "2m"
[listener.mqtt]
connect_timeout = "3s"
max_connect_size = "8k"
route_by = "username"
{brokers}"#
    );
    let s = load_str(&src, "t.toml", dir).unwrap();
    let ListenerKind::Mqtt(d) = &s.listeners[0].kind else {
        panic!("{:?}", s.listeners[0].kind)
    };
    assert_eq!(
        (d.connect_timeout, d.max_connect_size, d.route_by),
        (
            Duration::from_secs(10),
            64 << 10,
            crate::MqttRouteBy::ClientId
        ),
        "defaults"
    );
    let ListenerKind::Mqtt(u) = &s.listeners[1].kind else {
        panic!("{:?}", s.listeners[1].kind)
    };
    assert_eq!(
        (
            u.connect_timeout,
            u.max_connect_size,
            u.route_by,
            u.idle_timeout
        ),
        (
            Duration::from_secs(3),
            8 << 10,
            crate::MqttRouteBy::Username,
            Duration::from_secs(120)
        )
    );
}

/// Each mistake of an MQTT listener (or of `[listener.mqtt]` elsewhere), where it is.
fn mqtt_listener_mistakes_are_named(dir: &Path, brokers: &str) {
    let bad = format!(
        r#"
[[listener]]
name = "round"
address = "127.0.0.1:1885"
kind = "mqtt"
upstream = "db"
[[listener]]
name = "web"
address = "127.0.0.1:8080"
[listener.mqtt]
route_by = "ip"
[[listener]]
name = "pass"
address = "127.0.0.1:8883"
kind = "mqtt"
passthrough = {{ "a.example.com" = "brokers" }}
[[listener]]
name = "lost"
address = "127.0.0.1:1886"
kind = "mqtt"
[listener.mqtt]
route_by = "device"
client_id_pattern = "^dev-[0-9"
{UPSTREAMS}{brokers}"#
    );
    let errs = errors(&bad, dir);
    let at = |needle: &str| said_at(&errs, &bad, needle);
    assert!(
        at("upstream = \"db\"").contains("does not hash"),
        "{errs:#?}"
    );
    assert!(at("upstream = \"db\"").contains("consistent_hash"));
    assert!(
        at("[listener.mqtt]").contains("is for kind = \"mqtt\" listeners"),
        "{errs:#?}"
    );
    assert!(
        at("passthrough = {").contains("cannot pass TLS through"),
        "{errs:#?}"
    );
    assert!(
        at("name = \"lost\"").contains("kind = \"mqtt\" but has no upstream"),
        "{errs:#?}"
    );
    assert!(
        at("route_by = \"device\"").contains("route_by"),
        "{errs:#?}"
    );
}

#[test]
fn an_mqtt_listener_checks_credentials_with_basic_or_jwt_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("devices.htpasswd"), "").unwrap();
    std::fs::write(dir.path().join("keys.txt"), "").unwrap();
    let listener = |auth: &str| {
        format!(
            r#"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "127.0.0.1:1883" }}]
[[listener]]
name = "devices"
address = "127.0.0.1:1883"
kind = "mqtt"
upstream = "brokers"
[listener.mqtt.auth]
{auth}
"#
        )
    };
    let good = listener(r#"basic = { htpasswd = "devices.htpasswd" }"#);
    let s = load_str(&good, "t.toml", dir.path()).unwrap();
    let ListenerKind::Mqtt(m) = &s.listeners[0].kind else {
        panic!("{:?}", s.listeners[0].kind)
    };
    assert!(m.auth.as_ref().is_some_and(|a| a.basic.is_some()));
    let bad = listener(r#"keys = { file = "keys.txt" }"#);
    let errs = errors(&bad, dir.path());
    let said = said_at(&errs, &bad, "[listener.mqtt.auth]");
    assert!(
        said.contains("`keys` reads HTTP requests, not a CONNECT"),
        "{errs:#?}"
    );
    let keyed = listener(
        "basic = { htpasswd = \"devices.htpasswd\" }\n[listener.mqtt.rate_per_client]\nrate = \"10/s\"\nkey = \"client\"",
    );
    let errs = errors(&keyed, dir.path());
    assert!(
        said_at(&errs, &keyed, "key = \"client\"").contains("`key` does not apply"),
        "{errs:#?}"
    );
    let missing = listener(r#"basic = { htpasswd = "nowhere.htpasswd" }"#);
    let errs = errors(&missing, dir.path());
    assert!(
        said_at(&errs, &missing, "nowhere").contains("listener `devices` [listener.mqtt.auth]"),
        "the owner is named: {errs:#?}"
    );
}

#[test]
fn an_mqtt_listener_asks_for_client_certificates_and_binds_a_field_to_them() {
    let dir = tempfile::tempdir().unwrap();
    super::write_cert(dir.path(), "site", "mqtt.test");
    super::write_cert(dir.path(), "ca", "devices-ca.test");
    let listener = |tls: &str, mqtt: &str| {
        format!(
            r#"
[[certificate]]
name = "site"
cert = "site.crt"
key = "site.key"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "127.0.0.1:1883" }}]
[[listener]]
name = "devices"
address = "127.0.0.1:8883"
kind = "mqtt"
upstream = "brokers"
[listener.tls]
client_ca = "ca.crt"
{tls}
[listener.mqtt]
{mqtt}
"#
        )
    };
    let good = listener(
        "client_auth = \"required\"",
        "certificate_identity = \"client_id\"",
    );
    let s = load_str(&good, "t.toml", dir.path()).unwrap();
    let ListenerKind::Mqtt(m) = &s.listeners[0].kind else {
        panic!("{:?}", s.listeners[0].kind)
    };
    assert_eq!(m.certificate_identity, Some(crate::MqttRouteBy::ClientId));
    let auth = s.listeners[0].tls.as_ref().unwrap().client_auth.as_ref();
    assert_eq!(auth.map(|a| a.mode), Some(crate::ClientAuthMode::Required));

    let optional = listener(
        "client_auth = \"optional\"",
        "certificate_identity = \"username\"",
    );
    let errs = errors(&optional, dir.path());
    assert!(
        said_at(&errs, &optional, "certificate_identity").contains("needs every device"),
        "{errs:#?}"
    );
    let forwarded = listener("client_auth = \"required\"\nforward_client_cert = true", "");
    let errs = errors(&forwarded, dir.path());
    assert!(
        said_at(&errs, &forwarded, "forward_client_cert").contains("HTTP header"),
        "{errs:#?}"
    );
    let unknown = listener(
        "client_auth = \"required\"",
        "certificate_identity = \"cn\"",
    );
    let errs = errors(&unknown, dir.path());
    assert!(
        said_at(&errs, &unknown, "certificate_identity").contains("certificate_identity"),
        "{errs:#?}"
    );
    let tcp = good.replace("kind = \"mqtt\"", "kind = \"tcp\"").replace(
        "[listener.mqtt]\ncertificate_identity = \"client_id\"\n",
        "",
    );
    let errs = errors(&tcp, dir.path());
    assert!(
        said_at(&errs, &tcp, "client_auth").contains("kind = \"tcp\""),
        "{errs:#?}"
    );
}

#[test]
fn an_mqtt_over_websocket_route_loads_and_its_mistakes_are_named() {
    let route = |extra: &str, balance: &str| {
        let factor = if balance == "consistent_hash" {
            "hash_balance_factor = 0"
        } else {
            ""
        };
        format!(
            r#"
[[upstream]]
name = "brokers"
balance = "{balance}"
servers = [{{ address = "127.0.0.1:1883" }}]
{factor}
[[listener]]
name = "web"
address = "127.0.0.1:8080"
[[route]]
name = "devices-ws"
path_exact = "/mqtt"
upstream = "brokers"
{extra}
[route.mqtt]
route_by = "username"
client_id_pattern = "^dev-"
"#
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let good = route("", "consistent_hash");
    let s = load_str(&good, "t.toml", dir.path()).unwrap();
    let m = s.routes[0].mqtt.as_ref().expect("[route.mqtt]");
    assert_eq!(m.upstream, 0);
    assert_eq!(m.route_by, crate::MqttRouteBy::Username);
    assert_eq!(m.connect_timeout, Duration::from_secs(10), "default");
    assert!(m.client_id_pattern.as_ref().unwrap().0.is_match("dev-1"));

    let round = route("", "round_robin");
    let errs = errors(&round, dir.path());
    assert!(
        said_at(&errs, &round, "[route.mqtt]").contains("does not hash"),
        "{errs:#?}"
    );
    let cached = route("[route.cache]", "consistent_hash");
    let errs = errors(&cached, dir.path());
    assert!(
        said_at(&errs, &cached, "[route.mqtt]").contains("[route.cache]"),
        "{errs:#?}"
    );
}

#[test]
fn a_cap_per_client_identifier_loads_and_its_mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let listener = |mqtt: &str, redis: &str| {
        format!(
            r#"
{redis}
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "127.0.0.1:1883" }}]
[[listener]]
name = "devices"
address = "127.0.0.1:1884"
kind = "mqtt"
upstream = "brokers"
[listener.mqtt]
{mqtt}
"#
        )
    };
    let cap = |toml: &str| {
        let s = load_str(toml, "t.toml", dir.path()).unwrap();
        let ListenerKind::Mqtt(m) = &s.listeners[0].kind else {
            panic!("{:?}", s.listeners[0].kind)
        };
        m.max_connections_per_client_id
    };
    let local = listener("max_connections_per_client_id = 1", "");
    let want = crate::ClientIdCap {
        max: 1,
        shared: false,
    };
    assert_eq!(cap(&local), Some(want));
    assert_eq!(cap(&listener("", "")), None);
    let shared = listener(
        "max_connections_per_client_id = 2\nmax_connections_store = \"redis\"",
        "[rate_limit]\nredis = \"redis://127.0.0.1:6379/\"",
    );
    let want = crate::ClientIdCap {
        max: 2,
        shared: true,
    };
    assert_eq!(cap(&shared), Some(want));

    let refused = |mqtt: &str, said: &str| {
        let toml = listener(mqtt, "");
        let errs = errors(&toml, dir.path());
        let at = said_at(&errs, &toml, mqtt.lines().last().unwrap_or(mqtt));
        assert!(at.contains(said), "{mqtt}: {errs:#?}");
    };
    let cap_in_redis = "max_connections_per_client_id = 1\nmax_connections_store = \"redis\"";
    refused(cap_in_redis, "no Redis is configured");
    refused("max_connections_per_client_id = 0", "every device");
    refused("max_connections_store = \"local\"", "there is no cap");
    let unknown = "max_connections_per_client_id = 1\nmax_connections_store = \"etcd\"";
    refused(unknown, "not a known value");
}

/// Two upstream settings that look harmless and break an MQTT entrance: a bounded-load ring
/// (the default `hash_balance_factor`, or any factor) moves a device away from its session,
/// and an HTTP health check marks every broker down. `sluice check` refuses both, on the line
/// to change, with the value to write.
#[test]
fn brokers_that_would_lose_devices_their_sessions_are_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let config = |upstream_extra: &str, kind: &str| {
        format!(
            r#"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
servers = [{{ address = "127.0.0.1:1883" }}]
{upstream_extra}
[[listener]]
name = "devices"
address = "127.0.0.1:1884"
{kind}
upstream = "brokers"
"#
        )
    };
    let mqtt = r#"kind = "mqtt""#;
    let default_factor = config("", mqtt);
    let errs = errors(&default_factor, dir.path());
    let said = said_at(&errs, &default_factor, r#"name = "brokers""#);
    assert!(
        said.contains("hash_balance_factor = 1.25, the default"),
        "{errs:#?}"
    );
    assert!(said.contains("set hash_balance_factor = 0"), "{errs:#?}");
    let bounded = config("hash_balance_factor = 2.0", mqtt);
    let errs = errors(&bounded, dir.path());
    assert!(
        said_at(&errs, &bounded, "hash_balance_factor = 2.0")
            .contains("set hash_balance_factor = 0"),
        "{errs:#?}"
    );
    let http_check = config(
        "hash_balance_factor = 0\n[upstream.health_check]\npath = \"/\"",
        mqtt,
    );
    let errs = errors(&http_check, dir.path());
    assert!(
        said_at(&errs, &http_check, "[upstream.health_check]").contains("type = \"tcp\""),
        "{errs:#?}"
    );
    let tcp_check = config(
        "hash_balance_factor = 0\n[upstream.health_check]\ntype = \"tcp\"",
        mqtt,
    );
    load_str(&tcp_check, "t.toml", dir.path()).unwrap();
    // The same upstream behind a TCP listener is not MQTT's business.
    let tcp = config("", r#"kind = "tcp""#);
    load_str(&tcp, "t.toml", dir.path()).unwrap();
    // A WebSocket route in front of the brokers is held to the same rule.
    let route = format!(
        "{}\n[[route]]\nname = \"ws\"\npath_exact = \"/mqtt\"\nupstream = \"brokers\"\n[route.mqtt]\n",
        config("", mqtt).replace("kind = \"mqtt\"\nupstream = \"brokers\"\n", "")
    );
    let errs = errors(&route, dir.path());
    assert!(
        said_at(&errs, &route, r#"name = "brokers""#).contains("route `ws` [route.mqtt]"),
        "{errs:#?}"
    );
}

/// `[route.mqtt]` admits a device by the MQTT listener's rules: credentials, connection
/// rates, the certificate binding and the idle timeout load as `[listener.mqtt]`'s do.
#[test]
fn an_mqtt_over_websocket_route_admits_by_the_listeners_rules() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("devices.htpasswd"), "dev:{PLAIN}pw\n").unwrap();
    let src = |mqtt: &str| {
        format!(
            r#"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "127.0.0.1:1883" }}]
[[listener]]
name = "web"
address = "127.0.0.1:8080"
[[route]]
name = "ws"
path_exact = "/mqtt"
upstream = "brokers"
[route.mqtt]
{mqtt}
"#
        )
    };
    let good = src(r#"certificate_identity = "client_id"
idle_timeout = "2m"
[route.mqtt.auth]
basic = { htpasswd = "devices.htpasswd" }
[route.mqtt.rate_per_client]
rate = "10/s"
[route.mqtt.rate_per_client_id]
rate = "6/m"
burst = 3"#);
    let s = load_str(&good, "t.toml", dir.path()).unwrap();
    let m = s.routes[0].mqtt.as_ref().unwrap();
    assert!(m.auth.as_ref().is_some_and(|a| a.basic.is_some()));
    assert!(m.rate_per_client.is_some() && m.rate_per_client_id.is_some());
    assert_eq!(m.certificate_identity, Some(crate::MqttRouteBy::ClientId));
    assert_eq!(m.idle_timeout, Duration::from_secs(120));
    let plain = load_str(&src(""), "t.toml", dir.path()).unwrap();
    let m = plain.routes[0].mqtt.as_ref().unwrap();
    assert_eq!(
        m.idle_timeout,
        Duration::from_secs(600),
        "a listener's default"
    );
    let keyed = src("[route.mqtt.rate_per_client]\nrate = \"1/s\"\nkey = \"client\"");
    let errs = errors(&keyed, dir.path());
    assert!(
        said_at(&errs, &keyed, "key = ").contains("route `ws` [route.mqtt.rate_per_client]"),
        "{errs:#?}"
    );
    let forward = src("[route.mqtt.auth]\nforward = { url = \"http://127.0.0.1:9/\" }");
    let errs = errors(&forward, dir.path());
    assert!(
        said_at(&errs, &forward, "[route.mqtt.auth]").contains("reads HTTP requests"),
        "{errs:#?}"
    );
}
