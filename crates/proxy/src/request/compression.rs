//! The compression stage: decides per response whether to compress, rewrites the headers,
//! and streams the body through chunk jobs on the compression dispatcher.
//!
//! Bodies whose declared length is at most `sw_threshold` (by default larger for faster
//! codecs: `Encoding::default_sw_threshold`) are compressed on the spot (one chunk, no
//! task). Larger or unknown-length bodies go through a pump task: it cuts the
//! upstream body into `chunk_size` pieces, keeps a few chunk jobs in flight on the
//! dispatcher (gzip and zstd chunks are independent), and sends their outputs in order. When
//! the upstream pauses, the pump compresses what it has at once (a full flush), so a
//! streaming response (server-sent events) reaches the client event by event. A client that
//! goes away closes the channel, which ends the pump and drops the upstream body.

use crate::body::{BoxError, ProxyBody};
use bytes::{Bytes, BytesMut};
use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesOrdered;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use sluice_compress::{
    BodyEncoder, ChunkJob, Codec, CompressConfig, CompressCounters, CompressEngine, Encoding,
    GzipBackend, SkipReason, compress_chunk, negotiate,
};
use sluice_config::{Compression, ContentCoding};
use sluice_offload::Dispatcher;
use std::sync::Arc;
use std::time::Duration;

/// Chunk jobs one body keeps in flight.
const WINDOW: usize = 4;
/// How long the stage waits for the first bytes of a body of unknown length to decide
/// whether it reaches `min_length`; past it, the body is compressed.
const MIN_LENGTH_WAIT: Duration = Duration::from_millis(250);

/// The compression service of a gateway: the dispatcher and the counters.
pub struct Compressor {
    dispatcher: Arc<Dispatcher<ChunkJob>>,
    counters: Arc<CompressCounters>,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor").finish_non_exhaustive()
    }
}

impl Compressor {
    /// The dispatcher `[offload.compress]` describes, counting into `counters` (a reload
    /// that rebuilds the engines passes the old ones, so `/metrics` does not start over).
    pub fn from_config(
        c: &sluice_config::CompressOffload,
        counters: Arc<CompressCounters>,
    ) -> std::io::Result<Arc<Self>> {
        let threads = c
            .pool_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let config = CompressConfig {
            engines: c
                .engines
                .iter()
                .map(|e| match e {
                    sluice_config::CompressEngineName::Pool => CompressEngine::Pool,
                })
                .collect(),
            pool_threads: threads,
            pool_capacity: c.pool_capacity.unwrap_or(16 * threads),
            deadline: c.deadline,
        };
        Ok(Arc::new(Compressor {
            dispatcher: Arc::new(sluice_compress::build_dispatcher(&config)?),
            counters,
        }))
    }

    /// What compression did.
    pub fn counters(&self) -> Arc<CompressCounters> {
        self.counters.clone()
    }

    /// The chunk engines' counters.
    pub fn engine_counters(&self) -> Vec<sluice_offload::CountersSnapshot> {
        self.dispatcher.counters()
    }

    /// The event-loop CPU time offloaded compression would have cost inline (chunks carry
    /// no measured cost yet: zero until they do).
    pub fn cpu_saved(&self) -> std::time::Duration {
        self.dispatcher.cpu_saved()
    }

    /// Whether each chunk engine's breaker is open, in [`Compressor::engine_counters`]' order.
    pub fn breakers_open(&self) -> Vec<bool> {
        self.dispatcher.breakers_open()
    }
}

/// What the stage needs to know of the request.
#[derive(Debug, Clone)]
pub(crate) struct RequestFacts {
    pub(crate) settings: Arc<Compression>,
    pub(crate) head: bool,
    pub(crate) accept_encoding: Option<String>,
    pub(crate) range: bool,
}

impl RequestFacts {
    pub(crate) fn new(settings: &Arc<Compression>, method: &Method, headers: &HeaderMap) -> Self {
        let accept_encoding = headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        RequestFacts {
            settings: settings.clone(),
            head: *method == Method::HEAD,
            accept_encoding: (!accept_encoding.is_empty()).then_some(accept_encoding),
            range: headers.contains_key(header::RANGE),
        }
    }
}

