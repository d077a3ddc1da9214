#!/usr/bin/env python3
"""What a saturated WAF costs the routes beside it: the p99 of a route without a WAF while
clients hammer a WAF route with attack payloads, in Sluice and in NGINX with ModSecurity-nginx
(the same libmodsecurity and CRS 3.3.4, the configurations of bench/waf.py).

Each gateway is pinned to the gateway core; the clients and the NGINX origin run on the load
core: four keep-alive HTTP/1.1 clients request the plain route's 1 KiB page back to back for
`--duration` seconds, while 0 or 8 clients POST a 10 KiB form carrying SQL injection to the WAF
route back to back (each refused with 403 after CRS has read the whole body, the costliest
verdict; Sluice's WAF queue is full the whole time). Per row: the plain route's p50 and p99
(median of the runs [min-max]) and its failed requests, and the attacks answered. The issue's
bound: the plain route's p99 under attack within 2x of its idle p99.

Two more rows put the native engine under a flood of GETs carrying SQL injection in the
query (no body): in the same Sluice (inspected on the WAF's threads) and in a second Sluice
with `[waf] inline_percent` (`--inline-percent`, default 50: inspected on the event loop
within that share of its time), the price of the knob in the plain route's p99.

    bench/waf --saturated [--runs 3] [--duration 8] [--smoke]

Called by bench/waf.
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
import waf as W

ATTACKERS = (0, 8)
PLAIN_HEADERS = {"User-Agent": W.UA, "Accept": "*/*"}


def attack_body():
    body = bytearray(W.form(10 * 1024))
    body[-40:] = b"&id=1%27%20or%20%271%27%3D%271&x=aaaaaaa"[:40]
    return bytes(body)


# The GET flood's attack: SQL injection in the query, no body.
ATTACK_GET = "/1k?id=1%27%20or%20%271%27%3D%271"
INLINE = {"none": 18817, "native": 18815}
# Each row: its name, the gateway's listeners, the one attacked, and whether by the GET flood.
ROWS = (("sluice", W.SLUICE, "waf", False), ("nginx", W.NGINX, "waf", False),
        ("sluice native get", W.SLUICE, "native", True), ("sluice-inline native get", INLINE, "native", True))


def attacker(port, stop, counts, body):
    """POSTs the attack back to back on one keep-alive connection until `stop` (`body`
    None: GETs `ATTACK_GET`)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"User-Agent": W.UA, "Accept": "*/*", "Content-Type": "application/x-www-form-urlencoded"}
    if body is None:
        headers = PLAIN_HEADERS
    while not stop.is_set():
        try:
            if body is None:
                conn.request("GET", ATTACK_GET, headers=headers)
            else:
                conn.request("POST", "/form", body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            counts[str(resp.status)] = counts.get(str(resp.status), 0) + 1
        except (OSError, http.client.HTTPException):
            counts["failed"] = counts.get("failed", 0) + 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.close()


def one_run(plain_port, waf_port, attackers, seconds, get=False):
    stop, counts, body = threading.Event(), {}, None if get else attack_body()
    threads = [threading.Thread(target=attacker, args=(waf_port, stop, counts, body)) for _ in range(attackers)]
    for t in threads:
        t.start()
    if threads:
        time.sleep(0.5)  # the WAF saturated before the plain route is measured
    lat, failed = B.keepalive_latencies(plain_port, "/1k", seconds, headers=PLAIN_HEADERS)
    stop.set()
    for t in threads:
        t.join()
    if not lat:
        raise RuntimeError("the plain route answered nothing")

    def ms(q):
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 3)

    return {"p50_ms": ms(0.5), "p99_ms": ms(0.99), "requests": len(lat), "failed": failed, "attacks": counts}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--saturated", action="store_true", help="(the mode bench/waf passes on)")
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per row")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    ap.add_argument("--inline-percent", type=int, default=50,
                    help="[waf] inline_percent of the second Sluice (the GET flood's inline row; default 50, Sluice's own default)")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    os.sched_setaffinity(0, {int(B.LOAD_CORE)})
    rows = {}
    with tempfile.TemporaryDirectory(prefix="sluice-waf-sat-") as d:
        os.chmod(d, 0o755)
        www = Path(d, "www")
        www.mkdir()
        www.joinpath("1k").write_bytes(b"x" * 1024)
        Path(d, "origin.conf").write_text(W.origin_conf(d))
        Path(d, "nginx.conf").write_text(W.nginx_conf(d))
        Path(d, "modsec.conf").write_text(W.modsec_conf())
        Path(d, "modsec2.conf").write_text(W.modsec_conf(paranoia=2))
        Path(d, "sluice.toml").write_text(W.sluice_conf())
        Path(d, "sluice-inline.toml").write_text(W.sluice_conf(INLINE, args.inline_percent))
        procs = []
        try:
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, W.ORIGIN, f"{d}/origin.out"))
            procs.append(B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE, W.NGINX["waf"], f"{d}/nginx.out"))
            procs.append(B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/sluice.pid"],
                                B.GW_CORE, W.SLUICE["waf"], f"{d}/sluice.out"))
            procs.append(B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice-inline.toml", "--pid-file",
                                           f"{d}/sluice-inline.pid"], B.GW_CORE, INLINE["native"], f"{d}/sluice-inline.out"))
            for who, ports, attacked, get in ROWS:
                B.keepalive_latencies(ports["none"], "/1k", min(args.duration, 2.0), headers=PLAIN_HEADERS)  # warm the connections and the pool
                for n in ATTACKERS:
                    rows[f"{who} {n}"] = [one_run(ports["none"], ports[attacked], n, args.duration, get=get)
                                          for _ in range(args.runs)]
                    print(f"  {who}, {n} attackers: " + "; ".join(
                        f"p99 {r['p99_ms']} ms, attacks {r['attacks']}" for r in rows[f"{who} {n}"]), flush=True)
        finally:
            for p in reversed(procs):
                p.stop()
    report(rows, args)


def report(rows, args):
    print("# A saturated WAF beside a route without one (`bench/waf --saturated`)\n")
    print(f"CPU: {B.cpu_model()}; each gateway on core {B.GW_CORE}, clients and origin on core {B.LOAD_CORE}; "
          f"{args.runs} runs of {args.duration:g} s; median [min-max].\n")
    print("| gateway | attack clients | plain p50 ms | plain p99 ms | p99 / idle | plain failed | attacks answered |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for who, *_ in ROWS:
        base = statistics.median(r["p99_ms"] for r in rows[f"{who} 0"])
        for n in ATTACKERS:
            runs = rows[f"{who} {n}"]
            p99 = [r["p99_ms"] for r in runs]
            answered = {}
            for r in runs:
                for k, v in r["attacks"].items():
                    answered[k] = answered.get(k, 0) + v
            failed = sum(r["failed"] for r in runs)
            bad += failed if who.startswith("sluice") else 0
            print(f"| {who} | {n} | {B.spread([r['p50_ms'] for r in runs])} | {B.spread(p99)} | "
                  f"{statistics.median(p99) / base if base else float('nan'):.2f}x | {failed} | "
                  f"{', '.join(f'{k}: {v}' for k, v in sorted(answered.items())) or '—'} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-waf-saturated{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": B.cpu_model(), "runs": args.runs, "duration": args.duration,
                                "inline_percent": args.inline_percent, "rows": rows}, indent=1) + "\n")
    print(f"results: {path}")
    if bad:
        raise SystemExit(f"bench/waf --saturated: {bad} plain requests failed in Sluice")


if __name__ == "__main__":
    main()
