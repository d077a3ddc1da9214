//! gRPC end to end: a tonic client through the gateway to a tonic server (cleartext HTTP/2
//! both ways): unary, server-streaming, client-streaming and bidirectional calls, trailers
//! and statuses passed through, streams not buffered, `grpc-timeout` honoured, and the
//! gateway's own failures answered as gRPC errors.
//!
//! The service is written the way tonic's generated code is (a `tonic::server::Grpc` per
//! method, prost messages), without a protoc build step.

use crate::support::*;
use futures_util::{Stream, StreamExt};
use http::uri::PathAndQuery;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Msg {
    #[prost(string, tag = "1")]
    pub text: String,
    #[prost(uint32, tag = "2")]
    pub n: u32,
}

fn msg(text: &str, n: u32) -> Msg {
    Msg {
        text: text.into(),
        n,
    }
}

type Codec = tonic_prost::ProstCodec<Msg, Msg>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send>>;
type MsgStream = Pin<Box<dyn Stream<Item = Result<Msg, Status>> + Send>>;

/// A connection to the test server, cleartext or TLS.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Unary: echoes the text with `n + 1`; "fail" answers a status with details in trailers,
/// "slow" waits 5 s (past the test's deadline).
struct Unary;
impl tonic::server::UnaryService<Msg> for Unary {
    type Response = Msg;
    type Future = BoxFuture<Response<Msg>>;
    fn call(&mut self, req: Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let m = req.into_inner();
            match m.text.as_str() {
                "fail" => Err(Status::failed_precondition("the origin says no")),
                "slow" => {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok(Response::new(msg("late", 0)))
                }
                _ => Ok(Response::new(msg(&m.text, m.n + 1))),
            }
        })
    }
}

/// Server streaming: `n` messages; after the first it waits for the test's go-ahead, so the
/// first can only arrive if the gateway does not buffer the stream.
struct Count(Arc<Notify>);
impl tonic::server::ServerStreamingService<Msg> for Count {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<Response<MsgStream>>;
    fn call(&mut self, req: Request<Msg>) -> Self::Future {
        let go = self.0.clone();
        Box::pin(async move {
            let n = req.into_inner().n;
            let s = futures_util::stream::unfold(0, move |i| {
                let go = go.clone();
                async move {
                    if i == n {
                        return None;
                    }
                    if i == 1 {
                        go.notified().await;
                    }
                    Some((Ok(msg("tick", i)), i + 1))
                }
            });
            Ok(Response::new(Box::pin(s) as MsgStream))
        })
    }
}

/// Client streaming: the sum of the `n`s and the texts joined.
struct Sum;
impl tonic::server::ClientStreamingService<Msg> for Sum {
    type Response = Msg;
    type Future = BoxFuture<Response<Msg>>;
    fn call(&mut self, req: Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let mut s = req.into_inner();
            let (mut total, mut texts) = (0, Vec::new());
            while let Some(m) = s.message().await? {
                total += m.n;
                texts.push(m.text);
            }
            Ok(Response::new(msg(&texts.join(","), total)))
        })
    }
}

/// Bidirectional: answers each message as it comes.
struct Chat;
impl tonic::server::StreamingService<Msg> for Chat {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<Response<MsgStream>>;
    fn call(&mut self, req: Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let s = req
                .into_inner()
                .map(|m| m.map(|m| msg(&format!("re: {}", m.text), m.n)));
            Ok(Response::new(Box::pin(s) as MsgStream))
        })
    }
}

/// A tonic server on a cleartext HTTP/2 socket.
async fn grpc_server(go: Arc<Notify>) -> SocketAddr {
    grpc_server_tls(go, None).await
}

