//! OCSP stapling: for each certificate that names an OCSP responder (and `ocsp = "auto"`,
//! the default), a task fetches its status from the responder, staples a `good` response to
//! every handshake of the certificate (each store's slot is rebuilt with it; see
//! [`crate::live`]), and fetches again halfway to the response's nextUpdate.
//!
//! A failure never stops a handshake: the certificate is served without a staple while no
//! current response is at hand (a response past its nextUpdate is withdrawn, never served),
//! failures are retried with back-off, logged and counted. A `revoked` or `unknown` answer
//! is not stapled (a client would refuse the connection) and is reported loudly. Certificates
//! without a responder, such as Let's Encrypt's since 2025, are left alone.
//!
//! ACME certificates staple like files: a task per ACME certificate follows the certificate
//! in force in its shared slot (the placeholder, then each issued one) and staples each one
//! that names a responder. Good answers are kept on disk ([`kept`]) and stapled when the
//! slot is built, before the first handshake of a restarted or upgraded process.

mod codec;
pub mod kept;

use crate::live::{OcspStatus, live};
use sluice_config::{Certificate, Snapshot};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Back-off after a failed fetch: doubled from the first up to the second.
const RETRY: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(1800));
/// The largest response read (real ones are 1-3 KiB).
const MAX_RESPONSE: usize = 64 * 1024;

/// Whether `cert`'s handshakes carry a stapled OCSP response: `ocsp = "auto"`, a responder
/// named in the certificate, and its issuer in the chain (to name the certificate to the
/// responder). ACME certificates are stapled through their shared slot instead.
pub fn staples(cert: &Certificate) -> bool {
    cert.ocsp && cert.acme.is_none() && cert.chain.len() >= 2 && responder(cert).is_some()
}

fn responder(cert: &Certificate) -> Option<String> {
    codec::responder(&cert.chain[0].to_der().ok()?)
}

/// Where a certificate's staples go.
enum Target {
    /// A file certificate's stapling slots, by the certificate's fingerprint.
    File([u8; 32]),
    /// An ACME certificate's shared slot, by its name (and only while `cert` is in force).
    Acme,
}

impl Target {
    fn staple(
        &self,
        cert: &Certificate,
        response: Option<Vec<u8>>,
    ) -> Result<usize, crate::TlsError> {
        match self {
            Target::File(fp) => live().staple(fp, response),
            Target::Acme => live().staple_acme(&cert.name, &cert.chain[0], response),
        }
    }
}

/// The stapling tasks of the configuration in force.
#[derive(Default)]
pub struct Stapler {
    workers: HashMap<[u8; 32], (String, JoinHandle<()>)>,
}

impl Stapler {
    /// Starts a task for each certificate of `snapshot` that staples.
    pub fn start(snapshot: &Snapshot) -> Self {
        let mut s = Stapler::default();
        s.update(snapshot);
        s
    }

    /// Follows a new configuration: a certificate unchanged (same fingerprint) keeps its
    /// task and its staple; a new one gets a task; one gone loses its task.
    pub fn update(&mut self, snapshot: &Snapshot) {
        let wanted: HashMap<[u8; 32], &Arc<Certificate>> = snapshot
            .certificates
            .iter()
            .filter(|c| staples(c) || c.ocsp && c.acme.is_some())
            .map(|c| (c.fingerprint, c))
            .collect();
        self.workers.retain(|fp, (_, task)| {
            let keep = wanted.contains_key(fp);
            if !keep {
                task.abort();
            }
            keep
        });
        for (fp, cert) in wanted {
            if self.workers.contains_key(&fp) {
                continue;
            }
            let task = if cert.acme.is_some() {
                tokio::spawn(follow_acme(cert.name.clone()))
            } else {
                let Some(url) = responder(cert) else { continue };
                tokio::spawn(keep_stapled(
                    cert.clone(),
                    url,
                    Target::File(cert.fingerprint),
                ))
            };
            self.workers.insert(fp, (cert.name.clone(), task));
        }
        let names: Vec<String> = self.workers.values().map(|(n, _)| n.clone()).collect();
        live().retain_ocsp_status(&|n| names.iter().any(|k| k == n));
    }

    /// Stops every task.
    pub fn stop(&mut self) {
        for (_, (_, task)) in self.workers.drain() {
            task.abort();
        }
    }
}

impl Drop for Stapler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// How often an ACME certificate's task looks for a renewed certificate in its slot.
const FOLLOW: Duration = Duration::from_secs(2);

/// An ACME certificate's stapling: each certificate in force in its slot that names a
/// responder is stapled until another replaces it.
async fn follow_acme(name: String) {
    loop {
        let current = live().acme_current(&name);
        let url = current
            .as_ref()
            .filter(|c| !c.placeholder && c.chain.len() >= 2)
            .and_then(|c| responder(c));
        let (Some(cert), Some(url)) = (current, url) else {
            tokio::time::sleep(FOLLOW).await;
            continue;
        };
        let leaf = cert.chain[0].clone();
        let replaced = async {
            loop {
                tokio::time::sleep(FOLLOW).await;
                let now = live().acme_current(&name);
                if now.is_none_or(|c| c.chain[0].to_der().ok() != leaf.to_der().ok()) {
                    return;
                }
            }
        };
        tokio::select! {
            () = keep_stapled(cert, url, Target::Acme) => {}
            () = replaced => {}
        }
    }
}

