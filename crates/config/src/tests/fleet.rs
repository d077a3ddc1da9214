//! Fleet mode's part of the loader: `[config]`, and routes checked one at a time.

use super::{error_at, errors, said_at, write_secret};
use crate::{LoadError, RouteContext, fleet_source, load_route, load_str, parse_keyring};
use std::path::Path;

const LISTENER: &str = "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n";

#[test]
fn config_section_loads_and_its_mistakes_are_located() {
    let dir = tempfile::tempdir().unwrap();
    write_secret(
        &dir.path().join("ring"),
        &format!(
            "# newest first\nk2 {}\nk1 {}\n",
            "0f".repeat(32),
            "a".repeat(64)
        ),
    );
    write_secret(&dir.path().join("pw"), "secret\n");
    let good = format!(
        "[config]\nsource = \"etcd\"\nendpoints = [\"127.0.0.1:2379\", \"https://etcd-2:2379\"]\nprefix = \"/shop/\"\ncache_file = \"c.json\"\nkeyring = \"ring\"\nuser = \"gw\"\npassword_file = \"pw\"\nticket_key_rotation = \"1h\"\n{LISTENER}"
    );
    let s = load_str(&good, "gw.toml", dir.path()).unwrap();
    let f = s.fleet.expect("fleet mode");
    assert_eq!(
        f.endpoints,
        ["http://127.0.0.1:2379", "https://etcd-2:2379"]
    );
    assert_eq!(f.prefix, "/shop");
    assert_eq!(f.cache_file.unwrap(), dir.path().join("c.json"));
    assert_eq!(f.keyring.len(), 2);
    assert_eq!(f.keyring[0].0, "k2");
    assert_eq!(f.keyring[0].1, [0x0f; 32]);
    assert_eq!(f.user, Some(("gw".into(), "secret".into())));
    assert_eq!(f.ticket_key_rotation.as_secs(), 3600);
    // The section alone, as `sluice run` reads it before etcd's objects are there.
    assert!(
        fleet_source(&good, "gw.toml", dir.path())
            .unwrap()
            .is_some()
    );
    assert!(
        fleet_source(LISTENER, "gw.toml", dir.path())
            .unwrap()
            .is_none()
    );
    assert!(
        load_str(LISTENER, "gw.toml", dir.path())
            .unwrap()
            .fleet
            .is_none()
    );

    let bad = format!(
        "[config]\nsource = \"etcd\"\nendpoints = [\"127.0.0.1\"]\nprefix = \"sluice\"\ncert = \"c.pem\"\nkeyring = \"missing\"\n{LISTENER}"
    );
    let errs = errors(&bad, dir.path());
    assert!(
        said_at(&errs, &bad, "endpoints =").contains("not host:port"),
        "{errs:#?}"
    );
    assert!(said_at(&errs, &bad, "prefix =").contains("must start with `/`"));
    assert!(said_at(&errs, &bad, "cert =").contains("cert and key go together"));
    assert!(
        error_at(&errs, &bad, "keyring =")
            .message
            .contains("cannot read")
    );
    let other = format!("[config]\nsource = \"zookeeper\"\n{LISTENER}");
    let errs = errors(&other, dir.path());
    assert!(
        error_at(&errs, &other, "source =")
            .help
            .contains("\"etcd\"")
    );
    let no_endpoints = format!("[config]\nsource = \"etcd\"\n{LISTENER}");
    assert!(
        said_at(
            &errors(&no_endpoints, dir.path()),
            &no_endpoints,
            "source ="
        )
        .contains("needs endpoints")
    );
    let stray = format!("[config]\nendpoints = [\"127.0.0.1:2379\"]\n{LISTENER}");
    assert!(said_at(&errors(&stray, dir.path()), &stray, "endpoints =").contains("not \"etcd\""));
}

#[test]
fn keyrings_are_id_and_64_hex_digits() {
    assert!(parse_keyring("").unwrap_err().contains("no key"));
    assert!(parse_keyring("k1 abcd").unwrap_err().contains("64 hex"));
    assert!(parse_keyring("k1").unwrap_err().contains("ID HEX"));
    let twice = format!("k1 {0}\nk1 {0}\n", "00".repeat(32));
    assert!(parse_keyring(&twice).unwrap_err().contains("twice"));
}

#[test]
fn a_route_alone_is_checked_against_the_configuration_it_joins() {
    let base = format!(
        "{LISTENER}[[upstream]]\nname = \"app\"\nservers = [{{ address = \"127.0.0.1:9\" }}]\n[[upstream]]\nname = \"other\"\nservers = [{{ address = \"127.0.0.1:10\" }}]\n[[route]]\nname = \"local\"\npath_exact = \"/health\"\nrespond = {{ status = 200 }}\n"
    );
    let snapshot = load_str(&base, "gw.toml", Path::new("/")).unwrap();
    let cx = RouteContext::new(&snapshot);
    let ok = "[[route]]\nname = \"api\"\npath_prefix = \"/api/\"\nupstream = \"other\"\n";
    let route = load_route(ok, "etcd:/sluice/routes/api", Path::new("/"), &cx).unwrap();
    // Upstream indices are the base's own.
    assert_eq!(route.upstream, Some(1));
    let bad = "[[route]]\nname = \"api\"\npath_prefix = \"/api/\"\nupstream = \"nope\"\nmethods = [\"FETCH\"]\n";
    let Err(LoadError::Invalid(errs)) =
        load_route(bad, "etcd:/sluice/routes/api", Path::new("/"), &cx)
    else {
        panic!("an undefined upstream loaded");
    };
    assert_eq!(errs[0].file, "etcd:/sluice/routes/api");
    assert!(said_at(&errs, bad, "upstream =").contains("not defined"));
    // A name the local file uses, or anything but one route, is refused.
    let taken = "[[route]]\nname = \"local\"\nupstream = \"app\"\n";
    assert!(
        load_route(taken, "k", Path::new("/"), &cx)
            .unwrap_err()
            .to_string()
            .contains("own file")
    );
    let two = format!("{ok}{ok}");
    assert!(
        load_route(&two, "k", Path::new("/"), &cx)
            .unwrap_err()
            .to_string()
            .contains("exactly one")
    );
    let shared_limit = "[[route]]\nname = \"x\"\nupstream = \"app\"\n[route.rate_limit]\nrate = \"10/s\"\nstore = \"redis\"\n";
    assert!(
        load_route(shared_limit, "k", Path::new("/"), &cx)
            .unwrap_err()
            .to_string()
            .contains("no Redis")
    );
}

#[test]
fn an_acme_certificate_in_fleet_mode_needs_the_keyring_that_seals_its_shared_key() {
    let dir = tempfile::tempdir().unwrap();
    write_secret(
        &dir.path().join("ring"),
        &format!("k1 {}\n", "ab".repeat(32)),
    );
    let cert = "[[certificate]]\nname = \"site\"\nacme = { names = [\"a.example\"] }\n";
    let with = format!(
        "[config]\nsource = \"etcd\"\nendpoints = [\"127.0.0.1:2379\"]\nkeyring = \"ring\"\n{LISTENER}{cert}"
    );
    assert!(load_str(&with, "gw.toml", dir.path()).is_ok());
    let without = with.replace("keyring = \"ring\"\n", "");
    let errs = errors(&without, dir.path());
    assert!(
        said_at(&errs, &without, "acme = {").contains("needs [config] keyring"),
        "{errs:#?}"
    );
}
