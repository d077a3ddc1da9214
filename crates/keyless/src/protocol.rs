//! The key-server wire protocol, version 1.
//!
//! Every message is one frame: a 12-byte header, then a body. All integers are big-endian.
//!
//! ```text
//!  0        1        2                 4                                 8                                12
//! +--------+--------+-----------------+---------------------------------+---------------------------------+
//! |version | opcode |     status      |           request id            |          body length            |
//! +--------+--------+-----------------+---------------------------------+---------------------------------+
//! ```
//!
//! - `version` is 1. A frame of another version is refused with [`Status::BadVersion`] and the
//!   connection closes (a peer that speaks another version cannot be parsed further).
//! - `opcode`: requests are [`Op::Sign`] (1), [`Op::Decrypt`] (2) and [`Op::Ping`] (3); a
//!   response carries the request's opcode with the high bit set (`0x81`, `0x82`, `0x83`).
//! - `status` is 0 in requests; in responses a [`Status`].
//! - `request id` is chosen by the client and echoed in the response: many operations are in
//!   flight on one connection at once, and responses come back in completion order.
//! - `body length` is at most [`MAX_BODY`]; a longer frame is malformed and closes the
//!   connection (the server never buffers more than one frame's worth per connection).
//!
//! Bodies:
//!
//! - Sign: key id (32 bytes) | signature scheme (2 bytes, the TLS code point, e.g. `0x0804`
//!   rsa_pss_rsae_sha256) | the message to sign (the whole message; the server hashes it).
//! - Decrypt: key id (32 bytes) | the RSA ciphertext (raw decryption, no padding removed: the
//!   TLS stack checks the padding in constant time).
//! - Ping: any payload up to [`MAX_PING`] bytes, echoed back.
//! - Response: with status OK, the signature or plaintext (or the ping payload); otherwise a
//!   short UTF-8 message saying what went wrong.
//!
//! The **key id** is the SHA-256 of the key's DER SubjectPublicKeyInfo, which the gateway
//! computes from the certificate and the key server from the private key: the gateway needs no
//! key file and the two sides need no shared naming.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;
/// Header length.
pub const HEADER: usize = 12;
/// Longest body: a sign request carries a TLS handshake's signed content (a few hundred
/// bytes); an RSA-8192 ciphertext is 1 KiB.
pub const MAX_BODY: usize = 16 * 1024;
/// Longest ping payload.
pub const MAX_PING: usize = 1024;
/// Length of a key id.
pub const KEY_ID_LEN: usize = 32;

/// SHA-256 of a key's DER SubjectPublicKeyInfo.
pub type KeyId = [u8; KEY_ID_LEN];

/// Operation codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Sign a message with a key and a TLS signature scheme.
    Sign = 1,
    /// Raw RSA decryption.
    Decrypt = 2,
    /// Liveness check; the payload comes back.
    Ping = 3,
}

impl Op {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Op::Sign),
            2 => Some(Op::Decrypt),
            3 => Some(Op::Ping),
            _ => None,
        }
    }
}

/// Response bit of the opcode.
const RESPONSE: u8 = 0x80;

/// Outcome of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// Done; the body is the result.
    Ok = 0,
    /// The server holds no key with this id.
    UnknownKey = 1,
    /// The client's certificate may not use this key.
    Forbidden = 2,
    /// The key cannot do this (a scheme of another key type, decryption with a non-RSA key).
    Unsupported = 3,
    /// The request body is malformed (too short, a ciphertext of the wrong length).
    BadRequest = 4,
    /// The private-key operation failed on the server.
    CryptoFailed = 5,
    /// The server cannot take the request now; try another server. Reserved: this key
    /// server applies back-pressure instead (it stops reading a connection at
    /// `max_pending`), but clients treat it like any error and fail over.
    Overloaded = 6,
    /// The server does not speak the request's protocol version.
    BadVersion = 7,
    /// Anything else (a status code this version does not know reads as this).
    Internal = 8,
}

impl Status {
    /// The status for a code on the wire.
    pub fn from_u16(v: u16) -> Self {
        match v {
            0 => Status::Ok,
            1 => Status::UnknownKey,
            2 => Status::Forbidden,
            3 => Status::Unsupported,
            4 => Status::BadRequest,
            5 => Status::CryptoFailed,
            6 => Status::Overloaded,
            7 => Status::BadVersion,
            _ => Status::Internal,
        }
    }

    /// A short name for logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::UnknownKey => "unknown_key",
            Status::Forbidden => "forbidden",
            Status::Unsupported => "unsupported",
            Status::BadRequest => "bad_request",
            Status::CryptoFailed => "crypto_failed",
            Status::Overloaded => "overloaded",
            Status::BadVersion => "bad_version",
            Status::Internal => "internal",
        }
    }
}

/// What a frame says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A signature request.
    Sign {
        /// Which key.
        key_id: KeyId,
        /// The TLS signature scheme code point.
        scheme: u16,
        /// The message to sign.
        message: Bytes,
    },
    /// A raw RSA decryption request.
    Decrypt {
        /// Which key.
        key_id: KeyId,
        /// The ciphertext, exactly the modulus length.
        ciphertext: Bytes,
    },
    /// A ping.
    Ping {
        /// Echoed back.
        payload: Bytes,
    },
    /// The answer to a request.
    Response {
        /// The request's operation.
        op: Op,
        /// Its outcome.
        status: Status,
        /// The result, or an error message.
        body: Bytes,
    },
}

/// One frame: a message and the request id that pairs a response with its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Chosen by the client, echoed by the server.
    pub id: u32,
    /// The content.
    pub message: Message,
}

