#!/usr/bin/env python3
"""One of three upstream servers killed under load: what each gateway's clients see.

Three NGINX origins (one process each, so that a SIGKILL takes the server away at once) on
the load core; keep-alive HTTP/1.1 load (h2load, 32 connections, GET /1k) through each
gateway on the gateway core for `--duration` seconds; one third of the way in, origin 2 is
killed (its open connections reset, new ones refused). Gateways, one phase each per run:

- NGINX 1.22, passive health only (open source): `max_fails=1 fail_timeout=10s`, GETs sent
  to the next server on error (`proxy_next_upstream error timeout`, the default);
- Sluice with the same passive settings (`max_fails = 1`, `fail_timeout = "10s"`);
- Sluice with active health checks as well (`GET /1k` every second, out after 2 failures)
  and outlier ejection.

For each: requests completed, requests failed (h2load's non-2xx plus errored: the client
saw the failure), and the gateway's attempts on the dead server after the kill (from its
log: Sluice's "upstream request failed" lines, NGINX's "connect() failed" lines), with the
time of the last one. Passive health keeps trying the dead server once per `fail_timeout`
with a live request; active checks keep it out. Called by bench/failover.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import bench as B

ORIGINS = [21101, 21102, 21103]
DEAD = ORIGINS[1]
PORTS = {"nginx": 18490, "sluice": 18491, "sluice-active": 18492}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def origin_conf(d, port):
    return f"""
daemon off;
master_process off;
worker_processes 1;
error_log {d}/origin-{port}-error.log warn;
pid {d}/origin-{port}.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {d}/tmp-o{port}-body;
    proxy_temp_path {d}/tmp-o{port}-proxy;
    fastcgi_temp_path {d}/tmp-o{port}-fcgi;
    uwsgi_temp_path {d}/tmp-o{port}-uwsgi;
    scgi_temp_path {d}/tmp-o{port}-scgi;
    default_type text/plain;
    server {{ listen 127.0.0.1:{port} backlog=1024; root {d}/www; }}
}}
"""


def nginx_conf(d):
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=10s;" for p in ORIGINS)
    return B.NGINX_COMMON.format(d=d, name="nginx") + f"""
    access_log off;
    upstream origin {{
{servers}
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{PORTS['nginx']} backlog=4096;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / {{ proxy_pass http://origin; }}
    }}
}}
"""


def sluice_conf(active, port):
    servers = ", ".join(f'{{ address = "127.0.0.1:{p}" }}' for p in ORIGINS)
    extra = """
[upstream.health_check]
path = "/1k"
interval = "1s"
timeout = "500ms"
unhealthy = 2
healthy = 2
[upstream.outlier]
consecutive_failures = 5
""" if active else ""
    return f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[[listener]]
name = "http"
address = "127.0.0.1:{port}"
[[upstream]]
name = "origin"
keepalive = 64
max_fails = 1
fail_timeout = "10s"
connect_timeout = "1s"
servers = [{servers}]
{extra}
[[route]]
name = "all"
upstream = "origin"
"""


def start_origin(d, port):
    return B.Proc(f"origin-{port}", ["nginx", "-c", f"{d}/origin-{port}.conf", "-p", d], B.LOAD_CORE, port,
                  f"{d}/origin-{port}.out")


def dead_attempts(who, logfile, since):
    """Times (Unix seconds) of the gateway's attempts on the dead server after `since`."""
    times = []
    text = ANSI.sub("", Path(logfile).read_text(errors="replace"))
    needle = f"127.0.0.1:{DEAD}"
    for line in text.splitlines():
        if needle not in line:
            continue
        if who == "nginx":
            if "connect() failed" not in line and "upstream prematurely closed" not in line and "recv() failed" not in line:
                continue
            stamp = line[:19]
            t = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S"))
        else:
            if "upstream request failed" not in line:
                continue
            stamp = line.split()[0].rstrip("Z")
            try:
                t = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").replace(
                    tzinfo=datetime.timezone.utc).timestamp()
            except ValueError:
                continue
        if t >= since - 1:
            times.append(t)
    return times


