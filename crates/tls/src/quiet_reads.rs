//! Reads of an established TLS connection that ask the socket before BoringSSL.
//!
//! A connection's reader polls until it is told to wait: after each request's bytes, one more
//! read finds nothing. Through BoringSSL that last read is an `SSL_read` that clears the error
//! queue, walks the record layer, calls the BIO, and builds an error out of "would block":
//! ~1,500 instructions, for every request on a kept-alive connection (two `SSL_read`s per
//! request where one had data, counted with `bench/instructions.py`). When BoringSSL holds
//! nothing (no decrypted byte, no record not yet opened), nothing was read ahead of it, and
//! the socket is not readable, that read can only wait: [`QuietReads`] asks the socket's
//! readiness first and waits there, registered exactly as the read would have.

use crate::OffloadIo;
use foreign_types::ForeignTypeRef as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_boring::SslStream;

/// A socket whose readability can be asked without reading from it (tokio's
/// `poll_read_ready`: ready until a read finds the socket drained, then pending until the
/// next readiness event, which wakes the task it was asked from).
pub trait ReadReady {
    /// Ready when a read may find bytes; pending (the task registered) when it would wait.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl ReadReady for tokio::net::TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tokio::net::TcpStream::poll_read_ready(self, cx)
    }
}

/// A server's TLS stream after its handshake, whose reads skip BoringSSL when they could
/// only wait (see the module's comment). Writes go straight through.
pub struct QuietReads<S>(SslStream<OffloadIo<S>>);

impl<S> QuietReads<S> {
    /// Wraps a stream whose handshake is done.
    pub fn new(stream: SslStream<OffloadIo<S>>) -> Self {
        QuietReads(stream)
    }

    /// Whether a read could be answered without the socket: BoringSSL holds bytes
    /// (decrypted, or a record not yet opened), bytes were read ahead of it, or the peer's
    /// `close_notify` came (a read then returns its end at once).
    #[expect(
        unsafe_code,
        reason = "SSL_has_pending and SSL_get_shutdown on the stream's SSL"
    )]
    fn holds_input(&self) -> bool {
        let ssl = self.0.ssl().as_ptr();
        // SAFETY: `ssl` is the stream's live `SSL`, borrowed with `self` for this call; both
        // functions only read it (the sizes of its buffers, its shutdown bits).
        let (buffered, shutdown) = unsafe {
            (
                boring_sys::SSL_has_pending(ssl) != 0,
                boring_sys::SSL_get_shutdown(ssl),
            )
        };
        buffered
            || shutdown & boring_sys::SSL_RECEIVED_SHUTDOWN != 0
            || self.0.get_ref().has_read_ahead()
    }
}

impl<S: AsyncRead + AsyncWrite + ReadReady + Unpin> AsyncRead for QuietReads<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.holds_input() {
            ready!(self.0.get_ref().get_ref().poll_read_ready(cx))?;
        }
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for QuietReads<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::WakerSlot;
    use crate::selfsigned::{KeyKind, generate};
    use boring::ssl::{SslAcceptor, SslConnector, SslMethod, SslVerifyMode};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// Far longer than any read of bytes already on this machine takes.
    const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

    /// A TLS 1.3 connection over loopback: our side in [`QuietReads`], the client's plain.
    async fn pair() -> (QuietReads<TcpStream>, SslStream<TcpStream>) {
        let (cert, key) = generate(KeyKind::EcdsaP256, &["a.test"], 30).unwrap();
        let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).unwrap();
        acceptor.set_certificate(&cert).unwrap();
        acceptor.set_private_key(&key).unwrap();
        let acceptor = acceptor.build();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut c = SslConnector::builder(SslMethod::tls()).unwrap();
            c.set_verify(SslVerifyMode::NONE);
            let cfg = c.build().configure().unwrap();
            let tcp = TcpStream::connect(addr).await.unwrap();
            tokio_boring::connect(cfg, "a.test", tcp).await.unwrap()
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let io = OffloadIo::new(tcp, Arc::new(WakerSlot::default()));
        let ssl = boring::ssl::Ssl::new(acceptor.context()).unwrap();
        let server = tokio_boring::SslStreamBuilder::new(ssl, io)
            .accept()
            .await
            .unwrap();
        (QuietReads::new(server), client.await.unwrap())
    }

    /// Records written together arrive together: after the first read, the rest sit in
    /// BoringSSL's buffer or the read ahead, not in the socket, and must still be read
    /// without another readiness event (none would come).
    #[tokio::test]
    async fn records_already_taken_from_the_socket_are_read_without_it() {
        let (mut ours, mut theirs) = pair().await;
        // Separate records in one segment: three writes, flushed as one burst.
        for part in [&b"first "[..], b"second ", b"third"] {
            theirs.write_all(part).await.unwrap();
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 4];
        while got.len() < 18 {
            // Bounded only so that a read left waiting fails the test instead of hanging it.
            let n = tokio::time::timeout(WAIT, ours.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("a read waited for the socket after {got:?}"))
                .unwrap();
            assert!(n > 0, "an early end after {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"first second third");
        // The peer's close_notify ends the stream, also after data read in the same turn.
        theirs.write_all(b"last").await.unwrap();
        theirs.shutdown().await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, ours.read_to_end(&mut rest))
            .await
            .expect("the end was read")
            .unwrap();
        assert_eq!(rest, b"last");
        let mut more = [0u8; 1];
        assert_eq!(ours.read(&mut more).await.unwrap(), 0, "the end again");
    }

    /// With nothing buffered and nothing sent, a read waits (the task is registered with the
    /// socket) and is woken by the next record.
    #[tokio::test]
    async fn a_read_with_nothing_there_waits_for_the_socket() {
        let (mut ours, mut theirs) = pair().await;
        let mut buf = [0u8; 16];
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut rb = ReadBuf::new(&mut buf);
        assert!(
            Pin::new(&mut ours).poll_read(&mut cx, &mut rb).is_pending(),
            "nothing was sent"
        );
        assert!(!ours.holds_input());
        theirs.write_all(b"hello").await.unwrap();
        let n = ours.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"hello");
    }
}
