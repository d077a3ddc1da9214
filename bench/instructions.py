#!/usr/bin/env python3
"""User-space instructions per keep-alive request, Sluice, NGINX or HAProxy as the gateway, counted.

The host's noise (±8-15% between runs of one binary) hides a change of a few percent in CPU
time; an instruction count does not move between runs. This runs the gateway under
`valgrind --tool=callgrind` on the gateway core with the bench's own certificates,
configuration and NGINX origin (`bench.sluice_conf`, `bench.nginx_gateway_conf` with
`master_process off`, `bench.haproxy_conf` with `-db`), sends a warm-up load (20,000
requests, past the fill of Sluice's request log), then two counted loads with h2load from the
load core, of N and 2N requests, each on new connections, and prints the second's count less
the first's over the difference in requests: a keep-alive request's work, what a keep-alive
row of `bench/run` measures, with the connections' TLS handshakes cancelled out wherever they
ran. (Until 2026-11-28 it subtracted `SSL_do_handshake`'s inclusive count from one load: the
same total within 1%, but `--top` then listed the handshakes' functions too, RSA's first on
`--load h1`, where 32 handshakes fall on 20,000 requests.)

    bench/instructions.py [--gateway sluice|nginx|haproxy] [--binary PATH] [--load h1|h2]
                          [--requests 20000] [--top 30] [--keep] [--cache]

`--load h1`: 32 HTTP/1.1 connections; `h2`: 4 HTTP/2 connections x 16 streams; 1 KiB over
TLS 1.3 either way. `--top N` adds the N functions with the most instructions of their own
(per request, the same difference); `--keep` keeps the two callgrind files (for
`callgrind_annotate --inclusive=yes`).
`--cache` adds callgrind's cache and branch simulation (`--cache-sim=yes --branch-sim=yes`,
a model of this host's caches, twice as slow) and prints the misses and mispredicted branches
per request: where two gateways run the same count of instructions in different CPU time, these
are the counts that tell why, on a host whose counters `perf` cannot read (a VM).
NGINX and HAProxy run OpenSSL, whose handshake function has the same name. Needs valgrind
(Debian's package) besides `bench/run`'s packages. A run takes 2-6 minutes (the gateway
runs ~50x slower under callgrind).
"""

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench

LOADS = {"h1": (32, 1, True), "h2": (4, 16, False)}
WARM_UP = 20000


def wait_port(port, seconds=180):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"the gateway did not listen on {port} within {seconds} s (under valgrind)")


def load(port, load_name, n):
    clients, streams, h1 = LOADS[load_name]
    argv = ["taskset", "-c", bench.LOAD_CORE, "h2load", "-t", "1", "-c", str(clients), "-m", str(streams),
            "-n", str(n)]
    if h1:
        argv.append("--h1")
    argv.append(f"https://127.0.0.1:{port}/1k")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900).stdout
    m = bench.H2LOAD_RE["succeeded"].search(out)
    if not m:
        sys.exit(f"h2load failed:\n{out}")
    return int(m.group(1))


def stop_gateway(gw, sig):
    """Stops a gateway under callgrind with `sig` (it writes its last dump then), killed after
    two minutes."""
    gw.send_signal(sig)
    try:
        gw.wait(timeout=120)
    except subprocess.TimeoutExpired:
        gw.kill()
        gw.wait()


def totals(path):
    """Every event's total, by callgrind's name for it (`Ir`, and with `--cache` `I1mr`, `D1mr`,
    `DLmr`, `Bcm`, ...)."""
    names, values = [], []
    for line in open(path, errors="replace"):
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            values = [int(v) for v in line.split()[1:]]
    return dict(zip(names, values))


