use crate::*;
use bytes::Bytes;
use proptest::prelude::*;
use std::io::Read as _;

fn gzip(backend: GzipBackend, level: u32, dictionary: bool) -> Encoding {
    Encoding {
        codec: Codec::Gzip,
        level,
        backend,
        dictionary,
    }
}

fn other(codec: Codec, level: u32) -> Encoding {
    Encoding {
        codec,
        level,
        backend: GzipBackend::ZlibRs,
        dictionary: false,
    }
}

/// Encodes `pieces` (as the upstream delivered them) with the chunk jobs run inline.
fn encode(encoding: Encoding, pieces: &[Vec<u8>]) -> Vec<u8> {
    let mut enc = BodyEncoder::new(encoding);
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        // Every other piece arrives as three segments (one of them possibly empty), the way
        // upstream frames are handed over without being copied together.
        let job = if i % 2 == 0 {
            enc.job(Bytes::copy_from_slice(p), last)
        } else {
            let b = Bytes::copy_from_slice(p);
            let (a, c) = (p.len() / 3, p.len() * 2 / 3);
            enc.job_segments(vec![b.slice(..a), b.slice(a..c), b.slice(c..)], last)
        };
        let done = compress_chunk(&job, "inline").unwrap();
        out.extend_from_slice(&enc.frame(done.bytes, last));
    }
    if pieces.is_empty() {
        let job = enc.job(Bytes::new(), true);
        let done = compress_chunk(&job, "inline").unwrap();
        out.extend_from_slice(&enc.frame(done.bytes, true));
    }
    out
}

fn decode(codec: Codec, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match codec {
        // GzDecoder reads one member only: the body must be exactly one.
        Codec::Gzip => {
            let mut d = flate2::read::GzDecoder::new(data);
            d.read_to_end(&mut out).unwrap();
            let mut rest = Vec::new();
            d.into_inner().read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty(), "bytes after the gzip member");
        }
        Codec::Zstd => out = zstd::stream::decode_all(data).unwrap(),
        Codec::Brotli => {
            brotli_decompressor::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
    }
    out
}

/// A text-like body: compressible, with some randomness.
fn body(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "<div class=\"item\">",
        "</div>\n",
        "gateway ",
        "offload ",
        "{\"id\": ",
        "sluice",
        " handshake",
        "\t",
    ];
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if x >> 60 == 0 {
            out.push((x >> 32) as u8);
        } else {
            out.extend_from_slice(words[(x >> 33) as usize % words.len()].as_bytes());
        }
    }
    out.truncate(len);
    out
}

fn split(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut at = 0;
    for p in points {
        pieces.push(data[at..p].to_vec());
        at = p;
    }
    pieces.push(data[at..].to_vec());
    pieces
}

