//! `sluice ct-check`: dudect on the `mb` kernel (see `sluice_crypto::ct`).

use anyhow::{Result, bail};
use sluice_crypto::Kernel;
use std::time::Duration;

/// Measures `kernel` ("auto", "ifma", "ifma4" or "portable") for `seconds` and prints the
/// verdict; fails when the times depend on the key (|t| ≥ 4.5), unless `report_only`.
pub(crate) fn run(
    kernel: &str,
    seconds: f64,
    max_samples: usize,
    json: bool,
    report_only: bool,
) -> Result<()> {
    let kernel = match kernel {
        "auto" => Kernel::detect().unwrap_or(Kernel::Reference),
        "ifma" => Kernel::detect_lanes(8).ok_or_else(|| {
            anyhow::anyhow!("this CPU has no AVX-512 IFMA; use --kernel portable")
        })?,
        "ifma4" => Kernel::detect_lanes(4).ok_or_else(|| {
            anyhow::anyhow!("this CPU has no AVX-512 IFMA with VL; use --kernel portable")
        })?,
        "portable" => Kernel::Reference,
        other => bail!("unknown kernel `{other}`: use auto, ifma, ifma4 or portable"),
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    // A fixed key and 15 others, new for each run.
    let keys = (0..16)
        .map(|_| {
            boring::rsa::Rsa::generate(2048)
                .and_then(boring::pkey::PKey::from_rsa)
                .and_then(|k| k.private_key_to_der_pkcs8())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let r =
        sluice_crypto::ct::measure(kernel, &keys, Duration::from_secs_f64(seconds), max_samples)
            .map_err(|e| anyhow::anyhow!("cannot prepare the measurement: {e}"))?;
    let verdict = if r.constant_time() {
        "no dependence on the key found"
    } else {
        "TIMES DEPEND ON THE KEY"
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "cpu": cpu, "kernel": format!("{:?}", r.kernel), "lanes": r.lanes,
                "fixed": r.fixed, "random": r.random, "t_all": r.t_all, "t_max": r.t_max,
                "median_us": r.median.as_secs_f64() * 1e6, "constant_time": r.constant_time(),
            })
        );
    } else {
        println!(
            "{cpu}: {:?} kernel, {} lanes, RSA-2048: {} + {} batches (fixed key, random keys), median {:.0} µs; Welch t {:+.2} on all, max |t| {:.2} over the crops: {verdict} (threshold 4.5)",
            r.kernel,
            r.lanes,
            r.fixed,
            r.random,
            r.median.as_secs_f64() * 1e6,
            r.t_all,
            r.t_max.abs()
        );
    }
    if !r.constant_time() && !report_only {
        bail!(
            "max |t| = {:.2} ≥ 4.5: the kernel's time depends on the key",
            r.t_max.abs()
        );
    }
    Ok(())
}
