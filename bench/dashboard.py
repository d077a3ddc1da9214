#!/usr/bin/env python3
"""The dashboard's cost: keep-alive HTTPS CPU per request with the dashboard open against
closed, on one pinned gateway core, and (with --screenshot) the dashboard under that load.

Sluice with its admin listener (the sampler runs either way: it is part of the gateway),
NGINX as the origin and h2load (HTTP/1.1, keep-alive) on the load core. Runs alternate
closed / open; "open" is what a browser tab does: the page once, then GET /api/v1/stats
every second. Per request = gateway CPU seconds / completed requests; ratio open / closed
per pair of runs, median [min-max]. The goal is no measurable difference (< 1%)."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B

ADMIN_PORT = 18901
PORT = 18444


def sluice_conf(d):
    conf = B.sluice_conf(d, "ecdsa", "pool", PORT, "sluice-access.log")
    return conf.replace("[admin]\nenabled = false", f'[admin]\naddress = "127.0.0.1:{ADMIN_PORT}"')


class Viewer(threading.Thread):
    """A dashboard tab: the page, then its data every second, until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.fetches = 0

    def run(self):
        base = f"http://127.0.0.1:{ADMIN_PORT}"
        urllib.request.urlopen(base + "/", timeout=5).read()
        while not self.stop.is_set():
            urllib.request.urlopen(base + "/api/v1/stats", timeout=5).read()
            self.fetches += 1
            self.stop.wait(1.0)


def measure(gw, duration, open_):
    viewer = Viewer() if open_ else None
    if viewer:
        viewer.start()
    cpu0 = gw.cpu()
    r = B.h2load(PORT, duration, "/1k", True, 4, 1)
    cpu = gw.cpu() - cpu0
    if viewer:
        viewer.stop.set()
        viewer.join()
    r["gateway_cpu_s"] = cpu
    r["us_per_request"] = cpu / max(r["completed"], 1) * 1e6
    r["stats_fetches"] = viewer.fetches if viewer else 0
    return r


def fetch_cost(gw, n):
    """CPU the gateway spends per GET /api/v1/stats, fetched `n` times back to back on an
    otherwise idle gateway: what an open tab adds each second, measured without the
    keep-alive load's noise."""
    url = f"http://127.0.0.1:{ADMIN_PORT}/api/v1/stats"
    size = len(urllib.request.urlopen(url, timeout=5).read())
    cpu0 = gw.cpu()
    for _ in range(n):
        urllib.request.urlopen(url, timeout=5).read()
    return (gw.cpu() - cpu0) / n * 1e6, size


def idle_cost(gw, seconds):
    """The idle gateway's CPU per second (the sampler, health checks and timers)."""
    cpu0 = gw.cpu()
    time.sleep(seconds)
    return (gw.cpu() - cpu0) / seconds * 1e6


