#!/usr/bin/env python3
"""What bench/lua's five-line `access` script adds to a request, counted in instructions:
Sluice and NGINX with lua-nginx-module, each under `valgrind --tool=callgrind`, side by side.

The CPU-time difference between a gateway's rows with and without the script is smaller than
this host's noise between two rows (bench/JOURNAL.md, "What a Lua script costs"). An
instruction count does not move between runs. Each gateway runs bench/lua's configuration
(one listener without a script, one with it) on the gateway core under callgrind
(`--smc-check=all-non-file`, since LuaJIT writes machine code); after a warm-up on both
listeners, two loads of N and 2N keep-alive HTTP/1.1 requests (h2load, 32 connections, from
the load core) per listener, each counted from zero: the second less the first over the
difference in requests is one request's instructions, the connections' own cancelled out.
The script's added instructions per request are the scripted listener's less the plain
one's; Sluice's over NGINX's is the figure. Repeated `--runs` times (the counts move by a few
instructions between runs: the origin's timing shifts a few branches).

`--cache` adds callgrind's cache and branch simulation (twice as slow) and prints the
simulated L1 and last-level misses the script adds per request, the counts that say where
two gateways with the same instructions spend different time.

`--top N` lists, per gateway, the N functions whose own instructions the script adds most.

    bench/lua --instructions [--runs 3] [--requests 5000] [--cache] [--top N]

Needs valgrind (Debian's package) besides bench/lua's packages; a run takes about four
minutes per repetition (each gateway runs ~50x slower under callgrind).
"""

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench as B
import instructions as I
import lua as L

WARM_UP = 20000
# `--top N`: list the N functions whose own instructions the script adds most.
TOP = 0


def load(port, n):
    argv = ["taskset", "-c", B.LOAD_CORE, "h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-n", str(n),
            "-H", "x-token: bench-token", f"http://127.0.0.1:{port}/1k"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800).stdout
    m = B.H2LOAD_RE["succeeded"].search(out)
    bad = re.search(r"status codes: (\d+) 2xx", out)
    if not m or not bad or int(bad.group(1)) != int(m.group(1)):
        sys.exit(f"h2load on port {port} failed or got errors:\n{out}")
    return int(m.group(1))


def per_request(pid, out, port, n):
    """One request's events on `port`: loads of `n` and `2n`, each counted from zero."""
    dumps, counts = [], []
    for requests in (n, 2 * n):
        before = set(glob.glob(out + ".*"))
        subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=False)
        counts.append(load(port, requests))
        subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=False)
        deadline = time.time() + 60
        while not (new := set(glob.glob(out + ".*")) - before) and time.time() < deadline:
            time.sleep(0.5)
        if len(new) != 1:
            sys.exit(f"callgrind wrote {len(new)} dumps for one load, 1 expected")
        dumps.append(new.pop())
    first, second = I.totals(dumps[0]), I.totals(dumps[1])
    done = counts[1] - counts[0]
    own = {}
    if TOP:
        a, b = I.own_costs(dumps[0]), I.own_costs(dumps[1])
        own = {name: (v - a.get(name, 0)) / done for name, v in b.items()}
    for f in dumps:
        os.remove(f)
    return {k: (v - first.get(k, 0)) / done for k, v in second.items()}, own


