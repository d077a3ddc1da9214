//! Reading a TLS ClientHello without terminating TLS, for passthrough by server name (what
//! NGINX's `ssl_preread` and HAProxy's `req.ssl_sni` do).
//!
//! The records are read and kept, to be replayed to the chosen server; only the handshake
//! message is parsed, as far as the `server_name` extension (RFC 8446 §4.1.2, RFC 6066 §3).
//! Every length is checked against what is left before it is used, so a truncated or
//! garbage hello is refused, never trusted; the whole message is bounded by
//! [`MAX_HELLO`], like NGINX's 16 KiB preread buffer.

use tokio::io::{AsyncRead, AsyncReadExt as _};

/// The largest ClientHello accepted (the handshake message, all records together).
pub(crate) const MAX_HELLO: usize = 16 * 1024;

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME: u16 = 0;

/// Why a connection's first bytes could not be routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadHello {
    /// Not a TLS handshake record, or a ClientHello whose lengths do not add up.
    Malformed,
    /// Longer than [`MAX_HELLO`].
    TooLarge,
    /// The client closed (or failed) before the hello was complete.
    Truncated,
}

/// A ClientHello as read: every byte read so far (to replay), and the server name it asks for.
#[derive(Debug)]
pub(crate) struct Hello {
    pub(crate) bytes: Vec<u8>,
    pub(crate) server_name: Option<String>,
}

/// Reads records from `io` until the ClientHello is complete.
pub(crate) async fn read<S: AsyncRead + Unpin>(io: &mut S) -> Result<Hello, BadHello> {
    let mut bytes = Vec::with_capacity(2048);
    let mut message = Vec::new();
    // The handshake message's length, once its 4-byte header is in.
    let mut want: Option<usize> = None;
    loop {
        let mut head = [0u8; 5];
        io.read_exact(&mut head)
            .await
            .map_err(|_| BadHello::Truncated)?;
        // A TLS record: content type, legacy version 3.x, length (≤ 2^14, RFC 8446 §5.1).
        let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
        if head[0] != HANDSHAKE || head[1] != 3 || len == 0 || len > 16 * 1024 {
            return Err(BadHello::Malformed);
        }
        if message.len() + len > MAX_HELLO + 4 {
            return Err(BadHello::TooLarge);
        }
        bytes.extend_from_slice(&head);
        let start = bytes.len();
        bytes.resize(start + len, 0);
        io.read_exact(&mut bytes[start..])
            .await
            .map_err(|_| BadHello::Truncated)?;
        message.extend_from_slice(&bytes[start..]);
        if want.is_none() && message.len() >= 4 {
            if message[0] != CLIENT_HELLO {
                return Err(BadHello::Malformed);
            }
            let n = (usize::from(message[1]) << 16)
                | (usize::from(message[2]) << 8)
                | usize::from(message[3]);
            if n > MAX_HELLO {
                return Err(BadHello::TooLarge);
            }
            want = Some(4 + n);
        }
        if let Some(n) = want
            && message.len() >= n
        {
            let server_name = server_name(&message[4..n]).ok_or(BadHello::Malformed)?;
            return Ok(Hello { bytes, server_name });
        }
    }
}

