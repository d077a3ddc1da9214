#!/usr/bin/env python3
"""What a rate limit costs per request: Sluice (none, local, shared through Redis) and NGINX
(none, limit_req), side by side on the gateway core.

Each gateway has a listener per row, all proxying keep-alive HTTP/1.1 GETs of 1 KiB to one
NGINX origin; the limits are set so high (10 million requests a second per client) that they
never refuse, so the rows measure the check itself. Redis (Debian's redis-server) and the
origin run on the load core with h2load (32 connections). Per row: gateway CPU µs per
request (all threads, user + system), median of the runs [min-max], and the difference to
the same gateway's row without a limit, run by run. Called by bench/ratelimit.
"""

import argparse
import datetime
import json
import os
import re
import tempfile
import time
from pathlib import Path

import bench as B

ORIGIN = 18500
REDIS = 18501
SLUICE = {"none": 18510, "local": 18511, "redis": 18512}
NGINX = {"none": 18520, "limit_req": 18521}


def origin_conf(d):
    return B.NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    default_type text/plain;
    server {{ listen 127.0.0.1:{ORIGIN} backlog=4096; root {d}/www; }}
}}
"""


def nginx_conf(d):
    return B.NGINX_COMMON.format(d=d, name="nginx") + f"""
    access_log off;
    limit_req_zone $binary_remote_addr zone=perclient:10m rate=10000000r/s;
    upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{NGINX['none']} backlog=4096;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / {{ proxy_pass http://o; }}
    }}
    server {{
        listen 127.0.0.1:{NGINX['limit_req']} backlog=4096;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / {{ limit_req zone=perclient burst=1000 nodelay; proxy_pass http://o; }}
    }}
}}
"""


def sluice_conf():
    out = [f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[rate_limit]
redis = "redis://127.0.0.1:{REDIS}/"
redis_timeout = "50ms"
[[upstream]]
name = "o"
keepalive = 64
servers = [{{ address = "127.0.0.1:{ORIGIN}" }}]
"""]
    for row, port in SLUICE.items():
        limit = "" if row == "none" else f"""[route.rate_limit]
rate = "10000000/s"
burst = 1000
nodelay = true
store = "{'redis' if row == 'redis' else 'local'}"
"""
        out.append(f"""
[[listener]]
name = "{row}"
address = "127.0.0.1:{port}"
request_id = false
[[route]]
name = "{row}"
listeners = ["{row}"]
upstream = "o"
{limit}""")
    return "".join(out)


def h2load(port, duration):
    out, cpu = B.run_load(["h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-D", str(max(1, round(duration))),
                           f"http://127.0.0.1:{port}/1k"])
    m = B.H2LOAD_RE["succeeded"].search(out)
    refused = re.search(r"status codes: \d+ 2xx, \d+ 3xx, (\d+) 4xx", out)
    if refused and int(refused.group(1)):
        # The limits are meant never to refuse; a 429 would make the row measure refusals.
        raise RuntimeError(f"port {port}: {refused.group(1)} requests refused by a limit that should never trigger")
    return int(m.group(1)) if m else 0


def measure(proc, port, duration, redis=None):
    cpu0 = proc.cpu()
    r0 = redis.cpu() if redis else 0.0
    done = h2load(port, duration)
    if done == 0:
        raise RuntimeError(f"nothing served on port {port}")
    r = {"completed": done, "cpu_us_per_req": (proc.cpu() - cpu0) / done * 1e6}
    if redis:
        r["redis_us_per_req"] = (redis.cpu() - r0) / done * 1e6
    return r



def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per row")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs x {args.duration:g} s per row")
    rows = {f"sluice {k}": [] for k in SLUICE} | {f"nginx {k}": [] for k in NGINX}
    with tempfile.TemporaryDirectory(prefix="sluice-ratelimit-") as d:
        os.chmod(d, 0o755)
        Path(d, "www").mkdir()
        Path(d, "www", "1k").write_bytes((b"Sluice rate-limit benchmark body.\n" * 40)[:1024])
        Path(d, "origin.conf").write_text(origin_conf(d))
        Path(d, "nginx.conf").write_text(nginx_conf(d))
        Path(d, "sluice.toml").write_text(sluice_conf())
        procs = []
        try:
            redis = B.Proc("redis", ["redis-server", "--port", str(REDIS), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", d], B.LOAD_CORE, REDIS, f"{d}/redis.out")
            procs.append(redis)
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, ORIGIN, f"{d}/origin.out"))
            nginx = B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE, NGINX["limit_req"], f"{d}/nginx.out")
            procs.append(nginx)
            sluice = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/sluice.pid"],
                            B.GW_CORE, SLUICE["redis"], f"{d}/sluice.out")
            procs.append(sluice)
            time.sleep(0.5)  # Sluice connects to Redis in the background
            plan = [(f"sluice {k}", sluice, p, k == "redis") for k, p in SLUICE.items()] + \
                   [(f"nginx {k}", nginx, p, False) for k, p in NGINX.items()]
            for name, proc, port, uses_redis in plan:
                measure(proc, port, 1, redis if uses_redis else None)  # warm-up
            for run in range(args.runs):
                for name, proc, port, uses_redis in (plan if run % 2 == 0 else list(reversed(plan))):
                    r = measure(proc, port, args.duration, redis if uses_redis else None)
                    rows[name].append(r)
                    B.log(f"  {name}: {r['cpu_us_per_req']:.2f} µs/req")
            fallback = Path(d, "sluice.out").read_text(errors="replace").count("Redis failed")
        finally:
            for p in reversed(procs):
                p.stop()

    def delta(name, base):
        return B.summarize([a["cpu_us_per_req"] - b["cpu_us_per_req"] for a, b in zip(rows[name], rows[base])])

    print("# What a never-triggering rate limit costs per request (keep-alive HTTP/1.1, 1 KiB)\n")
    print(f"CPU: {cpu}. {args.runs} runs x {args.duration:g} s per row, rows alternating; median [min-max]. "
          "Gateway CPU µs per request, all threads; the difference is to the same gateway's row without a limit, "
          "run by run.\n")
    print("| gateway, limit | gateway µs/request | difference to no limit | Redis µs/request |")
    print("|---|---|---|---|")
    f = lambda s: f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"
    for name in rows:
        cpu_s = B.summarize([r["cpu_us_per_req"] for r in rows[name]])
        base = "sluice none" if name.startswith("sluice") else "nginx none"
        diff = "—" if name == base else f(delta(name, base))
        red = f(B.summarize([r["redis_us_per_req"] for r in rows[name]])) if "redis_us_per_req" in rows[name][0] else "—"
        print(f"| {name} | {f(cpu_s)} | {diff} | {red} |")
    if fallback:
        print(f"\nWarning: Sluice logged {fallback} Redis failures during the run (fallback rows).")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-ratelimit{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration, "rows": rows}, indent=1))
    B.log(f"results: {path}")


if __name__ == "__main__":
    main()
