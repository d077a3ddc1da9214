#!/usr/bin/env python3
"""System calls and context switches per keep-alive request, each gateway beside the others.

CPU time says how much a request costs; this says where the kernel's share comes from. Each
gateway (NGINX, HAProxy, Sluice: the bench's own configurations, certificates and origin, the
gateway on its core, h2load and the origin on the load core) takes the keep-alive load while
`perf stat` counts its system calls on the kernel's `syscalls:sys_enter_*` tracepoints (a
count per call, no stop per call: `strace -c` slowed the gateways enough to change how they
batch their writes), and `/proc/PID/task/*/status` its context switches. It prints, per
request, the calls in all and each one that was made, with the user and system µs the
gateway spent.

    bench/syscalls.py [--load h1|h2] [--duration 5] [--gateways nginx,haproxy,sluice]

`--load h1`: 32 HTTP/1.1 connections; `h2`: 4 connections x 16 streams (as `bench/ab.py`).
Needs `perf` with tracepoints readable (root, or `kernel.perf_event_paranoid` <= -1) and
`bench/run`'s packages; build Sluice first (`scripts/build-release -p sluice`).
2026-11-27, Intel Xeon, `--load h2`: NGINX 4.22 (a `write` to the client per request),
HAProxy 2.80 (`sendto` to the client 0.17), Sluice 2.80 with `sendto` 0.55, then 2.32 with
0.14 after its HTTP/2 flush was held until quiet (README, "HTTP/2's flush held until quiet").
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import bench

# The calls a gateway's request path makes (the rest are rare or start-up only).
CALLS = ("read", "write", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg", "epoll_wait",
         "epoll_ctl", "futex", "getsockopt", "setsockopt", "accept4", "close", "clock_gettime")
LOADS = {"h1": ("-c", "32", "-m", "1", "--h1"), "h2": ("-c", "4", "-m", "16")}


def switches(pids):
    """Voluntary and involuntary context switches of every thread of `pids`."""
    v = n = 0
    for pid in pids:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                s = Path(f"/proc/{pid}/task/{t}/status").read_text()
            except OSError:
                continue  # a thread that ended meanwhile
            v += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", s, re.M).group(1))
            n += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", s, re.M).group(1))
    return v, n


def load(port, load, duration):
    """h2load on the load core; the requests that succeeded."""
    argv = ["taskset", "-c", bench.LOAD_CORE, "h2load", "-t", "1", "-D", str(duration), "-T", str(duration + 15),
            *LOADS[load], f"https://127.0.0.1:{port}/1k"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60).stdout
    m = bench.H2LOAD_RE["succeeded"].search(out)
    return int(m.group(1)) if m else 0


def count(proc, port, load_name, duration, d):
    """One gateway under the load: (requests, {call: count}, user s, system s, switches)."""
    pids = bench.tree_pids(proc.p.pid)
    load(port, load_name, 2)  # warm-up: handshakes done, pools filled
    out = Path(d, "perf-stat.csv")
    events = ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{c}" for c in CALLS]
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", str(out), *sum((["-e", e] for e in events), []),
                             "-p", ",".join(map(str, pids))], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(1)  # perf attached
    if perf.poll() is not None:
        sys.exit(f"syscalls: perf stat could not start: {perf.stderr.read().strip()}")
    (u0, s0), sw0 = proc.cpu_split(), switches(pids)
    n = load(port, load_name, duration)
    (u1, s1), sw1 = proc.cpu_split(), switches(pids)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    calls = {}
    for line in out.read_text().splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].isdigit():
            name = "all" if f[2] == "raw_syscalls:sys_enter" else f[2].removeprefix("syscalls:sys_enter_")
            calls[name] = int(f[0])
        elif len(f) > 2 and f[0].startswith("<not"):
            sys.exit(f"syscalls: perf could not count {f[2]}; are the tracepoints readable (run as root)?")
    return n, calls, u1 - u0, s1 - s0, (sw1[0] - sw0[0], sw1[1] - sw0[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", choices=sorted(LOADS), default="h2")
    ap.add_argument("--duration", type=int, default=5, help="seconds of counted load (default 5)")
    ap.add_argument("--gateways", default="nginx,haproxy,sluice")
    args = ap.parse_args()
    if not os.access(bench.SLUICE, os.X_OK):
        sys.exit(f"syscalls: {bench.SLUICE} is missing; scripts/build-release -p sluice")
    d, origin, _ = bench.prepared("sluice-syscalls-")
    try:
        gw = bench.Gateways(d, "rsa")
    except BaseException:
        origin.stop()
        raise
    print(f"CPU: {bench.cpu_model()}; load {args.load}, {args.duration} s counted; gateway on core {bench.GW_CORE}, "
          f"load and origin on core {bench.LOAD_CORE}; per request:")
    try:
        for who in args.gateways.split(","):
            n, calls, user, system, (vol, invol) = count(gw.procs[who], gw.ports[who], args.load, args.duration, d)
            if n == 0:
                sys.exit(f"syscalls: no request succeeded against {who}")
            made = ", ".join(f"{c} {calls[c] / n:.3f}" for c in CALLS if calls.get(c, 0) / n >= 0.001)
            print(f"  {who}: {n} requests, {calls.get('all', 0) / n:.2f} system calls ({made}); "
                  f"context switches {vol / n:.3f} + {invol / n:.3f} involuntary; "
                  f"user {user / n * 1e6:.2f} + system {system / n * 1e6:.2f} µs")
    finally:
        gw.stop()
        origin.stop()
    # Finished: nothing left behind (a failed run keeps its directory to read).
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
