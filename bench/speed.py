#!/usr/bin/env python3
"""Private-key operations per second: `sluice speed` per engine beside `openssl speed` (the
system OpenSSL) on the same pinned core, alternating, several runs; median [min-max].

    bench/speed                                  # 5 runs x 3 s, every algorithm, inline + pool
    bench/speed --runs 3 --seconds 2 --engines inline,pool,mb --algorithms rsa2048
    bench/speed --engines mb-worker/4,mb-worker/8 --jobs 64 --algorithms rsa2048  # mb lanes

Called by bench/speed (the shell wrapper), which installs openssl and builds sluice.
Both sides measure one operation at a time per job on the same core; Sluice's RSA figures
include the verification every RSA signature gets before it leaves the process. `pool` runs with one thread on the same core and 16 jobs in flight.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLUICE = ROOT / os.environ.get("CARGO_TARGET_DIR", "target") / "release" / "sluice"
ALGORITHMS = ["rsa2048", "rsa3072", "rsa4096", "ecdsap256", "ecdsap384", "ed25519"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# OpenSSL with AVX-512 IFMA masked off (CPUID leaf 7 EBX bit 21, the second word of
# OPENSSL_ia32cap): its mulx/adx code instead of the 256-bit IFMA code OpenSSL 3 runs
# RSA-2048..4096 on where the CPU has it. A reference column (`--engines openssl-noifma,...`):
# it shows how much of OpenSSL's own speed is IFMA, which bounds what eight IFMA lanes can gain.
NO_IFMA = {"OPENSSL_ia32cap": ":~0x200000"}


def openssl_speed(core, algorithms, seconds, env=None):
    """Signs/s per algorithm from `openssl speed -mr` (machine-readable lines)."""
    out = subprocess.run(
        ["taskset", "-c", str(core), "openssl", "speed", "-mr", "-seconds", str(seconds), *algorithms],
        capture_output=True, text=True, check=True, timeout=60 + 4 * seconds * len(algorithms),
        env={**os.environ, **(env or {})},
    ).stdout
    got = {}
    for line in out.splitlines():
        f = line.split(":")
        if line.startswith("+F2:"):  # RSA: index, bits, sign/s, verify/s
            got[f"rsa{f[2]}"] = float(f[3])
        elif line.startswith("+F4:"):  # ECDSA: index, bits, sign/s, verify/s
            got[{"256": "ecdsap256", "384": "ecdsap384", "521": "ecdsap521"}.get(f[2], f[2])] = float(f[3])
        elif line.startswith("+F6:") and f[3] == "Ed25519":  # EdDSA: index, bits, name, sign/s
            got["ed25519"] = float(f[4])
    return {a: got[a] for a in algorithms if a in got}


def sluice_speed(core, engine, algorithms, seconds, jobs, threads):
    # "mb-worker/4": the engine with that many lanes per batch (`--mb-lanes`).
    engine, _, lanes = engine.partition("/")
    argv = ["taskset", "-c", str(core), str(SLUICE), "speed", *algorithms, "--engine", engine,
            "--seconds", str(seconds), "--jobs", str(jobs), "--json"]
    if lanes:
        argv += ["--mb-lanes", lanes]
    if threads:
        argv += ["--threads", str(threads)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         timeout=120 + 4 * seconds * len(algorithms)).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return {r["algorithm"]: r for r in rows}


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def cell(values):
    if not values:
        return "n/a"
    return f"{fmt(statistics.median(values))} [{fmt(min(values))}-{fmt(max(values))}]"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--engines", default="inline,pool")
    p.add_argument("--jobs", type=int, default=16, help="jobs in flight for asynchronous engines")
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = p.parse_args()
    algorithms = a.algorithms.split(",")
    engines = a.engines.split(",")
    secs = max(1, int(round(a.seconds)))

    runs = []
    for i in range(a.runs):
        log(f"run {i + 1}/{a.runs}: openssl speed")
        run = {"openssl": openssl_speed(a.core, algorithms, secs)}
        for e in engines:
            if e == "openssl-noifma":
                log(f"run {i + 1}/{a.runs}: openssl speed without IFMA")
                run[e] = {alg: {"ops_per_sec": v}
                          for alg, v in openssl_speed(a.core, algorithms, secs, NO_IFMA).items()}
                continue
            log(f"run {i + 1}/{a.runs}: sluice speed --engine {e}")
            jobs = 1 if e == "inline" else a.jobs
            threads = 1 if e == "pool" else None
            run[e] = sluice_speed(a.core, e, algorithms, a.seconds, jobs, threads)
        runs.append(run)

    date = datetime.datetime.now(datetime.timezone.utc)
    stamp = date.strftime("%Y-%m-%dT%H%M%S")
    header = (f"CPU: {cpu_model()}; date: {date:%Y-%m-%d}; everything pinned to core {a.core}; "
              f"median of {a.runs} run(s), [min-max]; OpenSSL: "
              + subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip())
    cols = ["algorithm", "OpenSSL signs/s"]
    for e in engines:
        cols += [f"`{e}` signs/s", f"`{e}`/OpenSSL", f"`{e}` p99 µs"]
    lines = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for alg in algorithms:
        ossl = [r["openssl"][alg] for r in runs if alg in r["openssl"]]
        row = [alg, cell(ossl)]
        for e in engines:
            vals = [r[e][alg]["ops_per_sec"] for r in runs if alg in r[e]]
            p99 = [r[e][alg]["p99_us"] for r in runs if "p99_us" in r[e].get(alg, {})]
            ratio = (f"{statistics.median(vals) / statistics.median(ossl):.2f}x"
                     if vals and ossl else "n/a")
            row += [cell(vals), ratio, cell(p99)]
        lines.append("| " + " | ".join(row) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stamp}-speed.json").write_text(json.dumps(
        {"date": date.isoformat(), "cpu": cpu_model(), "args": vars(a), "runs": runs}, indent=1))
    (out / "latest-speed.md").write_text(table)
    log(f"wrote {out / (stamp + '-speed.json')} and {out / 'latest-speed.md'}")


if __name__ == "__main__":
    main()
