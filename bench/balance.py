#!/usr/bin/env python3
"""Balancers with 2,000 servers: Sluice's against NGINX's, side by side, per gateway core.

One NGINX origin listens on 2,000 ports of 127.0.0.1 (the load core); each is one server of
every upstream group. Sluice and NGINX (one worker), both pinned to the gateway core, have a
listener per balancer, each routed to its own group of the same 2,000 servers, plus a
one-server group as the baseline. h2load (keep-alive HTTP/1.1, 32 connections, 1,000 URIs
that differ in their query, so that URI hashes spread) loads each listener in turn,
alternating the gateways; each listener gets a warm-up first (its upstream connections).
Idle upstream connections are kept 10 s by both, so that the rows before do not hold
thousands of connections open during the next (NGINX keeps up to 4,096 per group, Sluice 32
per server).

A row's figure is requests/s per gateway core: requests/s divided by the gateway's measured
CPU use (all threads, user + system), which does not depend on whether the load core (h2load
and the origin) or the gateway core ran out first. Median of the runs with [min-max]. Called
by bench/balance.
"""

import argparse
import datetime
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import bench as B

ORIGIN_BASE = 20000
SLUICE_BASE, NGINX_BASE = 18460, 18480
URIS = 1000

# (row, Sluice balance, extra Sluice upstream keys, NGINX directive or None, servers)
ROWS = [
    ("1 server (baseline)", "round_robin", "", "", 1),
    ("round robin", "round_robin", "", "", None),
    ("weighted round robin (NGINX: its round robin)", "weighted_round_robin", "", "", None),
    ("least_conn", "least_conn", "", "least_conn;", None),
    ("ip_hash", "ip_hash", "", "ip_hash;", None),
    ("consistent hash on the URI (NGINX: hash $request_uri consistent)", "consistent_hash", 'hash_on = "uri"',
     "hash $request_uri consistent;", None),
    ("peak_ewma (NGINX: least_conn)", "peak_ewma", "", "least_conn;", None),
]


def origin_conf(d, servers):
    listens = "\n".join(f"        listen 127.0.0.1:{ORIGIN_BASE + i} backlog=1024;" for i in range(servers))
    return B.NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    default_type text/plain;
    server {{
{listens}
        root {d}/www;
    }}
}}
"""


def server_list(n):
    return [f"127.0.0.1:{ORIGIN_BASE + i}" for i in range(n)]


def sluice_conf(d, servers):
    out = ["""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
"""]
    for i, (_, balance, extra, _, n) in enumerate(ROWS):
        addrs = ", ".join(f'{{ address = "{a}" }}' for a in server_list(n or servers))
        out.append(f"""