/// Why bytes are not a frame. Every one of them closes the connection: after a bad header
/// the stream cannot be resynchronised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Another protocol version.
    #[error("protocol version {0}, this side speaks version 1")]
    BadVersion(u8),
    /// An opcode this version does not define.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A body over [`MAX_BODY`].
    #[error("frame body of {0} bytes is over the limit of 16384")]
    TooLong(u32),
    /// A request with a non-zero status field.
    #[error("request with a status field set")]
    StatusInRequest,
    /// A body too short for its opcode.
    #[error("{op:?} body of {len} bytes is too short")]
    ShortBody {
        /// The operation.
        op: Op,
        /// The body's length.
        len: usize,
    },
    /// A ping payload over [`MAX_PING`].
    #[error("ping payload of {0} bytes is over the limit of 1024")]
    LongPing(usize),
}

impl Frame {
    /// A sign request.
    pub fn sign(id: u32, key_id: KeyId, scheme: u16, message: &[u8]) -> Self {
        Frame {
            id,
            message: Message::Sign {
                key_id,
                scheme,
                message: Bytes::copy_from_slice(message),
            },
        }
    }

    /// A decrypt request.
    pub fn decrypt(id: u32, key_id: KeyId, ciphertext: &[u8]) -> Self {
        Frame {
            id,
            message: Message::Decrypt {
                key_id,
                ciphertext: Bytes::copy_from_slice(ciphertext),
            },
        }
    }

    /// A ping.
    pub fn ping(id: u32, payload: &[u8]) -> Self {
        Frame {
            id,
            message: Message::Ping {
                payload: Bytes::copy_from_slice(payload),
            },
        }
    }

    /// A response to request `id`.
    pub fn response(id: u32, op: Op, status: Status, body: impl Into<Bytes>) -> Self {
        Frame {
            id,
            message: Message::Response {
                op,
                status,
                body: body.into(),
            },
        }
    }

    /// Appends the frame's bytes to `out`.
    ///
    /// # Panics
    /// When the body is over [`MAX_BODY`]: callers build bodies from bounded inputs (a
    /// signature, a ciphertext, an error message), so that is a bug, not an input error.
    pub fn encode(&self, out: &mut BytesMut) {
        let (op, status, len) = match &self.message {
            Message::Sign { message, .. } => (Op::Sign as u8, 0, KEY_ID_LEN + 2 + message.len()),
            Message::Decrypt { ciphertext, .. } => {
                (Op::Decrypt as u8, 0, KEY_ID_LEN + ciphertext.len())
            }
            Message::Ping { payload } => (Op::Ping as u8, 0, payload.len()),
            Message::Response { op, status, body } => {
                (*op as u8 | RESPONSE, *status as u16, body.len())
            }
        };
        assert!(len <= MAX_BODY, "keyless frame body of {len} bytes");
        out.reserve(HEADER + len);
        out.put_u8(VERSION);
        out.put_u8(op);
        out.put_u16(status);
        out.put_u32(self.id);
        out.put_u32(len as u32);
        match &self.message {
            Message::Sign {
                key_id,
                scheme,
                message,
            } => {
                out.put_slice(key_id);
                out.put_u16(*scheme);
                out.put_slice(message);
            }
            Message::Decrypt { key_id, ciphertext } => {
                out.put_slice(key_id);
                out.put_slice(ciphertext);
            }
            Message::Ping { payload } => out.put_slice(payload),
            Message::Response { body, .. } => out.put_slice(body),
        }
    }

    /// The frame's bytes.
    pub fn to_bytes(&self) -> BytesMut {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b
    }

    /// Takes one frame off the front of `buf`. `Ok(None)`: more bytes are needed (nothing is
    /// consumed). The header is checked before the body has arrived, so a bad length is
    /// refused without waiting for (or buffering) the bytes it announces.
    pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let version = buf[0];
        if version != VERSION {
            return Err(ProtocolError::BadVersion(version));
        }
        let raw_op = buf[1];
        let op = Op::from_u8(raw_op & !RESPONSE).ok_or(ProtocolError::UnknownOpcode(raw_op))?;
        let is_response = raw_op & RESPONSE != 0;
        let status = u16::from_be_bytes([buf[2], buf[3]]);
        let id = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let len = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
        if len as usize > MAX_BODY {
            return Err(ProtocolError::TooLong(len));
        }
        if !is_response && status != 0 {
            return Err(ProtocolError::StatusInRequest);
        }
        let len = len as usize;
        if buf.len() < HEADER + len {
            return Ok(None);
        }
        buf.advance(HEADER);
        let mut body = buf.split_to(len).freeze();
        let short = |op| ProtocolError::ShortBody { op, len };
        let message = if is_response {
            Message::Response {
                op,
                status: Status::from_u16(status),
                body,
            }
        } else {
            match op {
                Op::Sign => {
                    if len < KEY_ID_LEN + 2 {
                        return Err(short(op));
                    }
                    let key_id = take_key_id(&mut body);
                    let scheme = body.get_u16();
                    Message::Sign {
                        key_id,
                        scheme,
                        message: body,
                    }
                }
                Op::Decrypt => {
                    if len <= KEY_ID_LEN {
                        return Err(short(op));
                    }
                    let key_id = take_key_id(&mut body);
                    Message::Decrypt {
                        key_id,
                        ciphertext: body,
                    }
                }
                Op::Ping => {
                    if len > MAX_PING {
                        return Err(ProtocolError::LongPing(len));
                    }
                    Message::Ping { payload: body }
                }
            }
        };
        Ok(Some(Frame { id, message }))
    }
}

fn take_key_id(body: &mut Bytes) -> KeyId {
    let mut id = [0; KEY_ID_LEN];
    body.copy_to_slice(&mut id);
    id
}

/// A key id as lowercase hex (logs, metrics, configuration).
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}