/// The same, over TLS with `acceptor` (ALPN `h2`) when given.
async fn grpc_server_tls(
    go: Arc<Notify>,
    acceptor: Option<boring::ssl::SslAcceptor>,
) -> SocketAddr {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            let go = go.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let io: Box<dyn Io> = match &acceptor {
                    None => Box::new(tcp),
                    Some(a) => match tokio_boring::accept(a, tcp).await {
                        Ok(s) => {
                            assert_eq!(
                                s.ssl().selected_alpn_protocol(),
                                Some(&b"h2"[..]),
                                "ALPN h2"
                            );
                            Box::new(s)
                        }
                        Err(_) => return,
                    },
                };
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let go = go.clone();
                        async move {
                            let mut grpc = tonic::server::Grpc::new(Codec::default());
                            let resp = match req.uri().path() {
                                "/test.Echo/Unary" => grpc.unary(Unary, req).await,
                                "/test.Echo/Count" => grpc.server_streaming(Count(go), req).await,
                                "/test.Echo/Sum" => grpc.client_streaming(Sum, req).await,
                                "/test.Echo/Chat" => grpc.streaming(Chat, req).await,
                                _ => Status::unimplemented("no such method").into_http(),
                            };
                            Ok::<_, Infallible>(resp)
                        }
                    });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(io), svc)
                    .await;
            });
        }
    });
    addr
}

async fn client(addr: SocketAddr) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc
}

fn path(method: &'static str) -> PathAndQuery {
    PathAndQuery::from_static(method)
}

/// One unary call of `method` with `m`, once the channel is ready.
async fn unary(
    c: &mut tonic::client::Grpc<tonic::transport::Channel>,
    method: &'static str,
    m: Msg,
) -> Result<Msg, Status> {
    c.ready().await.unwrap();
    c.unary(Request::new(m), path(method), Codec::default())
        .await
        .map(Response::into_inner)
}

async fn gateway(origin: SocketAddr) -> TestGateway {
    let dead = dead_port().await;
    TestGateway::plain(&format!(
        r#"
[[listener]]
name = "grpc"
address = "127.0.0.1:0"
[[upstream]]
name = "echo"
protocol = "h2"
servers = [{{ address = "{origin}" }}]
[[upstream]]
name = "down"
protocol = "h2"
servers = [{{ address = "{dead}" }}]
[[route]]
name = "down"
path_prefix = "/test.Down/"
upstream = "down"
[[route]]
name = "echo"
path_prefix = "/test.Echo/"
upstream = "echo"
"#
    ))
    .await
}

#[tokio::test]
async fn unary_and_streaming_calls_pass_through_with_their_statuses() {
    let go = Arc::new(Notify::new());
    let gw = gateway(grpc_server(go.clone()).await).await;
    let mut c = client(gw.addr("grpc")).await;

    let r = unary(&mut c, "/test.Echo/Unary", msg("hello", 41))
        .await
        .unwrap();
    assert_eq!(r, msg("hello", 42));

    // The origin's own error status and message come through in the trailers.
    let e = unary(&mut c, "/test.Echo/Unary", msg("fail", 0))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (tonic::Code::FailedPrecondition, "the origin says no")
    );

    // Server streaming: the first message arrives while the origin holds the rest back.
    c.ready().await.unwrap();
    let mut s = c
        .server_streaming(
            Request::new(msg("", 3)),
            path("/test.Echo/Count"),
            Codec::default(),
        )
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), s.message())
        .await
        .expect("the first message was not held back")
        .unwrap();
    assert_eq!(first, Some(msg("tick", 0)));
    go.notify_one();
    assert_eq!(s.message().await.unwrap(), Some(msg("tick", 1)));
    assert_eq!(s.message().await.unwrap(), Some(msg("tick", 2)));
    assert_eq!(
        s.message().await.unwrap(),
        None,
        "grpc-status 0 in the trailers"
    );

    // Client streaming.
    c.ready().await.unwrap();
    let up = futures_util::stream::iter((1..=4).map(|i| msg(&format!("m{i}"), i)));
    let r = c
        .client_streaming(Request::new(up), path("/test.Echo/Sum"), Codec::default())
        .await
        .unwrap();
    assert_eq!(r.into_inner(), msg("m1,m2,m3,m4", 10));

    // Bidirectional, in lock step: each answer arrives before the next message is sent.
    c.ready().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel::<Msg>(1);
    let up =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    tx.send(msg("one", 1)).await.unwrap();
    let mut down = c
        .streaming(Request::new(up), path("/test.Echo/Chat"), Codec::default())
        .await
        .unwrap()
        .into_inner();
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        if i > 0 {
            tx.send(msg(text, i as u32 + 1)).await.unwrap();
        }
        let got = tokio::time::timeout(Duration::from_secs(10), down.message())
            .await
            .expect("an answer per message, not at the end")
            .unwrap();
        assert_eq!(got, Some(msg(&format!("re: {text}"), i as u32 + 1)));
    }
    drop(tx);
    assert_eq!(down.message().await.unwrap(), None);
}

