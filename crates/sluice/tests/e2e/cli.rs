use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
fn check_reports_every_error_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    std::fs::write(
        &path,
        "[[listener]]\nname = \"web\"\naddress = \"localhost:http\"\n\n[[route]]\nname = \"r\"\nupstrem = \"x\"\n\n[[route]]\nname = \"s\"\nupstream = \"nowhere\"\n",
    )
    .unwrap();
    let out = sluice()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    assert!(
        err.contains(&format!(
            "{file}:3:11: listener `web`: `localhost:http` is not an ip:port address"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:7:1: unknown field `upstrem`")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:11:12: route `s` sends to upstream `nowhere`"
        )),
        "{err}"
    );
    assert!(err.contains("help:"), "{err}");
    assert!(err.contains("3 errors"), "{err}");
}

#[test]
fn check_refuses_a_world_readable_key_and_accepts_a_good_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    crate::support::write_cert(
        dir.path(),
        "site",
        sluice_tls::selfsigned::KeyKind::EcdsaP256,
        &["site.test"],
    );
    let key = dir.path().join("site.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = dir.path().join("site.toml");
    std::fs::write(
        &path,
        "[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:8443\"\n[listener.tls]\n[[certificate]]\nname = \"site\"\ncert = \"site.crt\"\nkey = \"site.key\"\n",
    )
    .unwrap();
    let out = sluice()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("readable by group or others")
            && err.contains(&format!("chmod 600 {}", key.display())),
        "{err}"
    );

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = sluice()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_serves_a_config_file_and_exits_0_on_sigterm() {
    let origin_rt = tokio::runtime::Runtime::new().unwrap();
    let origin = origin_rt.block_on(crate::support::Origin::start("file-origin"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(
        &path,
        format!(
            "[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\n[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"o\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"r\"\nupstream = \"o\"\n",
            origin.addr
        ),
    )
    .unwrap();
    let mut child = sluice()
        .args(["run", "--config"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut addr = None;
    for line in stdout.lines().take(10) {
        let line = line.unwrap();
        if let Some(rest) = line.split("http://").nth(1) {
            addr = rest.split('/').next().map(str::to_owned);
            break;
        }
    }
    let addr = addr.expect("the banner names the listener address");
    let body = origin_rt.block_on(async {
        crate::support::http1_get(addr.parse().unwrap(), "x", "/whoami")
            .await
            .body
    });
    assert_eq!(body, "file-origin");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
