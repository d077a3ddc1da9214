//! The HTTP client of JWKS fetches and forward-auth subrequests: hyper's pooled HTTP/1.1
//! client (kept connections, so a subrequest per request costs no handshake), `https://` on
//! rustls trusting a configured CA or the system's roots.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;

/// The most of an answer's body read.
pub(crate) const MAX_BODY: usize = 1 << 20;

/// A pooled client.
#[derive(Clone)]
pub(crate) struct HttpClient {
    inner: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpClient")
    }
}

impl HttpClient {
    /// A client trusting `ca` (PEM), else the system's roots.
    pub(crate) fn new(ca: Option<&[u8]>) -> Result<Self, String> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("the CA file: {e}"))?;
                    roots.add(cert).map_err(|e| format!("the CA file: {e}"))?;
                }
            }
            None => {
                // A system root rustls cannot use is skipped.
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(64)
            .build(connector);
        Ok(HttpClient { inner })
    }

    /// Sends `req` and reads the answer (its body up to [`MAX_BODY`]) within `timeout`.
    pub(crate) async fn send(
        &self,
        req: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Response<Bytes>, String> {
        let exchange = async {
            let resp = self.inner.request(req).await.map_err(|e| {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text.push_str(": ");
                    text.push_str(&s.to_string());
                    source = s.source();
                }
                text
            })?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            Ok(Response::from_parts(parts, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| format!("no answer within {timeout:?}"))?
    }
}
