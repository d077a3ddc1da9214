#!/usr/bin/env python3
"""What a runaway script costs the routes beside it: the p99 of a plain route while another
route's `access` script loops for ever (`while true do end`) at a fixed rate.

Sluice stops each loop at `[lua] max_instructions` (the default) and answers it 500; until
then the loop holds its worker thread, which the plain route's requests on that thread wait
for. The gateway (both its worker threads) is pinned to the gateway core; the clients run on
the load core with the NGINX origin: four keep-alive HTTP/1.1 clients requesting the plain
route back to back for `--duration` seconds, and one client requesting the looping route at
0, 2 and 10 loops a second. Per rate: the plain route's p50, p99 and slowest request (median
of the runs [min-max]), its failed requests, and the loops answered 500. The issue's bound:
the plain route's p99 within 2x of its p99 with no loop.

NGINX with lua-nginx-module has no counterpart: it has no instruction budget, and a loop holds
its worker for good (the requests on that worker wait until it is killed), so there is no
side-by-side row.

    bench/lua --runaway [--runs 3] [--duration 8] [--smoke]

Called by bench/lua.
"""

import argparse
import datetime
import http.client
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import bench as B
import lua as L

PORT = 18731
RATES = (0, 2, 10)


def sluice_conf():
    return f"""
[global]
shutdown_timeout = "2s"
[log]
level = "error"
access_log = "off"
[admin]
enabled = false
[[upstream]]
name = "o"
keepalive = 64
servers = [{{ address = "127.0.0.1:{L.ORIGIN}" }}]
[[listener]]
name = "web"
address = "127.0.0.1:{PORT}"
request_id = false
[[route]]
name = "spin"
path_prefix = "/spin"
upstream = "o"
[route.lua]
access = 'while true do end'
[[route]]
name = "plain"
upstream = "o"
"""


def spinner(rate, stop, counts):
    """Requests the looping route `rate` times a second until `stop`; counts sent and 500s."""
    while not stop.is_set():
        start = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
        try:
            conn.request("GET", "/spin/x")
            resp = conn.getresponse()
            resp.read()
            counts["500"] += resp.status == 500
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()
        counts["sent"] += 1
        stop.wait(max(0.0, 1 / rate - (time.monotonic() - start)))


def one_run(rate, seconds):
    stop, counts = threading.Event(), {"sent": 0, "500": 0}
    spin = threading.Thread(target=spinner, args=(rate, stop, counts)) if rate else None
    if spin:
        spin.start()
    lat, failed = B.keepalive_latencies(PORT, "/1k", seconds)
    stop.set()
    if spin:
        spin.join()
    if not lat:
        raise RuntimeError("the plain route answered nothing")

    def ms(q):
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 3)

    return {"p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": round(lat[-1] * 1000, 3),
            "requests": len(lat), "failed": failed, "loops": counts["sent"], "loops_500": counts["500"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runaway", action="store_true", help="(the mode bench/lua passes on)")
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s at 0 and 2 loops a second")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    rates = RATES
    if args.smoke:
        args.runs, args.duration, rates = 1, 1.0, (0, 2)
    os.sched_setaffinity(0, {int(B.LOAD_CORE)})
    d = tempfile.mkdtemp(prefix="lua-runaway-")
    os.chmod(d, 0o755)
    www = Path(d, "www")
    www.mkdir()
    www.joinpath("1k").write_bytes(b"x" * 1024)
    Path(d, "origin.conf").write_text(L.origin_conf(d))
    Path(d, "sluice.toml").write_text(sluice_conf())
    origin = B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, L.ORIGIN,
                    f"{d}/origin.out")
    rows = {}
    try:
        gateway = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml"], B.GW_CORE,
                         PORT, f"{d}/sluice.out")
        try:
            B.keepalive_latencies(PORT, "/1k", min(args.duration, 2.0))  # warm the connections and the pool
            for rate in rates:
                rows[rate] = [one_run(rate, args.duration) for _ in range(args.runs)]
                print(f"  {rate} loops/s: " + "; ".join(
                    f"p99 {r['p99_ms']} ms, {r['loops_500']}/{r['loops']} loops stopped" for r in rows[rate]),
                    flush=True)
        finally:
            gateway.stop()
    finally:
        origin.stop()
    report(rows, args)


def report(rows, args):
    base = statistics.median(r["p99_ms"] for r in rows[0])
    print("# A runaway script beside a plain route (`bench/lua --runaway`)\n")
    print(f"CPU: {B.cpu_model()}; Sluice's worker threads on core {B.GW_CORE}, clients and origin on "
          f"core {B.LOAD_CORE}; {args.runs} runs of {args.duration:g} s; median [min-max].\n")
    print("| loops a second | plain p50 ms | plain p99 ms | p99 / no loop | slowest ms | plain failed | loops stopped (500) |")
    print("|---|---|---|---|---|---|---|")
    for rate, runs in rows.items():
        p99 = [r["p99_ms"] for r in runs]
        ratio = statistics.median(p99) / base if base else float("nan")
        print(f"| {rate} | {B.spread([r['p50_ms'] for r in runs])} | {B.spread(p99)} | {ratio:.2f}x | "
              f"{B.spread([r['max_ms'] for r in runs])} | {sum(r['failed'] for r in runs)} | "
              f"{sum(r['loops_500'] for r in runs)} of {sum(r['loops'] for r in runs)} |")
    failed = sum(r["failed"] for runs in rows.values() for r in runs)
    unstopped = sum(r["loops"] - r["loops_500"] for runs in rows.values() for r in runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-lua-runaway{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": B.cpu_model(), "runs": args.runs, "duration": args.duration,
                                "rows": {str(k): v for k, v in rows.items()}}, indent=1) + "\n")
    print(f"results: {path}")
    if failed or unstopped:
        raise SystemExit(f"bench/lua --runaway: {failed} plain requests failed, {unstopped} loops not answered 500")


if __name__ == "__main__":
    main()
