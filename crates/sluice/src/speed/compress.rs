//! `sluice speed gzip|br|zstd`: compression throughput and ratio on the bundled corpus,
//! through the same chunk jobs and engines the gateway uses.

use super::args::SpeedArgs;
use anyhow::bail;
use bytes::Bytes;
use sluice_compress::{
    BodyEncoder, ChunkJob, Codec, CompressConfig, CompressEngine, Encoding, GzipBackend,
    build_dispatcher,
};
use sluice_offload::Dispatcher;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether `name` is a compression algorithm.
pub(crate) fn is_codec(name: &str) -> bool {
    matches!(name, "gzip" | "br" | "zstd")
}

/// What one measurement of a codec came to.
struct Measured {
    bytes_in: usize,
    bytes_out: usize,
    /// Each body's time, µs.
    lat: Vec<f64>,
    /// Seconds the measurement took.
    elapsed: f64,
}

/// Runs one codec.
pub(crate) fn run(name: &str, args: &SpeedArgs) -> anyhow::Result<()> {
    let codec = Codec::from_token(name).expect("checked by is_codec");
    let encoding = encoding(codec, name, args)?;
    let engines = match args.engine.as_str() {
        "inline" => vec![],
        "pool" => vec![CompressEngine::Pool],
        other => bail!("--engine {other}: use inline or pool"),
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let dispatcher = Arc::new(build_dispatcher(&CompressConfig {
        engines,
        pool_threads: threads,
        pool_capacity: args.jobs.max(1) * 4,
        deadline: Duration::from_secs(10),
    })?);
    let corpus = Arc::new(crate::corpus::corpus());
    let total_in: usize = corpus.iter().map(|c| c.2.len()).sum();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let Measured {
        bytes_in,
        bytes_out,
        mut lat,
        elapsed,
    } = rt.block_on(measure(dispatcher, corpus, encoding, args))?;
    lat.sort_by(f64::total_cmp);
    let p99 = lat
        .get(((lat.len().max(1) as f64 - 1.0) * 0.99) as usize)
        .copied()
        .unwrap_or(0.0);
    let mb_s = bytes_in as f64 / elapsed / 1e6;
    let ratio = bytes_in as f64 / bytes_out.max(1) as f64;
    let backend_name = if codec == Codec::Gzip {
        encoding.backend.name()
    } else {
        "-"
    };
    let level = encoding.level;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "algorithm": name, "engine": args.engine, "backend": backend_name, "level": level,
                "jobs": args.jobs, "mb_per_sec": mb_s, "ratio": ratio, "p99_us": p99,
                "ops_per_sec": lat.len() as f64 / elapsed, "corpus_bytes": total_in,
            })
        );
    } else {
        println!(
            "{:<6} {:<8} {:>5} {:<7} {:>5} {:>10.1} {:>7.2} {:>10.0}",
            name, backend_name, level, args.engine, args.jobs, mb_s, ratio, p99
        );
    }
    Ok(())
}

/// The encoding `--backend` and `--level` ask for (each codec's default level otherwise).
fn encoding(codec: Codec, name: &str, args: &SpeedArgs) -> anyhow::Result<Encoding> {
    let backend = match args.backend.as_str() {
        "isal" => GzipBackend::Isal,
        "zlib-rs" => GzipBackend::ZlibRs,
        other => bail!("--backend {other}: use isal or zlib-rs"),
    };
    let level = args.level.unwrap_or(match (codec, backend) {
        (Codec::Gzip, _) => 1,
        (Codec::Brotli, _) => 4,
        (Codec::Zstd, _) => 3,
    });
    let max = match (codec, backend) {
        (Codec::Gzip, GzipBackend::Isal) => sluice_compress::ISAL_MAX_LEVEL,
        _ => *codec.levels().end(),
    };
    if level > max {
        bail!("--level {level} is above {name}'s highest ({max}) for this backend");
    }
    Ok(Encoding {
        codec,
        level,
        backend,
        dictionary: true,
    })
}

/// `--jobs` tasks compressing the corpus's bodies in turn, in 64 KiB chunks as the gateway
/// sends them, for `--seconds`.
async fn measure(
    dispatcher: Arc<Dispatcher<ChunkJob>>,
    corpus: Arc<Vec<(&'static str, &'static str, Bytes)>>,
    encoding: Encoding,
    args: &SpeedArgs,
) -> anyhow::Result<Measured> {
    let chunk = 64 * 1024;
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for j in 0..args.jobs.max(1) {
        let (d, corpus) = (dispatcher.clone(), corpus.clone());
        tasks.push(tokio::spawn(async move {
            let (mut bin, mut bout, mut lat) = (0usize, 0usize, Vec::new());
            let mut i = j;
            while Instant::now() < deadline {
                let body = &corpus[i % corpus.len()].2;
                i += 1;
                let t = Instant::now();
                let mut enc = BodyEncoder::new(encoding);
                let pieces: Vec<_> = body.chunks(chunk).collect();
                for (k, p) in pieces.iter().enumerate() {
                    let last = k + 1 == pieces.len();
                    let job = enc.job(body.slice_ref(p), last);
                    let out = d.run(job).await.map_err(|e| anyhow::anyhow!("{e}"))?;
                    bout += enc.frame(out.bytes, last).len();
                }
                bin += body.len();
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            anyhow::Ok((bin, bout, lat))
        }));
    }
    let (mut bytes_in, mut bytes_out, mut lat) = (0, 0, Vec::new());
    for t in tasks {
        let (a, b, l) = t.await??;
        bytes_in += a;
        bytes_out += b;
        lat.extend(l);
    }
    Ok(Measured {
        bytes_in,
        bytes_out,
        lat,
        elapsed: start.elapsed().as_secs_f64(),
    })
}

/// The table header for the text output.
pub(crate) fn header() {
    println!(
        "{:<6} {:<8} {:>5} {:<7} {:>5} {:>10} {:>7} {:>10}",
        "codec", "backend", "level", "engine", "jobs", "MB/s", "ratio", "p99 µs"
    );
}