/// With compression on for the route, `W/"x"` in If-None-Match is also sent as `"x"`: the
/// client holds the weakened ETag of a compressed response, and an origin that compares
/// strongly would otherwise never answer 304.
pub(crate) fn strengthen_if_none_match(settings: &Compression, headers: &mut HeaderMap) {
    if !settings.enabled {
        return;
    }
    let Some(v) = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    if !v.contains("W/") {
        return;
    }
    let mut tags: Vec<String> = Vec::new();
    for t in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        tags.push(t.to_owned());
        if let Some(strong) = t.strip_prefix("W/") {
            tags.push(strong.to_owned());
        }
    }
    if let Ok(v) = HeaderValue::from_str(&tags.join(", ")) {
        headers.insert(header::IF_NONE_MATCH, v);
    }
}

pub(crate) fn codec_of(c: ContentCoding) -> Codec {
    match c {
        ContentCoding::Gzip => Codec::Gzip,
        ContentCoding::Brotli => Codec::Brotli,
        ContentCoding::Zstd => Codec::Zstd,
    }
}

/// Measures, once per process, what each encoding the routes use costs per byte inline.
pub(crate) fn calibrate(routes: &[Arc<sluice_config::Route>]) {
    let mut seen: Vec<Encoding> = Vec::new();
    for route in routes {
        let settings = &route.compression;
        if !settings.enabled {
            continue;
        }
        for coding in &settings.codecs {
            let e = encoding_for(settings, codec_of(*coding));
            if !seen.contains(&e) {
                seen.push(e);
                sluice_compress::calibrate(e);
            }
        }
    }
}

pub(crate) fn encoding_for(settings: &Compression, codec: Codec) -> Encoding {
    Encoding {
        codec,
        level: match codec {
            Codec::Gzip => settings.gzip_level,
            Codec::Brotli => settings.brotli_level,
            Codec::Zstd => settings.zstd_level,
        },
        backend: match settings.gzip_backend {
            sluice_config::GzipBackend::Isal => GzipBackend::Isal,
            sluice_config::GzipBackend::ZlibRs => GzipBackend::ZlibRs,
        },
        dictionary: settings.dictionary,
    }
}