/// A cursor that refuses to read past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    /// A vector with a `u8` or `u16` length prefix.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// The `host_name` of the ClientHello body's `server_name` extension: `Some(None)` when it
/// has none, `None` when the body is malformed.
fn server_name(body: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // legacy_version, random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    if r.0.is_empty() {
        return Some(None); // no extensions at all (an old client)
    }
    let mut exts = Reader(r.vec16()?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        if kind != usize::from(SERVER_NAME) {
            continue;
        }
        let mut list = Reader(Reader(data).vec16()?);
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let name = list.vec16()?;
            if name_type == 0 {
                let name = std::str::from_utf8(name).ok()?;
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                    return None;
                }
                return Some(Some(sluice_config::normalize_host(name)));
            }
        }
        return Some(None);
    }
    Some(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello body with these extensions (type, data).
    fn body(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&[7u8; 32]);
        b.push(0); // session id
        b.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        b.extend_from_slice(&[1, 0]); // null compression
        let mut exts = Vec::new();
        for (kind, data) in extensions {
            exts.extend_from_slice(&kind.to_be_bytes());
            exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
            exts.extend_from_slice(data);
        }
        b.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        b.extend_from_slice(&exts);
        b
    }

    fn sni(name: &str) -> (u16, Vec<u8>) {
        let mut entry = vec![0];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name.as_bytes());
        let mut data = (entry.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&entry);
        (0, data)
    }

    /// `body` as a handshake message split into records of at most `record` bytes.
    fn records(body: &[u8], record: usize) -> Vec<u8> {
        let mut msg = vec![CLIENT_HELLO];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(body);
        let mut out = Vec::new();
        for chunk in msg.chunks(record) {
            out.extend_from_slice(&[HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    async fn read_all(bytes: &[u8]) -> Result<Hello, BadHello> {
        let mut io = bytes;
        read(&mut io).await
    }

    #[tokio::test]
    async fn the_server_name_is_found_in_one_record_or_several() {
        let b = body(&[
            (10, vec![0, 2, 0, 29]),
            sni("A.Example.com"),
            (16, vec![0, 3, 2, b'h', b'2']),
        ]);
        for size in [16 * 1024, 40, 7] {
            let wire = records(&b, size);
            let hello = read_all(&wire).await.unwrap();
            assert_eq!(hello.server_name.as_deref(), Some("a.example.com"));
            assert_eq!(hello.bytes, wire, "every byte read is kept for the server");
        }
    }

    #[tokio::test]
    async fn a_hello_without_a_name_or_extensions_has_none() {
        let wire = records(&body(&[(10, vec![0, 2, 0, 29])]), 1 << 14);
        assert_eq!(read_all(&wire).await.unwrap().server_name, None);
        let mut bare = body(&[]);
        bare.truncate(bare.len() - 2);
        let wire = records(&bare, 1 << 14);
        assert_eq!(read_all(&wire).await.unwrap().server_name, None);
    }

    #[tokio::test]
    async fn truncated_garbage_and_oversized_hellos_are_refused() {
        let wire = records(&body(&[sni("a.example.com")]), 1 << 14);
        for cut in [0, 3, 5, 20, wire.len() - 1] {
            assert_eq!(
                read_all(&wire[..cut]).await.unwrap_err(),
                BadHello::Truncated,
                "cut at {cut}"
            );
        }
        assert_eq!(
            read_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .await
                .unwrap_err(),
            BadHello::Malformed
        );
        // Lengths inside the hello that point past its end.
        let mut b = body(&[sni("a.example.com")]);
        let n = b.len();
        b[n - 3] = 0xff;
        assert_eq!(
            read_all(&records(&b, 1 << 14)).await.unwrap_err(),
            BadHello::Malformed
        );
        // A 64 KiB hello (a padding extension), in full-size records.
        let big = body(&[sni("a.example.com"), (21, vec![0; 64 * 1024 - 200])]);
        assert_eq!(
            read_all(&records(&big, 1 << 14)).await.unwrap_err(),
            BadHello::TooLarge
        );
        // A record claiming more than TLS allows.
        assert_eq!(
            read_all(&[HANDSHAKE, 3, 1, 0xff, 0xff, 1])
                .await
                .unwrap_err(),
            BadHello::Malformed
        );
    }

    #[test]
    fn no_prefix_of_a_hello_yields_its_name_and_flipped_bytes_never_panic() {
        // The name last, so that every cut short of the end truncates it.
        let b = body(&[(10, vec![0, 2, 0, 29]), sni("a.example.com")]);
        for cut in 0..b.len() {
            assert!(
                !matches!(server_name(&b[..cut]), Some(Some(_))),
                "a hello cut at {cut} of {} gave a name",
                b.len()
            );
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0xa5;
            // Lengths now point anywhere: refused or read within bounds, and never a name
            // longer than the bytes that held it.
            if let Some(Some(name)) = server_name(&c) {
                assert!(name.len() <= c.len(), "byte {i}");
            }
        }
        assert_eq!(server_name(&b), Some(Some("a.example.com".into())));
    }
}
