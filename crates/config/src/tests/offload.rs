//! [offload], [offload.handshakes], key exchange groups, [compression] and keyless settings: what loads and what is refused.

use super::*;

#[test]
fn offload_settings_load_and_bad_engines_are_named() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    let base = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:1\"\n[listener.tls]\n";
    let good = format!(
        "{base}[offload.crypto]\nengines = [\"pool\", \"inline\"]\npool_threads = 3\ndeadline = \"20ms\"\nverify = \"all\"\n[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\nkey = \"a.key\"\noffload_engines = []\n"
    );
    let s = load_str(&good, "t", dir.path()).unwrap();
    let c = &s.offload.crypto;
    assert_eq!(c.engines, Some(vec![crate::CryptoEngine::Pool]));
    let unset = good.replace("engines = [\"pool\", \"inline\"]\n", "");
    assert_eq!(
        load_str(&unset, "t", dir.path())
            .unwrap()
            .offload
            .crypto
            .engines,
        None,
        "no list: chosen at start"
    );
    assert_eq!(
        (c.pool_threads, c.deadline, c.verify_all),
        (Some(3), Duration::from_millis(20), true)
    );
    assert_eq!(s.certificates[0].offload_engines, Some(vec![]));
    assert!(c.mb_on_worker, "mb batches run on the worker by default");
    let thread = good.replace(
        "verify = \"all\"\n",
        "verify = \"all\"\nmb_run_on = \"thread\"\n",
    );
    assert!(
        !load_str(&thread, "t", dir.path())
            .unwrap()
            .offload
            .crypto
            .mb_on_worker
    );
    let errs = errors(
        &good.replace("verify = \"all\"\n", "mb_run_on = \"gpu\"\n"),
        dir.path(),
    );
    assert!(
        errs.iter().any(|e| e.message.contains("mb_run_on")),
        "{errs:#?}"
    );
    assert_eq!(c.mb_lanes, None, "mb lanes: the CPU's choice by default");
    for (v, want) in [("4", Some(4)), ("8", Some(8)), ("\"auto\"", None)] {
        let t = good.replace("verify = \"all\"\n", &format!("mb_lanes = {v}\n"));
        assert_eq!(
            load_str(&t, "t", dir.path())
                .unwrap()
                .offload
                .crypto
                .mb_lanes,
            want,
            "{v}"
        );
    }
    let errs = errors(
        &good.replace("verify = \"all\"\n", "mb_lanes = 6\n"),
        dir.path(),
    );
    assert!(
        errs.iter()
            .any(|e| e.message.contains("mb_lanes") && e.help.contains("256-bit")),
        "{errs:#?}"
    );
    assert_eq!(
        s.admin.as_ref().map(|a| a.address),
        Some("127.0.0.1:9901".parse().unwrap()),
        "admin on loopback by default"
    );
    bad_engines_are_named(dir.path(), base);
}

/// Unknown engines, a pool of no threads and a bad admin address, each named.
fn bad_engines_are_named(dir: &Path, base: &str) {
    let bad = format!(
        "{base}[offload.crypto]\nengines = [\"gpu\"]\npool_threads = 0\n[admin]\naddress = \"nowhere\"\n[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\nkey = \"a.key\"\noffload_engines = [\"qat\"]\n"
    );
    let errs = errors(&bad, dir);
    for needle in [
        "\"gpu\"",
        "pool_threads must be at least 1",
        "`nowhere`",
        "offload_engines names \"qat\"",
    ] {
        assert!(
            errs.iter().any(|e| e.message.contains(needle)),
            "missing {needle}: {errs:#?}"
        );
    }
}