def phase(d, who, proc, logfile, duration):
    """Load through `who` for `duration` s, killing origin 2 a third of the way in."""
    origins = {p: start_origin(d, p) for p in ORIGINS}
    try:
        # Warm the gateway's upstream connections to all three.
        subprocess.run(["taskset", "-c", B.LOAD_CORE, "h2load", "--h1", "-c", "8", "-n", "300",
                        f"http://127.0.0.1:{PORTS[who]}/1k"], capture_output=True, check=True)
        log_offset = Path(logfile).stat().st_size
        killed = {}

        def kill_later():
            time.sleep(duration / 3)
            killed["at"] = time.time()
            origins[DEAD].p.kill()

        t = threading.Thread(target=kill_later)
        t.start()
        out, _ = B.run_load(["h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-D", str(max(1, round(duration))),
                             f"http://127.0.0.1:{PORTS[who]}/1k"])
        t.join()
        time.sleep(0.5)  # the gateway's log writer
        text = Path(logfile).read_text(errors="replace")[log_offset:]
        part = Path(d, f"{who}-phase.log")
        part.write_text(text)
        m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
        total, done, ok, failed, errored = (int(x) for x in m.groups()) if m else (0, 0, 0, 0, 0)
        attempts = dead_attempts("nginx" if who == "nginx" else "sluice", part, killed["at"])
        after = [a - killed["at"] for a in attempts]
        return {"completed": done, "succeeded": ok, "failed": failed + errored,
                "dead_attempts": len(attempts), "last_attempt_s": max(after) if after else None,
                "attempts_after_5s": sum(1 for a in after if a > 5), "duration_s": duration}
    finally:
        for p in origins.values():
            p.stop()
        for p in ORIGINS:
            B.wait_port_free(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 6 s: keeps the harness working")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 6.0
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs x {args.duration:g} s; origin 127.0.0.1:{DEAD} killed at {args.duration / 3:g} s")
    results = {who: [] for who in PORTS}
    with tempfile.TemporaryDirectory(prefix="sluice-failover-") as d:
        os.chmod(d, 0o755)
        Path(d, "www").mkdir()
        Path(d, "www", "1k").write_bytes((b"Sluice failover benchmark body.\n" * 40)[:1024])
        for p in ORIGINS:
            Path(d, f"origin-{p}.conf").write_text(origin_conf(d, p))
        Path(d, "nginx.conf").write_text(nginx_conf(d))
        Path(d, "sluice.toml").write_text(sluice_conf(False, PORTS["sluice"]))
        Path(d, "sluice-active.toml").write_text(sluice_conf(True, PORTS["sluice-active"]))
        gws = {}
        try:
            gws["nginx"] = (B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE, PORTS["nginx"],
                                   f"{d}/nginx.out"), f"{d}/nginx-error.log")
            for who in ("sluice", "sluice-active"):
                gws[who] = (B.Proc(who, [str(B.SLUICE), "run", "--config", f"{d}/{who}.toml", "--pid-file", f"{d}/{who}.pid"], B.GW_CORE, PORTS[who],
                                   f"{d}/{who}.out"), f"{d}/{who}.out")
            for run in range(args.runs):
                for who in PORTS:
                    proc, logfile = gws[who]
                    r = phase(d, who, proc, logfile, args.duration)
                    results[who].append(r)
                    B.log(f"  run {run + 1} {who}: {r['completed']:,} requests, {r['failed']} failed, "
                          f"{r['dead_attempts']} attempts on the dead server (last at +{r['last_attempt_s']})")
        finally:
            for proc, _ in gws.values():
                proc.stop()

    print(f"# One of three upstream servers killed at {args.duration / 3:g} s of {args.duration:g} s, keep-alive HTTP/1.1\n")
    print(f"CPU: {cpu}. {args.runs} runs; requests and attempts are medians [min-max]; failures summed over the runs.\n")
    print("| gateway | requests | failed (seen by clients) | attempts on the dead server after the kill | "
          "of them later than 5 s after | last attempt after the kill |")
    print("|---|---|---|---|---|---|")
    labels = {"nginx": "NGINX, passive (max_fails=1 fail_timeout=10s)", "sluice": "Sluice, passive (same settings)",
              "sluice-active": "Sluice, active checks (1 s, 2 failures) + outlier ejection"}
    rows = {}
    for who, runs in results.items():
        med = lambda k: statistics.median(r[k] for r in runs)
        rng = lambda k: f"{min(r[k] for r in runs):,}-{max(r[k] for r in runs):,}"
        lasts = [r["last_attempt_s"] for r in runs if r["last_attempt_s"] is not None]
        last = f"{max(0.0, statistics.median(lasts)):.1f} s" if lasts else "none"
        rows[who] = {"runs": runs}
        print(f"| {labels[who]} | {med('completed'):,.0f} [{rng('completed')}] | {sum(r['failed'] for r in runs)} | "
              f"{med('dead_attempts'):,.0f} [{rng('dead_attempts')}] | {med('attempts_after_5s'):,.0f} | {last} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-failover{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration, "results": results}, indent=1))
    B.log(f"results: {path}")


if __name__ == "__main__":
    main()
