"""The "site mix" row of bench/run: what a site's entrance carries most of the time.

Each gateway is offered the same fixed load, below saturation (`sluice-loadgen mix`): paced
requests on established HTTP/1.1 and HTTP/2 connections (70% 1 KiB responses, 15% a
compressible HTML page the gateway gzips at level 1, 15% a 16 KiB incompressible image), 3%
new connections (a fifth resuming a TLS 1.3 session, the rest full handshakes, half RSA-2048
and half ECDSA P-256), and idle connections held open throughout. The figure is the
gateway's CPU (user and system apart) per 1,000 requests of the mix, read from /proc over
the measured window only (after the idle connections are open and a warm-up), and the p99 of
the established requests, counted from when each was due.

Imported by bench.py; nothing here imports it back (it is run as a script).
"""

import json
import statistics
import subprocess
import time

# Idle connections held open by the mix (the smoke run uses fewer).
IDLE = 2000
SMOKE_IDLE = 200

MIX_STATED = ("3,200 established req/s (16 HTTP/1.1 connections x 100 req/s, 4 HTTP/2 connections x 400 req/s; "
              "70% 1 KiB, 15% a gzipped HTML page, 15% a 16 KiB image), 100 new connections/s "
              "(20% resumed, the rest half RSA-2048, half ECDSA P-256), idle connections held open")


def run(loadgen, load_core, cpu_split, gateway, origin, port, duration, idle, extra=()):
    """One run of the mix against `gateway` (a bench.Proc listening on `port`); returns the
    loadgen's figures with the gateway's, origin's and load generator's CPU over the window.
    `extra`: more of the loadgen's arguments (`--class`: one class of the mix alone)."""
    argv = ["taskset", "-c", load_core, str(loadgen), "mix", "--addr", f"127.0.0.1:{port}", "--path", "/1k",
            "--duration", f"{duration}s", "--idle", str(idle), *extra]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marks, other = {}, []
    try:
        for line in p.stderr:
            line = line.strip()
            if line in ("window start", "window end"):
                marks[line] = (time.time(), gateway.cpu_split(), origin.cpu(), sum(cpu_split(p.pid)))
            else:
                other.append(line)
        out = p.stdout.read()
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if rc != 0 or len(marks) != 2:
        raise RuntimeError(f"sluice-loadgen mix failed (exit {rc}): {' '.join(other)[-500:]}")
    r = json.loads(out)
    (t0, (u0, s0), o0, l0), (t1, (u1, s1), o1, l1) = marks["window start"], marks["window end"]
    r["wall_s"] = t1 - t0
    r["gateway_user_s"], r["gateway_sys_s"] = u1 - u0, s1 - s0
    r["gateway_cpu_s"] = r["gateway_user_s"] + r["gateway_sys_s"]
    r["origin_cpu_s"] = o1 - o0
    r["loadgen_cpu_s"] = l1 - l0
    # CPU ms per 1,000 requests (= µs per request).
    r["value"] = r["gateway_cpu_s"] / max(r["completed"], 1) * 1e6
    return r


def key_shares(runs):
    """The groups a gateway's new connections negotiated over its runs, most used first."""
    n = {}
    for r in runs:
        for g, k in (r.get("key_shares_new") or {}).items():
            n[g] = n.get(g, 0) + k
    return "+".join(g for g, _ in sorted(n.items(), key=lambda x: -x[1])) or "?"


def notes(row, gateways):
    """The mix row's notes: the split of its CPU, the latency of its established requests,
    and what was actually served (so that a gateway that dropped work cannot look cheap)."""
    def med(who, key):
        return statistics.median(r.get(key, 0) for r in row["runs"][who])
    present = [w for w, _ in gateways if w in row["runs"]]
    out = [
        "user+system µs/req (N / H / S): " + " / ".join(
            f"{med(w, 'gateway_user_s') / max(med(w, 'completed'), 1) * 1e6:.1f}"
            f"+{med(w, 'gateway_sys_s') / max(med(w, 'completed'), 1) * 1e6:.1f}" for w in present),
        "established p99 ms (N / H / S): " + " / ".join(f"{med(w, 'p99_ms'):.2f}" for w in present),
        "served req/s (N / H / S): " + " / ".join(f"{med(w, 'rate'):,.0f}" for w in present)
        + f" of {med(present[0], 'offered_rate'):,.0f} offered",
        "resumed / full RSA / full ECDSA per run (N / H / S): " + " / ".join(
            f"{med(w, 'resumed'):.0f}/{med(w, 'full_rsa'):.0f}/{med(w, 'full_ecdsa'):.0f}" for w in present),
        f"idle connections held: {med(present[0], 'idle_opened'):,.0f}",
        "key share of new connections (N / H / S): " + " / ".join(key_shares(row["runs"][w]) for w in present),
    ]
    failed = {w: sum(r.get("failed", 0) for r in row["runs"][w]) for w in row["runs"]}
    if any(failed.values()):
        out.append("FAILED requests: " + ", ".join(f"{w} {n}" for w, n in failed.items() if n))
    return out
