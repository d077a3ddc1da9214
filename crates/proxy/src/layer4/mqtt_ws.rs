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

use crate::layer4::splice::FinOnClose;
use crate::layer4::stream::{TcpConn, opened};
use crate::request::context::WsHandoff;
use bytes::Bytes;
use futures_util::{Sink, Stream};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

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
    } = h;
    let Some(io) = upgrade.wait().await else {
        return;
    };
    // The relay ends when its own drain does, not when its HTTP connection's would.
    let signals = crate::signals::Signals {
        force: signals.streams.force.clone(),
        ..signals
    };
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
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
    crate::layer4::mqtt::admit(conn, &mqtt, WsBytes::new(ws), Ok(None)).await;
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
