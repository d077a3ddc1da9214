#!/usr/bin/env python3
"""Where the native engine's inspection of a GET should run: one Sluice process per
`[waf] inline_percent` share (default 0, 50, 75, 100; 50 is Sluice's default), each with the
native engine on Debian's CRS 3.3.4 at paranoia level 1 (bench/waf.py's configuration), side by
side on the gateway core, measured in turn with keep-alive HTTP/1.1 GETs of a 1 KiB page
(h2load, 32 connections, on the load core with the NGINX origin). Per share: the gateway's CPU
per request (all threads, user + system), of it the WAF threads' (what was handed off), and the
ratio to share 0 (every inspection on the WAF's threads), run by run. The figure that chose
the default (docs/waf.md, "Where an inspection runs").

    bench/waf --placement [--shares 0,50,75,100] [--runs 5] [--duration 4] [--smoke]

Called by bench/waf.
"""

import argparse
import datetime
import json
import os
import tempfile
from pathlib import Path

import bench as B
import waf as W

FIRST_PORT = 18830


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--placement", action="store_true", help="(the mode bench/waf passes on)")
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per share")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--shares", default="0,50,75,100", help="inline_percent values, one Sluice each")
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    shares = [int(s) for s in args.shares.split(",")]
    ports = {s: FIRST_PORT + i for i, s in enumerate(shares)}
    rows = {s: [] for s in shares}
    with tempfile.TemporaryDirectory(prefix="sluice-waf-placement-") as d:
        os.chmod(d, 0o755)
        www = Path(d, "www")
        www.mkdir()
        www.joinpath("1k").write_bytes((b"Sluice WAF benchmark body.\n" * 40)[:1024])
        Path(d, "origin.conf").write_text(W.origin_conf(d))
        procs = []
        try:
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, W.ORIGIN,
                                f"{d}/origin.out"))
            proc_of = {}
            for s, port in ports.items():
                Path(d, f"sluice-{s}.toml").write_text(W.sluice_conf({"native": port}, s))
                proc_of[s] = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice-{s}.toml", "--pid-file",
                                               f"{d}/sluice-{s}.pid"], B.GW_CORE, port, f"{d}/sluice-{s}.out")
                procs.append(proc_of[s])
            W.check_rules_run({f"inline{s} native": port for s, port in ports.items()})
            for s in shares:
                W.measure(proc_of[s], ports[s], 1, "get", d)  # warm-up
            for run in range(args.runs):
                for s in (shares if run % 2 == 0 else shares[::-1]):
                    r = W.measure(proc_of[s], ports[s], args.duration, "get", d)
                    rows[s].append(r)
                    B.log(f"  inline_percent {s}: {r['cpu_us_per_req']:.2f} µs/req, "
                          f"WAF threads {r['waf_threads_us_per_req']:.2f}")
        finally:
            for p in reversed(procs):
                p.stop()
    report(rows, shares, args)


def report(rows, shares, args):
    cpu = B.cpu_model()
    print("# Where the native engine inspects a GET (`bench/waf --placement`)\n")
    print(f"CPU: {cpu}; each Sluice on core {B.GW_CORE}, h2load and the origin on core {B.LOAD_CORE}; "
          f"{args.runs} runs of {args.duration:g} s; median [min-max].\n")
    print("| `inline_percent` | gateway µs per GET | of it, the WAF threads' | / `inline_percent = 0`, run by run |")
    print("|---|---|---|---|")
    us = {s: [round(r["cpu_us_per_req"], 1) for r in rows[s]] for s in shares}
    for s in shares:
        waf = [round(r["waf_threads_us_per_req"], 1) for r in rows[s]]
        ratio = (B.spread([round(a / b, 2) for a, b in zip(us[s], us[0])]) + "x") if 0 in us and s != 0 else ""
        print(f"| {s} | {B.spread(us[s])} | {B.spread(waf)} | {ratio} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-waf-placement{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration,
                                "rows": {str(s): rows[s] for s in shares}}, indent=1) + "\n")
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