#[test]
fn rsa_key_exchange_is_off_by_default_and_refused_with_tls_1_3_only() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    assert!(!s.listeners[0].tls.as_ref().unwrap().rsa_key_exchange);

    let on = GOOD.replace("min_version = \"1.3\"", "rsa_key_exchange = true");
    let s = load_str(&on, "on.toml", dir.path()).unwrap();
    assert!(s.listeners[0].tls.as_ref().unwrap().rsa_key_exchange);

    let src = GOOD.replace(
        "min_version = \"1.3\"",
        "min_version = \"1.3\"\nrsa_key_exchange = true",
    );
    let errs = errors(&src, dir.path());
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].message.contains("rsa_key_exchange needs TLS 1.2"));
    assert_eq!(errs[0].line, line_of(&src, "rsa_key_exchange"));
    assert!(errs[0].help.contains("min_version = \"1.2\""));
}

#[test]
fn handshake_scheduling_defaults_settings_and_located_errors() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    assert_eq!(
        s.offload.handshakes,
        crate::Handshakes {
            isolate: true,
            share_percent: 1,
            max_in_progress: None
        },
        "isolated, nice +19, 128 per CPU"
    );
    let set = format!(
        "{GOOD}\n[offload.handshakes]\nisolate = false\nshare_percent = 25\nmax_in_progress = 64\n"
    );
    let h = load_str(&set, "h.toml", dir.path())
        .unwrap()
        .offload
        .handshakes;
    assert_eq!(
        (h.isolate, h.share_percent, h.max_in_progress),
        (false, 25, Some(64))
    );
    for (bad, says) in [
        ("share_percent = 60", "share_percent = 60 is over 50"),
        ("max_in_progress = 0", "max_in_progress must be at least 1"),
    ] {
        let src = format!("{GOOD}\n[offload.handshakes]\n{bad}\n");
        let errs = errors(&src, dir.path());
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(errs[0].message.contains(says), "{errs:#?}");
        assert_eq!(errs[0].line, line_of(&src, bad), "{bad}");
    }
}

#[test]
fn key_exchange_groups_load_in_any_openssl_spelling_and_bad_lists_are_located() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    assert_eq!(
        s.listeners[0].tls.as_ref().unwrap().groups,
        None,
        "BoringSSL's default"
    );

    let with = |groups: &str| {
        GOOD.replace(
            "min_version = \"1.3\"",
            &format!("min_version = \"1.3\"\ngroups = {groups}"),
        )
    };
    let s = load_str(
        &with(r#"["x25519", "prime256v1", "secp384r1", "X25519MLKEM768"]"#),
        "g.toml",
        dir.path(),
    )
    .unwrap();
    assert_eq!(
        s.listeners[0].tls.as_ref().unwrap().groups,
        Some(vec!["X25519", "P-256", "P-384", "X25519MLKEM768"])
    );

    for (groups, says, help) in [
        (
            r#"["X25519", "brainpoolP256r1"]"#,
            "\"brainpoolP256r1\", which is not a key-exchange group",
            "\"X25519MLKEM768\"",
        ),
        (
            r#"["P-256", "secp256r1"]"#,
            "names P-256 twice",
            "each group once",
        ),
        (
            "[]",
            "groups is empty",
            "remove groups for the default (X25519MLKEM768, X25519, P-256, P-384)",
        ),
    ] {
        let src = with(groups);
        let errs = errors(&src, dir.path());
        assert_eq!(errs.len(), 1, "{groups}: {errs:#?}");
        assert!(errs[0].message.contains(says), "{groups}: {errs:#?}");
        assert!(errs[0].message.contains("listener `"), "{errs:#?}");
        assert!(errs[0].help.contains(help), "{groups}: {errs:#?}");
        assert_eq!(errs[0].line, line_of(&src, "groups"), "{groups}");
    }
}

