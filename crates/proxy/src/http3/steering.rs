//! Which process a QUIC datagram belongs to while `sluice upgrade` runs two of them on one
//! port.
//!
//! TCP hands a listening socket over and the kernel keeps each accepted connection with the
//! process that accepted it. UDP has no such thing: each process binds its own socket with
//! `SO_REUSEPORT` and the kernel spreads datagrams over the group by a hash of their
//! addresses, so adding the new process's socket would move about half of the old process's
//! QUIC connections to a process that does not know them, and send half of the new clients
//! to an old process that takes no new connections.
//!
//! So the connection IDs this side chooses say which process chose them, and each socket
//! carries a classic BPF program (`SO_ATTACH_REUSEPORT_CBPF`, the group's selector) that
//! reads the destination connection ID of every datagram:
//!
//! - an ID of ours (16 bytes starting with [`MARKER`]) goes to the process of its generation:
//!   the newest socket (index 1 while two run) for this process's own generation, the older
//!   one (index 0) for the other;
//! - anything else (a new client's Initial, whose ID the client picked) goes to the newest
//!   socket, which is the process taking new connections.
//!
//! Generations alternate (`SLUICE_GENERATION`, counted up by each upgrade), so one bit in the
//! ID is enough. With one process alone, index 1 does not exist and the kernel falls back to
//! its hash over the one socket: the program costs nothing then. A datagram too short for
//! the loads ends the program with 0 (the kernel's rule for a failed load): it goes to the
//! older socket, which drops it as unparsable. The IDs keep 95 random bits; the 32-bit prefix
//! names this gateway (a load balancer's QUIC-LB server ID does the same) but not a
//! connection.

use quiche::ConnectionId;
use std::sync::atomic::{AtomicU8, Ordering};

/// The length of the connection IDs this side chooses.
pub(crate) const CID_LEN: usize = 16;

/// The first 31 bits of every connection ID this side chooses (the 32nd is the generation).
/// A client's own 16-byte ID begins so with probability 2⁻³¹.
const MARKER: u32 = 0x51c3_e2a4;

/// This process's generation bit: 0 or 1.
static GENERATION: AtomicU8 = AtomicU8::new(0);

/// Sets this process's generation (`SLUICE_GENERATION`: 0 for a process started by hand,
/// one more for each upgrade). Call before any listener binds.
pub fn set_generation(generation: u32) {
    GENERATION.store((generation & 1) as u8, Ordering::Relaxed);
}

fn generation() -> u8 {
    GENERATION.load(Ordering::Relaxed)
}

/// A connection ID of this process: the marker, the generation bit, then random bytes.
pub(crate) fn new_cid() -> ConnectionId<'static> {
    let mut id = [0u8; CID_LEN];
    boring::rand::rand_bytes(&mut id).expect("BoringSSL's random generator");
    id[..4].copy_from_slice(&(MARKER | u32::from(generation())).to_be_bytes());
    ConnectionId::from_vec(id.to_vec())
}

/// The selector for a socket of generation `own`, in classic BPF. Offsets are into the UDP
/// payload (the kernel strips the UDP header before running it).
fn program(own: u8) -> [libc::sock_filter; 15] {
    const NEW: u8 = 14;
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    use libc::{
        BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_JA, BPF_JEQ, BPF_JMP, BPF_JSET, BPF_K, BPF_LD,
        BPF_MISC, BPF_RET, BPF_TAX, BPF_TXA, BPF_W,
    };
    [
        // 0: the first byte; the long header form has its top bit set.
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 0),
        // 1: long → 4, short → 2.
        op(BPF_JMP | BPF_JSET | BPF_K, 2, 0, 0x80),
        // 2: short header: the destination ID starts at byte 1.
        op(BPF_LD | BPF_W | BPF_ABS, 0, 0, 1),
        // 3: → 7.
        op(BPF_JMP | BPF_JA, 0, 0, 3),
        // 4: long header: the destination ID's length at byte 5 (after flags and version).
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 5),
        // 5: not our length: a client's ID → the newest socket.
        op(BPF_JMP | BPF_JEQ | BPF_K, 0, NEW - 6, CID_LEN as u32),
        // 6: its first four bytes, at byte 6.
        op(BPF_LD | BPF_W | BPF_ABS, 0, 0, 6),
        // 7: keep the word.
        op(BPF_MISC | BPF_TAX, 0, 0, 0),
        // 8, 9: not our marker → the newest socket.
        op(BPF_ALU | BPF_AND | BPF_K, 0, 0, !1),
        op(BPF_JMP | BPF_JEQ | BPF_K, 0, NEW - 10, MARKER),
        // 10, 11, 12: our generation → the newest socket; the other → the older.
        op(BPF_MISC | BPF_TXA, 0, 0, 0),
        op(BPF_ALU | BPF_AND | BPF_K, 0, 0, 1),
        op(BPF_JMP | BPF_JEQ | BPF_K, NEW - 13, 0, u32::from(own)),
        // 13: the older socket.
        op(BPF_RET | BPF_K, 0, 0, 0),
        // 14 (NEW): the newest socket.
        op(BPF_RET | BPF_K, 0, 0, 1),
    ]
}

