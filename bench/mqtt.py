#!/usr/bin/env python3
"""New MQTT-over-TLS connections per core (issue 68's first figure): Sluice's `kind = "mqtt"`
listener beside HAProxy 2.6 (Debian's) checking `mqtt_is_valid`, side by side on the gateway
core, in front of one mosquitto broker on the load core.

Each connection: TCP, a full TLS 1.3 handshake with an RSA-2048 certificate (no tickets, no
session cache, X25519 offered alone so that both gateways compute the same key share), an
MQTT 3.1.1 CONNECT with a fresh client identifier, the broker's CONNACK through the gateway,
DISCONNECT, close (`sluice-loadgen handshake --mqtt`, 64 in flight). Per run and gateway:
connections completed per second of gateway CPU (all threads, user + system); the ratio
Sluice / HAProxy run by run, median [min-max]. Sluice runs its default configuration (its
default RSA engine).

Called by bench/mqtt.
"""

import argparse
import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path

import bench as B

BROKER = 18960
SLUICE = 18961
HAPROXY = 18962


def sluice_conf(d):
    return f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[[certificate]]
name = "rsa"
cert = "{d}/rsa.crt"
key = "{d}/rsa.key"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{{ address = "127.0.0.1:{BROKER}" }}]
[[listener]]
name = "devices"
address = "127.0.0.1:{SLUICE}"
kind = "mqtt"
upstream = "brokers"
[listener.tls]
certificates = ["rsa"]
session_tickets = false
"""


def haproxy_conf(d):
    """As an operator would run it for this: one thread, TLS without tickets or a session
    cache, the CONNECT checked by mqtt_is_valid before the broker sees it."""
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
frontend mqtts
    bind 127.0.0.1:{HAPROXY} ssl crt {d}/rsa.pem
    tcp-request inspect-delay 5s
    tcp-request content reject unless {{ req.payload(0,0),mqtt_is_valid }}
    default_backend brokers
backend brokers
    server broker 127.0.0.1:{BROKER}
"""


def measure(proc, port, duration):
    cpu0 = proc.cpu()
    r = B.loadgen("handshake", port, duration, ["--mqtt", "--groups", "X25519", "--concurrency", "64"])
    cpu = proc.cpu() - cpu0
    if r["completed"] == 0 or r["failed"]:
        raise RuntimeError(f"port {port}: {r['completed']} completed, {r['failed']} failed: {r.get('first_error')}")
    return {"completed": r["completed"], "rate": r["rate"], "gateway_cpu_s": cpu,
            "per_core": r["completed"] / cpu if cpu > 0 else float("nan")}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per gateway")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs x {args.duration:g} s per gateway")
    rows = {"sluice": [], "haproxy": []}
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    with tempfile.TemporaryDirectory(prefix="sluice-mqtt-") as d:
        os.chmod(d, 0o755)
        B.make_certs(d)
        Path(d, "rsa.pem").write_text(Path(d, "rsa.crt").read_text() + Path(d, "rsa.key").read_text())
        Path(d, "mosquitto.conf").write_text(
            f"listener {BROKER} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_type none\nmax_connections -1\n")
        Path(d, "sluice.toml").write_text(sluice_conf(d))
        Path(d, "haproxy.cfg").write_text(haproxy_conf(d))
        procs = []
        try:
            procs.append(B.Proc("mosquitto", [mosquitto, "-c", f"{d}/mosquitto.conf"], B.LOAD_CORE, BROKER, f"{d}/mosquitto.out"))
            gws = {
                "sluice": B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml"], B.GW_CORE, SLUICE, f"{d}/sluice.out"),
                "haproxy": B.Proc("haproxy", [haproxy, "-db", "-f", f"{d}/haproxy.cfg"], B.GW_CORE, HAPROXY, f"{d}/haproxy.out"),
            }
            procs += gws.values()
            ports = {"sluice": SLUICE, "haproxy": HAPROXY}
            for name in gws:
                measure(gws[name], ports[name], 1)  # warm-up
            for run in range(args.runs):
                order = ["sluice", "haproxy"] if run % 2 == 0 else ["haproxy", "sluice"]
                for name in order:
                    r = measure(gws[name], ports[name], args.duration)
                    rows[name].append(r)
                    B.log(f"  {name}: {r['rate']:.0f} conn/s, {r['per_core']:.0f} per gateway CPU-second")
        finally:
            for p in reversed(procs):
                p.stop()
    report(cpu, args, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-mqtt{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration, "rows": rows}, indent=1))
    B.log(f"results: {path}")


def report(cpu, args, rows):
    f = lambda s: f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"
    per = lambda name: [r["per_core"] for r in rows[name]]
    print("# New MQTT-over-TLS connections per core (RSA-2048, TLS 1.3, X25519; CONNECT and CONNACK included)\n")
    print(f"CPU: {cpu}. {args.runs} runs x {args.duration:g} s per gateway, alternating; median [min-max].\n")
    print("| gateway | connections/s | per gateway CPU-second |")
    print("|---|---|---|")
    for name in ("sluice", "haproxy"):
        rate = B.summarize([r["rate"] for r in rows[name]])
        print(f"| {name} | {f(rate)} | {f(B.summarize(per(name)))} |")
    ratio = B.summarize([a / b for a, b in zip(per("sluice"), per("haproxy"))])
    print(f"\n- Sluice / HAProxy, connections per gateway CPU-second, run by run: "
          f"{ratio['median']:.2f}x [{ratio['min']:.2f}-{ratio['max']:.2f}]")


if __name__ == "__main__":
    main()
