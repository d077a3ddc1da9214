#!/usr/bin/env python3
"""Layer 4: Sluice's `kind = "tcp"` listeners against NGINX `stream` and HAProxy `mode tcp`.

Each gateway is one process pinned to the gateway core (NGINX one worker, HAProxy one
thread); the load generator, an echo server and an NGINX HTTP origin run on the load core.
Rows, each run alternating the gateways:

- TCP throughput: 16 connections each sending 64 KiB messages to the echo server through
  the gateway and reading each back (bytes cross the gateway twice; both directions count);
- TCP connections: 64 clients each opening a connection, exchanging 16 bytes, closing;
- TLS-terminated TCP: full TLS 1.3 handshakes (no tickets, no session cache) with an
  RSA-2048 and with an ECDSA P-256 certificate, then one HTTP request carried as bytes to
  the origin; Sluice with the crypto engine chain of --engine.

A row's figure is work per gateway CPU-second (MB, connections or handshakes per second of
the gateway's CPU, user + system, all threads), so that whichever core ran out first, the
ratio compares the gateways' cost; the rates are context. Median of the runs [min-max];
ratios run by run. No access logs (HAProxy has none by default in mode tcp, NGINX's stream
module none unless configured; Sluice's is turned off). Called by bench/stream.
"""

import argparse
import datetime
import json
import os
import tempfile
import time
from pathlib import Path

import bench as B

ECHO_PORT, ORIGIN_PORT = 18600, 18601
PORTS = {"sluice": (18610, 18611, 18612), "nginx": (18620, 18621, 18622), "haproxy": (18630, 18631, 18632)}
WHO = ("sluice", "nginx", "haproxy")

# (row, listener index: 0 plain, 1 TLS RSA, 2 TLS ECDSA, loadgen mode and arguments, unit)
ROWS = [
    ("TCP throughput, 64 KiB messages", 0, ["tcp", "--concurrency", "16", "--size", "65536"], "MB"),
    ("TCP connections, 16-byte exchange", 0, ["tcp", "--concurrency", "64", "--size", "16", "--per-connection"], "conn"),
    ("TLS-terminated TCP, full handshakes, RSA-2048, TLS 1.3", 1, ["handshake", "--path", "/1k", "--tls", "1.3"], "hs"),
    ("TLS-terminated TCP, full handshakes, ECDSA P-256, TLS 1.3", 2, ["handshake", "--path", "/1k", "--tls", "1.3"], "hs"),
]


def nginx_conf(d):
    p = PORTS["nginx"]
    tls = "\n".join(f"""
        server {{
            listen 127.0.0.1:{port} ssl backlog=4096;
            ssl_certificate {d}/{cert}.crt;
            ssl_certificate_key {d}/{cert}.key;
            ssl_protocols TLSv1.2 TLSv1.3;
            ssl_session_tickets off;
            ssl_session_cache off;
            proxy_pass origin;
        }}""" for port, cert in ((p[1], "rsa"), (p[2], "ecdsa")))
    return f"""
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
master_process on;
worker_processes 1;
error_log {d}/nginx-error.log warn;
pid {d}/nginx.pid;
worker_rlimit_nofile 20000;
events {{ worker_connections 10000; multi_accept on; }}
stream {{
    # Half-close passed on, as Sluice and HAProxy's mode tcp always do (NGINX's default,
    # off, closes both sides at the first end of stream: less work, and a client that
    # half-closes loses the reply).
    proxy_half_close on;
    upstream echo {{ server 127.0.0.1:{ECHO_PORT}; }}
    upstream origin {{ server 127.0.0.1:{ORIGIN_PORT}; }}
    server {{
        listen 127.0.0.1:{p[0]} backlog=4096;
        proxy_pass echo;
    }}{tls}
}}
"""


