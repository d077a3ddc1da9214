use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use sluice_offload::FallbackReason;
use sluice_tls::selfsigned::KeyKind;

async fn gateway(crypto: &str) -> (TestGateway, Origin) {
    gateway_with(crypto, "").await
}

/// A gateway with `crypto` as its `[offload.crypto]` body. These tests count where each job
/// went, so a generous engine deadline is the default here: tests run in parallel on a loaded
/// two-core machine, and a job that outlived the 100 ms default would fall back (correctly,
/// but not what these tests look at). A test about deadlines names its own.
async fn gateway_with(crypto: &str, listener_tls: &str) -> (TestGateway, Origin) {
    gateway_with_key(KeyKind::Rsa2048, crypto, listener_tls).await
}

/// [`gateway_with`], its one certificate's key of `kind`.
async fn gateway_with_key(
    kind: KeyKind,
    crypto: &str,
    listener_tls: &str,
) -> (TestGateway, Origin) {
    let crypto = if crypto.contains("deadline") {
        crypto.to_string()
    } else {
        format!("{crypto}\ndeadline = \"30s\"")
    };
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "rsa", kind, &["a.test"]);
    let cfg = format!(
        r#"
[log]
access_log = "off"
[offload.crypto]
{crypto}
[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
session_tickets = false
{listener_tls}
[[certificate]]
name = "rsa"
cert = "rsa.crt"
key = "rsa.key"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    );
    (TestGateway::start(&cfg, dir).await, origin)
}

async fn one_request(addr: std::net::SocketAddr) -> u16 {
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    request_on(h).await
}

async fn request_on(h: Handshake) -> u16 {
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(h.stream))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::get("/whoami")
        .header("host", "a.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    match sender.send_request(req).await {
        Ok(resp) => collect(resp).await.status,
        Err(e) => panic!("{e:?}; connection ended with {:?}", conn.await),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_handshakes_on_a_pool_of_capacity_one_all_succeed() {
    let (gw, _o) = gateway("engines = [\"pool\"]\npool_threads = 1\npool_capacity = 1").await;
    let addr = gw.addr("https");

    // A keep-alive connection established before the storm.
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let (mut keepalive, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(h.stream))
            .await
            .unwrap();
    tokio::spawn(conn);

    let storm: Vec<_> = (0..300).map(|_| tokio::spawn(one_request(addr))).collect();
    // Requests on the established connection keep being answered meanwhile.
    for _ in 0..20 {
        keepalive.ready().await.unwrap();
        let req = http::Request::get("/whoami")
            .header("host", "a.test")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let got = collect(keepalive.send_request(req).await.unwrap()).await;
        assert_eq!(got.status, 200);
    }
    for t in storm {
        assert_eq!(t.await.unwrap(), 200, "every handshake succeeded");
    }

    let c = gw.gateway().crypto_counters();
    let (pool, inline) = (&c[0], &c[1]);
    assert_eq!(
        (pool.engine.as_str(), inline.engine.as_str()),
        ("pool", "inline")
    );
    assert_eq!(
        pool.completed + inline.completed,
        301,
        "one signature per full handshake: {c:?}"
    );
    assert!(pool.completed >= 1, "the pool signed some: {c:?}");
    assert!(
        pool.fell_back(FallbackReason::Busy) >= 1,
        "at capacity 1 some fell back: {c:?}"
    );
    assert_eq!((pool.in_flight, inline.in_flight, pool.failed), (0, 0, 0));
    let m = gw.gateway().metrics().snapshot();
    assert_eq!(m.handshakes[1], [301, 0], "TLS 1.3, none resumed");
    assert_eq!(m.requests[1], 320, "2xx responses");
}

#[tokio::test]
async fn with_no_engine_configured_handshakes_sign_inline() {
    let (gw, _o) = gateway("engines = []").await;
    for _ in 0..5 {
        assert_eq!(one_request(gw.addr("https")).await, 200);
    }
    let c = gw.gateway().crypto_counters();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].engine.as_str(), c[0].completed), ("inline", 5));
}