[[listener]]
name = "l{i}"
address = "127.0.0.1:{SLUICE_BASE + i}"
[[upstream]]
name = "u{i}"
balance = "{balance}"
keepalive_timeout = "10s"
{extra}
servers = [{addrs}]
[[route]]
name = "r{i}"
listeners = ["l{i}"]
upstream = "u{i}"
""")
    return "".join(out)


def nginx_conf(d, servers):
    blocks = []
    for i, (_, _, _, directive, n) in enumerate(ROWS):
        lines = "\n".join(f"        server {a};" for a in server_list(n or servers))
        blocks.append(f"""
    upstream u{i} {{
        {directive}
{lines}
        keepalive 4096;
        keepalive_timeout 10s;
    }}
    server {{
        listen 127.0.0.1:{NGINX_BASE + i} backlog=4096;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        location / {{ proxy_pass http://u{i}; }}
    }}""")
    return B.NGINX_COMMON.format(d=d, name="nginx") + "    access_log off;\n" + "".join(blocks) + "\n}\n"


def h2load(port, duration, d):
    # h2load takes the scheme, host and port from the first URI of the file only.
    uris = Path(d, f"uris-{port}.txt")
    if not uris.exists():
        uris.write_text(f"http://127.0.0.1:{port}/1k?k=0\n" + "".join(f"/1k?k={k}\n" for k in range(1, URIS)))
    argv = ["h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-D", str(max(1, round(duration))), "-i", str(uris)]
    out, cpu = B.run_load(argv)
    if os.environ.get("BALANCE_DEBUG"):
        B.log(out)
    m = B.H2LOAD_RE["rate"].search(out)
    done = B.H2LOAD_RE["succeeded"].search(out)
    return {"rate": float(m.group(1)) if m else 0.0, "completed": int(done.group(1)) if done else 0,
            "loadgen_cpu_s": cpu}


def measure(proc, port, duration, d):
    cpu0, t0 = proc.cpu(), time.time()
    r = h2load(port, duration, d)
    r["wall_s"] = time.time() - t0
    r["gateway_cpu_s"] = proc.cpu() - cpu0
    r["cpu_us_per_req"] = r["gateway_cpu_s"] / max(r["completed"], 1) * 1e6
    r["per_core"] = 1e6 / max(r["cpu_us_per_req"], 1e-9)
    return r



def cell(s, fmt="{:,.0f}"):
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}-{fmt.format(s['max'])}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per row, to keep the harness working")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--servers", type=int, default=2000)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; gateway core {B.GW_CORE}, load core {B.LOAD_CORE}; {args.servers:,} servers; "
          f"{args.runs} runs x {args.duration:g} s")
    results = {name: {"sluice": [], "nginx": []} for name, *_ in ROWS}
    with tempfile.TemporaryDirectory(prefix="sluice-balance-") as d:
        os.chmod(d, 0o755)  # NGINX workers run as nobody and must read the static file
        www = Path(d, "www")
        www.mkdir()
        (www / "1k").write_bytes((b"Sluice balancer benchmark: 1 KiB body.\n" * 30)[:1024])
        Path(d, "origin.conf").write_text(origin_conf(d, args.servers))
        Path(d, "nginx.conf").write_text(nginx_conf(d, args.servers))
        Path(d, "sluice.toml").write_text(sluice_conf(d, args.servers))
        procs = []
        try:
            origin = B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE,
                            ORIGIN_BASE + args.servers - 1, f"{d}/origin.out")
            procs.append(origin)
            nginx = B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE,
                           NGINX_BASE + len(ROWS) - 1, f"{d}/nginx.out")
            procs.append(nginx)
            sluice = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/sluice.pid"], B.GW_CORE,
                            SLUICE_BASE + len(ROWS) - 1, f"{d}/sluice.out")
            procs.append(sluice)
            gateways = {"sluice": (sluice, SLUICE_BASE), "nginx": (nginx, NGINX_BASE)}
            for i, (name, *_rest) in enumerate(ROWS):
                for who, (proc, base) in gateways.items():
                    measure(proc, base + i, 1, d)  # warm-up: upstream connections
                for run in range(args.runs):
                    order = ("sluice", "nginx") if run % 2 == 0 else ("nginx", "sluice")
                    for who in order:
                        proc, base = gateways[who]
                        r = measure(proc, base + i, args.duration, d)
                        if r["completed"] == 0:
                            tail = Path(d, f"{who}.out").read_text()[-2000:]
                            raise RuntimeError(f"{who} served nothing on row {name!r}; its output ends:\n{tail}")
                        results[name][who].append(r)
                        B.log(f"  {name}: {who} {r['rate']:,.0f} req/s, {r['cpu_us_per_req']:.1f} µs/req")
        finally:
            for p in reversed(procs):
                p.stop()

    rows = []
    rr = {who: B.summarize([r["cpu_us_per_req"] for r in results["round robin"][who]]) for who in ("sluice", "nginx")}
    for name, *_ in ROWS:
        row = {"name": name}
        for who in ("sluice", "nginx"):
            row[who] = {k: B.summarize([r[k] for r in results[name][who]]) for k in ("per_core", "cpu_us_per_req", "rate")}
        row["ratio"] = B.summarize([s["per_core"] / n["per_core"] for s, n in zip(results[name]["sluice"], results[name]["nginx"])])
        row["sluice_vs_round_robin_us"] = row["sluice"]["cpu_us_per_req"]["median"] - rr["sluice"]["median"]
        rows.append(row)

    print(f"# Balancers with {args.servers:,} servers, keep-alive HTTP/1.1, 1 KiB, one gateway core\n")
    print(f"CPU: {cpu}. {args.runs} runs x {args.duration:g} s, median [min-max]. Per core = requests/s ÷ the "
          "gateway's CPU use. Ratio = Sluice per core ÷ NGINX per core, run by run.\n")
    print("| balancer | Sluice req/s per core | NGINX req/s per core | Sluice/NGINX | Sluice µs/req | NGINX µs/req "
          "| Sluice µs/req − its round robin |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['name']} | {cell(row['sluice']['per_core'])} | {cell(row['nginx']['per_core'])} "
              f"| {cell(row['ratio'], '{:.2f}')}x | {cell(row['sluice']['cpu_us_per_req'], '{:.1f}')} "
              f"| {cell(row['nginx']['cpu_us_per_req'], '{:.1f}')} | {row['sluice_vs_round_robin_us']:+.2f} |")
    lc = next(r for r in rows if r["name"] == "least_conn")
    rrow = next(r for r in rows if r["name"] == "round robin")
    print(f"\nSluice least_conn ÷ Sluice round robin (per core): "
          f"{lc['sluice']['per_core']['median'] / rrow['sluice']['per_core']['median']:.2f}x")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-balance{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "servers": args.servers, "runs": args.runs, "duration": args.duration,
                                "rows": rows, "raw": results}, indent=1))
    B.log(f"results: {path}")


if __name__ == "__main__":
    main()