fn encodings() -> Vec<Encoding> {
    vec![
        gzip(GzipBackend::ZlibRs, 1, true),
        gzip(GzipBackend::ZlibRs, 6, false),
        gzip(GzipBackend::Isal, 1, true),
        gzip(GzipBackend::Isal, 0, false),
        gzip(GzipBackend::Isal, 3, true),
        other(Codec::Zstd, 3),
        other(Codec::Brotli, 4),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any body, split anywhere (empty pieces included), decodes byte-exact with every
    /// codec and backend.
    #[test]
    fn any_body_any_split_round_trips(
        seed in any::<u64>(),
        len in 0usize..200_000,
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let data = body(seed, len);
        let pieces = split(&data, &cuts);
        for e in encodings() {
            let encoded = encode(e, &pieces);
            prop_assert_eq!(decode(e.codec, &encoded), data.clone(), "{:?}", e);
        }
    }
}

#[test]
fn random_bytes_and_large_pieces_round_trip() {
    let mut noise = vec![0u8; 300_000];
    let mut x = 7u64;
    for b in &mut noise {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *b = (x >> 56) as u8;
    }
    for e in encodings() {
        let encoded = encode(e, &[noise[..100_000].to_vec(), noise[100_000..].to_vec()]);
        assert_eq!(decode(e.codec, &encoded), noise, "{e:?}");
    }
}

#[test]
fn the_system_gzip_reads_a_chunked_member() {
    let data = body(3, 150_000);
    let pieces = split(&data, &[1000, 65536, 70000, 140000]);
    for e in [
        gzip(GzipBackend::ZlibRs, 1, true),
        gzip(GzipBackend::Isal, 1, true),
    ] {
        let encoded = encode(e, &pieces);
        let dir = tempfile_dir();
        let path = dir.join(format!("{}.gz", e.backend.name()));
        std::fs::write(&path, &encoded).unwrap();
        let out = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(&path)
            .output()
            .expect("gzip is installed");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, data, "{e:?}");
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-compress-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn priming_with_the_previous_input_keeps_the_ratio() {
    let data = body(11, 256 * 1024);
    let pieces: Vec<Vec<u8>> = data.chunks(16 * 1024).map(<[u8]>::to_vec).collect();
    for backend in [GzipBackend::ZlibRs, GzipBackend::Isal] {
        let primed = encode(gzip(backend, 1, true), &pieces).len();
        let fresh = encode(gzip(backend, 1, false), &pieces).len();
        assert!(
            primed < fresh,
            "{backend:?}: primed {primed} vs fresh {fresh}"
        );
    }
}

#[test]
fn negotiation_follows_q_values_then_server_order() {
    use Codec::*;
    let all = [Brotli, Zstd, Gzip];
    assert_eq!(
        negotiate(Some("gzip, deflate, br, zstd"), &all),
        Some(Brotli)
    );
    assert_eq!(
        negotiate(Some("gzip, deflate, br, zstd"), &[Gzip, Brotli]),
        Some(Gzip)
    );
    assert_eq!(negotiate(Some("gzip;q=1.0, br;q=0.5"), &all), Some(Gzip));
    assert_eq!(negotiate(Some("br;q=0, *"), &all), Some(Zstd));
    assert_eq!(negotiate(Some("*;q=0.1, gzip;q=0"), &[Gzip]), None);
    assert_eq!(negotiate(Some("identity"), &all), None);
    assert_eq!(negotiate(Some("identity;q=0"), &all), None);
    assert_eq!(negotiate(Some(""), &all), None);
    assert_eq!(negotiate(None, &all), None);
    assert_eq!(negotiate(Some("GZIP ; Q=0.8"), &all), Some(Gzip));
    assert_eq!(negotiate(Some("x-gzip"), &all), Some(Gzip));
    assert_eq!(negotiate(Some("gzip;q=garbage, zstd"), &all), Some(Zstd));
}

/// An engine that fails every other chunk: the dispatcher runs those on `inline` and the
/// body is still one valid stream.
#[tokio::test]
async fn a_failing_engine_mid_body_still_yields_a_valid_body() {
    use sluice_offload::{DispatcherBuilder, Engine, EngineError, Inline, Pending, Reject};
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Flaky(AtomicUsize);
    impl Engine<ChunkJob> for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        fn submit(&self, job: ChunkJob) -> Result<Pending<ChunkOutput>, Reject> {
            if self.0.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
                return Ok(Pending::ready(Err(EngineError::Failed("injected".into()))));
            }
            // A wrong result would corrupt the stream: this engine only ever fails cleanly.
            Ok(Pending::ready(compress_chunk(&job, "flaky")))
        }
    }
    for e in encodings() {
        let d = DispatcherBuilder::new(std::sync::Arc::new(Inline::new(|j: &ChunkJob| {
            compress_chunk(j, "inline")
        })))
        .engine(std::sync::Arc::new(Flaky(AtomicUsize::new(0))))
        .breaker(sluice_offload::BreakerConfig {
            failures: 1000,
            ..Default::default()
        })
        .build();
        let data = body(5, 120_000);
        let pieces = split(&data, &[10_000, 30_000, 50_000, 90_000]);
        let mut enc = BodyEncoder::new(e);
        let mut out = Vec::new();
        let mut engines = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            let last = i + 1 == pieces.len();
            let r = d
                .run(enc.job(Bytes::copy_from_slice(p), last))
                .await
                .unwrap();
            engines.push(r.engine);
            out.extend_from_slice(&enc.frame(r.bytes, last));
        }
        assert!(
            engines.contains(&"flaky") && engines.contains(&"inline"),
            "{engines:?}"
        );
        assert_eq!(decode(e.codec, &out), data, "{e:?}");
    }
}

#[test]
fn a_brotli_chunk_run_twice_does_not_corrupt_the_stream() {
    let data = body(9, 50_000);
    let mut enc = BodyEncoder::new(other(Codec::Brotli, 5));
    let a = enc.job(Bytes::copy_from_slice(&data[..20_000]), false);
    let b = enc.job(Bytes::copy_from_slice(&data[20_000..]), true);
    let first = compress_chunk(&a, "pool").unwrap().bytes;
    let again = compress_chunk(&a, "inline").unwrap().bytes; // the fallback's rerun
    assert_eq!(first, again);
    let mut out = enc.frame(first, false).to_vec();
    out.extend_from_slice(&enc.frame(compress_chunk(&b, "inline").unwrap().bytes, true));
    assert_eq!(decode(Codec::Brotli, &out), data);
}

#[test]
fn a_brotli_chunk_out_of_order_fails_instead_of_corrupting() {
    let data = body(3, 40_000);
    let mut enc = BodyEncoder::new(other(Codec::Brotli, 5));
    assert!(enc.encoding().in_order());
    let a = enc.job(Bytes::copy_from_slice(&data[..20_000]), false);
    let b = enc.job(Bytes::copy_from_slice(&data[20_000..]), true);
    let err = compress_chunk(&b, "pool").unwrap_err();
    assert!(err.to_string().contains("in order"), "{err}");
    // The stream is untouched: in order, it still decodes.
    let mut out = enc
        .frame(compress_chunk(&a, "pool").unwrap().bytes, false)
        .to_vec();
    out.extend_from_slice(&enc.frame(compress_chunk(&b, "pool").unwrap().bytes, true));
    assert_eq!(decode(Codec::Brotli, &out), data);
    assert!(!other(Codec::Zstd, 3).in_order());
}

#[test]
fn counters_add_up_per_codec_and_engine() {
    let c = CompressCounters::default();
    c.compressed(Codec::Gzip);
    c.skipped(SkipReason::TooShort);
    c.skipped(SkipReason::TooShort);
    c.chunk(Codec::Gzip, "pool", 1000, 100);
    c.chunk(Codec::Gzip, "pool", 500, 50);
    c.chunk(Codec::Gzip, "inline", 10, 5);
    assert_eq!(c.compressed_count(Codec::Gzip), 1);
    assert_eq!(c.skipped_count(SkipReason::TooShort), 2);
    assert_eq!(c.skipped_count(SkipReason::Range), 0);
    let b = c.bytes();
    assert_eq!(b.len(), 2);
    assert_eq!((b[0].bytes_in, b[0].bytes_out), (1500, 150));
}
