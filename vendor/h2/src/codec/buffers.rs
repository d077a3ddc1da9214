//! Sluice: a connection's read and write buffers from free lists per thread.
//!
//! A connection holds its buffers only while it has bytes to read or write (see
//! `framed_read::READ_BUFFER_CAPACITY` and `Encoder::release_if_empty`). Giving them back to
//! the allocator and asking again on every wake-up and every flush cost ~800 instructions a
//! request (a 16 KiB and an 8 KiB block, mostly through the allocator's slow path); the lists
//! here keep a few per thread instead, so idle connections still hold none. Sluice's own
//! HTTP/1.1 buffers (`sluice_proxy::http1::buffers`) work the same way.

use bytes::BytesMut;
use std::cell::RefCell;

/// At most this many free buffers of each kind are kept per thread (8 x 16 KiB + 8 x 8 KiB
/// = 192 KiB): a connection's task holds a buffer only while it runs or while the socket
/// will not take its bytes, so a few serve a thread's connections; a burst's beyond that go
/// back to the allocator.
const MAX_FREE: usize = 8;

thread_local! {
    static READ: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static WRITE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// Which list a buffer comes from, and its size there.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Read(usize),
    Write(usize),
}

impl Kind {
    fn list(self) -> &'static std::thread::LocalKey<RefCell<Vec<BytesMut>>> {
        match self {
            Kind::Read(_) => &READ,
            Kind::Write(_) => &WRITE,
        }
    }

    fn size(self) -> usize {
        match self {
            Kind::Read(n) | Kind::Write(n) => n,
        }
    }
}

/// An empty buffer with room for the kind's size.
pub(crate) fn take(kind: Kind) -> BytesMut {
    kind.list()
        .try_with(|f| f.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(kind.size()))
}

/// Gives an empty buffer back. One still shared with bytes handed out (frames are slices of
/// the read buffer), holding bytes, or grown far past its size is simply dropped: its memory
/// goes when the last slice does.
pub(crate) fn give(kind: Kind, mut buf: BytesMut) {
    let size = kind.size();
    if !buf.is_empty() || buf.capacity() > 4 * size || !buf.try_reclaim(size) {
        return;
    }
    // A thread being torn down drops it instead.
    let _ = kind.list().try_with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < MAX_FREE {
            f.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn free(kind: Kind) -> usize {
        kind.list().with(|f| f.borrow().len())
    }

    #[test]
    fn an_empty_unshared_buffer_is_kept_and_taken_again_with_its_room() {
        let kind = Kind::Write(1024);
        let before = free(kind);
        let mut b = take(kind);
        assert!(b.capacity() >= 1024);
        b.put_slice(b"frame");
        let _ = b.split_to(5);
        give(kind, b);
        assert_eq!(free(kind), before + 1, "empty and unshared: kept");
        let again = take(kind);
        assert!(again.is_empty() && again.capacity() >= 1024);
        assert_eq!(free(kind), before);
    }

    #[test]
    fn a_buffer_still_shared_or_holding_bytes_is_dropped() {
        let kind = Kind::Read(1024);
        let before = free(kind);
        let mut b = take(kind);
        b.put_slice(b"frame");
        let frame = b.split_to(5).freeze();
        give(kind, b);
        assert_eq!(free(kind), before, "a frame still points into it");
        assert_eq!(&frame[..], b"frame");
        let mut b = take(kind);
        b.put_slice(b"left");
        give(kind, b);
        assert_eq!(free(kind), before, "bytes not yet read");
    }
}
