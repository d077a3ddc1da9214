//! TLS to upstream servers (`[upstream.tls]`): one BoringSSL connector per group, and the
//! stream type both kinds of upstream connection (HTTP/1.1 pool, TCP relay) then carry.
//!
//! Verification is on by default: the server's certificate must chain to `ca` (or the
//! system's roots) and carry `server_name` (or, without one, the server's IP address), as
//! NGINX's `proxy_ssl_verify on` with `proxy_ssl_name` would check.

use boring::ssl::{SslConnector, SslMethod, SslVerifyMode};
use sluice_config::UpstreamTls;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_boring::SslStream;

/// How a group's connections start TLS.
pub(crate) struct UpstreamConnector {
    connector: SslConnector,
    server_name: Option<String>,
    verify: bool,
}

impl std::fmt::Debug for UpstreamConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConnector")
            .field("server_name", &self.server_name)
            .field("verify", &self.verify)
            .finish_non_exhaustive()
    }
}

impl UpstreamConnector {
    /// `alpn`: the protocol offered (wire format), if any.
    pub(crate) fn new(
        cfg: &UpstreamTls,
        alpn: Option<&[u8]>,
    ) -> Result<Self, boring::error::ErrorStack> {
        let mut b = SslConnector::builder(SslMethod::tls())?;
        b.set_min_proto_version(Some(boring::ssl::SslVersion::TLS1_2))?;
        match &cfg.ca {
            Some(pem) => {
                for cert in boring::x509::X509::stack_from_pem(pem)? {
                    // A certificate listed twice is already in the store: not an error.
                    let _ = b.cert_store_mut().add_cert(cert);
                }
            }
            None => b.set_default_verify_paths()?,
        }
        b.set_verify(if cfg.verify {
            SslVerifyMode::PEER
        } else {
            SslVerifyMode::NONE
        });
        if let Some(p) = alpn {
            b.set_alpn_protos(p)?;
        }
        if let Some(id) = &cfg.client_identity {
            // Checked to parse and match when loaded.
            let mut chain = boring::x509::X509::stack_from_pem(&id.cert_pem)?.into_iter();
            if let Some(leaf) = chain.next() {
                b.set_certificate(&leaf)?;
            }
            for extra in chain {
                b.add_extra_chain_cert(extra)?;
            }
            let key = boring::pkey::PKey::private_key_from_pem(&id.key_pem)?;
            b.set_private_key(&key)?;
        }
        Ok(UpstreamConnector {
            connector: b.build(),
            server_name: cfg.server_name.clone(),
            verify: cfg.verify,
        })
    }

    /// The TLS handshake on `tcp`, a connection to `addr`.
    pub(crate) async fn connect(
        &self,
        addr: SocketAddr,
        tcp: TcpStream,
    ) -> std::io::Result<SslStream<TcpStream>> {
        let mut cfg = self.connector.configure().map_err(std::io::Error::other)?;
        cfg.set_verify_hostname(self.verify);
        // An IP address is verified as one (and sent without SNI, which takes names only).
        let name = self
            .server_name
            .clone()
            .unwrap_or_else(|| addr.ip().to_string());
        tokio_boring::connect(cfg, &name, tcp)
            .await
            .map_err(|e| std::io::Error::other(format!("TLS handshake with {addr} ({name}): {e}")))
    }
}

/// An upstream connection, cleartext or TLS.
pub(crate) enum UpstreamIo {
    Plain(TcpStream),
    Tls(Box<SslStream<TcpStream>>),
}

impl UpstreamIo {
    /// A new server connection made ready for requests or a client's bytes: the PROXY
    /// protocol header naming the client first (cleartext, as HAProxy sends it), then TLS.
    pub(crate) async fn open(
        mut tcp: TcpStream,
        addr: SocketAddr,
        proxy: Option<sluice_config::ProxyProtocol>,
        at: crate::addresses::Addresses,
        tls: Option<&UpstreamConnector>,
    ) -> std::io::Result<UpstreamIo> {
        if let Some(v) = proxy {
            use tokio::io::AsyncWriteExt as _;
            tcp.write_all(&crate::proxy_protocol::header(v, at.client, at.local))
                .await?;
        }
        Self::start(tls, addr, tcp).await
    }

    /// `tcp`, after a TLS handshake when `tls` is set.
    pub(crate) async fn start(
        tls: Option<&UpstreamConnector>,
        addr: SocketAddr,
        tcp: TcpStream,
    ) -> std::io::Result<UpstreamIo> {
        Ok(match tls {
            None => UpstreamIo::Plain(tcp),
            Some(c) => UpstreamIo::Tls(Box::new(c.connect(addr, tcp).await?)),
        })
    }
}

impl AsyncRead for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_flush(cx),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Plain(s) => s.is_write_vectored(),
            UpstreamIo::Tls(s) => s.is_write_vectored(),
        }
    }
}

impl hyper_util::client::legacy::connect::Connection for UpstreamIo {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

/// The connector of HTTP/2 upstream groups (hyper-util's pooled client): TCP by
/// `HttpConnector` (its connect timeout, `TCP_NODELAY`), then TLS when the group has
/// `[upstream.tls]` (offering ALPN `h2`).
#[derive(Clone)]
pub(crate) struct H2Connect {
    pub(crate) http: hyper_util::client::legacy::connect::HttpConnector,
    pub(crate) tls: Option<std::sync::Arc<UpstreamConnector>>,
}

impl tower_service::Service<http::Uri> for H2Connect {
    type Response = hyper_util::rt::TokioIo<UpstreamIo>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let addr = tcp.peer_addr()?;
            let io = UpstreamIo::start(tls.as_deref(), addr, tcp).await?;
            Ok(hyper_util::rt::TokioIo::new(io))
        })
    }
}