#[tokio::test]
async fn a_certificate_can_choose_its_own_engines() {
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "pooled", KeyKind::Rsa2048, &["a.test"]);
    write_cert(dir.path(), "local", KeyKind::Rsa2048, &["b.test"]);
    let cfg = format!(
        r#"
[log]
access_log = "off"
[offload.crypto]
engines = ["pool"]
[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
session_tickets = false
[[certificate]]
name = "pooled"
cert = "pooled.crt"
key = "pooled.key"
[[certificate]]
name = "local"
cert = "local.crt"
key = "local.key"
offload_engines = []
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    );
    let gw = TestGateway::start(&cfg, dir).await;
    for sni in ["a.test", "a.test", "a.test", "b.test", "b.test"] {
        let h = tls_connect(
            gw.addr("https"),
            &ClientOpts {
                sni: Some(sni),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let req = http::Request::get("/whoami")
            .header("host", sni)
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(http1_send(h.stream, req).await.status, 200);
    }
    let c = gw.gateway().crypto_counters();
    let (pool, inline) = (&c[0], &c[1]);
    assert_eq!(pool.completed, 3, "a.test signs on the pool: {c:?}");
    assert_eq!(
        pool.routed_past, 2,
        "b.test's jobs are not the pool's: {c:?}"
    );
    assert_eq!(inline.completed, 2);
}

#[tokio::test]
async fn a_client_that_goes_away_mid_handshake_leaves_nothing_in_flight() {
    let (gw, _o) = gateway("engines = [\"pool\"]\npool_threads = 1").await;
    let addr = gw.addr("https");
    // Send a ClientHello and close at once, many times, while real clients keep working.
    for _ in 0..50 {
        let connector = boring::ssl::SslConnector::builder(boring::ssl::SslMethod::tls())
            .unwrap()
            .build();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let cfg = connector.configure().unwrap();
        let attempt = tokio_boring::connect(cfg, "a.test", tcp);
        // Poll the handshake once (the ClientHello goes out), then drop it.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), attempt).await;
    }
    assert_eq!(one_request(addr).await, 200);
    for _ in 0..500 {
        if gw
            .gateway()
            .crypto_counters()
            .iter()
            .all(|c| c.in_flight == 0)
            && gw.gateway().open_connections() == 0
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!(
        "left behind: {:?}, {} connections",
        gw.gateway().crypto_counters(),
        gw.gateway().open_connections()
    );
}

/// A TLS 1.2 client that offers only RSA key exchange: refused by default; with
/// `rsa_key_exchange = true` its premaster secret is decrypted by the pool and requests go
/// through, while a modern client on the same listener still gets ECDHE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_key_exchange_decrypts_through_the_pool_when_enabled() {
    let old_client = ClientOpts {
        sni: Some("a.test"),
        max_version: Some(boring::ssl::SslVersion::TLS1_2),
        ciphers: Some("AES128-GCM-SHA256:AES256-GCM-SHA384"),
        ..Default::default()
    };
    let (gw, _o) = gateway("engines = [\"pool\"]").await;
    assert!(
        tls_connect(gw.addr("https"), &old_client).await.is_err(),
        "RSA key exchange is off by default"
    );
    drop(gw);

    let (gw, _o) = gateway_with(
        "engines = [\"pool\"]\npool_threads = 1\npool_capacity = 2",
        "rsa_key_exchange = true",
    )
    .await;
    let addr = gw.addr("https");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let opts = old_client.clone();
        tasks.push(tokio::spawn(async move {
            let h = tls_connect(addr, &opts).await.unwrap();
            assert_eq!(h.cipher, "AES128-GCM-SHA256");
            request_on(h).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let modern = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            max_version: Some(boring::ssl::SslVersion::TLS1_2),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(modern.cipher.starts_with("ECDHE-"), "{}", modern.cipher);
    assert_eq!(request_on(modern).await, 200);

    let c = gw.gateway().crypto_counters();
    let done: u64 = c.iter().map(|c| c.completed).sum();
    assert_eq!(done, 9, "8 decryptions and 1 signature: {c:?}");
    assert!(c[0].engine == "pool" && c[0].completed >= 1, "{c:?}");
    assert_eq!(c.iter().map(|c| c.failed).sum::<u64>(), 0, "{c:?}");
}

/// The mb engine end to end: concurrent RSA-2048 handshakes are signed in batches (TLS 1.3
/// PSS signatures and TLS 1.2 RSA key exchange alike). Without AVX-512 IFMA the engine
/// answers `Unsupported` and every handshake still succeeds on the next engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mb_signs_concurrent_handshakes_in_batches_or_falls_through_without_ifma() {
    mb_handshakes("").await;
}

/// The same with RSA-2048 batches of four on 256-bit IFMA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mb_with_four_lanes_signs_concurrent_handshakes_too() {
    mb_handshakes("mb_lanes = 4").await;
}

async fn mb_handshakes(extra: &str) {
    let (gw, _o) = gateway_with(
        &format!("engines = [\"mb\", \"pool\"]\npool_threads = 1\n{extra}"),
        "rsa_key_exchange = true",
    )
    .await;
    let addr = gw.addr("https");
    let storm: Vec<_> = (0..64).map(|_| tokio::spawn(one_request(addr))).collect();
    for t in storm {
        assert_eq!(t.await.unwrap(), 200, "every handshake succeeded");
    }
    // TLS 1.2 with RSA key exchange: a decryption through the same engine.
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            max_version: Some(boring::ssl::SslVersion::TLS1_2),
            ciphers: Some("AES128-GCM-SHA256"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(request_on(h).await, 200);

    let c = gw.gateway().crypto_counters();
    let (mb, pool, inline) = (&c[0], &c[1], &c[2]);
    assert_eq!(mb.engine, "mb");
    assert_eq!(
        mb.completed + pool.completed + inline.completed,
        65,
        "{c:?}"
    );
    assert_eq!((mb.failed, pool.failed, mb.in_flight), (0, 0, 0), "{c:?}");
    let lanes = if extra.contains("mb_lanes = 4") { 4 } else { 8 };
    if sluice_crypto::Kernel::detect_lanes(lanes).is_some() {
        assert_eq!(mb.completed, 65, "mb took every job: {c:?}");
        let batches: u64 = mb.batch_size.counts.iter().sum();
        assert!((1..=65).contains(&batches), "{c:?}");
        if lanes == 4 {
            // Histogram buckets of 5 to 8 jobs: empty.
            assert_eq!(&mb.batch_size.counts[4..8], &[0, 0, 0, 0], "{c:?}");
        }
    } else {
        assert_eq!(mb.completed, 0);
        assert_eq!(mb.routed_past, 65, "{c:?}");
        assert_eq!(
            mb.fell_back.iter().sum::<u64>(),
            0,
            "routing, not a fault: {c:?}"
        );
    }
}

/// An ECDSA key's handshakes pass `mb` (it signs RSA only) by design: counted as routed past
/// it, never as a fallback, whatever the CPU (the dashboard shows fallbacks as faults).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecdsa_handshakes_are_routed_past_mb_not_counted_as_fallbacks() {
    let (gw, _o) = gateway_with_key(KeyKind::EcdsaP256, "engines = [\"mb\", \"pool\"]", "").await;
    for _ in 0..5 {
        assert_eq!(one_request(gw.addr("https")).await, 200);
    }
    let c = gw.gateway().crypto_counters();
    let (mb, pool) = (&c[0], &c[1]);
    assert_eq!(mb.engine, "mb", "{c:?}");
    assert_eq!(mb.routed_past, 5, "{c:?}");
    assert_eq!(mb.fell_back.iter().sum::<u64>(), 0, "not a fault: {c:?}");
    assert_eq!(pool.completed, 5, "{c:?}");
}

/// Whether this CPU has what the `mb` engine needs, read from /proc/cpuinfo (independently
/// of the gateway's own probe).
pub(crate) fn cpu_has_ifma() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| {
            let flags: Vec<&str> = l.split_whitespace().collect();
            flags.contains(&"avx512f") && flags.contains(&"avx512ifma")
        })
}

/// With no `engines` line the chain is chosen at start: `mb` first where the CPU has AVX-512
/// IFMA (RSA handshakes signed on it), then, with handshakes on threads of their own (the
/// default), nothing but `inline` on those threads; with handshakes on the event loop, `pool`
/// before `inline`. A handshake that starts alone stays on the event loop and signs there.
/// `/status` says which and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_engines_the_chain_is_chosen_from_the_cpu_and_shown_on_status() {
    let ifma = cpu_has_ifma();
    for isolated in [true, false] {
        let crypto = if isolated {
            "pool_threads = 1".to_owned()
        } else {
            "pool_threads = 1\ndeadline = \"30s\"\n[offload.handshakes]\nisolate = false".to_owned()
        };
        let (gw, _o) = gateway(&crypto).await;
        let addr = gw.addr("https");
        let storm: Vec<_> = (0..16).map(|_| tokio::spawn(one_request(addr))).collect();
        for t in storm {
            assert_eq!(t.await.unwrap(), 200);
        }
        let mut expect = Vec::new();
        if ifma {
            expect.push("mb");
        }
        if !isolated {
            expect.push("pool");
        }
        expect.push("inline");
        let c = gw.gateway().crypto_counters();
        let names: Vec<&str> = c.iter().map(|c| c.engine.as_str()).collect();
        assert_eq!(names, expect, "isolated {isolated}: {c:?}");
        let hs = gw.gateway().handshake_stats();
        // Isolated, a handshake that started alone ran on the event loop and signed there
        // (the software engine, last); the others went to the handshake threads and the
        // chain's first engine. Not isolated: every one on the chain's first engine.
        let (first, software) = (c[0].completed, c[c.len() - 1].completed);
        if isolated && ifma {
            assert_eq!(
                (first, software),
                (hs.handed_off, hs.kept_on_loop),
                "{c:?} {hs:?}"
            );
        } else if !isolated {
            assert_eq!(first, 16, "RSA signed on the chain's first engine: {c:?}");
        }
        assert_eq!(hs.handed_off + hs.kept_on_loop, 16, "{hs:?}");
        assert_eq!(hs.priority.is_some(), isolated);

        let (admin, task) = admin_for(&gw).await;
        let status: serde_json::Value =
            serde_json::from_str(&http1_get(admin, "admin", "/status").await.body).unwrap();
        task.abort();
        let chain = &status["offload"]["chain"];
        assert_eq!(chain["origin"], "probed", "{chain}");
        assert_eq!(chain["engines"], serde_json::json!(expect), "{chain}");
        let why = chain["why"].as_str().unwrap();
        assert!(
            why.contains(if ifma {
                "has AVX-512 IFMA"
            } else {
                "no AVX-512 IFMA"
            }),
            "{why}"
        );
        assert!(
            why.contains(if isolated {
                "handshake threads"
            } else {
                "1 thread(s)"
            }),
            "{why}"
        );
        assert_eq!(
            status["tls_handshake_scheduler"]["isolated"], isolated,
            "{status}"
        );
    }
}

