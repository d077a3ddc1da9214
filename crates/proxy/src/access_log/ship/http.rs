//! The HTTP shipper: a batch is one POST, of JSON lines, an Elasticsearch `_bulk` body or an
//! OTLP logs request, over a connection kept between batches; `https://` verifies the store's
//! certificate (against `ca`, or the system's roots) and its name, and presents the client
//! certificate when one is configured, through the upstreams' connector.

use super::{Batch, Sent};
use crate::upstreams::upstream_tls::{UpstreamConnector, UpstreamIo};
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, USER_AGENT};
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sluice_config::{ClientIdentity, HttpLogFormat, OtlpProtocol, UpstreamTls};
use std::time::Duration;

/// The most of an answer read (a bulk answer lists every item).
const MAX_ANSWER: usize = 8 << 20;

pub(crate) struct Client {
    url: Uri,
    /// `https://`: the connector, or why it could not be built.
    tls: Option<Result<UpstreamConnector, String>>,
    format: HttpLogFormat,
    /// `format = "otlp"`: the records' envelope.
    otlp: Option<sluice_trace::logs::LogEncoder>,
    /// `protocol = "grpc"`: the collector's logs service, or why it cannot be reached.
    grpc: Option<Result<sluice_trace::logs::GrpcExporter, String>>,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    pub(crate) fn new(
        url: Uri,
        format: HttpLogFormat,
        headers: &[(String, String)],
        (ca, client_identity): (Option<Vec<u8>>, Option<ClientIdentity>),
        timeout: Duration,
    ) -> Self {
        let otlp = matches!(format, HttpLogFormat::Otlp { .. })
            .then(|| sluice_trace::logs::LogEncoder::new("sluice"));
        // OTLP/gRPC has its own TLS (tonic's); a POST shipper has the upstreams' connector.
        let grpc_wanted = format
            == HttpLogFormat::Otlp {
                protocol: OtlpProtocol::Grpc,
            };
        let grpc = grpc_wanted.then(|| {
            sluice_trace::logs::GrpcExporter::new(
                &url.to_string(),
                timeout,
                headers,
                (ca.as_deref(), client_identity.as_ref()),
                sluice_trace::logs::LOGS_PATH,
            )
            .map_err(|e| format!("OTLP/gRPC to {url}: {e}"))
        });
        let tls = (!grpc_wanted && url.scheme_str() == Some("https")).then(|| {
            let cfg = UpstreamTls {
                server_name: url.host().map(str::to_owned),
                ca,
                verify: true,
                client_identity,
            };
            UpstreamConnector::new(&cfg, Some(b"\x08http/1.1"))
                .map_err(|e| format!("setting up TLS to {url}: {e}"))
        });
        Client {
            tls,
            url,
            otlp,
            grpc,
            format,
            // Checked when the configuration was loaded.
            headers: headers
                .iter()
                .filter_map(|(k, v)| {
                    Some((
                        HeaderName::from_bytes(k.as_bytes()).ok()?,
                        HeaderValue::from_str(v).ok()?,
                    ))
                })
                .collect(),
            timeout,
            conn: None,
        }
    }

    pub(crate) async fn send(&mut self, batch: &Batch) -> Sent {
        if self.grpc.is_some() {
            return self.send_grpc(batch).await;
        }
        let body = match &self.format {
            HttpLogFormat::JsonLines => batch.bytes.clone(),
            HttpLogFormat::Elasticsearch { index } => bulk_body(batch, index),
            HttpLogFormat::Otlp { .. } => otlp_body(batch, self.otlp.as_ref()),
        };
        match tokio::time::timeout(self.timeout, self.post(body)).await {
            Ok(Ok((status, answer))) => {
                // The connection is only reused after a complete exchange.
                match self.classify(status, &answer) {
                    Sent::Ok { rejected } => Sent::Ok {
                        rejected: rejected.min(batch.lines),
                    },
                    other => other,
                }
            }
            Ok(Err(why)) => {
                self.conn = None;
                Sent::Retry(why)
            }
            Err(_) => {
                self.conn = None;
                Sent::Retry(format!(
                    "no answer within {:?} (raise [[log.ship]] timeout if the store is slow)",
                    self.timeout
                ))
            }
        }
    }

    /// An OTLP/gRPC `Export` of the batch.
    async fn send_grpc(&mut self, batch: &Batch) -> Sent {
        let body = otlp_body(batch, self.otlp.as_ref());
        let grpc = match self.grpc.as_mut() {
            Some(Ok(g)) => g,
            Some(Err(why)) => return Sent::Retry(why.clone()),
            None => return Sent::Retry("no gRPC client".into()),
        };
        match tokio::time::timeout(self.timeout, grpc.export(body)).await {
            Ok(Ok((rejected, _))) => Sent::Ok {
                rejected: (rejected as usize).min(batch.lines),
            },
            Ok(Err(e)) if e.permanent => Sent::Rejected(format!("{}: {}", self.url, e.message)),
            Ok(Err(e)) => Sent::Retry(format!("{}: {}", self.url, e.message)),
            Err(_) => Sent::Retry(format!(
                "no answer within {:?} (raise [[log.ship]] timeout if the collector is slow)",
                self.timeout
            )),
        }
    }

    fn classify(&self, status: http::StatusCode, answer: &[u8]) -> Sent {
        let code = status.as_u16();
        if status.is_success() {
            let rejected = match self.format {
                HttpLogFormat::Elasticsearch { .. } => bulk_item_errors(answer),
                HttpLogFormat::JsonLines => 0,
                HttpLogFormat::Otlp { .. } => sluice_trace::logs::rejected(answer) as usize,
            };
            return Sent::Ok { rejected };
        }
        let text = String::from_utf8_lossy(&answer[..answer.len().min(200)]);
        let why = format!("{} answered {code}: {}", self.url, text.trim());
        if code == 408 || code == 429 || status.is_server_error() {
            Sent::Retry(why)
        } else {
            Sent::Rejected(why)
        }
    }

