//! OCSP stapling against a real responder: `openssl ocsp` answers each request the gateway
//! sends (signed by a test CA from its index file), behind an HTTP front on 127.0.0.1 that
//! the test owns (OpenSSL 3.0's `-port` server binds every interface, which tests here must
//! not do). The real `sluice run` fetches, staples, refreshes before nextUpdate, and keeps
//! handshaking when the responder is down.

use crate::acme::{Gw, until};
use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA and a leaf for `host` whose AIA names the responder at `ocsp_url`, serial
/// `serial` (hex); writes `<host>.pem` (leaf then CA) and `<host>.key`.
fn issue(dir: &Path, host: &str, serial: &str, ocsp_url: &str) {
    if !dir.join("ca.crt").exists() {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "30",
                "-subj",
                "/CN=Sluice test OCSP CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            ],
        );
        std::fs::write(dir.join("index.txt"), "").unwrap();
    }
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{host}.key"),
            "-out",
            &format!("{host}.csr"),
            "-subj",
            &format!("/CN={host}"),
        ],
    );
    std::fs::write(
        dir.join(format!("{host}.ext")),
        format!("subjectAltName=DNS:{host}\nauthorityInfoAccess=OCSP;URI:{ocsp_url}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{host}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            &format!("0x{serial}"),
            "-days",
            "30",
            "-extfile",
            &format!("{host}.ext"),
            "-out",
            &format!("{host}.crt"),
        ],
    );
    let chain = [
        std::fs::read(dir.join(format!("{host}.crt"))).unwrap(),
        std::fs::read(dir.join("ca.crt")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.join(format!("{host}.pem")), chain).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        dir.join(format!("{host}.key")),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // openssl ocsp's index: status, expiry, revocation, serial, file, subject.
    let mut index = std::fs::read_to_string(dir.join("index.txt")).unwrap();
    index.push_str(&format!(
        "V\t301231000000Z\t\t{}\tunknown\t/CN={host}\n",
        serial.to_uppercase()
    ));
    std::fs::write(dir.join("index.txt"), index).unwrap();
}