pub(crate) fn add_vary(headers: &mut HeaderMap) {
    let present = headers.get_all(header::VARY).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.eq_ignore_ascii_case("accept-encoding")
            })
        })
    });
    if !present {
        headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

pub(crate) fn weaken_etag(headers: &mut HeaderMap) {
    if let Some(v) = headers.get(header::ETAG)
        && v.as_bytes().starts_with(b"\"")
        && let Ok(weak) = HeaderValue::from_bytes(&[b"W/", v.as_bytes()].concat())
    {
        headers.insert(header::ETAG, weak);
    }
}

/// The decision for one response, from everything but the body.
pub(crate) fn decide(
    facts: &RequestFacts,
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<Codec, Option<SkipReason>> {
    let s = &facts.settings;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(Some(SkipReason::Upgrade));
    }
    if facts.head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Err(Some(SkipReason::NoBody));
    }
    if headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| !v.trim().eq_ignore_ascii_case("identity"))
    {
        return Err(Some(SkipReason::AlreadyEncoded));
    }
    if headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
        })
    {
        return Err(Some(SkipReason::NoTransform));
    }
    if facts.range
        || status == StatusCode::PARTIAL_CONTENT
        || headers.contains_key(header::CONTENT_RANGE)
    {
        return Err(Some(SkipReason::Range));
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !s.compresses_type(content_type) {
        return Err(Some(SkipReason::Type));
    }
    if let Some(len) = content_length(headers)
        && len < s.min_length
    {
        return Err(Some(SkipReason::TooShort));
    }
    let offered: Vec<Codec> = s.codecs.iter().map(|c| codec_of(*c)).collect();
    negotiate(facts.accept_encoding.as_deref(), &offered).ok_or(Some(SkipReason::NotAccepted))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// Applies the stage to a response: returns its body, compressed or not, with the headers
/// rewritten to match.
pub(crate) async fn apply(
    compressor: &Arc<Compressor>,
    facts: &RequestFacts,
    parts: &mut http::response::Parts,
    body: ProxyBody,
) -> ProxyBody {
    let settings = &facts.settings;
    if !settings.enabled {
        return body;
    }
    let counters = &compressor.counters;
    let codec = match decide(facts, parts.status, &parts.headers) {
        Ok(c) => c,
        Err(reason) => {
            if reason == Some(SkipReason::NotAccepted) {
                add_vary(&mut parts.headers);
            }
            if parts.status == StatusCode::NOT_MODIFIED
                && facts.accept_encoding.is_some()
                && !facts.head
            {
                // The 200 this revalidates would have been compressed with a weak ETag.
                let offered: Vec<Codec> = settings.codecs.iter().map(|c| codec_of(*c)).collect();
                if negotiate(facts.accept_encoding.as_deref(), &offered).is_some() {
                    weaken_etag(&mut parts.headers);
                    add_vary(&mut parts.headers);
                }
            }
            if let Some(r) = reason {
                counters.skipped(r);
            }
            return body;
        }
    };
    // Boxed: most responses are not compressed, and this future is part of every request's
    // (a KiB that each request's handler future would otherwise carry and copy).
    Box::pin(compress(compressor, facts, parts, body, codec)).await
}

/// Compresses a response `decide` chose `codec` for: its first bytes read where its length
/// is unknown (`read_head`), its head marked as encoded, then one job for a body that fits a
/// chunk (`compress_one`) or a pump task that streams chunk jobs.
async fn compress(
    compressor: &Arc<Compressor>,
    facts: &RequestFacts,
    parts: &mut http::response::Parts,
    body: ProxyBody,
    codec: Codec,
) -> ProxyBody {
    let settings = &facts.settings;
    let declared = content_length(&parts.headers);
    let mut start = Start {
        body,
        head: BytesMut::new(),
        ended: false,
        trailers: None,
    };
    if declared.is_none() && !is_event_stream(&parts.headers) && settings.min_length > 0 {
        if let Err(e) = start.read_head(settings.min_length).await {
            return error_body(e);
        }
        if start.ended && (start.head.len() as u64) < settings.min_length {
            // A body that ends short of min_length goes out as it is.
            compressor.counters.skipped(SkipReason::TooShort);
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(start.head.len()));
            return rebuilt(start.head.freeze(), start.trailers);
        }
    }
    let encoding = encoding_for(settings, codec);
    compressor.counters.compressed(codec);
    mark_encoded(&mut parts.headers, codec);
    let sw_threshold = settings
        .sw_threshold
        .unwrap_or_else(|| encoding.default_sw_threshold());
    if declared.is_some_and(|n| n <= sw_threshold.max(settings.chunk_size as u64)) {
        // Up to `sw_threshold` on the spot; otherwise on the dispatcher's engines.
        let inline = declared.is_some_and(|n| n <= sw_threshold);
        return compress_one(compressor, start, encoding, codec, inline).await;
    }
    let (tx, rx) = http_body_util::channel::Channel::<Bytes, BoxError>::new(2);
    let pump = Pump {
        dispatcher: compressor.dispatcher.clone(),
        counters: compressor.counters.clone(),
        encoder: BodyEncoder::new(encoding),
        chunk_size: settings.chunk_size,
    };
    let mut pending = Segments::default();
    if !start.head.is_empty() {
        pending.push(start.head.freeze());
    }
    tokio::spawn(pump.run(start.body, pending, start.ended, start.trailers, tx));
    rx.boxed()
}

/// A response body about to be compressed, and what was read of it before deciding.
struct Start {
    body: ProxyBody,
    /// The bytes read so far (an unknown length decides on the first `min_length`).
    head: BytesMut,
    ended: bool,
    trailers: Option<HeaderMap>,
}