def gateway(who, d, n, cache):
    """`who` under callgrind: events per request on its plain and scripted listeners."""
    out = f"{d}/{who}.callgrind"
    grind = ["taskset", "-c", B.GW_CORE, "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             "--dump-instr=no", "--smc-check=all-non-file"] + (["--cache-sim=yes", "--branch-sim=yes"] if cache else [])
    if who == "nginx":
        Path(d, "gw-nginx.conf").write_text(L.nginx_conf(d).replace("master_process on;", "master_process off;"))
        argv, ports, stop = grind + ["nginx", "-c", f"{d}/gw-nginx.conf", "-p", d], L.NGINX, signal.SIGQUIT
    else:
        argv, ports, stop = grind + [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml"], L.SLUICE, signal.SIGTERM
    gw = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(f"{d}/{who}.valgrind.log", "w"))
    try:
        I.wait_port(ports["lua"])
        for k in ("none", "lua"):
            load(ports[k], WARM_UP)
        counted = {k: per_request(gw.pid, out, ports[k], n) for k in ("none", "lua")}
        if TOP:
            none, lua = counted["none"][1], counted["lua"][1]
            added = {f: v - none.get(f, 0) for f, v in lua.items()}
            print(f"{who}: the {TOP} functions whose own instructions the script adds most, per request:")
            for name, v in sorted(added.items(), key=lambda kv: -kv[1])[:TOP]:
                print(f"  {v:8.1f}  {I.short_name(name)}")
        return {k: events for k, (events, _) in counted.items()}
    finally:
        I.stop_gateway(gw, stop)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instructions", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--cache", action="store_true")
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    global TOP
    TOP = args.top
    for tool in ("valgrind", "callgrind_control", "h2load", "nginx", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install valgrind nginx-light nghttp2-client util-linux")
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs of {args.requests} and {2 * args.requests} requests per listener")
    runs = []
    with tempfile.TemporaryDirectory(prefix="sluice-lua-instructions-") as d:
        os.chmod(d, 0o755)
        www = Path(d, "www")
        www.mkdir()
        www.joinpath("1k").write_bytes((b"Sluice Lua benchmark body.\n" * 40)[:1024])
        for sub in ("body", "proxy", "fcgi", "uwsgi", "scgi"):
            os.makedirs(f"{d}/tmp-nginx-{sub}", exist_ok=True)
        Path(d, "origin.conf").write_text(L.origin_conf(d))
        Path(d, "sluice.toml").write_text(L.sluice_conf(d))
        origin = B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, L.ORIGIN, f"{d}/origin.out")
        try:
            for run in range(args.runs):
                r = {who: gateway(who, d, args.requests, args.cache) for who in ("sluice", "nginx")}
                runs.append(r)
                for who in ("sluice", "nginx"):
                    B.log(f"  {who}: {r[who]['none']['Ir']:,.0f} instructions per request without the script, "
                          f"{r[who]['lua']['Ir']:,.0f} with it")
        finally:
            origin.stop()
    report(cpu, args, runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-lua-instructions.json"
    path.write_text(json.dumps({"cpu": cpu, "requests": args.requests, "cache": args.cache, "runs": runs}, indent=1))
    B.log(f"results: {path}")


def report(cpu, args, runs):
    f = lambda s: f"{s['median']:,.0f} [{s['min']:,.0f}-{s['max']:,.0f}]"
    added = lambda who, event: [r[who]["lua"].get(event, 0) - r[who]["none"].get(event, 0) for r in runs]
    print("# What a five-line access script adds to a request, in instructions (keep-alive HTTP/1.1, 1 KiB)\n")
    print(f"CPU: {cpu}. callgrind, {len(runs)} runs; median [min-max] per request.\n")
    print("| gateway | without the script | with it | added by the script |")
    print("|---|---|---|---|")
    for who in ("sluice", "nginx"):
        print(f"| {who} | {f(B.summarize([r[who]['none']['Ir'] for r in runs]))} | "
              f"{f(B.summarize([r[who]['lua']['Ir'] for r in runs]))} | {f(B.summarize(added(who, 'Ir')))} |")
    ratio = B.summarize([s / n for s, n in zip(added("sluice", "Ir"), added("nginx", "Ir")) if n > 0])
    print(f"\nSluice's added instructions / NGINX + lua-nginx-module's, run by run: {ratio['median']:.2f}x "
          f"[{ratio['min']:.2f}-{ratio['max']:.2f}]")
    if args.cache:
        print("\n| gateway | added L1 instruction misses | added L1 data misses | added last-level misses |")
        print("|---|---|---|---|")
        for who in ("sluice", "nginx"):
            s = lambda *events: f(B.summarize([sum(x) for x in zip(*(added(who, e) for e in events))]))
            print(f"| {who} | {s('I1mr')} | {s('D1mr', 'D1mw')} | {s('ILmr', 'DLmr', 'DLmw')} |")


if __name__ == "__main__":
    main()
