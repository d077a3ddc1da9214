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
