//! OTLP over HTTP/protobuf (`POST /v1/traces`, `application/x-protobuf`): the same
//! `ExportTraceServiceRequest` bytes as over gRPC, on a kept HTTP/1.1 connection; `https://`
//! on rustls (as the gRPC channel), trusting `ca` or the system's roots, presenting the
//! client certificate when one is configured. Headers go with every request.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sluice_config::ClientIdentity;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The most of an answer read.
const MAX_ANSWER: usize = 1 << 20;

pub(super) struct HttpCollector {
    url: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    tls: Option<TlsConnector>,
    conn: Option<SendRequest<Full<Bytes>>>,
}

/// The rustls client configuration for `https://`: `ca` (PEM) or the system's roots, and the
/// client certificate.
pub(super) fn client_config(
    ca: Option<&[u8]>,
    identity: Option<&ClientIdentity>,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("reading the CA file: {e}"))?;
                roots.add(cert).map_err(|e| format!("the CA file: {e}"))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // A system root rustls cannot use is skipped, as the gRPC channel does.
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&id.cert_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("the client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(&id.key_pem)
                .map_err(|e| format!("the client key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate: {e}"))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

impl HttpCollector {
    pub(super) fn new(
        url: Uri,
        headers: &[(String, String)],
        ca: Option<&[u8]>,
        identity: Option<&ClientIdentity>,
    ) -> Result<Self, String> {
        let tls = match url.scheme_str() {
            Some("https") => Some(TlsConnector::from(Arc::new(client_config(ca, identity)?))),
            _ => None,
        };
        Ok(HttpCollector {
            url,
            // Checked when the configuration was loaded.
            headers: headers
                .iter()
                .filter_map(|(k, v)| {
                    Some((
                        HeaderName::from_bytes(k.as_bytes()).ok()?,
                        HeaderValue::from_str(v).ok()?,
                    ))
                })
                .collect(),
            tls,
            conn: None,
        })
    }

    /// One export: the spans the collector rejected, and why.
    pub(super) async fn export(&mut self, body: Bytes) -> Result<(u64, String), String> {
        let result = self.post(body).await;
        if result.is_err() {
            self.conn = None;
        }
        let (status, answer) = result?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned();
            return Err(format!("{} answered {status}: {}", self.url, text.trim()));
        }
        Ok(crate::otlp::rejected(&answer))
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let authority = self.url.authority().ok_or("the endpoint has no host")?;
        let port = self
            .url
            .port_u16()
            .unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = TcpStream::connect((authority.host(), port))
            .await
            .map_err(|e| format!("connecting to {authority}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        macro_rules! handshake {
            ($io:expr) => {{
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new($io))
                    .await
                    .map_err(|e| format!("HTTP to {authority}: {e}"))?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                Ok(sender)
            }};
        }
        match &self.tls {
            None => handshake!(tcp),
            Some(connector) => {
                let host = authority.host().trim_matches(['[', ']']).to_owned();
                let name = ServerName::try_from(host).map_err(|e| e.to_string())?;
                let tls = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS to {authority}: {e}"))?;
                handshake!(tls)
            }
        }
    }

    async fn post(&mut self, body: Bytes) -> Result<(http::StatusCode, Bytes), String> {
        if self.conn.as_ref().is_none_or(SendRequest::is_closed) {
            self.conn = Some(self.connect().await?);
        }
        let authority = self
            .url
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let sender = self.conn.as_mut().expect("connected above");
        sender.ready().await.map_err(|e| e.to_string())?;
        let path = self.url.path_and_query().map_or("/", |p| p.as_str());
        let mut req = Request::post(path)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .header(http::header::CONTENT_LENGTH, body.len())
            .header(
                http::header::USER_AGENT,
                concat!("sluice/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let answer = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        Ok((status, answer))
    }
}