/// One certificate's stapling, for the life of its configuration.
async fn keep_stapled(cert: Arc<Certificate>, url: String, target: Target) {
    let name = cert.name.clone();
    let mut status = OcspStatus {
        responder: url.clone(),
        state: "pending",
        ..OcspStatus::default()
    };
    let ders = (cert.chain[0].to_der(), cert.chain[1].to_der());
    let (Ok(leaf), Ok(issuer)) = ders else { return };
    let request = codec::cert_id(&leaf, &issuer).and_then(|id| Ok((codec::request(&id)?, id)));
    let (request, id) = match request {
        Ok(r) => r,
        Err(e) => {
            status.state = "failing";
            status.last_error = Some(e.clone());
            live().set_ocsp_status(&name, status);
            tracing::warn!(certificate = %name, error = %e, "cannot name this certificate to its OCSP responder; not stapling");
            return;
        }
    };
    let mut failures_in_row = 0u32;
    resume_kept(&cert, &mut status).await;
    loop {
        live().set_ocsp_status(&name, status.clone());
        let fetched = fetch(&url, &request)
            .await
            .and_then(|der| Ok((codec::answer(&der, &id, now())?, der)));
        let next = match fetched {
            Ok((answer, der)) => {
                failures_in_row = 0;
                status.fetched += 1;
                status.last_error = None;
                status.state = answer.status.as_str();
                let good = answer.status == codec::Status::Good;
                if good {
                    kept::keep(&cert.chain[0], &der);
                } else {
                    kept::forget(&cert.chain[0]);
                }
                match target.staple(&cert, good.then_some(der)) {
                    Ok(_) => status.stapled = good,
                    Err(e) => tracing::error!(certificate = %name, error = %e, "stapling failed"),
                }
                status.this_update = Some(answer.this_update);
                status.next_update = answer.next_update;
                if good {
                    tracing::debug!(certificate = %name, next_update = ?answer.next_update, "OCSP response stapled");
                } else {
                    tracing::error!(certificate = %name, status = answer.status.as_str(), "the OCSP responder does not say this certificate is good; nothing is stapled (replace the certificate)");
                }
                // Halfway to nextUpdate, as NGINX and Caddy do; hourly without one.
                let at = match answer.next_update {
                    Some(n) => answer.this_update + (n - answer.this_update) / 2,
                    None => now() + 3600,
                };
                at.max(now() + 10)
            }
            Err(e) => {
                failures_in_row += 1;
                status.failures += 1;
                status.last_error = Some(e.clone());
                // A response past its nextUpdate is withdrawn: a stale staple fails clients.
                let expired = status.next_update.is_none_or(|n| n <= now());
                if status.stapled && expired && target.staple(&cert, None).is_ok() {
                    status.stapled = false;
                }
                if !status.stapled {
                    status.state = "failing";
                }
                let wait = RETRY
                    .0
                    .saturating_mul(2u32.saturating_pow(failures_in_row.saturating_sub(1).min(16)))
                    .min(RETRY.1);
                tracing::warn!(certificate = %name, responder = %url, error = %e, retry_in_s = wait.as_secs(), stapled = status.stapled, "OCSP fetch failed; handshakes go on");
                let retry = now() + wait.as_secs() as i64;
                // Wake at the staple's expiry if that comes first, to withdraw it.
                match status.next_update.filter(|_| status.stapled) {
                    Some(n) => retry.min(n.max(now() + 1)),
                    None => retry,
                }
            }
        };
        status.next_fetch = Some(next);
        live().set_ocsp_status(&name, status.clone());
        let wait = (next - now()).clamp(0, 86_400) as u64;
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
}

/// A response kept on disk by an earlier process is already stapled (the slot was built
/// with it): shown as such, and the first fetch waits until halfway to its nextUpdate.
async fn resume_kept(cert: &Certificate, status: &mut OcspStatus) {
    let Some((_, answer)) = kept::load(&cert.chain) else {
        return;
    };
    let Some(next) = answer.next_update else {
        return;
    };
    status.state = answer.status.as_str();
    status.stapled = true;
    status.this_update = Some(answer.this_update);
    status.next_update = Some(next);
    let at = answer.this_update + (next - answer.this_update) / 2;
    status.next_fetch = Some(at);
    live().set_ocsp_status(&cert.name, status.clone());
    tracing::info!(certificate = %cert.name, next_update = next, "stapling the OCSP response kept on disk");
    tokio::time::sleep(Duration::from_secs((at - now()).clamp(0, 86_400) as u64)).await;
}

/// POSTs `request` to the responder at `url` (http://) and returns the response's body.
async fn fetch(url: &str, request: &[u8]) -> Result<Vec<u8>, String> {
    use http_body_util::BodyExt as _;
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("responder URL {url}: {e}"))?;
    let host = uri
        .host()
        .ok_or("the responder URL has no host")?
        .to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let work = async move {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("connecting to {host}:{port}: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = http::Request::post(path)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/ocsp-request")
            .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
                request,
            )))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        if resp.status() != http::StatusCode::OK {
            return Err(format!("the responder answered {}", resp.status()));
        }
        let body = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        Ok(body.to_bytes().to_vec())
    };
    tokio::time::timeout(FETCH_TIMEOUT, work)
        .await
        .map_err(|_| format!("no answer from {url} within {}s", FETCH_TIMEOUT.as_secs()))?
}