/// `openssl ocsp` answering every POSTed request from the CA's index (nextUpdate one minute
/// out), behind an HTTP server on 127.0.0.1; `up` false: 503.
pub(crate) struct Responder {
    pub(crate) addr: SocketAddr,
    pub(crate) up: Arc<AtomicBool>,
    pub(crate) answered: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Responder {
    async fn start(dir: PathBuf) -> Responder {
        Responder::start_with(dir, Arc::new(|| {})).await
    }

    /// `before` runs before each answer (to bring the index up to date).
    pub(crate) async fn start_with(dir: PathBuf, before: Arc<dyn Fn() + Send + Sync>) -> Responder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let answered = Arc::new(AtomicUsize::new(0));
        let (up2, answered2) = (up.clone(), answered.clone());
        let task = tokio::spawn(async move {
            let n = Arc::new(AtomicUsize::new(0));
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (dir, up, answered, n, before) = (
                    dir.clone(),
                    up2.clone(),
                    answered2.clone(),
                    n.clone(),
                    before.clone(),
                );
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let (dir, up, answered, n, before) = (
                                dir.clone(),
                                up.clone(),
                                answered.clone(),
                                n.clone(),
                                before.clone(),
                            );
                            async move {
                                before();
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                if !up.load(Ordering::Relaxed) {
                                    return Ok::<_, std::convert::Infallible>(
                                        http::Response::builder()
                                            .status(503)
                                            .body(Full::new(Bytes::new()))
                                            .unwrap(),
                                    );
                                }
                                let k = n.fetch_add(1, Ordering::Relaxed);
                                let (req_path, resp_path) = (
                                    dir.join(format!("req{k}.der")),
                                    dir.join(format!("resp{k}.der")),
                                );
                                std::fs::write(&req_path, &body).unwrap();
                                let out = tokio::process::Command::new("openssl")
                                    .current_dir(&dir)
                                    .args([
                                        "ocsp",
                                        "-index",
                                        "index.txt",
                                        "-rsigner",
                                        "ca.crt",
                                        "-rkey",
                                        "ca.key",
                                        "-CA",
                                        "ca.crt",
                                        "-nmin",
                                        "1",
                                        "-reqin",
                                    ])
                                    .arg(&req_path)
                                    .arg("-respout")
                                    .arg(&resp_path)
                                    .output()
                                    .await
                                    .unwrap();
                                assert!(
                                    out.status.success(),
                                    "{}",
                                    String::from_utf8_lossy(&out.stderr)
                                );
                                answered.fetch_add(1, Ordering::Relaxed);
                                let resp = std::fs::read(&resp_path).unwrap();
                                Ok(http::Response::builder()
                                    .header("content-type", "application/ocsp-response")
                                    .body(Full::new(Bytes::from(resp)))
                                    .unwrap())
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Responder {
            addr,
            up,
            answered,
            task,
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The OCSP response stapled to a new handshake for `sni` (a client asking for status).
pub(crate) async fn staple(addr: SocketAddr, sni: &str) -> Option<Vec<u8>> {
    use boring::ssl::{SslConnector, SslMethod, SslVerifyMode, StatusType};
    let mut b = SslConnector::builder(SslMethod::tls()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    let connector = b.build();
    let mut config = connector.configure().unwrap();
    config.set_verify_hostname(false);
    config.set_status_type(StatusType::OCSP).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let s = tokio_boring::connect(config, sni, tcp).await.unwrap();
    s.ssl().ocsp_status().map(<[u8]>::to_vec)
}

/// What `openssl ocsp` reads in a response: its text.
pub(crate) fn read_response(dir: &Path, der: &[u8]) -> String {
    let path = dir.join("stapled.der");
    std::fs::write(&path, der).unwrap();
    let out = Command::new("openssl")
        .args(["ocsp", "-respin"])
        .arg(&path)
        .args(["-resp_text", "-CAfile"])
        .arg(dir.join("ca.crt"))
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn this_update(text: &str) -> String {
    text.lines()
        .find(|l| l.trim_start().starts_with("This Update:"))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_good_response_is_stapled_refreshed_before_next_update_and_a_dead_responder_fails_nothing()
 {
    let ca = tempfile::tempdir().unwrap();
    let responder = Responder::start(ca.path().to_path_buf()).await;
    let dead = free_port();
    issue(
        ca.path(),
        "ocsp.test",
        "1234",
        &format!("http://{}/", responder.addr),
    );
    issue(
        ca.path(),
        "dead.test",
        "99",
        &format!("http://127.0.0.1:{dead}/"),
    );
    issue(
        ca.path(),
        "off.test",
        "77",
        &format!("http://{}/", responder.addr),
    );
    let origin = Origin::start("origin").await;
    let https = free_port();
    let cert = |name: &str, extra: &str| {
        format!(
            "[[certificate]]\nname = \"{name}\"\ncert = \"{d}/{name}.pem\"\nkey = \"{d}/{name}.key\"\n{extra}",
            d = ca.path().display()
        )
    };
    let text = format!(
        "[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\n[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:{https}\"\n[listener.tls]\n{}{}{}[[upstream]]\nname = \"o\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"r\"\nupstream = \"o\"\n",
        cert("ocsp.test", ""),
        cert("dead.test", ""),
        cert("off.test", "ocsp = \"off\"\n"),
        origin.addr
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = Gw::start(dir.path(), &text);
    let addr = SocketAddr::from(([127, 0, 0, 1], https));

    // Stapled: openssl itself reads the staple as a good, verified answer for serial 1234.
    until(
        Duration::from_secs(30),
        || format!("never stapled: {}", gw.stderr()),
        || async { staple(addr, "ocsp.test").await.is_some() },
    )
    .await;
    let first = read_response(ca.path(), &staple(addr, "ocsp.test").await.unwrap());
    assert!(first.contains("Cert Status: good"), "{first}");
    assert!(first.contains("Serial Number: 1234"), "{first}");
    assert!(first.contains("Response verify OK"), "{first}");
    let status = gw.status().await;
    let entry = |name: &str| {
        status["ocsp"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["certificate"] == name).cloned())
            .unwrap_or_default()
    };
    let good = entry("ocsp.test");
    assert_eq!(good["state"], "good", "{status}");
    assert_eq!(good["stapled"], true);
    assert!(good["next_update"].as_i64() > good["this_update"].as_i64());

    // A responder that does not answer: handshakes go on without a staple, counted.
    assert_eq!(staple(addr, "dead.test").await, None);
    let dead_entry = entry("dead.test");
    assert_eq!(dead_entry["stapled"], false, "{status}");
    until(
        Duration::from_secs(15),
        || "the dead responder's failure was never counted".to_owned(),
        || async {
            let s = gw.status().await;
            s["ocsp"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|c| c["certificate"] == "dead.test" && c["failures"].as_u64() >= Some(1))
            })
        },
    )
    .await;
    // ocsp = "off": never asked, never stapled.
    assert_eq!(staple(addr, "off.test").await, None);
    assert!(entry("off.test").is_null(), "{status}");

    // nextUpdate is a minute out: fetched again halfway, a newer response stapled.
    let answered = responder.answered.load(Ordering::Relaxed);
    until(
        Duration::from_secs(60),
        || format!("no refresh: {}", gw.stderr()),
        || async {
            let now = read_response(ca.path(), &staple(addr, "ocsp.test").await.unwrap());
            this_update(&now) != this_update(&first)
        },
    )
    .await;
    assert!(responder.answered.load(Ordering::Relaxed) > answered);

    // The responder goes down: the current staple (valid until its nextUpdate) still serves.
    responder.up.store(false, Ordering::Relaxed);
    let still = staple(addr, "ocsp.test").await;
    assert!(
        still.is_some(),
        "a current staple is kept while the responder is down"
    );
    let metrics = http1_get(gw.admin, "x", "/metrics").await.body;
    assert!(
        metrics.contains("sluice_ocsp_stapled{certificate=\"ocsp.test\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_ocsp_stapled{certificate=\"dead.test\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_ocsp_fetches_total{certificate=\"dead.test\",result=\"failed\"}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_gateway_staples_from_its_first_handshake_what_it_kept_while_the_responder_is_down()
 {
    let ca = tempfile::tempdir().unwrap();
    let responder = Responder::start(ca.path().to_path_buf()).await;
    issue(
        ca.path(),
        "kept.test",
        "4321",
        &format!("http://{}/", responder.addr),
    );
    let origin = Origin::start("origin").await;
    let https = free_port();
    let text = format!(
        "[log]\naccess_log = \"off\"\n[admin]\naddress = \"127.0.0.1:0\"\n[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:{https}\"\n[listener.tls]\n[[certificate]]\nname = \"kept.test\"\ncert = \"{d}/kept.test.pem\"\nkey = \"{d}/kept.test.key\"\n[[upstream]]\nname = \"o\"\nservers = [{{ address = \"{}\" }}]\n[[route]]\nname = \"r\"\nupstream = \"o\"\n",
        origin.addr,
        d = ca.path().display()
    );
    let dir = tempfile::tempdir().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], https));
    let first = {
        let gw = Gw::start(dir.path(), &text);
        until(
            Duration::from_secs(30),
            || format!("never stapled: {}", gw.stderr()),
            || async { staple(addr, "kept.test").await.is_some() },
        )
        .await;
        staple(addr, "kept.test").await.unwrap()
    };
    // Kept beside the ACME storage, one file per certificate.
    let kept: Vec<_> = std::fs::read_dir(dir.path().join("acme/ocsp"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");

    // The responder goes down; a new process staples the kept answer from its first handshake.
    responder.up.store(false, Ordering::Relaxed);
    let asked = responder.answered.load(Ordering::Relaxed);
    let gw = Gw::start(dir.path(), &text);
    let again = staple(addr, "kept.test").await;
    assert_eq!(again.as_deref(), Some(first.as_slice()), "{}", gw.stderr());
    assert!(read_response(ca.path(), &first).contains("Cert Status: good"));
    assert_eq!(responder.answered.load(Ordering::Relaxed), asked);
    let status = gw.status().await;
    let entry = status["ocsp"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["certificate"] == "kept.test").cloned())
        .unwrap_or_default();
    assert_eq!(entry["stapled"], true, "{status}");
}
