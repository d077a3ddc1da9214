//! A TCP connection's two sides joined: bytes copied both ways until both have ended.
//!
//! Why not `tokio::io::copy_bidirectional_with_sizes`: it zeroes a 16 KiB buffer per
//! direction for every connection (2% of a connection-rate load's CPU went to that `memset`
//! in `perf`) and shuts down both sides' write halves, though the second shutdown is a
//! system call that closing the socket a moment later does as well. Here the buffers are
//! read into uninitialised (`tokio_util::io::poll_read_buf` on a `BytesMut`), and the
//! second direction to end leaves its FIN to the close when the stream is plain TCP.

use bytes::BytesMut;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::listen::connection::Signals;

/// Bytes buffered per direction (NGINX's `proxy_buffer_size` is 16k).
const BUFFER: usize = 16 * 1024;

/// Copies both ways until both have ended (a half-close is passed on), an error, `idle`
/// with no byte either way, or the gateway's forced close. Returns the bytes sent by the
/// client and by the server.
pub(crate) async fn splice<C, U>(
    client: C,
    upstream: U,
    idle: Duration,
    signals: &Signals,
) -> (u64, u64)
where
    C: AsyncRead + AsyncWrite + FinOnClose + Unpin,
    U: AsyncRead + AsyncWrite + FinOnClose + Unpin,
{
    let activity = signals.idle.watch(idle);
    let mut client = Counted::new(client, activity.clone());
    let mut upstream = Counted::new(upstream, activity.clone());
    {
        let copy = both_ways(&mut client, &mut upstream);
        tokio::select! {
            r = copy => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "TCP connection ended with an error");
                }
            }
            () = signals.force.cancelled() => {}
            () = activity.expired.notified() => {
                tracing::debug!(?idle, "TCP connection idle; closing it");
            }
        }
    }
    (client.read, upstream.read)
}

/// Whether closing a stream ends it as well as shutting its write side down would: true for
/// plain TCP (close sends the FIN once nothing unread is left), false for TLS (shutting down
/// sends close_notify first).
pub(crate) trait FinOnClose {
    fn fin_on_close(&self) -> bool;
}

impl FinOnClose for TcpStream {
    fn fin_on_close(&self) -> bool {
        true
    }
}

impl<S> FinOnClose for tokio_boring::SslStream<S> {
    fn fin_on_close(&self) -> bool {
        false
    }
}

impl FinOnClose for crate::upstreams::upstream_tls::UpstreamIo {
    fn fin_on_close(&self) -> bool {
        matches!(self, crate::upstreams::upstream_tls::UpstreamIo::Plain(_))
    }
}

/// Copies `a` to `b` and `b` to `a` until both have reached their end of stream, passing
/// each end on as a shutdown of the other side's write half (except where closing will do
/// it: see the module's doc). Resolves when both directions are done, or at the first error.
fn both_ways<'a, A, B>(a: &'a mut A, b: &'a mut B) -> BothWays<'a, A, B>
where
    A: AsyncRead + AsyncWrite + FinOnClose + Unpin,
    B: AsyncRead + AsyncWrite + FinOnClose + Unpin,
{
    BothWays {
        a,
        b,
        a_to_b: Half::default(),
        b_to_a: Half::default(),
    }
}

struct BothWays<'a, A, B> {
    a: &'a mut A,
    b: &'a mut B,
    a_to_b: Half,
    b_to_a: Half,
}