impl Start {
    /// Reads up to `min_length` bytes, for at most `MIN_LENGTH_WAIT` (a streaming response
    /// that pauses is decided on what came).
    async fn read_head(&mut self, min_length: u64) -> Result<(), BoxError> {
        let deadline = tokio::time::Instant::now() + MIN_LENGTH_WAIT;
        while (self.head.len() as u64) < min_length {
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => break,
                Ok(None) => {
                    self.ended = true;
                    break;
                }
                Ok(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => self.head.extend_from_slice(&d),
                    Err(f) => {
                        self.trailers = f.into_trailers().ok();
                        self.ended = true;
                        break;
                    }
                },
                Ok(Some(Err(e))) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A compressed response's head: no length or ranges, its `Content-Encoding`, `Vary`, and a
/// weak ETag (the bytes differ from the identity representation's).
fn mark_encoded(h: &mut HeaderMap, codec: Codec) {
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::ACCEPT_RANGES);
    h.insert(
        header::CONTENT_ENCODING,
        HeaderValue::from_static(codec.token()),
    );
    add_vary(h);
    weaken_etag(h);
}

/// A body that fits one chunk: collected (its frames, uncopied) and compressed in one job,
/// without a pump task; `inline` on the spot, else on the dispatcher's engines.
async fn compress_one(
    compressor: &Compressor,
    start: Start,
    encoding: Encoding,
    codec: Codec,
    inline: bool,
) -> ProxyBody {
    let Start { mut body, head, .. } = start;
    let mut segments = Vec::new();
    let mut trailers = None;
    if !head.is_empty() {
        segments.push(head.freeze());
    }
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => match f.into_data() {
                Ok(d) => segments.push(d),
                Err(f) => trailers = f.into_trailers().ok(),
            },
            Err(e) => return error_body(e),
        }
    }
    let mut enc = BodyEncoder::new(encoding);
    let job = enc.job_segments(segments, true);
    let len = job.input_len();
    let done = if inline {
        compress_chunk(&job, "inline").map_err(|e| e.to_string())
    } else {
        compressor
            .dispatcher
            .run(job)
            .await
            .map_err(|e| e.to_string())
    };
    match done {
        Ok(out) => {
            compressor
                .counters
                .chunk(codec, out.engine, len, out.bytes.len());
            rebuilt(enc.frame(out.bytes, true), trailers)
        }
        Err(e) => {
            compressor.counters.failed();
            tracing::warn!(error = %e, "compression failed on every engine");
            error_body(e.into())
        }
    }
}

/// Compresses a whole body in `encoding` (the cache's variants): on the spot up to the
/// encoding's inline threshold, else on the dispatcher's engines; counted as a chunk.
pub(crate) async fn compress_whole(
    compressor: &Compressor,
    encoding: Encoding,
    sw_threshold: Option<u64>,
    body: Bytes,
) -> Result<Bytes, String> {
    let len = body.len() as u64;
    let mut enc = BodyEncoder::new(encoding);
    let job = enc.job(body, true);
    let inline = len <= sw_threshold.unwrap_or_else(|| encoding.default_sw_threshold());
    let out = if inline {
        compress_chunk(&job, "inline").map_err(|e| e.to_string())?
    } else {
        compressor
            .dispatcher
            .run(job)
            .await
            .map_err(|e| e.to_string())?
    };
    compressor.counters.compressed(encoding.codec);
    compressor
        .counters
        .chunk(encoding.codec, out.engine, len as usize, out.bytes.len());
    Ok(enc.frame(out.bytes, true))
}

fn rebuilt(data: Bytes, trailers: Option<HeaderMap>) -> ProxyBody {
    match trailers {
        None => Full::new(data).map_err(|never| match never {}).boxed(),
        Some(t) => BodyExt::boxed(http_body_util::StreamBody::new(futures_util::stream::iter(
            [Ok(Frame::data(data)), Ok(Frame::trailers(t))],
        ))),
    }
}

/// A body that fails at once: the response is aborted.
fn error_body(e: BoxError) -> ProxyBody {
    BodyExt::boxed(http_body_util::StreamBody::new(futures_util::stream::iter(
        [Err(e)],
    )))
}

struct Pump {
    dispatcher: Arc<Dispatcher<ChunkJob>>,
    counters: Arc<CompressCounters>,
    encoder: BodyEncoder,
    chunk_size: usize,
}

type Flight = std::pin::Pin<
    Box<dyn Future<Output = (usize, bool, Result<sluice_compress::ChunkOutput, String>)> + Send>,
>;

impl Pump {
    /// Chunk jobs this body keeps in flight: one for a codec whose chunks must run in order.
    fn window(&self) -> usize {
        if self.encoder.encoding().in_order() {
            1
        } else {
            WINDOW
        }
    }

