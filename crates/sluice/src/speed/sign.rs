//! `sluice speed rsa2048 …`: signatures per second of each algorithm on each engine, like
//! `openssl speed -async_jobs`. `--engine boringssl` measures BoringSSL's own signing on the
//! caller, the reference the software engines replaced.

use super::args::SpeedArgs;
use anyhow::{Context as _, bail};
use boring::pkey::{Id, PKey, Private};
use sluice_crypto::{
    CryptoConfig, EngineKind, KeyJob, PrivateKey, SignatureScheme, VerifyPolicy, build_dispatcher,
};
use sluice_offload::{Dispatcher, DispatcherBuilder, Inline};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALGORITHMS: [&str; 6] = [
    "rsa2048",
    "rsa3072",
    "rsa4096",
    "ecdsap256",
    "ecdsap384",
    "ed25519",
];

fn key(name: &str) -> anyhow::Result<(PKey<Private>, SignatureScheme)> {
    use boring::ec::{EcGroup, EcKey};
    use boring::nid::Nid;
    let ec = |nid| -> anyhow::Result<PKey<Private>> {
        let group = EcGroup::from_curve_name(nid)?;
        Ok(PKey::from_ec_key(EcKey::generate(&group)?)?)
    };
    Ok(match name {
        "rsa2048" | "rsa3072" | "rsa4096" => {
            let bits = name[3..].parse()?;
            (
                PKey::from_rsa(boring::rsa::Rsa::generate(bits)?)?,
                SignatureScheme::RsaPssSha256,
            )
        }
        "ecdsap256" => (ec(Nid::X9_62_PRIME256V1)?, SignatureScheme::EcdsaP256Sha256),
        "ecdsap384" => (ec(Nid::SECP384R1)?, SignatureScheme::EcdsaP384Sha384),
        "ed25519" => (PKey::generate(Id::ED25519)?, SignatureScheme::Ed25519),
        other => bail!(
            "unknown algorithm `{other}`; use one of {}",
            ALGORITHMS.join(", ")
        ),
    })
}

struct Result_ {
    ops_per_sec: f64,
    mean_us: f64,
    p99_us: f64,
    /// Batching engines: jobs per flushed batch.
    batch_sizes: Option<sluice_offload::HistogramSnapshot>,
    /// Jobs that left the measured engine for the software fallback, by reason (a figure
    /// with many of them measures the fallback, not the engine).
    fell_back: Vec<(&'static str, u64)>,
}

/// `{"1": flushes, ..., "8": flushes}` (non-empty buckets only).
fn histogram_json(h: &sluice_offload::HistogramSnapshot) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (i, &c) in h.counts.iter().enumerate() {
        if c > 0 {
            let label = h
                .bounds
                .get(i)
                .map_or_else(|| "more".to_string(), |b| b.to_string());
            m.insert(label, c.into());
        }
    }
    serde_json::Value::Object(m)
}

fn summarize(mut lat_us: Vec<f64>, elapsed: f64) -> Result_ {
    lat_us.sort_by(f64::total_cmp);
    let n = lat_us.len().max(1);
    Result_ {
        ops_per_sec: lat_us.len() as f64 / elapsed,
        mean_us: lat_us.iter().sum::<f64>() / n as f64,
        p99_us: lat_us
            .get(((n as f64 - 1.0) * 0.99) as usize)
            .copied()
            .unwrap_or(0.0),
        batch_sizes: None,
        fell_back: Vec::new(),
    }
}