/// Installs this process's selector on the reuseport group `socket` belongs to (bound
/// already). It replaces an older process's: the newest process decides, as it should.
pub(crate) fn attach(socket: &impl std::os::fd::AsRawFd) -> std::io::Result<()> {
    attach_as(socket, generation())
}

#[expect(unsafe_code, reason = "SO_ATTACH_REUSEPORT_CBPF has no safe wrapper")]
fn attach_as(socket: &impl std::os::fd::AsRawFd, own: u8) -> std::io::Result<()> {
    let mut filter = program(own);
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: `prog` points at `filter`, which outlives the call (the kernel copies the
    // program); the option's length is that of `sock_fprog`, as the kernel expects, and the
    // descriptor is the caller's open socket.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&raw const prog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    //! The program runs in the kernel here: two sockets of one reuseport group, as an old and
    //! a new process hold them during an upgrade, and datagrams of each kind sent to the
    //! port. (A mistake in a jump offset or a load sends them to the wrong socket, or makes
    //! the kernel refuse the program.)
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    fn reuseport(at: std::net::SocketAddr) -> UdpSocket {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.set_reuse_port(true).unwrap();
        s.bind(&at.into()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        UdpSocket::from(s)
    }

    fn cid(generation: u8) -> Vec<u8> {
        let mut id = vec![0xab; CID_LEN];
        id[..4].copy_from_slice(&(MARKER | u32::from(generation)).to_be_bytes());
        id
    }

    fn short(dcid: &[u8]) -> Vec<u8> {
        let mut p = vec![0x40];
        p.extend_from_slice(dcid);
        p.extend_from_slice(&[0; 30]);
        p
    }

    /// A long header packet of `ty` (0 Initial, 2 Handshake) to `dcid`.
    fn long(ty: u8, dcid: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc0 | (ty << 4), 0, 0, 0, 1, dcid.len() as u8];
        p.extend_from_slice(dcid);
        p.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8]);
        p.resize(1200, 0);
        p
    }

    /// Which of `socks` received `packet` (sent from a fresh socket each time, so that the
    /// kernel's hash would spread them if the program did not choose).
    fn receiver(socks: &[&UdpSocket], packet: &[u8]) -> usize {
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .send_to(packet, socks[0].local_addr().unwrap())
            .unwrap();
        let mut buf = [0u8; 2048];
        for _ in 0..50 {
            for (i, s) in socks.iter().enumerate() {
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    assert_eq!(&buf[..n], packet);
                    return i;
                }
            }
        }
        panic!("no socket received the datagram");
    }

    #[test]
    fn datagrams_go_to_the_process_whose_connection_id_they_carry_and_new_clients_to_the_newest() {
        for new_generation in [0u8, 1] {
            let old_generation = 1 - new_generation;
            let old = reuseport("127.0.0.1:0".parse().unwrap());
            let new = reuseport(old.local_addr().unwrap());
            attach_as(&new, new_generation).expect("the kernel takes the program");
            let socks = [&old, &new];
            for _ in 0..8 {
                assert_eq!(receiver(&socks, &short(&cid(old_generation))), 0);
                assert_eq!(receiver(&socks, &short(&cid(new_generation))), 1);
                assert_eq!(receiver(&socks, &long(2, &cid(old_generation))), 0);
                assert_eq!(receiver(&socks, &long(0, &cid(old_generation))), 0);
                assert_eq!(receiver(&socks, &long(0, &cid(new_generation))), 1);
                // New clients' Initials, with IDs of their own choosing.
                assert_eq!(receiver(&socks, &long(0, &[7; 8])), 1);
                assert_eq!(receiver(&socks, &long(0, &[0xab; 16])), 1);
                assert_eq!(receiver(&socks, &long(0, &[0x51; 20])), 1);
                // Not ours: a short header whose ID lacks the marker.
                assert_eq!(receiver(&socks, &short(&[0x52; 16])), 1);
            }
            // Too short to load from: the older socket (which drops it as unparsable).
            assert_eq!(receiver(&socks, &[0x40, 1]), 0);
        }
    }

    #[test]
    fn a_process_alone_gets_everything() {
        let only = reuseport("127.0.0.1:0".parse().unwrap());
        attach_as(&only, 1).unwrap();
        for p in [short(&cid(1)), short(&cid(0)), long(0, &[7; 8]), vec![0x40]] {
            assert_eq!(receiver(&[&only], &p), 0);
        }
    }

    #[test]
    fn our_ids_carry_the_marker_and_generation_and_random_bytes() {
        let a = new_cid();
        let b = new_cid();
        assert_eq!(a.len(), CID_LEN);
        let word = u32::from_be_bytes(a[..4].try_into().unwrap());
        assert_eq!(word & !1, MARKER);
        assert_eq!((word & 1) as u8, generation());
        assert_ne!(a[4..], b[4..]);
    }
}