def misses(events, n):
    """The simulated cache misses and mispredicted branches per request, one line."""
    def per(*names):
        return sum(events.get(k, 0) for k in names) / n
    return (f"per request: L1 instruction misses {per('I1mr'):,.0f}, L1 data misses {per('D1mr', 'D1mw'):,.0f} "
            f"({per('D1mr'):,.0f} reads + {per('D1mw'):,.0f} writes), "
            f"last-level misses {per('ILmr', 'DLmr', 'DLmw'):,.1f}, mispredicted branches "
            f"{per('Bcm', 'Bim'):,.0f} (of {per('Bc', 'Bi'):,.0f})")


def inclusive(path, pattern):
    """The events of the first function whose line names `pattern`, its callees included, as
    a list in the file's event order (`Ir` first)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if pattern in line:
            # Each count may be followed by its share, "(12.3%)"; the name follows the counts.
            counts = line.split(pattern)[0].split(":")[0]
            return [int(t.replace(",", "")) for t in re.sub(r"\([^)]*\)", " ", counts).split()
                    if re.fullmatch(r"[\d,]+", t)]
    return []


def own_costs(path, events=("Ir",)):
    """Each function's own count of `events` (summed), by name (callgrind_annotate 3.19 puts
    everything under `clone` for a dump taken from a running process; the file is read here)."""
    ids = {"fn": {}, "fl": {}, "ob": {}}
    space = {"fn": "fn", "cfn": "fn", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl",
             "ob": "ob", "cob": "ob"}

    def named(kind, tok):
        m = re.match(r"\((\d+)\)(?: (.*))?", tok)
        if not m:
            return tok
        if m.group(2) is not None:
            ids[kind][m.group(1)] = m.group(2)
        return ids[kind].get(m.group(1), tok)

    own = {}
    columns = []
    fn, call_cost_next = None, False
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("events:"):
            # A cost line is a position, then one count per event (missing ones are 0).
            names = line.split()[1:]
            columns = [1 + names.index(e) for e in events if e in names]
            continue
        key, eq, rest = line.partition("=")
        if eq and key in space:
            name = named(space[key], rest)
            if key == "fn":
                fn = name
            continue
        if line.startswith("calls="):
            call_cost_next = True
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            parts = line.split()
            if call_cost_next:
                call_cost_next = False
            elif fn:
                v = sum(int(parts[c]) for c in columns if c < len(parts))
                own[fn] = own.get(fn, 0) + v
    return own


def top(first, second, n, requests, events=("Ir",)):
    """The `n` functions with the most of `events` of their own per request, the second dump
    less the first (see `main`)."""
    a, b = own_costs(first, events), own_costs(second, events)
    own = {name: v - a.get(name, 0) for name, v in b.items()}
    for name, v in sorted(own.items(), key=lambda kv: -kv[1])[:n]:
        print(f"  {v / requests:8.1f}  {short_name(name)}")


def short_name(name):
    """A function's name without its generic arguments, cut to a line."""
    return re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", name))[:110]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gateway", choices=["sluice", "nginx", "haproxy"], default="sluice")
    ap.add_argument("--binary", default=str(bench.RELEASE / "sluice"))
    ap.add_argument("--load", choices=sorted(LOADS), default="h1")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--cache", action="store_true")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_annotate", "callgrind_control", "h2load", "nginx", "taskset") + (
            ("haproxy",) if args.gateway == "haproxy" else ()):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install valgrind nginx nghttp2-client util-linux")

    d = tempfile.mkdtemp(prefix="sluice-instructions-")
    os.chmod(d, 0o755)
    bench.make_certs(d)
    bench.make_content(d)
    for sub in ("tmp-nginx-body", "tmp-nginx-proxy", "tmp-nginx-fcgi", "tmp-nginx-uwsgi", "tmp-nginx-scgi"):
        os.makedirs(f"{d}/{sub}", exist_ok=True)
    Path(d, "origin.conf").write_text(bench.nginx_origin_conf(d))
    origin = subprocess.Popen(["taskset", "-c", bench.LOAD_CORE, "nginx", "-c", f"{d}/origin.conf", "-p", d])
    out = f"{d}/callgrind.out"
    grind = ["taskset", "-c", bench.GW_CORE, "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             "--dump-instr=no"] + (["--cache-sim=yes", "--branch-sim=yes"] if args.cache else [])
    if args.gateway == "nginx":
        conf = bench.nginx_gateway_conf(d, "rsa").replace("master_process on;", "master_process off;")
        Path(d, "gateway.conf").write_text(conf)
        argv, port, stop = grind + ["nginx", "-c", f"{d}/gateway.conf", "-p", d], bench.NGINX_PORT, signal.SIGQUIT
    elif args.gateway == "haproxy":
        for c in bench.CERTS["rsa"]:
            Path(d, f"{c}.pem").write_bytes(Path(d, f"{c}.crt").read_bytes() + Path(d, f"{c}.key").read_bytes())
        Path(d, "haproxy.cfg").write_text(bench.haproxy_conf(d, "rsa"))
        argv, port, stop = grind + ["haproxy", "-db", "-f", f"{d}/haproxy.cfg"], bench.HAPROXY_PORT, signal.SIGTERM
    else:
        Path(d, "sluice.toml").write_text(bench.sluice_conf(d, "rsa", admin=None))
        argv = grind + [args.binary, "run", "--config", f"{d}/sluice.toml"]
        port, stop = bench.SLUICE_PORT, signal.SIGTERM
    gw = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        # Past the fill of Sluice's request log (8 MiB of ~600-byte records, a ring per
        # worker thread that grows a quarter at a time, copying, until full): counted inside
        # it, a request carried ~500 instructions of copies that a running gateway does not.
        load(port, args.load, WARM_UP)
        # Two counted loads, of N and 2N requests, each on as many new connections: the
        # second less the first is N requests' work with the connections' own (TLS
        # handshakes, on whichever thread they ran) cancelled out.
        dumps, counts = [], []
        for i, requests in enumerate((args.requests, 2 * args.requests)):
            subprocess.run(["callgrind_control", "-z", str(gw.pid)], capture_output=True, check=False)
            counts.append(load(port, args.load, requests))
            subprocess.run(["callgrind_control", "-d", str(gw.pid)], capture_output=True, check=False)
            time.sleep(1)
            files = sorted(glob.glob(out + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
            if len(files) != i + 1:
                sys.exit(f"callgrind wrote {len(files)} dumps, {i + 1} expected")
            dumps.append(files[-1])
        n = counts[1] - counts[0]
        first, second = totals(dumps[0]), totals(dumps[1])
        events = {k: v - first.get(k, 0) for k, v in second.items()}
        handshakes = (inclusive(dumps[0], "SSL_do_handshake") or [0])[0]
        print(f"CPU: {bench.cpu_model()}; {args.gateway} ({args.binary if args.gateway == 'sluice' else args.gateway}), "
              f"load {args.load}: {counts[1]} requests less {counts[0]}, each on new connections")
        print(f"instructions per request: {events.get('Ir', 0) / n:,.0f} (the first load: "
              f"{first.get('Ir', 0) / counts[0]:,.0f} in all, {handshakes / counts[0]:,.0f} of them in "
              f"SSL_do_handshake)")
        if args.cache:
            print(misses(events, n))
        if args.top:
            print(f"the {args.top} functions with the most instructions of their own, per request:")
            top(dumps[0], dumps[1], args.top, n)
            if args.cache:
                print(f"the {args.top} with the most L1 data misses of their own, per request:")
                top(dumps[0], dumps[1], args.top, n, ("D1mr", "D1mw"))
                print(f"the {args.top} with the most L1 instruction misses of their own, per request:")
                top(dumps[0], dumps[1], args.top, n, ("I1mr",))
        if args.keep:
            print(f"callgrind files: {dumps[0]} ({counts[0]} requests), {dumps[1]} ({counts[1]})")
    finally:
        stop_gateway(gw, stop)
        origin.send_signal(signal.SIGQUIT)
        origin.wait()
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
