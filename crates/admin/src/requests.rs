//! The access log on the admin listener: the in-memory request log searched by
//! `GET /api/v1/requests` (with `fleet=1`, every gateway of the fleet asked and the answers
//! merged), and what the `[[log.ship]]` shippers did (`sluice_log_ship_*`, `/status`'s
//! `log_shipping` and `request_log`).

use crate::Sources;
use crate::exposition::{Exposition, Kind};
use crate::reply::{Reply, error, json_reply, reply};
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Duration;
use std::time::SystemTime;

/// How long another gateway of the fleet gets to answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(3);
/// The most of a peer's answer read (1,000 requests of a few hundred bytes each).
const MAX_PEER_ANSWER: usize = 16 << 20;

/// `GET /api/v1/requests?…`: this gateway's, or with `fleet=1` the fleet's.
pub(crate) async fn answer(s: &Sources, req: &Request<Incoming>) -> Reply {
    let query = req.uri().query().unwrap_or("");
    let (fleet, rest) = split_fleet(query);
    if !fleet {
        return search(s, Some(query));
    }
    let Some(store) = s.control.as_ref().and_then(|c| c.shared()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "fleet=1 asks every gateway of a fleet, and this gateway is not in fleet mode ([config] source = \"etcd\"); leave it out",
        );
    };
    // The filters are checked here once, so that a bad one is a 400, not N errors.
    let (limit, slowest) = match sluice_proxy::RequestQuery::parse(&rest, SystemTime::now()) {
        Ok(q) => (q.limit(), q.slowest()),
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let members = match store.members().await {
        Ok(m) => m,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
    };
    let auth = req.headers().get(header::AUTHORIZATION).cloned();
    let asks = members.iter().map(|(name, admin)| {
        let auth = auth.clone();
        let rest = rest.clone();
        async move {
            let got = tokio::time::timeout(PEER_TIMEOUT, ask(admin, &rest, auth))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {PEER_TIMEOUT:?}")));
            (name.clone(), admin.clone(), got)
        }
    });
    let answers = futures_util::future::join_all(asks).await;
    let (mut requests, mut matched, mut kept, mut gateways) = (Vec::new(), 0, 0, Vec::new());
    for (name, admin, got) in answers {
        match got {
            Ok(mut v) => {
                let n = v["matched"].as_u64().unwrap_or(0);
                matched += n;
                kept += v["kept"].as_u64().unwrap_or(0);
                if let Some(rs) = v["requests"].as_array_mut() {
                    for mut r in rs.drain(..) {
                        r["gateway"] = Value::from(name.as_str());
                        requests.push(r);
                    }
                }
                gateways.push(json!({ "name": name, "admin": admin, "matched": n }));
            }
            Err(e) => gateways.push(json!({ "name": name, "admin": admin, "error": e })),
        }
    }
    // Newest first (RFC 3339 times in one format sort as text), or slowest first.
    if slowest {
        requests.sort_by(|a, b| {
            let d = |r: &Value| r["duration_ms"].as_f64().unwrap_or(0.0);
            d(b).total_cmp(&d(a))
        });
    } else {
        requests.sort_by(|a, b| b["time"].as_str().cmp(&a["time"].as_str()));
    }
    requests.truncate(limit);
    json_reply(
        StatusCode::OK,
        &json!({ "requests": requests, "matched": matched, "kept": kept, "gateways": gateways }),
    )
}

/// Whether `fleet=1` (or `true`) is asked, and the query without it.
fn split_fleet(query: &str) -> (bool, String) {
    let mut fleet = false;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            if k == "fleet" {
                fleet = matches!(v, "1" | "true");
                false
            } else {
                !p.is_empty()
            }
        })
        .collect();
    (fleet, rest.join("&"))
}

/// One gateway's `/api/v1/requests?query`, as the caller's credentials allow.
async fn ask(admin: &str, query: &str, auth: Option<HeaderValue>) -> Result<Value, String> {
    let uri: http::Uri = admin
        .parse()
        .map_err(|_| format!("`{admin}` is not an address"))?;
    let host = uri.host().ok_or("no host")?.to_owned();
    let tls = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let mut req = Request::get(format!("/api/v1/requests?{query}"))
        .header(header::HOST, format!("{host}:{port}"));
    if let Some(a) = auth {
        req = req.header(header::AUTHORIZATION, a);
    }
    let req = req
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = if tls {
        // Verified against the system's roots, and by name: a fleet whose admin listeners
        // use a private CA installs it there.
        let mut b = boring::ssl::SslConnector::builder(boring::ssl::SslMethod::tls())
            .map_err(|e| e.to_string())?;
        b.set_default_verify_paths().map_err(|e| e.to_string())?;
        let cfg = b.build().configure().map_err(|e| e.to_string())?;
        let stream = tokio_boring::connect(cfg, &host, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        send(TokioIo::new(stream), req).await?
    } else {
        send(TokioIo::new(tcp), req).await?
    };
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_PEER_ANSWER)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| format!("answered {status}: not JSON ({e})"))?;
    if !status.is_success() {
        return Err(format!(
            "answered {status}: {}",
            v["error"].as_str().unwrap_or("")
        ));
    }
    Ok(v)
}

