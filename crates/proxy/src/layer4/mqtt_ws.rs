//! MQTT over WebSocket (`[route.mqtt]`): a device's WebSocket, once its route has answered
//! `101` (`request::mqtt_ws`), is admitted and relayed exactly as an MQTT listener's
//! connection (`mqtt::admit`): its CONNECT read from the frames within the route's limits,
//! checked, and the device sent to the broker its client identifier (or user name) hashes
//! to on the route's upstream ring. The broker is spoken to in plain MQTT on its TCP port,
//! so a device that arrives over WebSocket and one that arrives over TCP with the same
//! identifier reach the same broker, and the brokers need no WebSocket listener.
//!
//! Frames are read and written by tungstenite (`WsBytes` turns them into the byte stream
//! the relay copies): what the device sends in binary frames goes to the broker as bytes,
//! and what the broker sends goes back in binary frames, one per read. A text frame is a
//! protocol error (MQTT-6.0.0-1) and ends the connection; pings are answered by tungstenite.

use crate::layer4::mqtt::{Admits, Gate};
use crate::layer4::splice::FinOnClose;
use crate::layer4::stream::{TcpConn, opened};
use crate::request::context::WsHandoff;
use crate::request::mqtt_gate::{MqttGate, MqttGates, gate_key};
use bytes::Bytes;
use futures_util::{Sink, Stream};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// Takes a device's WebSocket to its end ([`crate::request::context::MqttBridge`]).
pub(crate) fn bridge(h: WsHandoff) -> Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(relay(h))
}

async fn relay(h: WsHandoff) {
    let WsHandoff {
        listener,
        mqtt,
        upgrade,
        at,
        signals,
        gate,
        cert,
    } = h;
    let Some(io) = upgrade.wait().await else {
        return;
    };
    // The relay ends when its own drain does, not when its HTTP connection's would.
    let signals = crate::signals::Signals {
        force: signals.streams.force.clone(),
        ..signals
    };
    let io = Bounded::new(io, pre_admission_bound(mqtt.max_connect_size));
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER);
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    let protocol = if listener.tls.is_some() {
        "mqtt-wss"
    } else {
        "mqtt-ws"
    };
    let (log, start) = opened(&listener, at, "MQTT", protocol);
    let conn = TcpConn {
        listener: &listener,
        idle_timeout: mqtt.idle_timeout,
        at,
        log,
        start,
        signals: &signals,
    };
    let gate = Gate {
        auth: gate.as_ref().and_then(|g| g.auth.as_deref()),
        rates: gate.as_ref().and_then(|g| g.rates.as_deref()),
    };
    crate::layer4::mqtt::admit(conn, &mqtt, gate, WsBytes::new(ws), Ok(cert)).await;
}

/// tungstenite's read buffer: the relay's own buffer size (its default, 128 KiB, would be
/// held by every idle device).
const READ_BUFFER: usize = 16 * 1024;

/// What a device may send before its CONNECT is admitted, frame headers included, and the
/// largest frame it may declare: the largest CONNECT, as much again for a packet sent behind
/// it in the same frames, and 1 KiB of headers. tungstenite reserves a frame's declared
/// length as soon as it reads the header (16 MiB by default), so the bound is applied to the
/// bytes before tungstenite sees them.
fn pre_admission_bound(max_connect_size: usize) -> usize {
    max_connect_size.saturating_mul(2).saturating_add(1024)
}

/// Each `[route.mqtt]` route's gate for a new configuration: the old one's checker and
/// rates where the route's settings for them stay.
pub(crate) fn gates(
    snapshot: &sluice_config::Snapshot,
    old: Option<&MqttGates>,
    hashing: &std::sync::Arc<sluice_auth::HashPool>,
    redis: Option<&std::sync::Arc<crate::request::rate_limit::RedisStore>>,
) -> Result<MqttGates, String> {
    let mut gates = MqttGates::new();
    for route in &snapshot.routes {
        let Some(mqtt) = &route.mqtt else {
            continue;
        };
        let kept = old.and_then(|o| o.values().find(|g| g.route == route.name));
        let auth = match &mqtt.auth {
            None => None,
            Some(config) => Some(crate::layer4::mqtt_auth::checker(
                &format!("route `{}` [route.mqtt.auth]", route.name),
                config,
                kept.and_then(|k| k.auth.as_ref()),
                hashing,
            )?),
        };
        let rates = crate::request::rate_limit::connect_rates::ConnectRates::build_for(
            &format!("route-{}", route.name),
            mqtt,
            kept.and_then(|k| k.rates.as_deref()),
            &snapshot.rate_limit_store,
            redis,
        );
        let gate = MqttGate {
            route: route.name.clone(),
            auth,
            rates,
        };
        gates.insert(gate_key(mqtt), std::sync::Arc::new(gate));
    }
    Ok(gates)
}

