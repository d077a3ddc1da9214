//! How Sluice's HTTP/2 server encodes a response head (the h2 patches in `vendor/patches/h2`):
//! names from HPACK's static table where it has them, values as raw literals,
//! nothing inserted into the dynamic table, so the same head is the same bytes on every
//! response of a connection, and a field marked sensitive goes out as a never-indexed
//! literal.
//!
//! The server is hyper's HTTP/2 server as Sluice runs it; the client is written here, frame
//! by frame over cleartext (h2c with prior knowledge), so that the test reads the header
//! block's bytes as they were sent.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

const FRAME_HEADERS: u8 = 0x1;
const FRAME_SETTINGS: u8 = 0x4;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_ACK: u8 = 0x1;

async fn answer(_: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut secret = hyper::header::HeaderValue::from_static("s3cr3t");
    secret.set_sensitive(true);
    Ok(Response::builder()
        .header("content-type", "text/plain")
        .header("x-custom", "hello-value")
        .header("set-cookie", "a=1")
        .header("set-cookie", "b=2")
        .header("x-long", "v".repeat(200))
        .header("x-token", secret)
        .body(Full::new(Bytes::from_static(b"ok")))
        .expect("a valid response"))
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// `GET /` for `localhost` on `stream`: :method GET, :scheme http, :path / from the static
/// table, :authority as a literal without indexing.
fn get(stream: u32) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 9];
    block.extend_from_slice(b"localhost");
    frame(
        FRAME_HEADERS,
        FLAG_END_HEADERS | FLAG_END_STREAM,
        stream,
        &block,
    )
}

/// Reads frames until the HEADERS frame of `stream` (acknowledging the server's SETTINGS)
/// and returns its header block.
async fn headers_of(io: &mut DuplexStream, stream: u32) -> Vec<u8> {
    loop {
        let mut head = [0u8; 9];
        io.read_exact(&mut head).await.expect("a frame header");
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        io.read_exact(&mut payload).await.expect("a frame payload");
        if head[3] == FRAME_SETTINGS && head[4] & FLAG_ACK == 0 {
            io.write_all(&frame(FRAME_SETTINGS, FLAG_ACK, 0, &[]))
                .await
                .expect("a SETTINGS ack");
        }
        if head[3] == FRAME_HEADERS && id == stream {
            assert_ne!(
                head[4] & FLAG_END_HEADERS,
                0,
                "one HEADERS frame holds the head"
            );
            return payload;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test(flavor = "current_thread")]
async fn response_heads_are_static_names_and_raw_literals_never_indexed() {
    let (mut client, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(server_io), hyper::service::service_fn(answer)),
    );
    client
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("the preface");
    client
        .write_all(&frame(FRAME_SETTINGS, 0, 0, &[]))
        .await
        .expect("SETTINGS");
    client.write_all(&get(1)).await.expect("a request");
    let first = headers_of(&mut client, 1).await;
    client.write_all(&get(3)).await.expect("a second request");
    let second = headers_of(&mut client, 3).await;

    // Nothing was inserted into the dynamic table: the same head is the same bytes.
    assert_eq!(
        first, second,
        "the second head should repeat the first's bytes"
    );
    // :status 200 is the static table's entry 8, one byte.
    assert_eq!(first[0], 0x88);
    // content-type (static name 31: 15 + 16 in a four-bit prefix), its value raw (no
    // Huffman bit, length 10).
    let at = find(&first, b"text/plain").expect("content-type's value as written");
    assert_eq!(&first[at - 3..at], &[0x0f, 16, 10]);
    // A name the static table lacks: a literal name and value, without indexing.
    let at = find(&first, b"x-custom").expect("the custom name as written");
    assert_eq!(&first[at - 2..at], &[0x00, 8]);
    assert_eq!(&first[at + 8..at + 20], b"\x0bhello-value");
    // Both set-cookie values, each with the static name 55 (15 + 40).
    for cookie in [&b"a=1"[..], b"b=2"] {
        let at = find(&first, cookie).expect("each set-cookie value");
        assert_eq!(&first[at - 3..at], &[0x0f, 40, 3]);
    }
    // A 200-byte value: length 127 + 73.
    let at = find(&first, b"x-long").expect("the long field's name");
    assert_eq!(&first[at + 6..at + 8], &[0x7f, 73]);
    // The sensitive value: a never-indexed literal (0001 prefix).
    let at = find(&first, b"x-token").expect("the sensitive field's name");
    assert_eq!(&first[at - 2..at], &[0x10, 7]);
    assert_eq!(&first[at + 7..at + 14], b"\x06s3cr3t");

    drop(client);
    let _ = server.await;
}

/// hyper's own strip of connection-specific fields (and h2's check after it) still takes
/// them out of a response that has them, with the fields `Connection` names, and leaves a
/// response without them whole; `Date` and `Content-Length` are added where missing and
/// kept where present. The client is hyper's, over h2: a response that kept one
/// would be a protocol error there.
#[tokio::test(flavor = "current_thread")]
async fn connection_specific_fields_are_stripped_and_others_kept() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(
        hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(
            TokioIo::new(server_io),
            hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                let mut resp = Response::builder().header("x-kept", "yes");
                if req.uri().path() == "/with" {
                    resp = resp
                        .header("connection", "x-private")
                        .header("x-private", "1")
                        .header("keep-alive", "timeout=5")
                        .header("proxy-connection", "keep-alive")
                        .header("upgrade", "websocket")
                        .header("te", "trailers")
                        .header("transfer-encoding", "chunked");
                } else if req.uri().path() == "/dated" {
                    resp = resp
                        .header("date", "Mon, 01 Jan 2024 00:00:00 GMT")
                        .header("content-length", "2");
                } else {
                    resp = resp
                        .header("x-other", "2")
                        .header("cache-control", "no-store");
                }
                Ok::<_, Infallible>(
                    resp.body(Full::new(Bytes::from_static(b"ok")))
                        .expect("a valid response"),
                )
            }),
        ),
    );
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(client_io))
            .await
            .expect("an h2c handshake");
    tokio::spawn(conn);
    for (path, want) in [
        ("/with", vec!["x-kept"]),
        ("/without", vec!["cache-control", "x-kept", "x-other"]),
        ("/dated", vec!["x-kept"]),
    ] {
        let req = Request::builder()
            .uri(format!("http://localhost{path}"))
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("a request");
        let resp = sender.send_request(req).await.expect("a response");
        let mut names: Vec<&str> = resp
            .headers()
            .keys()
            .map(|k| k.as_str())
            .filter(|k| !matches!(*k, "content-length" | "date"))
            .collect();
        names.sort_unstable();
        assert_eq!(names, want, "{path}");
        assert_eq!(resp.headers()["x-kept"], "yes", "{path}");
        // hyper adds `Date` and `Content-Length` where the response has none
        // and keeps the response's own, once.
        let date: Vec<_> = resp.headers().get_all("date").iter().collect();
        assert_eq!(date.len(), 1, "{path}: {date:?}");
        if path == "/dated" {
            assert_eq!(date[0], "Mon, 01 Jan 2024 00:00:00 GMT");
        }
        let length: Vec<_> = resp.headers().get_all("content-length").iter().collect();
        assert_eq!(length, ["2"], "{path}");
    }
    drop(sender);
    server.abort();
}
