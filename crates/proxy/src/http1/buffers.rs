//! Read buffers for HTTP/1.1 client connections, from a free list per thread.
//!
//! A connection holds a buffer only while it has bytes to parse or a request in flight; an
//! idle keep-alive connection gives its buffer back (NGINX frees `c->buffer` on keep-alive,
//! sozu keeps buffers for active connections only). Waiting for the next request takes a
//! buffer for the read and returns it at once when the read finds nothing (`Pending`), so a
//! million idle connections share the few buffers of the connections that are busy.

use super::upgrade::Io;
use bytes::BytesMut;
use std::cell::RefCell;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A read buffer's size: a request head of usual size (and the next one pipelined behind it)
/// fits in one read.
pub(crate) const SIZE: usize = 8 * 1024;

/// At most this many free buffers are kept per thread (512 KiB): a burst's buffers beyond
/// that go back to the allocator.
const MAX_FREE: usize = 64;

thread_local! {
    static FREE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for `SIZE` bytes.
pub(crate) fn take() -> BytesMut {
    FREE.with(|f| f.borrow_mut().pop())
        .unwrap_or_else(|| BytesMut::with_capacity(SIZE))
}

/// A read with less room than this left in the buffer grows it first.
const MIN_READ_ROOM: usize = 1024;

/// Reads from `io` into `buf`'s spare room, growing it by `SIZE` when nearly full.
pub(crate) fn poll_read<S: Io>(
    io: &mut S,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    if buf.capacity() - buf.len() < MIN_READ_ROOM {
        buf.reserve(SIZE);
    }
    tokio_util::io::poll_read_buf(Pin::new(io), cx, buf)
}

/// The most one read of a response body asks for. A body of known length is read in pieces
/// of up to this size rather than `SIZE`: a 100 KiB page is then 2 reads instead of 13, and 2
/// body frames through compression, HTTP/2 framing and TLS instead of 13 (each read and each
/// frame costs a system call and a pass through the pipeline whatever its size). NGINX's
/// `proxy_buffers` (8 x 4 or 8 KiB) bound the same thing; the buffer is held only while the
/// response streams.
pub(crate) const MAX_BODY_READ: usize = 64 * 1024;

/// Reads a response body from `io` into `buf`: like [`poll_read`], but with room for up to
/// `remaining` bytes (the body's known remaining length, at most [`MAX_BODY_READ`]).
pub(crate) fn poll_read_body<S: Io>(
    io: &mut S,
    buf: &mut BytesMut,
    remaining: u64,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    let want = usize::try_from(remaining)
        .unwrap_or(usize::MAX)
        .saturating_sub(buf.len())
        .clamp(MIN_READ_ROOM, MAX_BODY_READ);
    if buf.capacity() - buf.len() < want {
        buf.reserve(want);
    }
    tokio_util::io::poll_read_buf(Pin::new(io), cx, buf)
}

/// Gives an empty buffer back. One still shared with bytes handed out (a request's header
/// values are slices of it) or holding bytes is simply dropped: its memory goes when the last
/// slice does.
pub(crate) fn give(mut buf: BytesMut) {
    if !buf.is_empty() || !buf.try_reclaim(SIZE) || buf.capacity() > 4 * SIZE {
        return;
    }
    FREE.with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < MAX_FREE {
            f.push(buf);
        }
    });
}

/// Free buffers on this thread (tests).
#[cfg(test)]
pub(crate) fn free() -> usize {
    FREE.with(|f| f.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_of_known_length_is_read_in_large_pieces() {
        use tokio::io::AsyncWriteExt;
        let (mut origin, mut gateway) = tokio::io::duplex(512 * 1024);
        let body = 100 * 1024;
        // The body and the next response's first bytes, all available at once.
        origin.write_all(&vec![7u8; body + 300]).await.unwrap();
        let mut buf = take();
        let n = std::future::poll_fn(|cx| poll_read_body(&mut gateway, &mut buf, body as u64, cx))
            .await
            .unwrap();
        assert_eq!(n, MAX_BODY_READ, "one read of the largest piece, not SIZE");
        buf.clear();
        let rest = (body - MAX_BODY_READ) as u64;
        let n = std::future::poll_fn(|cx| poll_read_body(&mut gateway, &mut buf, rest, cx))
            .await
            .unwrap();
        assert!(
            n as u64 >= rest,
            "the rest of the body in one read ({n} bytes)"
        );
        // A plain read still asks for SIZE at most from an empty buffer.
        let mut small = take();
        origin.write_all(&vec![1u8; 3 * SIZE]).await.unwrap();
        let n = std::future::poll_fn(|cx| poll_read(&mut gateway, &mut small, cx))
            .await
            .unwrap();
        assert!(
            n <= SIZE + MIN_READ_ROOM,
            "a head read stays small ({n} bytes)"
        );
    }

    #[test]
    fn buffers_come_back_only_when_unshared_and_empty() {
        // A thread of its own: the free list starts empty.
        std::thread::spawn(|| {
            let mut b = take();
            b.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
            let head = b.split_to(b.len()).freeze();
            give(b);
            assert_eq!(free(), 0, "still shared with the head: not kept");
            drop(head);
            give(take());
            assert_eq!(free(), 1);
            let again = take();
            assert_eq!(free(), 0, "the kept buffer is handed out again");
            assert!(again.capacity() >= SIZE);
            let mut b = again;
            b.extend_from_slice(b"x");
            give(b);
            assert_eq!(free(), 0, "a buffer with bytes is not kept");
        })
        .join()
        .unwrap();
    }
}