#[test]
fn compression_defaults_overrides_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "example.com");
    let s = load_str(GOOD, "good.toml", dir.path()).unwrap();
    let c = &s.routes[0].compression;
    assert!(!c.enabled, "off unless configured, as in NGINX");
    assert!(c.compresses_type("text/html; charset=utf-8"));
    assert!(c.compresses_type("application/ld+json"));
    assert!(!c.compresses_type("image/png"));

    let src = format!(
        "{GOOD}\n[compression]\nenabled = true\ngzip_backend = \"zlib-rs\"\ngzip_level = 6\n"
    )
    .replace(
        "upstream = \"app\"\n\n[[route]]\nname = \"user\"",
        "upstream = \"app\"\n[route.compression]\nenabled = false\n\n[[route]]\nname = \"user\"",
    );
    let s = load_str(&src, "c.toml", dir.path()).unwrap();
    assert!(!s.routes[0].compression.enabled, "the route's override");
    let user = &s.routes[1].compression;
    assert!(user.enabled);
    assert_eq!(
        (user.gzip_backend, user.gzip_level),
        (crate::GzipBackend::ZlibRs, 6)
    );

    let src = format!(
        "{GOOD}\n[compression]\ncodecs = [\"gzip\", \"lzma\"]\ngzip_level = 5\ntypes = [\"html\"]\n"
    );
    let errs = errors(&src, dir.path());
    for (needle, line) in [
        ("\"lzma\"", "codecs ="),
        ("gzip_level = 5 is out of range 0-3", "gzip_level"),
        ("`html`, which is not a MIME type", "types ="),
    ] {
        let e = errs
            .iter()
            .find(|e| e.message.contains(needle))
            .unwrap_or_else(|| panic!("missing {needle}: {errs:#?}"));
        assert_eq!(e.line, line_of(&src, line), "{needle}");
    }
}

#[test]
fn keyless_settings_load_and_a_keyless_certificate_needs_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    write_cert(dir.path(), "ks", "keyserver.test");
    write_cert(dir.path(), "gw", "gateway.test");
    let base = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:1\"\n[listener.tls]\n";
    let keyless = "[offload.keyless]\nservers = [\"10.0.0.5:2407\", \"ks2.internal:2407\"]\nca = \"ks.crt\"\ncertificate = \"gw.crt\"\nkey = \"gw.key\"\ntimeout = \"30ms\"\nfallback = \"none\"\n";
    // No key file: the key lives on key servers.
    let cert = "[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\n";
    let good =
        format!("{base}[offload.crypto]\nengines = [\"keyless\", \"pool\"]\n{keyless}{cert}");
    let s = load_str(&good, "t", dir.path()).unwrap();
    assert_eq!(
        s.offload.crypto.engines,
        Some(vec![
            crate::CryptoEngine::Keyless,
            crate::CryptoEngine::Pool
        ])
    );
    let k = s.offload.keyless.as_ref().unwrap();
    assert_eq!(k.servers.len(), 2);
    assert_eq!(
        k.server_name, "10.0.0.5",
        "defaults to the first server's host"
    );
    assert_eq!(
        (k.connections, k.timeout, k.fallback_local),
        (2, Duration::from_millis(30), false)
    );
    assert!(s.certificates[0].key.is_none());
    assert_eq!(s.certificates[0].key_type, crate::KeyType::Ecdsa(256));

    // Without the engine, a certificate without a key is an error that says what to do; so
    // is naming the engine without [offload.keyless], and a server that is not host:port.
    let src = format!("{base}{cert}");
    let errs = errors(&src, dir.path());
    assert!(
        errs.iter()
            .any(|e| e.message.contains("has no `key`") && e.help.contains("keyless")),
        "{errs:#?}"
    );
    let src = format!("{base}[offload.crypto]\nengines = [\"keyless\"]\n{cert}");
    let errs = errors(&src, dir.path());
    assert!(
        errs.iter()
            .any(|e| e.message.contains("[offload.keyless] is missing")),
        "{errs:#?}"
    );
    let src = format!(
        "{base}[offload.crypto]\nengines = [\"keyless\"]\n{}{cert}",
        keyless.replace("10.0.0.5:2407", "10.0.0.5")
    );
    let errs = errors(&src, dir.path());
    let e = errs
        .iter()
        .find(|e| e.message.contains("is not host:port"))
        .unwrap_or_else(|| panic!("{errs:#?}"));
    assert_eq!(e.line, line_of(&src, "servers ="));
}