    fn submit(&mut self, flights: &mut FuturesOrdered<Flight>, input: Vec<Bytes>, last: bool) {
        let job = self.encoder.job_segments(input, last);
        let len = job.input_len();
        let d = self.dispatcher.clone();
        flights.push_back(Box::pin(async move {
            (len, last, d.run(job).await.map_err(|e| e.to_string()))
        }));
    }

    /// Sends the next finished chunk. `Err(None)`: the client is gone; `Err(Some(e))`:
    /// compression failed on every engine.
    async fn send_next(
        &mut self,
        flights: &mut FuturesOrdered<Flight>,
        tx: &mut http_body_util::channel::Sender<Bytes, BoxError>,
    ) -> Result<(), Option<String>> {
        let Some((len, last, result)) = flights.next().await else {
            return Ok(());
        };
        let out = result.map_err(Some)?;
        let codec = self.encoder.encoding().codec;
        self.counters.chunk(codec, out.engine, len, out.bytes.len());
        let framed = self.encoder.frame(out.bytes, last);
        if framed.is_empty() {
            return Ok(());
        }
        tx.send_data(framed).await.map_err(|_| None)
    }

    /// Ends the response after a failure: aborted (the client sees an error, a cut-off
    /// connection or stream reset) rather than ended cleanly with a corrupt body.
    fn fail(&self, e: Option<String>, tx: http_body_util::channel::Sender<Bytes, BoxError>) {
        if let Some(e) = e {
            self.counters.failed();
            tracing::warn!(error = %e, "compression failed on every engine; response aborted");
            tx.abort(e.into());
        }
    }

    async fn run(
        mut self,
        mut body: ProxyBody,
        pending: Segments,
        mut ended: bool,
        mut trailers: Option<HeaderMap>,
        mut tx: http_body_util::channel::Sender<Bytes, BoxError>,
    ) {
        let mut flights: FuturesOrdered<Flight> = FuturesOrdered::new();
        let mut buf = pending;
        while !ended {
            let frame = match body.frame().now_or_never() {
                Some(f) => f,
                None => {
                    // The upstream paused: compress and send what we have now.
                    if !buf.is_empty() {
                        let piece = buf.take_all();
                        self.submit(&mut flights, piece, false);
                    }
                    while !flights.is_empty() {
                        if let Err(e) = self.send_next(&mut flights, &mut tx).await {
                            return self.fail(e, tx);
                        }
                    }
                    body.frame().await
                }
            };
            match frame {
                None => ended = true,
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
                        buf.push(d);
                        while buf.len() >= self.chunk_size {
                            let piece = buf.take(self.chunk_size);
                            self.submit(&mut flights, piece, false);
                            if flights.len() >= self.window()
                                && let Err(e) = self.send_next(&mut flights, &mut tx).await
                            {
                                return self.fail(e, tx);
                            }
                        }
                    }
                    Err(f) => {
                        trailers = f.into_trailers().ok();
                        ended = true;
                    }
                },
                Some(Err(e)) => {
                    tx.abort(e);
                    return;
                }
            }
        }
        let rest = buf.take_all();
        self.submit(&mut flights, rest, true);
        while !flights.is_empty() {
            if let Err(e) = self.send_next(&mut flights, &mut tx).await {
                return self.fail(e, tx);
            }
        }
        if let Some(t) = trailers {
            let _ = tx.send_trailers(t).await;
        }
    }
}

/// Upstream frames waiting to become a chunk, kept as they arrived (no copy).
#[derive(Default)]
struct Segments {
    parts: Vec<Bytes>,
    len: usize,
}

impl Segments {
    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.parts.push(b);
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn take_all(&mut self) -> Vec<Bytes> {
        self.len = 0;
        std::mem::take(&mut self.parts)
    }

    /// The first `n` bytes (splitting a frame without copying it).
    fn take(&mut self, n: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut need = n.min(self.len);
        self.len -= need;
        let mut rest = std::mem::take(&mut self.parts).into_iter();
        for mut b in rest.by_ref() {
            if need == 0 {
                self.parts.push(b);
                break;
            }
            if b.len() <= need {
                need -= b.len();
                out.push(b);
            } else {
                out.push(b.split_to(need));
                need = 0;
                self.parts.push(b);
            }
        }
        self.parts.extend(rest);
        out
    }
}