/// BoringSSL signing on the caller (the reference).
fn boringssl(
    pkey: &PKey<Private>,
    scheme: SignatureScheme,
    seconds: f64,
) -> anyhow::Result<Result_> {
    use boring::hash::MessageDigest;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut lat = Vec::new();
    let msg = [7u8; 100];
    while Instant::now() < deadline {
        let t = Instant::now();
        let mut signer = match scheme {
            SignatureScheme::Ed25519 => boring::sign::Signer::new_without_digest(pkey)?,
            SignatureScheme::EcdsaP384Sha384 => {
                boring::sign::Signer::new(MessageDigest::sha384(), pkey)?
            }
            _ => boring::sign::Signer::new(MessageDigest::sha256(), pkey)?,
        };
        if scheme.is_rsa() {
            signer.set_rsa_padding(boring::rsa::Padding::PKCS1_PSS)?;
            signer.set_rsa_pss_saltlen(boring::sign::RsaPssSaltlen::DIGEST_LENGTH)?;
        }
        let sig = if scheme == SignatureScheme::Ed25519 {
            signer.sign_oneshot_to_vec(&msg)?
        } else {
            signer.update(&msg)?;
            signer.sign_to_vec()?
        };
        std::hint::black_box(sig);
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(summarize(lat, start.elapsed().as_secs_f64()))
}

async fn through(
    dispatcher: Arc<Dispatcher<KeyJob>>,
    key: Arc<PrivateKey>,
    scheme: SignatureScheme,
    args: &SpeedArgs,
    verify: VerifyPolicy,
) -> anyhow::Result<Result_> {
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for j in 0..args.jobs {
        let (d, key) = (dispatcher.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let msg = [j as u8; 100];
            while Instant::now() < deadline {
                let t = Instant::now();
                let job = KeyJob::sign(key.clone(), scheme, &msg, verify).context("scheme")?;
                d.run(job).await.map_err(|e| anyhow::anyhow!("{e}"))?;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    Ok(summarize(lat, start.elapsed().as_secs_f64()))
}

/// Signatures per second of each of `algorithms` (all of them when empty).
pub(crate) fn run(args: &SpeedArgs, algorithms: Vec<String>) -> anyhow::Result<()> {
    let algorithms: Vec<String> = if algorithms.is_empty() {
        ALGORITHMS.iter().map(|s| s.to_string()).collect()
    } else {
        algorithms
    };
    let verify = match args.verify.as_str() {
        "all" => VerifyPolicy::All,
        "rsa" => VerifyPolicy::Rsa,
        other => bail!("--verify {other}: use all or rsa"),
    };
    // One thread drives the jobs, as one gateway worker would; the pool has its own threads.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if !args.json {
        println!(
            "{:<10} {:<9} {:>5} {:>12} {:>10} {:>10}",
            "algorithm", "engine", "jobs", "signs/s", "mean µs", "p99 µs"
        );
    }
    for name in &algorithms {
        let (pkey, scheme) = key(name)?;
        let r = match args.engine.as_str() {
            "boringssl" => boringssl(&pkey, scheme, args.seconds)?,
            engine => through_engine(&rt, engine, &pkey, scheme, args, verify)?,
        };
        report(name, args, &r);
    }
    Ok(())
}

/// Signing with `pkey` through one of our engines, as the gateway signs: the result with
/// the first engine's batch sizes and the jobs it passed on to software.
fn through_engine(
    rt: &tokio::runtime::Runtime,
    engine: &str,
    pkey: &PKey<Private>,
    scheme: SignatureScheme,
    args: &SpeedArgs,
    verify: VerifyPolicy,
) -> anyhow::Result<Result_> {
    let key = Arc::new(PrivateKey::from_pkcs8(&pkey.private_key_to_der_pkcs8()?)?);
    // As the gateway does on loading a key: its inline and batch costs, which decide where
    // the mb engine computes a partial batch.
    sluice_crypto::calibrate(&key);
    let dispatcher = Arc::new(dispatcher(engine, args)?);
    let mut r = rt.block_on(through(dispatcher.clone(), key, scheme, args, verify))?;
    let first = &dispatcher.counters()[0];
    if first.engine != "inline" {
        r.fell_back = sluice_offload::FallbackReason::ALL
            .iter()
            .zip(first.fell_back)
            .filter(|(_, n)| *n > 0)
            .map(|(reason, n)| (reason.as_str(), n))
            .collect();
    }
    if first.batch_size.sum > 0 {
        r.batch_sizes = Some(first.batch_size.clone());
    }
    Ok(r)
}

/// The dispatcher `--engine` names, in front of the inline engine.
fn dispatcher(engine: &str, args: &SpeedArgs) -> anyhow::Result<Dispatcher<KeyJob>> {
    Ok(match engine {
        "inline" => DispatcherBuilder::new(Arc::new(Inline::new(sluice_crypto::run))).build(),
        "pool" => {
            let threads = args
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            build_dispatcher(
                &CryptoConfig {
                    engines: vec![EngineKind::Pool],
                    pool_threads: threads,
                    pool_capacity: args.jobs.max(1),
                    deadline: Duration::from_secs(10),
                    ..CryptoConfig::default()
                },
                None,
            )?
        }
        "mb" | "mb-worker" => {
            let Some(kernel) = sluice_crypto::Kernel::choose(args.mb_lanes) else {
                bail!(
                    "--engine mb needs AVX-512 IFMA (and VL for --mb-lanes 4), which this CPU lacks"
                );
            };
            let mb = sluice_crypto::Mb::with_kernel(
                sluice_crypto::MbConfig {
                    capacity: args.jobs.max(1),
                    on_worker: engine == "mb-worker",
                    ..Default::default()
                },
                Arc::new(std::sync::atomic::AtomicUsize::new(0)),
                kernel,
                None,
            )?;
            DispatcherBuilder::new(Arc::new(Inline::new(sluice_crypto::run)))
                .engine(Arc::new(mb))
                .deadline(Duration::from_secs(10))
                .build()
        }
        other => bail!("--engine {other}: use inline, pool, mb, mb-worker or boringssl"),
    })
}

/// One algorithm's line: JSON, or a table row with its batch sizes and fallbacks.
fn report(name: &str, args: &SpeedArgs, r: &Result_) {
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "algorithm": name, "engine": args.engine, "jobs": args.jobs,
                "ops_per_sec": r.ops_per_sec, "mean_us": r.mean_us, "p99_us": r.p99_us,
                "verify": args.verify,
                "batch_sizes": r.batch_sizes.as_ref().map(histogram_json),
                "fell_back": r.fell_back.iter().map(|(k, n)| (k.to_string(), serde_json::Value::from(*n))).collect::<serde_json::Map<_, _>>(),
            })
        );
        return;
    }
    println!(
        "{:<10} {:<9} {:>5} {:>12.0} {:>10.1} {:>10.1}",
        name, args.engine, args.jobs, r.ops_per_sec, r.mean_us, r.p99_us
    );
    if let Some(h) = &r.batch_sizes {
        println!("{:<10} batch sizes: {}", "", histogram_json(h));
    }
    if !r.fell_back.is_empty() {
        let total: u64 = r.fell_back.iter().map(|(_, n)| n).sum();
        let reasons: Vec<String> = r
            .fell_back
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        println!(
            "{:<10} fell back to software: {total} jobs ({}); the figure includes them",
            "",
            reasons.join(", ")
        );
    }
}