/// A configured list is obeyed as written, even where the probe would choose otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_chain_is_obeyed_and_shown_as_configured() {
    let (gw, _o) = gateway("engines = [\"pool\"]\npool_threads = 1").await;
    assert_eq!(one_request(gw.addr("https")).await, 200);
    let c = gw.gateway().crypto_counters();
    let names: Vec<&str> = c.iter().map(|c| c.engine.as_str()).collect();
    assert_eq!(names, ["pool", "inline"], "{c:?}");
    let offload = gw.gateway().key_offload();
    let chain = offload.chain();
    assert_eq!(chain.origin, sluice_tls::chain::Origin::Configured);
    assert_eq!(chain.names(), "pool, inline");
}

/// `max_in_progress` bounds the handshakes in progress: with one place, a client that opens a
/// connection and sends nothing holds it until the listener's `header_read_timeout` drops it
/// (counted as expired); a second client waits in the listen backlog meanwhile, not refused,
/// and completes once the place is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_holds_its_place_until_it_expires_while_others_wait_in_the_backlog() {
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "rsa", KeyKind::Rsa2048, &["a.test"]);
    let cfg = format!(
        r#"
[log]
access_log = "off"
[offload.handshakes]
max_in_progress = 1
[[listener]]
name = "https"
address = "127.0.0.1:0"
header_read_timeout = "1s"
[listener.tls]
session_tickets = false
[[certificate]]
name = "rsa"
cert = "rsa.crt"
key = "rsa.key"
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "all"
upstream = "o"
"#,
        origin.addr
    );
    let gw = TestGateway::start(&cfg, dir).await;
    let addr = gw.addr("https");
    let stats = || gw.gateway().handshake_stats();
    assert_eq!(stats().limit, 1);
    // (A readiness probe of the test harness may still be finishing its handshake.)
    wait_until(|| stats().in_progress == 0).await;
    let expired_before = stats().expired;

    // Connects and says nothing: accepted, and holds the only place.
    let silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    wait_until(|| stats().in_progress == 1).await;
    // A real client meanwhile: its connection completes in the kernel's backlog and its
    // handshake starts only when the silent one expires.
    let waiting = tokio::spawn(one_request(addr));
    assert_eq!(
        waiting.await.unwrap(),
        200,
        "served once the place was free"
    );
    // The silent handshake expired (counted just after its place is freed, so waited for).
    wait_until(|| stats().expired == expired_before + 1).await;
    // The acceptor waits for a place (`room`) before it goes back to `accept`; the semaphore
    // hands the freed place straight to that waiter, which holds it until its task next runs,
    // so a read at this instant may see it held: wait for it to settle, which it never would
    // if a place leaked.
    wait_until(|| stats().in_progress == 0).await;
    drop(silent);
}