impl<A, B> Future for BothWays<'_, A, B>
where
    A: AsyncRead + AsyncWrite + FinOnClose + Unpin,
    B: AsyncRead + AsyncWrite + FinOnClose + Unpin,
{
    type Output = std::io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.a_to_b.done {
            let other_done = this.b_to_a.done;
            if let Poll::Ready(r) = this.a_to_b.poll_copy(cx, this.a, this.b, other_done) {
                r?;
                this.a_to_b.done = true;
            }
        }
        if !this.b_to_a.done {
            let other_done = this.a_to_b.done;
            if let Poll::Ready(r) = this.b_to_a.poll_copy(cx, this.b, this.a, other_done) {
                r?;
                this.b_to_a.done = true;
            }
        }
        if this.a_to_b.done && this.b_to_a.done {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

/// One direction's state: the bytes read and not yet written are `buf[pos..]`.
#[derive(Default)]
struct Half {
    buf: BytesMut,
    pos: usize,
    eof: bool,
    /// Bytes written since the last flush (TLS streams hold them until flushed).
    unflushed: bool,
    done: bool,
}

impl Half {
    /// Moves bytes from `r` to `w` until `r` ends (then shuts `w` down, unless `w`'s other
    /// direction is over too and closing it sends the FIN) or either would block.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
        w: &mut W,
        other_done: bool,
    ) -> Poll<std::io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + FinOnClose + Unpin,
    {
        loop {
            if self.pos == self.buf.len() && !self.eof {
                self.buf.clear();
                self.pos = 0;
                self.buf.reserve(BUFFER);
                match tokio_util::io::poll_read_buf(Pin::new(&mut *r), cx, &mut self.buf) {
                    Poll::Pending => {
                        if self.unflushed {
                            ready!(Pin::new(&mut *w).poll_flush(cx))?;
                            self.unflushed = false;
                        }
                        // Nothing is held, so nothing is kept: a device's connection idles
                        // for minutes between messages, and 100,000 of them holding 32 KiB
                        // each would be 3 GiB. The next read allocates again (one
                        // allocator call beside a system call and a wake-up).
                        self.buf = BytesMut::new();
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(0)) => self.eof = true,
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                }
            }
            while self.pos < self.buf.len() {
                let n = ready!(Pin::new(&mut *w).poll_write(cx, &self.buf[self.pos..]))?;
                if n == 0 {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                self.pos += n;
                self.unflushed = true;
            }
            if self.eof {
                if self.unflushed {
                    ready!(Pin::new(&mut *w).poll_flush(cx))?;
                    self.unflushed = false;
                }
                if !(other_done && w.fin_on_close()) {
                    ready!(Pin::new(&mut *w).poll_shutdown(cx))?;
                }
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// A stream that counts the bytes read from it and notes when any I/O last moved bytes.
struct Counted<S> {
    inner: S,
    read: u64,
    activity: Arc<crate::signals::idle_sweep::Activity>,
}

impl<S> Counted<S> {
    fn new(inner: S, activity: Arc<crate::signals::idle_sweep::Activity>) -> Self {
        Counted {
            inner,
            read: 0,
            activity,
        }
    }
}

impl<S: FinOnClose> FinOnClose for Counted<S> {
    fn fin_on_close(&self) -> bool {
        self.inner.fin_on_close()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read += n as u64;
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    /// A connected pair of real TCP sockets.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    /// client ⇄ (gw_c | splice | gw_u) ⇄ server, the splice on its own task.
    async fn joined() -> (
        TcpStream,
        TcpStream,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let (client, mut gw_c) = pair().await;
        let (mut gw_u, server) = pair().await;
        let task = tokio::spawn(async move { both_ways(&mut gw_c, &mut gw_u).await });
        (client, server, task)
    }

    /// A direction with nothing to move holds no buffer, before and after it has moved bytes.
    #[tokio::test]
    async fn an_idle_direction_keeps_no_buffer() {
        let (mut client, mut gw_c) = pair().await;
        let (mut gw_u, mut server) = pair().await;
        let mut half = Half::default();
        // One poll of the direction: whether it waits (rather than ending or failing).
        macro_rules! step {
            () => {
                std::future::poll_fn(|cx| {
                    Poll::Ready(half.poll_copy(cx, &mut gw_c, &mut gw_u, false).is_pending())
                })
            };
        }
        assert!(step!().await, "nothing to read yet");
        client.write_all(&[7; 3000]).await.unwrap();
        let mut got = vec![0; 3000];
        let mut read = 0;
        while read < got.len() {
            assert!(step!().await);
            let more = tokio::time::timeout(
                std::time::Duration::from_millis(50),
                server.read(&mut got[read..]),
            )
            .await;
            if let Ok(n) = more {
                read += n.unwrap();
            }
        }
        assert_eq!(got, vec![7; 3000], "the bytes went across");
        assert!(step!().await, "idle again");
        assert_eq!(half.buf.capacity(), 0, "an idle direction holds no buffer");
    }

    #[tokio::test]
    async fn a_half_close_is_passed_on_and_the_reply_still_arrives_then_a_clean_end() {
        let (mut client, mut server, task) = joined().await;
        client.write_all(b"ping").await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(
            got, b"ping",
            "the server sees the bytes, then the client's end"
        );
        server.write_all(b"pong").await.unwrap();
        drop(server);
        let mut got = Vec::new();
        // A reset (an elided shutdown gone wrong) would be an error here, not an end.
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"pong");
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn the_server_ending_first_is_passed_on_too() {
        let (mut client, mut server, task) = joined().await;
        server.write_all(b"banner").await.unwrap();
        server.shutdown().await.unwrap();
        let mut got = [0u8; 6];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"banner");
        assert_eq!(
            client.read(&mut [0u8; 8]).await.unwrap(),
            0,
            "the server's end"
        );
        client.write_all(b"bye").await.unwrap();
        drop(client);
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"bye");
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn megabytes_both_ways_at_once_arrive_whole_and_in_order() {
        let (client, server, task) = joined().await;
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let (d1, d2) = (data.clone(), data.clone());
        let up = tokio::spawn(async move {
            cw.write_all(&d1).await.unwrap();
            cw.shutdown().await.unwrap();
        });
        let down = tokio::spawn(async move {
            sw.write_all(&d2).await.unwrap();
            sw.shutdown().await.unwrap();
        });
        let mut at_server = Vec::new();
        let mut at_client = Vec::new();
        let (a, b) = tokio::join!(
            sr.read_to_end(&mut at_server),
            cr.read_to_end(&mut at_client)
        );
        a.unwrap();
        b.unwrap();
        up.await.unwrap();
        down.await.unwrap();
        assert!(at_server == data, "client to server bytes differ");
        assert!(at_client == data, "server to client bytes differ");
        task.await.unwrap().unwrap();
    }
}