/// The upgraded connection's bytes, held to [`pre_admission_bound`] until the CONNECT is
/// admitted: a frame that declares more, or more bytes in all, is an error before tungstenite
/// reads (and reserves room for) it. Then its bytes pass untouched.
pub(crate) struct Bounded<S> {
    io: S,
    /// `None` once the CONNECT is admitted.
    guard: Option<FrameGuard>,
}

impl<S> Bounded<S> {
    fn new(io: S, bound: usize) -> Self {
        Bounded {
            io,
            guard: Some(FrameGuard {
                bound: bound as u64,
                seen: 0,
                header: [0; 14],
                have: 0,
                payload_left: 0,
            }),
        }
    }
}

/// The frame headers in a WebSocket's bytes before admission (RFC 6455 §5.2).
struct FrameGuard {
    bound: u64,
    /// Bytes seen so far.
    seen: u64,
    /// The header being read (at most 14 bytes: 2, 8 of length, 4 of mask).
    header: [u8; 14],
    have: usize,
    /// The current frame's payload bytes still to come.
    payload_left: u64,
}

impl FrameGuard {
    /// Notes `bytes`; an error where the bound is passed.
    fn scan(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let too_much = |what: &'static str| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, OverBound(what))
        };
        self.seen += bytes.len() as u64;
        if self.seen > self.bound {
            return Err(too_much("too many bytes"));
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.payload_left > 0 {
                let n = rest
                    .len()
                    .min(usize::try_from(self.payload_left).unwrap_or(usize::MAX));
                self.payload_left -= n as u64;
                rest = &rest[n..];
                continue;
            }
            self.header[self.have] = rest[0];
            self.have += 1;
            rest = &rest[1..];
            if let Some(len) = frame_length(&self.header[..self.have]) {
                if len > self.bound {
                    return Err(too_much("a frame too large"));
                }
                self.payload_left = len;
                self.have = 0;
            }
        }
        Ok(())
    }
}

/// What [`FrameGuard`] refuses: more before the CONNECT than `max_connect_size` allows. Its
/// own type, so that the CONNECT's reader can tell it, through tungstenite's error, from a
/// connection that broke ([`is_over_bound`]), and log it as the TCP listener logs a CONNECT
/// too large (413, `too_large`).
#[derive(Debug)]
pub(crate) struct OverBound(&'static str);

impl std::fmt::Display for OverBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} before the CONNECT was admitted (more than max_connect_size allows)",
            self.0
        )
    }
}

impl std::error::Error for OverBound {}

/// Whether a read failed because [`FrameGuard`] refused the bytes: its [`OverBound`] is in
/// the error's chain (tungstenite wraps the stream's `io::Error` in its own, which
/// [`WsBytes`] wraps in another).
pub(crate) fn is_over_bound(e: &std::io::Error) -> bool {
    let mut at: Option<&(dyn std::error::Error + 'static)> = e.get_ref().map(|r| r as _);
    while let Some(err) = at {
        if err.is::<OverBound>() {
            return true;
        }
        at = match err.downcast_ref::<tokio_tungstenite::tungstenite::Error>() {
            Some(tokio_tungstenite::tungstenite::Error::Io(io)) => io.get_ref().map(|r| r as _),
            _ => err.source(),
        };
    }
    false
}

/// A whole frame header's payload length; `None` while it is incomplete.
fn frame_length(h: &[u8]) -> Option<u64> {
    let (&b1, _) = h.get(1).zip(h.first())?;
    let short = b1 & 0x7f;
    let extended = match short {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b1 & 0x80 != 0 { 4 } else { 0 };
    if h.len() < 2 + extended + mask {
        return None;
    }
    Some(match short {
        126 => u64::from(u16::from_be_bytes([h[2], h[3]])),
        127 => u64::from_be_bytes(h[2..10].try_into().ok()?),
        n => u64::from(n),
    })
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if let Some(g) = &mut this.guard {
            g.scan(&buf.filled()[before..])?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Admits for WsBytes<Bounded<S>> {
    /// The CONNECT is in: the frames' bound is lifted (tungstenite's own limits stay).
    fn admitted(&mut self) {
        self.ws.get_mut().guard = None;
    }

    fn over_bound(e: &std::io::Error) -> bool {
        is_over_bound(e)
    }
}

/// A WebSocket's binary messages as a byte stream: reads give their payloads in order,
/// writes become one binary message each, shutdown sends the closing handshake.
pub(crate) struct WsBytes<S> {
    ws: WebSocketStream<S>,
    /// What the last message held that the reader has not taken yet.
    unread: Bytes,
}

impl<S> WsBytes<S> {
    pub(crate) fn new(ws: WebSocketStream<S>) -> Self {
        WsBytes {
            ws,
            unread: Bytes::new(),
        }
    }
}

fn io_error(e: tokio_tungstenite::tungstenite::Error) -> std::io::Error {
    std::io::Error::other(e)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsBytes<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.unread.is_empty() {
                let n = this.unread.len().min(buf.remaining());
                buf.put_slice(&this.unread.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut this.ws).poll_next(cx)) {
                None | Some(Ok(Message::Close(_))) => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                Some(Ok(Message::Binary(b))) => this.unread = b,
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a text frame: MQTT over WebSocket is binary (MQTT-6.0.0-1)",
                    )));
                }
                // Pings (answered by tungstenite), pongs, raw frames: nothing to pass on.
                Some(Ok(_)) => {}
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsBytes<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let ws = &mut self.get_mut().ws;
        ready!(Pin::new(&mut *ws).poll_ready(cx)).map_err(io_error)?;
        Pin::new(&mut *ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(buf)))
            .map_err(io_error)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_flush(cx)
            .map_err(io_error)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_close(cx)
            .map_err(io_error)
    }
}