def haproxy_conf(d):
    p = PORTS["haproxy"]
    return f"""
global
    nbthread 1
    maxconn 9000
    pidfile {d}/haproxy.pid
    tune.ssl.cachesize 0
    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend plain
    bind 127.0.0.1:{p[0]}
    default_backend echo
frontend tls-rsa
    bind 127.0.0.1:{p[1]} ssl crt {d}/rsa.pem
    default_backend origin
frontend tls-ecdsa
    bind 127.0.0.1:{p[2]} ssl crt {d}/ecdsa.pem
    default_backend origin
backend echo
    server echo 127.0.0.1:{ECHO_PORT}
backend origin
    server origin 127.0.0.1:{ORIGIN_PORT}
"""


def sluice_conf(d, engine):
    p = PORTS["sluice"]
    engines = {"pool": '["pool"]', "mb": '["mb", "pool"]', "inline": "[]"}[engine]
    tls = "".join(f"""
[[listener]]
name = "tls-{cert}"
address = "127.0.0.1:{port}"
kind = "tcp"
upstream = "origin"
[listener.tls]
certificates = ["{cert}"]
session_tickets = false
""" for port, cert in ((p[1], "rsa"), (p[2], "ecdsa")))
    certs = "".join(f"""
[[certificate]]
name = "{cert}"
cert = "{d}/{cert}.crt"
key = "{d}/{cert}.key"
""" for cert in ("rsa", "ecdsa"))
    return f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[offload.crypto]
engines = {engines}
[[listener]]
name = "plain"
address = "127.0.0.1:{p[0]}"
kind = "tcp"
upstream = "echo"
{tls}{certs}
[[upstream]]
name = "echo"
servers = [{{ address = "127.0.0.1:{ECHO_PORT}" }}]
[[upstream]]
name = "origin"
servers = [{{ address = "127.0.0.1:{ORIGIN_PORT}" }}]
"""


def origin_conf(d):
    return B.NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    default_type text/plain;
    server {{
        listen 127.0.0.1:{ORIGIN_PORT} reuseport backlog=4096;
        root {d}/www;
    }}
}}
"""


def measure(proc, port, mode_args, duration):
    cpu0 = proc.cpu()
    r = B.loadgen(mode_args[0], port, duration, mode_args[1:])
    r["gateway_cpu_s"] = proc.cpu() - cpu0
    cpu = max(r["gateway_cpu_s"], 1e-9)
    r["gateway_core"] = r["gateway_cpu_s"] / max(r["seconds"], 1e-9)
    r["per_cpu_s"] = (r["bytes"] / 1e6 if mode_args[0] == "tcp" and "--per-connection" not in mode_args
                      else r["completed"]) / cpu
    r["rate_shown"] = r.get("mb_per_s") if mode_args[0] == "tcp" and "--per-connection" not in mode_args else r["rate"]
    return r


