#!/usr/bin/env python3
"""Two Sluice binaries on the same keep-alive load, interleaved: is B cheaper than A?

`bench/run` compares Sluice with NGINX and HAProxy; a change to Sluice itself is judged by
running the binary before and after it. On a shared host the CPU per request of one binary
moves ±10% between runs, more than most single changes save, so the two binaries run in
rounds, one after the other, the order swapped every round (whichever runs second in a pair
reads a little higher on some hosts), and the report gives each binary's median with
min-max and the ratio of the medians.

Each run starts the binary on the gateway core with the bench's own configuration (the same
certificates, origin and `sluice_conf` as `bench/run`), loads it with h2load pinned to the
load core, and reads the gateway's user and system CPU from /proc over the load.

    bench/ab.py OLD_BINARY NEW_BINARY [--load h1|h1-paced|h2|h2-paced] [--rounds 6] [--duration 4]

Build the two binaries first (`git worktree add`, `scripts/build-release -p sluice
-p sluice-loadgen`, copy `target/release/sluice` aside).
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import bench

LOADS = {
    # name: (h2load clients, streams per client, HTTP/1.1, per-client rate or None)
    "h1": (32, 1, True, None),
    "h1-paced": (32, 1, True, 100),
    "h2": (4, 16, False, None),
    # 3,200 req/s like h1-paced: where a held-back HTTP/2 flush (coalesce.rs) could cost a
    # poll for nothing (2026-11-27: it did not, 91.2 -> 79.1 µs per request with it).
    "h2-paced": (4, 16, False, 800),
}


def one_run(binary, d, load, duration):
    """One binary under one load: (requests, user µs per request, system µs per request)."""
    clients, streams, h1, rps = LOADS[load]
    log = Path(d, "sluice.log")
    gw = bench.Proc("sluice", [str(binary), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/s.pid"],
                    bench.GW_CORE, bench.SLUICE_PORT, log)
    try:
        argv = ["taskset", "-c", bench.LOAD_CORE, "h2load", "-t", "1", "-c", str(clients), "-m", str(streams),
                "-D", str(duration), "-T", str(duration + 15)]
        if rps:
            argv.append(f"--rps={rps}")
        if h1:
            argv.append("--h1")
        argv.append(f"https://127.0.0.1:{bench.SLUICE_PORT}/1k")
        u0, s0 = gw.cpu_split()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60).stdout
        u1, s1 = gw.cpu_split()
    finally:
        gw.stop()
        bench.wait_port_free(bench.SLUICE_PORT)
    m = bench.H2LOAD_RE["succeeded"].search(out)
    n = int(m.group(1)) if m else 0
    if n == 0:
        raise RuntimeError(f"no request succeeded against {binary}; see {log}")
    return n, (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="the binary before (A)")
    ap.add_argument("b", type=Path, help="the binary after (B)")
    ap.add_argument("--load", choices=sorted(LOADS), default="h1")
    ap.add_argument("--rounds", type=int, default=6, help="runs of each binary (default 6)")
    ap.add_argument("--duration", type=int, default=4, help="seconds per run (default 4)")
    args = ap.parse_args()
    for p in (args.a, args.b):
        if not os.access(p, os.X_OK):
            sys.exit(f"ab: {p} is not an executable; build it first (see bench/ab.py's docstring)")
    d, origin, _ = bench.prepared("sluice-ab-")
    Path(d, "sluice.toml").write_text(bench.sluice_conf(d, "rsa"))
    results = {"A": [], "B": []}
    try:
        for r in range(args.rounds):
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for who in order:
                binary = args.a if who == "A" else args.b
                n, u, s = one_run(binary, d, args.load, args.duration)
                results[who].append((u, s))
                print(f"round {r + 1} {who}: {n} requests, user {u:.1f} + system {s:.1f} = {u + s:.1f} µs/request",
                      flush=True)
    finally:
        origin.p.send_signal(signal.SIGQUIT)
        origin.p.wait()
        origin.out.close()
    # Finished: nothing left behind (a failed run keeps its directory to read).
    shutil.rmtree(d, ignore_errors=True)
    print(f"\nCPU: {bench.cpu_model()}; load {args.load}; {args.rounds} runs of {args.duration} s each, "
          f"gateway on core {bench.GW_CORE}, load on core {bench.LOAD_CORE}; µs per request, median [min-max]")
    med = {}
    for who, path in (("A", args.a), ("B", args.b)):
        tot = [u + s for u, s in results[who]]
        med[who] = statistics.median(tot)
        print(f"  {who} {path}: {med[who]:.1f} [{min(tot):.1f}-{max(tot):.1f}] "
              f"(user {statistics.median([u for u, _ in results[who]]):.1f}, "
              f"system {statistics.median([s for _, s in results[who]]):.1f})")
    print(f"  B / A: {med['B'] / med['A']:.3f}")


if __name__ == "__main__":
    main()
