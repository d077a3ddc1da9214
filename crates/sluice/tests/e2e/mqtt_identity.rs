//! Devices admitted by client certificate on an MQTT listener, with Debian's mosquitto and
//! `mosquitto_pub` (3.1.1 and 5): the certificate's common name must be the client
//! identifier; a device with none, with one of another CA, or naming another device is
//! refused with "not authorized" and counted by reason, and the admitted one's certificate
//! subject is its log line's subject.

use crate::mqtt::{Mosquitto, config, lines, publish};
use crate::support::*;
use std::path::Path;

/// `ca` issuing `dev-1`; `rogue-ca` issuing `dev-2`.
fn make_pki(dir: &Path) {
    issue(dir, "ca", "Devices CA", None, &[]);
    issue(dir, "rogue-ca", "Rogue CA", None, &[]);
    let load = |stem: &str| {
        let cert = std::fs::read(dir.join(format!("{stem}.crt"))).unwrap();
        let key = std::fs::read(dir.join(format!("{stem}.key"))).unwrap();
        (
            boring::x509::X509::from_pem(&cert).unwrap(),
            boring::pkey::PKey::private_key_from_pem(&key).unwrap(),
        )
    };
    let (ca, ca_key) = load("ca");
    issue(
        dir,
        "dev-1",
        "dev-1",
        Some((&ca, &ca_key)),
        &["dev-1.devices.test"],
    );
    let (rogue, rogue_key) = load("rogue-ca");
    issue(
        dir,
        "dev-2",
        "dev-2",
        Some((&rogue, &rogue_key)),
        &["dev-2.devices.test"],
    );
}

/// `mosquitto_pub`'s TLS arguments: the site's certificate trusted and, where given, a
/// device certificate and key presented. The site's certificate names mqtt.test, not
/// 127.0.0.1: `--insecure` skips the name only.
fn tls_args<'a>(site: &'a str, cert: Option<(&'a str, &'a str)>) -> Vec<&'a str> {
    let mut args = vec!["--cafile", site, "--insecure"];
    if let Some((c, k)) = cert {
        args.extend(["--cert", c, "--key", k]);
    }
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_is_admitted_by_its_certificate_and_only_as_itself() {
    let broker = Mosquitto::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(
        dir.path(),
        "site",
        sluice_tls::selfsigned::KeyKind::EcdsaP256,
        &["mqtt.test"],
    );
    make_pki(dir.path());
    let text = config(&[&broker], "certificate_identity = \"client_id\"").replace(
        "[listener.mqtt]",
        "[listener.tls]\nclient_ca = \"ca.crt\"\nclient_auth = \"required\"\n[listener.mqtt]",
    ) + "[[certificate]]\nname = \"site\"\ncert = \"site.crt\"\nkey = \"site.key\"\n";
    let gw = TestGateway::start_logged(&text, dir).await;
    let port = gw.addr("devices").port().to_string();
    let file = |name: &str| gw.dir().join(name).display().to_string();
    let (site, dev1_crt, dev1_key) = (file("site.crt"), file("dev-1.crt"), file("dev-1.key"));
    let (dev2_crt, dev2_key) = (file("dev-2.crt"), file("dev-2.key"));
    let tls = |cert| tls_args(&site, cert);
    let out = publish(&port, "dev-1", &tls(Some((&dev1_crt, &dev1_key))));
    assert!(
        out.status.success(),
        "dev-1 as itself: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = [
        (
            "dev-9",
            tls(Some((&dev1_crt, &dev1_key))),
            "certificate_mismatch",
        ),
        ("dev-1", tls(None), "no_certificate"),
        (
            "dev-2",
            tls(Some((&dev2_crt, &dev2_key))),
            "bad_certificate",
        ),
    ];
    for (id, args, why) in &refused {
        for version in ["mqttv311", "mqttv5"] {
            let mut args = args.clone();
            args.extend(["-V", version]);
            let out = publish(&port, id, &args);
            let said = String::from_utf8_lossy(&out.stderr).to_lowercase();
            assert!(!out.status.success(), "{id} ({why}, {version}) got through");
            assert!(
                said.contains("not authori"),
                "{id} ({why}, {version}) is told it is not authorized: {said}"
            );
        }
    }
    // Counted when the connection ends, just after the CONNACK the client exits on.
    wait_until(|| lines(gw.dir()).len() >= 7).await;
    let counts = gw.gateway().metrics().snapshot().mqtt;
    let count = |name: &str| {
        let i = sluice_proxy::MQTT_OUTCOMES
            .iter()
            .position(|o| *o == name)
            .unwrap();
        counts[i]
    };
    assert_eq!(count("proxied"), 1);
    for (_, _, why) in &refused {
        assert_eq!(count(why), 2, "{why}: once per version");
    }
    let all = lines(gw.dir());
    let admitted = all.iter().find(|l| l["status"] == 200).unwrap();
    assert_eq!(admitted["path"], "dev-1", "{admitted}");
    assert_eq!(admitted["subject"], "CN=dev-1", "{admitted}");
    let mismatched = all.iter().find(|l| l["path"] == "dev-9").unwrap();
    assert_eq!(mismatched["status"], 403, "{mismatched}");
    assert_eq!(
        all.iter().filter(|l| l["status"] == 400).count(),
        4,
        "no certificate and a rogue one: {all:#?}"
    );
}
