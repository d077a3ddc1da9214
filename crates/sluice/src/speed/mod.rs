//! `sluice speed`: what the offload engines do per second, like `openssl speed -async_jobs`:
//! signatures of each algorithm on each engine (`sign`), and for `gzip`, `br` and `zstd`
//! compression throughput and ratio on the bundled corpus (`compress`).

mod args;
mod compress;
mod sign;

pub(crate) use args::SpeedArgs;

/// Runs `sluice speed`: the codecs named first, then the signature algorithms named (all of
/// them when nothing is named).
pub(crate) fn run(args: SpeedArgs) -> anyhow::Result<()> {
    let (codecs, algorithms): (Vec<String>, Vec<String>) = args
        .algorithms
        .iter()
        .cloned()
        .partition(|a| compress::is_codec(a));
    if !codecs.is_empty() {
        if !args.json {
            compress::header();
        }
        for c in &codecs {
            compress::run(c, &args)?;
        }
        if algorithms.is_empty() {
            return Ok(());
        }
    }
    sign::run(&args, algorithms)
}