def screenshot(out, duration):
    """The dashboard after `duration` seconds of keep-alive load and a handshake loop."""
    stop = threading.Event()

    def handshakes():
        while not stop.is_set():
            subprocess.run(["taskset", "-c", B.LOAD_CORE, str(B.LOADGEN), "handshake", "--addr",
                            f"127.0.0.1:{PORT}", "--duration", "2s", "--path", "/1k", "--tls", "1.3"],
                           capture_output=True)

    t = threading.Thread(target=handshakes, daemon=True)
    t.start()
    B.h2load(PORT, duration, "/1k", True, 4, 1)
    profile = tempfile.mkdtemp(prefix="sluice-chromium-")
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    f"--user-data-dir={profile}", "--window-size=1280,1100", "--virtual-time-budget=2500",
                    f"--screenshot={out}", f"http://127.0.0.1:{ADMIN_PORT}/"],
                   capture_output=True, timeout=90, env={**os.environ, "HOME": profile})
    stop.set()
    t.join()
    subprocess.run(["rm", "-rf", profile])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 pair of 1 s runs: keeps the harness working")
    ap.add_argument("--runs", type=int, default=7, help="pairs of runs (closed, open)")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--screenshot", help="also write a screenshot of the dashboard under load here")
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu_model = B.cpu_model()
    B.log(f"CPU: {cpu_model}; gateway core {B.GW_CORE}, load core {B.LOAD_CORE}; "
          f"{args.runs} pairs x {args.duration:g} s")
    pairs = []
    with tempfile.TemporaryDirectory(prefix="sluice-dashboard-") as d:
        os.chmod(d, 0o755)
        B.make_certs(d)
        B.make_content(d)
        Path(d, "origin.conf").write_text(B.nginx_origin_conf(d))
        Path(d, "sluice.toml").write_text(sluice_conf(d))
        origin = B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, B.ORIGIN_PORT,
                        f"{d}/origin.out")
        gw = None
        try:
            gw = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml"], B.GW_CORE, PORT,
                        f"{d}/sluice.out")
            B.wait_port(ADMIN_PORT)
            # A full 15 minutes of history is what a fetch serialises at worst; the sampler
            # has less so early, so the fetch cost is taken again after the load runs.
            idle_us = idle_cost(gw, 3 if args.smoke else 10)
            B.h2load(PORT, 1, "/1k", True, 4, 1)  # warm-up
            for i in range(args.runs):
                closed = measure(gw, args.duration, False)
                opened = measure(gw, args.duration, True)
                B.log(f"  run {i + 1}: closed {closed['us_per_request']:.2f} µs/req ({closed['rate']:,.0f} req/s), "
                      f"open {opened['us_per_request']:.2f} µs/req ({opened['rate']:,.0f} req/s, "
                      f"{opened['stats_fetches']} fetches)")
                if closed["completed"] == 0 or opened["completed"] == 0:
                    raise RuntimeError("no request completed; see the logs in " + d)
                pairs.append({"closed": closed, "open": opened,
                              "ratio": opened["us_per_request"] / closed["us_per_request"]})
            fetch_us, fetch_bytes = fetch_cost(gw, 20 if args.smoke else 300)
            B.log(f"  idle gateway {idle_us:.0f} µs of CPU per second; one /api/v1/stats "
                  f"({fetch_bytes:,} bytes) {fetch_us:.0f} µs")
            if args.screenshot:
                screenshot(args.screenshot, min(args.duration, 10.0))
                B.log(f"screenshot: {args.screenshot}")
        finally:
            if gw:
                gw.stop()
            origin.stop()
    ratios = [p["ratio"] for p in pairs]
    closed = [p["closed"]["us_per_request"] for p in pairs]
    opened = [p["open"]["us_per_request"] for p in pairs]
    summary = {
        "cpu": cpu_model,
        "runs": args.runs,
        "duration_s": args.duration,
        "closed_us_per_request": {"median": statistics.median(closed), "min": min(closed), "max": max(closed)},
        "open_us_per_request": {"median": statistics.median(opened), "min": min(opened), "max": max(opened)},
        "open_over_closed": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "pairs": pairs,
        "idle_gateway_cpu_us_per_s": idle_us,
        "stats_fetch_cpu_us": fetch_us,
        "stats_fetch_bytes": fetch_bytes,
    }
    os.makedirs(args.out, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H%M%S")
    path = Path(args.out) / f"{stamp}-dashboard{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps(summary, indent=2))
    m = summary
    print(f"# Dashboard cost: keep-alive HTTPS (HTTP/1.1, 1 KiB) CPU per request, Sluice on one core\n")
    print(f"CPU: {cpu_model}. {args.runs} pairs x {args.duration:g} s, median [min-max].\n")
    print("| dashboard | gateway CPU per request (µs) |")
    print("|---|---|")
    for name, key in (("closed", "closed_us_per_request"), ("open (page + /api/v1/stats every second)", "open_us_per_request")):
        s = m[key]
        print(f"| {name} | {s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}] |")
    s = m["open_over_closed"]
    print(f"\nopen / closed: {s['median']:.4f}x [{s['min']:.4f}-{s['max']:.4f}] (goal: no measurable difference, < 1%)")
    print(f"\nCounted instead of timed: one GET /api/v1/stats costs the gateway {fetch_us:.0f} µs of CPU "
          f"({fetch_bytes:,} bytes); an open tab fetches once a second, {fetch_us / 1e4:.3f}% of one core; "
          f"the idle gateway (sampler and timers) uses {idle_us:.0f} µs per second, {idle_us / 1e4:.3f}% of one core, "
          f"dashboard open or not.")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