def cell(s, fmt="{:,.0f}"):
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}-{fmt.format(s['max'])}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per row, to keep the harness working")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--engine", default="mb", choices=["mb", "pool", "inline"],
                    help="Sluice's crypto engine chain for the TLS rows (mb: [\"mb\", \"pool\"])")
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu = B.cpu_model()
    ifma = B.mb_available()
    B.log(f"CPU: {cpu}; gateway core {B.GW_CORE}, load core {B.LOAD_CORE}; engine {args.engine} "
          f"(AVX-512 IFMA: {'yes' if ifma else 'no'}); {args.runs} runs x {args.duration:g} s")
    results = {name: {who: [] for who in WHO} for name, *_ in ROWS}
    with tempfile.TemporaryDirectory(prefix="sluice-stream-") as d:
        os.chmod(d, 0o755)
        B.make_certs(d)
        for cert in ("rsa", "ecdsa"):
            Path(d, f"{cert}.pem").write_bytes(Path(d, f"{cert}.crt").read_bytes() + Path(d, f"{cert}.key").read_bytes())
        www = Path(d, "www")
        www.mkdir()
        (www / "1k").write_bytes((b"Sluice stream benchmark: 1 KiB body.\n" * 30)[:1024])
        Path(d, "origin.conf").write_text(origin_conf(d))
        Path(d, "nginx.conf").write_text(nginx_conf(d))
        Path(d, "haproxy.cfg").write_text(haproxy_conf(d))
        Path(d, "sluice.toml").write_text(sluice_conf(d, args.engine))
        procs = []
        try:
            serve_for = f"{int(args.runs * len(ROWS) * len(WHO) * (args.duration + 3) + 120)}s"
            procs.append(B.Proc("echo", [str(B.LOADGEN), "echo", "--addr", f"127.0.0.1:{ECHO_PORT}",
                                         "--duration", serve_for], B.LOAD_CORE, ECHO_PORT, f"{d}/echo.out"))
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, ORIGIN_PORT,
                                f"{d}/origin.out"))
            argv = {
                "sluice": [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml"],
                "nginx": ["nginx", "-c", f"{d}/nginx.conf", "-p", d],
                "haproxy": ["haproxy", "-db", "-f", f"{d}/haproxy.cfg"],
            }
            gw = {}
            for who in WHO:
                gw[who] = B.Proc(who, argv[who], B.GW_CORE, PORTS[who][2], f"{d}/{who}.out")
                procs.append(gw[who])
            for name, listener, mode_args, _unit in ROWS:
                for who in WHO:
                    measure(gw[who], PORTS[who][listener], mode_args, min(1.0, args.duration))  # warm-up
                for run in range(args.runs):
                    order = WHO[run % 3:] + WHO[:run % 3]
                    for who in order:
                        r = measure(gw[who], PORTS[who][listener], mode_args, args.duration)
                        if r["completed"] == 0:
                            tail = Path(d, f"{who}.out").read_text()[-2000:]
                            raise RuntimeError(f"{who} served nothing on row {name!r} ({r.get('first_error')}); "
                                               f"its output ends:\n{tail}")
                        results[name][who].append(r)
                        B.log(f"  {name}: {who} {r['rate_shown']:,.1f}/s, {r['per_cpu_s']:,.0f} per CPU-s, "
                              f"gateway core {r['gateway_core']:.0%}, failed {r['failed']}")
        finally:
            for p in reversed(procs):
                p.stop()

    rows = []
    for name, _l, _m, unit in ROWS:
        row = {"name": name, "unit": unit}
        for who in WHO:
            row[who] = {k: B.summarize([r[k] for r in results[name][who]])
                        for k in ("per_cpu_s", "rate_shown", "gateway_core")}
        for ref in ("nginx", "haproxy"):
            row[f"vs_{ref}"] = B.summarize([s["per_cpu_s"] / max(n["per_cpu_s"], 1e-9)
                                            for s, n in zip(results[name]["sluice"], results[name][ref])])
        rows.append(row)

    units = {"MB": "MB/s per gateway core", "conn": "connections/s per gateway core", "hs": "handshakes/s per gateway core"}
    print("# Layer 4: Sluice TCP listeners, NGINX stream, HAProxy mode tcp; one gateway core\n")
    print(f"CPU: {cpu} (AVX-512 IFMA: {'yes' if ifma else 'no'}); Sluice engine chain for TLS: {args.engine}. "
          f"{args.runs} runs x {args.duration:g} s, median [min-max]. Per core = work ÷ the gateway's CPU seconds; "
          "ratios run by run.\n")
    print("| row | unit | Sluice | NGINX | HAProxy | Sluice/NGINX | Sluice/HAProxy | gateway core (S / N / H) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        fmt = "{:,.0f}"
        print(f"| {row['name']} | {units[row['unit']]} | {cell(row['sluice']['per_cpu_s'], fmt)} "
              f"| {cell(row['nginx']['per_cpu_s'], fmt)} | {cell(row['haproxy']['per_cpu_s'], fmt)} "
              f"| {cell(row['vs_nginx'], '{:.2f}')}x | {cell(row['vs_haproxy'], '{:.2f}')}x "
              f"| {' / '.join(format(row[w]['gateway_core']['median'], '.0%') for w in WHO)} |")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-stream{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "ifma": ifma, "engine": args.engine, "runs": args.runs,
                                "duration": args.duration, "rows": rows, "raw": results}, indent=1))
    B.log(f"results: {path}")


if __name__ == "__main__":
    main()