impl<S> FinOnClose for WsBytes<S> {
    /// The closing handshake is a frame: closing the socket alone does not send it.
    fn fin_on_close(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::SinkExt as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A server-side `WsBytes` and the client's WebSocket, over an in-memory pipe.
    async fn pair() -> (
        WsBytes<tokio::io::DuplexStream>,
        WebSocketStream<tokio::io::DuplexStream>,
    ) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = WebSocketStream::from_raw_socket(a, Role::Server, None).await;
        let client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        (WsBytes::new(server), client)
    }

    #[tokio::test]
    async fn binary_messages_are_one_byte_stream_both_ways() {
        use futures_util::StreamExt as _;
        let (mut server, mut client) = pair().await;
        // A packet split over two frames, and a ping between them.
        client
            .send(Message::Binary(Bytes::from_static(b"\x10\x0c\x00\x04MQ")))
            .await
            .unwrap();
        client
            .send(Message::Ping(Bytes::from_static(b"p")))
            .await
            .unwrap();
        client
            .send(Message::Binary(Bytes::from_static(
                b"TT\x04\x02\x00\x3c\x00\x00",
            )))
            .await
            .unwrap();
        let mut got = [0u8; 14];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00");
        server.write_all(&[0x20, 2, 0, 0]).await.unwrap();
        server.flush().await.unwrap();
        let mut seen = Vec::new();
        while let Some(m) = client.next().await {
            match m.unwrap() {
                Message::Binary(b) => {
                    seen.extend_from_slice(&b);
                    break;
                }
                Message::Pong(p) => assert_eq!(&p[..], b"p", "the ping was answered"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, [0x20, 2, 0, 0]);
    }

    /// A masked binary frame's header (as a client sends it) declaring `len` bytes.
    fn header(len: u64) -> Vec<u8> {
        let mut h = vec![0x82];
        match len {
            0..=125 => h.push(0x80 | len as u8),
            126..=0xffff => {
                h.push(0x80 | 126);
                h.extend((len as u16).to_be_bytes());
            }
            _ => {
                h.push(0x80 | 127);
                h.extend(len.to_be_bytes());
            }
        }
        h.extend([1, 2, 3, 4]);
        h
    }

    #[test]
    fn the_bound_is_twice_the_largest_connect_and_a_kilobyte() {
        assert_eq!(pre_admission_bound(1024), 3 * 1024);
        assert_eq!(pre_admission_bound(64 * 1024), 129 * 1024);
        assert_eq!(pre_admission_bound(usize::MAX), usize::MAX, "saturates");
    }

    #[test]
    fn a_frames_length_is_read_once_its_header_is_whole() {
        for len in [0, 125, 126, 0xffff, 0x1_0000, u64::MAX] {
            let h = header(len);
            assert_eq!(frame_length(&h), Some(len), "{len}");
            for cut in 0..h.len() {
                assert_eq!(frame_length(&h[..cut]), None, "{len}, {cut} bytes of it");
            }
        }
        // Unmasked (a server's): no mask bytes to wait for.
        assert_eq!(frame_length(&[0x82, 5]), Some(5));
        assert_eq!(frame_length(&[0x82, 126, 1, 0]), Some(256));
    }

    /// A frame that declares more than the bound is refused at its header, however its
    /// bytes arrive, before any of its payload; one that declares the bound passes.
    #[test]
    fn a_frame_declared_past_the_bound_is_refused_at_its_header() {
        let bound = pre_admission_bound(1024) as u64;
        for declared in [bound + 1, 0x1_0000, 16 << 20, u64::MAX] {
            let h = header(declared);
            let mut whole = Bounded::new((), bound as usize).guard.unwrap();
            let err = whole.scan(&h).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{declared}");
            // A byte at a time: nothing until the header is whole, then the refusal.
            let mut bytes = Bounded::new((), bound as usize).guard.unwrap();
            let (last, first) = h.split_last().unwrap();
            for b in first {
                bytes.scan(std::slice::from_ref(b)).unwrap();
            }
            assert!(bytes.scan(&[*last]).is_err(), "{declared}");
        }
        let mut at_bound = Bounded::new((), bound as usize).guard.unwrap();
        at_bound.scan(&header(bound)).unwrap();
        assert_eq!(
            at_bound.payload_left, bound,
            "a frame may declare the bound itself"
        );
    }

    /// Frames each within the bound pass, their payloads skipped (a payload that looks like
    /// a header is not read as one), until the bytes in all pass it.
    #[test]
    fn small_frames_pass_until_the_bytes_in_all_pass_the_bound() {
        let bound = 3 * 1024;
        let mut g = Bounded::new((), bound).guard.unwrap();
        // A 100-byte payload of bytes that would declare 2^63 as a header.
        let mut frame = header(100);
        frame.extend(std::iter::repeat_n(0xff, 100));
        let mut sent = 0;
        while sent + frame.len() <= bound {
            g.scan(&frame).unwrap();
            sent += frame.len();
        }
        assert_eq!((g.have, g.payload_left), (0, 0), "between frames");
        // Empty frames (pings) count too.
        let ping = [0x89, 0x80, 1, 2, 3, 4];
        let err = loop {
            if let Err(e) = g.scan(&ping) {
                break e;
            }
        };
        assert!(err.to_string().contains("too many bytes"), "{err}");
    }

    /// Over a stream: the refusal is a read error; once the CONNECT is admitted, no bound.
    #[tokio::test]
    async fn the_bound_is_lifted_once_the_connect_is_admitted() {
        let (mut device, gateway) = tokio::io::duplex(64 * 1024);
        let mut guarded = Bounded::new(gateway, 3 * 1024);
        device.write_all(&header(1 << 20)).await.unwrap();
        let mut buf = [0u8; 64];
        let err = guarded.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);

        let (mut device, gateway) = tokio::io::duplex(64 * 1024);
        let mut guarded = Bounded::new(gateway, 3 * 1024);
        guarded.guard = None;
        let big = [header(1 << 20), vec![0; 16 * 1024]].concat();
        device.write_all(&big).await.unwrap();
        let mut got = vec![0u8; big.len()];
        guarded.read_exact(&mut got).await.unwrap();
        assert_eq!(got, big, "untouched");
    }

    /// The refusal reaches the CONNECT's reader through tungstenite as itself, so that the
    /// reader logs a CONNECT too large (413) rather than a connection that broke; other
    /// errors are not taken for it.
    #[tokio::test]
    async fn the_refusal_is_told_apart_through_tungstenite() {
        let (mut device, gateway) = tokio::io::duplex(64 * 1024);
        let ws =
            WebSocketStream::from_raw_socket(Bounded::new(gateway, 3 * 1024), Role::Server, None)
                .await;
        let mut bytes = WsBytes::new(ws);
        device.write_all(&header(1 << 20)).await.unwrap();
        let err = bytes.read(&mut [0u8; 64]).await.unwrap_err();
        assert!(is_over_bound(&err), "{err}");

        let (mut server, mut client) = pair().await;
        client.send(Message::Text("hello".into())).await.unwrap();
        let err = server.read(&mut [0u8; 8]).await.unwrap_err();
        assert!(!is_over_bound(&err), "{err}");
        let broken = std::io::Error::other(tokio_tungstenite::tungstenite::Error::Io(
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        ));
        assert!(!is_over_bound(&broken));
    }

    #[tokio::test]
    async fn a_text_frame_is_an_error_and_a_close_is_the_end() {
        let (mut server, mut client) = pair().await;
        client.send(Message::Text("hello".into())).await.unwrap();
        let mut buf = [0u8; 8];
        let err = server.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        let (mut server, mut client) = pair().await;
        client.close(None).await.unwrap();
        assert_eq!(server.read(&mut buf).await.unwrap(), 0, "end of stream");
    }
}
