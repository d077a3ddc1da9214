//! A client connection that switched protocols (`101`, e.g. a WebSocket): handed from the
//! connection's task to the request's tunnel with the bytes already read past the request.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// A client stream of any kind (TLS or cleartext).
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Put in an upgrade request's extensions (which must be `Clone`, hence the shared slot);
/// yields the client's stream once the `101` response is written, or nothing when the
/// response was something else.
#[derive(Debug, Clone)]
pub(crate) struct OnUpgrade(Arc<Mutex<Option<oneshot::Receiver<Upgraded>>>>);

impl OnUpgrade {
    pub(crate) fn pair() -> (oneshot::Sender<Upgraded>, Self) {
        let (tx, rx) = oneshot::channel();
        (tx, OnUpgrade(Arc::new(Mutex::new(Some(rx)))))
    }

    /// Offers `req`'s handler the upgraded stream (as an extension); the sender hands it
    /// over once the `101` is written.
    pub(crate) fn offer<B>(req: &mut http::Request<B>) -> oneshot::Sender<Upgraded> {
        let (tx, on) = Self::pair();
        req.extensions_mut().insert(on);
        tx
    }

    /// The upgraded stream; `None` if the connection did not switch protocols.
    pub(crate) async fn wait(self) -> Option<Upgraded> {
        let rx = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        rx.await.ok()
    }
}

/// The upgraded client stream: first the bytes read past the request head, then the socket.
pub(crate) struct Upgraded {
    pub(crate) io: Box<dyn Io>,
    pub(crate) read_ahead: bytes::Bytes,
}

impl std::fmt::Debug for Upgraded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgraded")
            .field("read_ahead", &self.read_ahead.len())
            .finish_non_exhaustive()
    }
}

impl AsyncRead for Upgraded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.read_ahead.is_empty() {
            let n = self.read_ahead.len().min(buf.remaining());
            let head = self.read_ahead.split_to(n);
            buf.put_slice(&head);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_read_ahead_come_first() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut up = Upgraded {
            io: Box::new(a),
            read_ahead: bytes::Bytes::from_static(b"early "),
        };
        b.write_all(b"later").await.unwrap();
        let mut got = vec![0u8; 11];
        up.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"early later");
        up.write_all(b"back").await.unwrap();
        let mut back = [0u8; 4];
        b.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
    }
}