#[tokio::test]
async fn a_deadline_and_a_down_upstream_are_grpc_errors_from_the_gateway() {
    let gw = gateway(grpc_server(Arc::new(Notify::new())).await).await;
    let mut c = client(gw.addr("grpc")).await;

    // grpc-timeout 300 ms; the origin would answer after 5 s and the upstream's
    // response_timeout is 60 s: the gateway ends the call at the deadline. (Sent by hand:
    // tonic's channel would cancel the call itself at its own deadline.)
    let mut frame = vec![0u8];
    let body = prost::Message::encode_to_vec(&msg("slow", 0));
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    let req = http::Request::post(format!("http://{}/test.Echo/Unary", gw.addr("grpc")))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "300m")
        .body(http_body_util::Full::new(bytes::Bytes::from(frame)))
        .unwrap();
    let tcp = tokio::net::TcpStream::connect(gw.addr("grpc"))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(4), http2_send(tcp, req))
        .await
        .expect("answered at the call's deadline, not the origin's pace");
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.headers["content-type"], "application/grpc");
    assert_eq!(
        got.headers["grpc-status"], "4",
        "DEADLINE_EXCEEDED: {got:?}"
    );

    let e = unary(&mut c, "/test.Down/Unary", msg("x", 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(e.message().contains("no upstream server"), "{e:?}");

    // No route: UNIMPLEMENTED, as a gRPC server says for an unknown method.
    let e = unary(&mut c, "/other.Svc/Call", msg("x", 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");
    let m = gw.gateway().metrics().snapshot();
    assert_eq!(
        m.requests[4], 2,
        "the log and metrics keep the HTTP status (504, 502)"
    );
}

#[tokio::test]
async fn calls_reach_a_grpc_server_over_tls_with_alpn_h2() {
    let dir = tempfile::tempdir().unwrap();
    issue(dir.path(), "ca", "gRPC origins CA", None, &[]);
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let ca = boring::x509::X509::from_pem(&read("ca.crt")).unwrap();
    let ca_key = boring::pkey::PKey::private_key_from_pem(&read("ca.key")).unwrap();
    issue(
        dir.path(),
        "grpc",
        "grpc.internal",
        Some((&ca, &ca_key)),
        &["grpc.internal"],
    );
    let mut b =
        boring::ssl::SslAcceptor::mozilla_intermediate_v5(boring::ssl::SslMethod::tls()).unwrap();
    b.set_certificate(&boring::x509::X509::from_pem(&read("grpc.crt")).unwrap())
        .unwrap();
    b.set_private_key(&boring::pkey::PKey::private_key_from_pem(&read("grpc.key")).unwrap())
        .unwrap();
    b.set_alpn_select_callback(|_, client| {
        boring::ssl::select_next_proto(b"\x02h2", client).ok_or(boring::ssl::AlpnError::NOACK)
    });
    let origin = grpc_server_tls(Arc::new(Notify::new()), Some(b.build())).await;
    let gw = TestGateway::start(
        &format!(
            r#"
[[listener]]
name = "grpc"
address = "127.0.0.1:0"
[[upstream]]
name = "echo"
protocol = "h2"
servers = [{{ address = "{origin}" }}]
[upstream.tls]
server_name = "grpc.internal"
ca = "ca.crt"
[upstream.health_check]
interval = "100ms"
path = "/healthz"
statuses = ["2xx", "4xx"]
[[route]]
name = "echo"
upstream = "echo"
"#
        ),
        dir,
    )
    .await;
    let mut c = client(gw.addr("grpc")).await;
    let r = unary(&mut c, "/test.Echo/Unary", msg("over tls", 1))
        .await
        .unwrap();
    assert_eq!(r, msg("over tls", 2));
    c.ready().await.unwrap();
    let up = futures_util::stream::iter((1..=3).map(|i| msg("s", i)));
    let r = c
        .client_streaming(Request::new(up), path("/test.Echo/Sum"), Codec::default())
        .await
        .unwrap();
    assert_eq!(r.into_inner(), msg("s,s,s", 6));
    // Health checks speak HTTP/2 over TLS too (the server answers them; three failures
    // 100 ms apart would have marked it down by now).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let health = gw.gateway().upstream_health();
    assert!(health[0].servers[0].up, "{health:?}");
}