async fn send<T>(io: T, req: Request<Full<Bytes>>) -> Result<http::Response<Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// `GET /api/v1/requests?status=5xx&route=api&since=10m&trace_id=…&sort=slowest&limit=50`.
pub(crate) fn search(s: &Sources, query: Option<&str>) -> Reply {
    let q = match sluice_proxy::RequestQuery::parse(query.unwrap_or(""), SystemTime::now()) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let log = s.gateway.access_log();
    let (found, matched) = log.recent().query(&q);
    let st = log.recent().stats();
    // The entries are JSON already (the access log's lines); they are joined, not re-parsed.
    let mut body = String::with_capacity(64 + found.iter().map(|l| l.len() + 1).sum::<usize>());
    body.push_str("{\"requests\":[");
    for (i, line) in found.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(line);
    }
    let _ = writeln!(
        body,
        "],\"matched\":{matched},\"kept\":{},\"bytes\":{},\"budget\":{}}}",
        st.entries, st.bytes, st.budget
    );
    reply(StatusCode::OK, "application/json", body)
}

/// The in-memory request log's families, then each `[[log.ship]]` shipper's.
pub(crate) fn metrics(out: &mut Exposition, s: &Sources) {
    let log = s.gateway.access_log();
    let st = log.recent().stats();
    out.single(
        "sluice_request_log_entries",
        Kind::Gauge,
        "Requests kept in memory for /api/v1/requests.",
        st.entries,
    );
    out.single(
        "sluice_request_log_bytes",
        Kind::Gauge,
        "Memory the kept requests take, against [log] request_log.",
        st.bytes,
    );
    out.single(
        "sluice_request_log_evicted_total",
        Kind::Counter,
        "Kept requests evicted (oldest first) to stay within [log] request_log.",
        st.evicted_total,
    );
    let shippers = log.shippers();
    if shippers.is_empty() {
        return;
    }
    let name = "sluice_log_ship_lines_total";
    out.family(
        name,
        Kind::Counter,
        "Access log lines per [[log.ship]] by outcome: sent; dropped (the queue was full: the store was slow or down); rejected (the store refused them).",
    );
    for sh in &shippers {
        for (outcome, n) in [
            ("sent", sh.sent),
            ("dropped", sh.dropped),
            ("rejected", sh.rejected),
        ] {
            out.sample(name, &[("shipper", &sh.name), ("outcome", outcome)], n);
        }
    }
    out.family_by(
        "sluice_log_ship_failures_total",
        Kind::Counter,
        "Sends to a log store or syslog server that failed (each retried with back-off).",
        "shipper",
        shippers.iter().map(|sh| (sh.name.as_str(), sh.failures)),
    );
    out.family_by(
        "sluice_log_ship_queue_bytes",
        Kind::Gauge,
        "Bytes of access log lines waiting to be shipped (bounded by the shipper's queue).",
        "shipper",
        shippers
            .iter()
            .map(|sh| (sh.name.as_str(), sh.queued_bytes)),
    );
}

/// `/status`'s `log_shipping`: one object per shipper.
pub(crate) fn shipping_status(s: &Sources) -> Value {
    s.gateway
        .access_log()
        .shippers()
        .iter()
        .map(|sh| {
            json!({
                "name": sh.name,
                "kind": sh.kind,
                "target": sh.target,
                "sent": sh.sent,
                "dropped": sh.dropped,
                "rejected": sh.rejected,
                "batches": sh.batches,
                "failures": sh.failures,
                "queued_bytes": sh.queued_bytes,
                "queue_limit": sh.queue_limit,
                "last_error": sh.last_error,
            })
        })
        .collect()
}

/// `/status`'s `request_log`.
pub(crate) fn request_log_status(s: &Sources) -> Value {
    let st = s.gateway.access_log().recent().stats();
    json!({
        "entries": st.entries,
        "bytes": st.bytes,
        "budget": st.budget,
        "kept_total": st.kept_total,
        "evicted_total": st.evicted_total,
    })
}
