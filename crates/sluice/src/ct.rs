//! `sluice ct-check`: dudect on the `mb` kernel (see `sluice_crypto::ct`).

use anyhow::{Result, bail};
use sluice_crypto::Kernel;
use std::time::Duration;

/// What a check expects and how strictly.
pub(crate) struct Verdict {
    /// |t| at or above this is a dependence on the key (dudect's 4.5 for a long run; a
    /// short one takes a higher bound it can afford).
    pub(crate) bound: f64,
    /// Print only; never fail.
    pub(crate) report_only: bool,
    /// The run must find a dependence (the `leaky` self-test).
    pub(crate) expect_leak: bool,
}

/// Measures `kernel` ("auto", "ifma", "ifma4", "portable", or "leaky": the portable kernel
/// made to leak, the method's self-test) for `seconds` and prints the verdict; fails when
/// the times depend on the key (|t| ≥ the bound), or with `expect_leak` when they do not.
pub(crate) fn run(
    kernel: &str,
    bits: u32,
    seconds: f64,
    max_samples: usize,
    json: bool,
    verdict: &Verdict,
) -> Result<()> {
    if ![2048, 3072, 4096].contains(&bits) {
        bail!("--bits {bits}: the mb engine takes RSA-2048, 3072 and 4096 keys");
    }
    let leaky = kernel == "leaky";
    let kernel = choose(kernel)?;
    let cpu = cpu_name();
    let keys = keys(bits)?;
    let duration = Duration::from_secs_f64(seconds);
    let r = if leaky {
        sluice_crypto::ct::measure_leaky(&keys, duration, max_samples)
    } else {
        sluice_crypto::ct::measure(kernel, &keys, duration, max_samples)
    }
    .map_err(|e| anyhow::anyhow!("cannot prepare the measurement: {e}"))?;
    let bound = verdict.bound;
    let constant = r.t_max.abs() < bound;
    let label = if leaky {
        "Leaky self-test".to_owned()
    } else {
        format!("{:?}", r.kernel)
    };
    let said = if constant {
        "no dependence on the key found"
    } else {
        "TIMES DEPEND ON THE KEY"
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "cpu": cpu, "kernel": label, "bits": bits, "lanes": r.lanes,
                "fixed": r.fixed, "random": r.random, "t_all": r.t_all, "t_max": r.t_max,
                "median_us": r.median.as_secs_f64() * 1e6, "bound": bound,
                "constant_time": constant,
            })
        );
    } else {
        println!(
            "{cpu}: {label} kernel, {} lanes, RSA-{bits}: {} + {} batches (fixed key, random keys), median {:.0} µs; Welch t {:+.2} on all, max |t| {:.2} over the crops: {said} (bound {bound})",
            r.lanes,
            r.fixed,
            r.random,
            r.median.as_secs_f64() * 1e6,
            r.t_all,
            r.t_max.abs()
        );
    }
    if verdict.report_only {
        return Ok(());
    }
    if verdict.expect_leak && constant {
        bail!(
            "max |t| = {:.2} < {bound} on a kernel that leaks on purpose: a run this short cannot see a leak; measure longer",
            r.t_max.abs()
        );
    }
    if !verdict.expect_leak && !constant {
        bail!(
            "max |t| = {:.2} ≥ {bound}: the kernel's time depends on the key",
            r.t_max.abs()
        );
    }
    Ok(())
}

/// The kernel `--kernel` names (`leaky`: the portable one, made to leak by the measurement).
fn choose(kernel: &str) -> Result<Kernel> {
    Ok(match kernel {
        "leaky" => Kernel::Reference,
        "auto" => Kernel::detect().unwrap_or(Kernel::Reference),
        "ifma" => Kernel::detect_lanes(8).ok_or_else(|| {
            anyhow::anyhow!("this CPU has no AVX-512 IFMA; use --kernel portable")
        })?,
        "ifma4" => Kernel::detect_lanes(4).ok_or_else(|| {
            anyhow::anyhow!("this CPU has no AVX-512 IFMA with VL; use --kernel portable")
        })?,
        "portable" => Kernel::Reference,
        other => bail!("unknown kernel `{other}`: use auto, ifma, ifma4, portable or leaky"),
    })
}

/// The CPU's model name, for the report.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// A fixed key and 15 others, new for each run (PKCS#8 DER).
fn keys(bits: u32) -> Result<Vec<Vec<u8>>> {
    (0..16)
        .map(|_| {
            boring::rsa::Rsa::generate(bits)
                .and_then(boring::pkey::PKey::from_rsa)
                .and_then(|k| k.private_key_to_der_pkcs8())
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(Into::into)
}
