use super::{errors, said_at};
use crate::{DEFAULT_ACCESS_FLUSH, DEFAULT_REQUEST_LOG_BYTES, HttpLogFormat, ShipSink, load_str};
use std::time::Duration;

const BASE: &str = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{ address = "127.0.0.1:9000" }]
[[route]]
name = "a"
upstream = "o"
"#;

#[test]
fn the_access_log_waits_200ms_unless_told_and_zero_writes_each_line() {
    let dir = tempfile::tempdir().unwrap();
    let s = load_str(BASE, "none.toml", dir.path()).unwrap();
    assert_eq!(s.log.access_flush, DEFAULT_ACCESS_FLUSH);
    assert_eq!(DEFAULT_ACCESS_FLUSH, Duration::from_millis(200));
    let at_once = format!("{BASE}\n[log]\naccess_flush = \"0s\"\n");
    let s = load_str(&at_once, "zero.toml", dir.path()).unwrap();
    assert_eq!(s.log.access_flush, Duration::ZERO);
    let bad = format!("{BASE}\n[log]\naccess_flush = \"soon\"\n");
    let errs = errors(&bad, dir.path());
    assert!(
        !said_at(&errs, &bad, "access_flush").is_empty(),
        "{errs:#?}"
    );
}

#[test]
fn log_shippers_and_the_request_log_load_with_their_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let s = load_str(BASE, "none.toml", dir.path()).unwrap();
    assert!(s.log.ship.is_empty());
    assert_eq!(s.log.request_log_bytes, DEFAULT_REQUEST_LOG_BYTES);
    let text = format!(
        r#"{BASE}
[log]
request_log = "1m"
[[log.ship]]
name = "store"
url = "http://127.0.0.1:9428/insert/jsonline?_time_field=time"
headers = {{ Authorization = "Bearer x" }}
batch = 500
flush = "250ms"
[[log.ship]]
url = "http://es:9200/_bulk"
format = "elasticsearch"
index = "sluice-access"
queue = "1m"
[[log.ship]]
name = "syslog"
url = "tcp://127.0.0.1:601"
facility = "local3"
app_name = "edge"
"#
    );
    let log = load_str(&text, "good.toml", dir.path()).unwrap().log;
    assert_eq!(log.request_log_bytes, 1 << 20);
    assert_eq!(log.ship.len(), 3);
    let store = &log.ship[0];
    assert_eq!(store.name, "store");
    assert_eq!((store.batch_lines, store.queue_bytes), (500, 8 << 20));
    assert_eq!(store.flush_every, Duration::from_millis(250));
    assert_eq!(store.timeout, Duration::from_secs(5));
    match &store.sink {
        ShipSink::Http {
            url,
            format,
            headers,
            ca,
            client_identity,
        } => {
            assert!(ca.is_none() && client_identity.is_none());
            assert_eq!(
                url.path_and_query().unwrap(),
                "/insert/jsonline?_time_field=time"
            );
            assert_eq!(*format, HttpLogFormat::JsonLines);
            assert_eq!(
                headers,
                &[("Authorization".to_owned(), "Bearer x".to_owned())]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.ship[1].name, "ship-2");
    assert_eq!(log.ship[1].queue_bytes, 1 << 20);
    assert!(matches!(
        &log.ship[1].sink,
        ShipSink::Http { format: HttpLogFormat::Elasticsearch { index }, .. } if index == "sluice-access"
    ));
    assert_eq!(
        log.ship[2].sink,
        ShipSink::Syslog {
            address: "127.0.0.1:601".into(),
            transport: crate::SyslogTransport::Tcp,
            facility: 19,
            app_name: "edge".into(),
        }
    );
    let off = format!("{BASE}[log]\nrequest_log = 0\n");
    assert_eq!(
        load_str(&off, "off.toml", dir.path())
            .unwrap()
            .log
            .request_log_bytes,
        0
    );
}

#[test]
fn log_shipper_mistakes_are_named_where_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let bad = bad_shippers();
    let errs = errors(&bad, dir.path());
    let at = |needle: &str| said_at(&errs, &bad, needle);
    assert!(
        at("\"ftp://logs:21\"").contains("neither http(s)://"),
        "{errs:#?}"
    );
    assert!(at("\"gelf\"").contains("not known"), "{errs:#?}");
    assert!(
        errs.iter().any(|e| e.to_string().contains("used twice")),
        "{errs:#?}"
    );
    assert!(
        at("\"udp://logs example:514\"").contains("does not name a host and port"),
        "{errs:#?}"
    );
    assert!(at("\"local9\"").contains("not known"), "{errs:#?}");
    assert!(
        at("protocol = \"grpc\"").contains("`protocol` is for format = \"otlp\""),
        "{errs:#?}"
    );
    assert!(
        at("client_cert = \"c.pem\"").contains("client_cert and client_key go together"),
        "{errs:#?}"
    );
    assert!(
        errs.iter().any(|e| e
            .to_string()
            .contains("`index` is not for this syslog shipper")),
        "{errs:#?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.to_string().contains("`facility` is for syslog")),
        "{errs:#?}"
    );
    assert!(at("batch = 0").contains("at least one"), "{errs:#?}");
    assert!(at("\"ca.pem\"").contains("for https://"), "{errs:#?}");
    assert!(
        at("\"nothere.pem\"").contains("cannot read CA file"),
        "{errs:#?}"
    );
    assert_eq!(errs.len(), 12, "{errs:#?}");
}

/// `[[log.ship]]` entries with one mistake or more each.
fn bad_shippers() -> String {
    format!(
        r#"{BASE}
[[log.ship]]
name = "a"
url = "ftp://logs:21"
[[log.ship]]
name = "a"
url = "http://127.0.0.1:9428/x"
format = "gelf"
[[log.ship]]
name = "s"
url = "udp://logs example:514"
[[log.ship]]
name = "t"
url = "udp://127.0.0.1:514"
facility = "local9"
index = "x"
[[log.ship]]
name = "h"
url = "http://127.0.0.1:9428/x"
facility = "local0"
batch = 0
ca = "ca.pem"
[[log.ship]]
name = "proto"
url = "http://127.0.0.1:9428/x"
protocol = "grpc"
[[log.ship]]
name = "half"
url = "tls://logs.example:6514"
client_cert = "c.pem"
[[log.ship]]
name = "missing-ca"
url = "https://logs.example/_bulk"
ca = "nothere.pem"
"#
    )
}