    async fn post(&mut self, body: Bytes) -> Result<(http::StatusCode, Bytes), String> {
        let authority = self.url.authority().ok_or("the url has no host")?.clone();
        if self.conn.as_ref().is_none_or(SendRequest::is_closed) {
            let default_port = if self.tls.is_some() { 443 } else { 80 };
            let port = self.url.port_u16().unwrap_or(default_port);
            let tcp = tokio::net::TcpStream::connect((authority.host(), port))
                .await
                .map_err(|e| format!("connecting to {authority}: {e}"))?;
            let _ = tcp.set_nodelay(true);
            let io = match &self.tls {
                None => UpstreamIo::Plain(tcp),
                Some(Err(why)) => return Err(why.clone()),
                Some(Ok(connector)) => {
                    let peer = tcp.peer_addr().map_err(|e| e.to_string())?;
                    UpstreamIo::Tls(Box::new(
                        connector
                            .connect(peer, tcp)
                            .await
                            .map_err(|e| e.to_string())?,
                    ))
                }
            };
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
                .await
                .map_err(|e| format!("HTTP to {authority}: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.conn = Some(sender);
        }
        let sender = self.conn.as_mut().expect("connected above");
        sender
            .ready()
            .await
            .map_err(|e| format!("HTTP to {authority}: {e}"))?;
        let mut req = Request::post(
            self.url
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
        )
        .header(HOST, authority.as_str())
        .header(
            CONTENT_TYPE,
            if self.otlp.is_some() {
                "application/x-protobuf"
            } else {
                "application/x-ndjson"
            },
        )
        .header(CONTENT_LENGTH, body.len())
        .header(USER_AGENT, concat!("sluice/", env!("CARGO_PKG_VERSION")))
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("HTTP to {authority}: {e}"))?;
        let status = resp.status();
        let answer = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {authority}: {e}"))?
            .to_bytes();
        Ok((status, answer))
    }
}

/// The `_bulk` body: a `create` action before each line (what data streams require), and
/// the line's `time` as `@timestamp`, the field Elasticsearch and OpenSearch sort logs by.
fn bulk_body(batch: &Batch, index: &str) -> Bytes {
    let action = format!("{{\"create\":{{\"_index\":\"{index}\"}}}}\n");
    let mut out = Vec::with_capacity(batch.bytes.len() + batch.lines * (action.len() + 6));
    for line in batch.lines() {
        out.extend_from_slice(action.as_bytes());
        match line.strip_prefix(b"{\"time\":") {
            Some(rest) => {
                out.extend_from_slice(b"{\"@timestamp\":");
                out.extend_from_slice(rest);
            }
            None => out.extend_from_slice(line),
        }
        out.push(b'\n');
    }
    out.into()
}

/// An OTLP logs request of the batch's lines, each at the time its line gives.
fn otlp_body(batch: &Batch, encoder: Option<&sluice_trace::logs::LogEncoder>) -> Bytes {
    let Some(encoder) = encoder else {
        return Bytes::new();
    };
    let now = std::time::SystemTime::now();
    let records = batch.lines().map(|line| {
        let text = std::str::from_utf8(line).unwrap_or_default();
        let at = line_time(text).unwrap_or(now);
        let ns = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        (ns, text.trim_end_matches('\n'))
    });
    encoder.request(records).into()
}

/// The `time` a JSON access log line starts with.
fn line_time(line: &str) -> Option<std::time::SystemTime> {
    let rest = line.strip_prefix("{\"time\":\"")?;
    humantime::parse_rfc3339_weak(rest.split('"').next()?.trim_end_matches('Z')).ok()
}

/// Items of a `_bulk` answer that were not taken (`"errors": true` lists them by status).
fn bulk_item_errors(answer: &[u8]) -> usize {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(answer) else {
        return 0;
    };
    if v["errors"] != serde_json::Value::Bool(true) {
        return 0;
    }
    v["items"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|item| {
                item.as_object().is_some_and(|actions| {
                    actions
                        .values()
                        .any(|r| r["status"].as_u64().is_some_and(|s| s >= 300))
                })
            })
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(lines: &[&str]) -> Batch {
        let mut bytes = Vec::new();
        for l in lines {
            bytes.extend_from_slice(l.as_bytes());
            bytes.push(b'\n');
        }
        Batch {
            bytes: bytes.into(),
            lines: lines.len(),
        }
    }

    #[test]
    fn a_bulk_body_puts_an_action_before_each_line_and_renames_time() {
        let body = bulk_body(
            &batch(&[
                r#"{"time":"2026-11-26T12:00:00.000Z","status":200}"#,
                r#"{"x":1}"#,
            ]),
            "sluice-access",
        );
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "{\"create\":{\"_index\":\"sluice-access\"}}\n\
             {\"@timestamp\":\"2026-11-26T12:00:00.000Z\",\"status\":200}\n\
             {\"create\":{\"_index\":\"sluice-access\"}}\n{\"x\":1}\n"
        );
    }

    #[test]
    fn bulk_item_errors_are_counted_from_the_answer() {
        let answer = br#"{"took":3,"errors":true,"items":[{"create":{"status":201}},{"create":{"status":400,"error":{"type":"mapper_parsing_exception"}}},{"create":{"status":429}}]}"#;
        assert_eq!(bulk_item_errors(answer), 2);
        assert_eq!(
            bulk_item_errors(br#"{"errors":false,"items":[{"create":{"status":201}}]}"#),
            0
        );
        assert_eq!(bulk_item_errors(b"not json"), 0);
    }
}
