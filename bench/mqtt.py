#!/usr/bin/env python3
"""Issue 68's figures: Sluice's `kind = "mqtt"` listener beside HAProxy 2.6 (Debian's)
checking `mqtt_is_valid`, side by side on the gateway core, in front of one mosquitto broker
(four listening ports: 100,000 connections need more than one port's ephemeral range) on
the load core. Three figures (`--figures`):

**connections**: new MQTT-over-TLS connections per core. Each connection: TCP, a full TLS 1.3 handshake with an RSA-2048 certificate (no tickets, no
session cache, X25519 offered alone so that both gateways compute the same key share), an
MQTT 3.1.1 CONNECT with a fresh client identifier, the broker's CONNACK through the gateway,
DISCONNECT, close (`sluice-loadgen handshake --mqtt`, 64 in flight). Per run and gateway:
connections completed per second of gateway CPU (all threads, user + system); the ratio
Sluice / HAProxy run by run, median [min-max]. Sluice runs its default configuration (its
default RSA engine).

**memory**: the gateway's memory per idle MQTT-over-TLS connection. Per run, each gateway
is started afresh, 100 devices connect and stay (warm-up), its RSS is read once settled,
then `--connections` more devices (default 100,000, from 127.0.0.1-8 as source addresses)
connect with a full TLS 1.3 handshake (ECDSA P-256, to spend the minutes on connections
rather than RSA) and a CONNECT, and stay silent (`sluice-loadgen mqtt-idle`); one second
after the last, RSS again: (after - before) / connections, KiB.

**relay**: QoS 0 messages of 100 bytes relayed per gateway CPU-second on established
connections (`sluice-loadgen mqtt-publish`): 50 publishers and 50 subscribers, all MQTT over
TLS through the gateway, 60,000 messages a second offered (the same load for both: most of a
gateway core, where the runs agree; at 20,000 a second they spread by +-10%), counted
as the subscribers receive them (each message crosses the gateway twice: in from its
publisher, out to its subscriber). HAProxy's is its TCP relay behind the CONNECT check.

Called by bench/mqtt.
"""

import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import bench as B

BROKER = 18960
SLUICE = 18961
HAPROXY = 18962
# The broker's other ports (one mosquitto): the gateways spread devices over all four.
BROKERS = (BROKER, 18963, 18964, 18965)
SOURCES = 8


def sluice_conf(d, cert="rsa"):
    servers = ", ".join(f'{{ address = "127.0.0.1:{p}" }}' for p in BROKERS)
    return f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[[certificate]]
name = "{cert}"
cert = "{d}/{cert}.crt"
key = "{d}/{cert}.key"
[[upstream]]
name = "brokers"
balance = "consistent_hash"
hash_balance_factor = 0
servers = [{servers}]
[[listener]]
name = "devices"
address = "127.0.0.1:{SLUICE}"
kind = "mqtt"
upstream = "brokers"
[listener.tls]
certificates = ["{cert}"]
session_tickets = false
"""


def haproxy_conf(d, cert="rsa", maxconn=9000):
    """As an operator would run it for this: one thread, TLS without tickets or a session
    cache, the CONNECT checked by mqtt_is_valid before the broker sees it."""
    servers = "\n".join(f"    server broker{i} 127.0.0.1:{p}" for i, p in enumerate(BROKERS))
    return f"""
global
    nbthread 1
    maxconn {maxconn}
    pidfile {d}/haproxy.pid
    tune.ssl.cachesize 0
    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend mqtts
    bind 127.0.0.1:{HAPROXY} ssl crt {d}/{cert}.pem
    tcp-request inspect-delay 5s
    tcp-request content reject unless {{ req.payload(0,0),mqtt_is_valid }}
    default_backend brokers
    timeout client 30m
backend brokers
    timeout server 30m
{servers}
"""


def measure(proc, port, duration):
    cpu0 = proc.cpu()
    r = B.loadgen("handshake", port, duration, ["--mqtt", "--groups", "X25519", "--concurrency", "64"])
    cpu = proc.cpu() - cpu0
    if r["completed"] == 0 or r["failed"]:
        raise RuntimeError(f"port {port}: {r['completed']} completed, {r['failed']} failed: {r.get('first_error')}")
    return {"completed": r["completed"], "rate": r["rate"], "gateway_cpu_s": cpu,
            "per_core": r["completed"] / cpu if cpu > 0 else float("nan")}


def held(port, n, hold):
    """`sluice-loadgen mqtt-idle` holding `n` devices on `port`: (process, its first line)."""
    p = subprocess.Popen(["taskset", "-c", B.LOAD_CORE, str(B.LOADGEN), "mqtt-idle", "--addr", f"127.0.0.1:{port}",
                          "--connections", str(n), "--sources", str(SOURCES), "--duration", f"{hold}s"],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line:
        p.wait()
        raise RuntimeError("sluice-loadgen mqtt-idle exited without opening its connections")
    r = json.loads(line)
    if r["completed"] != n:
        p.kill()
        p.wait()
        raise RuntimeError(f"port {port}: mqtt-idle opened {r['completed']} of {n}: {r.get('first_error')}")
    return p, r


def idle_memory(gw, port, n):
    """RSS growth per idle device connection, KiB (see the module's doc)."""
    warm, _ = held(port, 100, 3600)
    try:
        before = B.settled_rss_kib(gw.p.pid)
        p, r = held(port, n, 3600)
        try:
            time.sleep(1.0)
            after = B.tree_rss_kib(gw.p.pid)
        finally:
            p.kill()
            p.wait()
    finally:
        warm.kill()
        warm.wait()
    return {"per_connection_kib": (after - before) / n, "rss_before_kib": before, "rss_after_kib": after,
            "connections": n, "open_seconds": r["seconds"]}


def relay(gw, port, duration, rate):
    """QoS 0 messages received per gateway CPU-second at `rate` offered (the module's doc)."""
    p = subprocess.Popen(["taskset", "-c", B.LOAD_CORE, str(B.LOADGEN), "mqtt-publish", "--addr", f"127.0.0.1:{port}",
                          "--pairs", "50", "--rate", str(rate), "--payload", "100", "--duration", f"{duration}s"],
                         stdout=subprocess.PIPE, text=True)
    try:
        ready = p.stdout.readline()
        if not ready:
            raise RuntimeError(f"port {port}: mqtt-publish exited before its connections were ready")
        cpu0 = gw.cpu()
        line = p.stdout.readline()
        cpu = gw.cpu() - cpu0
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if not line:
        raise RuntimeError(f"port {port}: mqtt-publish failed")
    r = json.loads(line)
    if r["received"] < 0.99 * r["published"]:
        raise RuntimeError(f"port {port}: {r['received']} of {r['published']} messages arrived")
    return {"published": r["published"], "received": r["received"], "rate": r["rate"], "gateway_cpu_s": cpu,
            "per_core": r["received"] / cpu if cpu > 0 else float("nan")}


def more_descriptors(n):
    """Raises this process's descriptor limit (inherited by what it starts) for `n` devices
    and returns how many fit: each takes one descriptor in the load generator and the broker
    and two in the gateway (the 100 warm-up devices too). Where the hard limit cannot be
    raised (a container without CAP_SYS_RESOURCE), fewer devices, said so."""
    want = 2 * (n + 100) + 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
        return n
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        fit = (hard - 1000) // 2 - 100
        B.log(f"descriptors: the hard limit is {hard} and cannot be raised here, so {min(n, fit):,} idle devices "
              f"instead of {n:,}")
        return min(n, fit)


def setup(d, devices):
    B.make_certs(d)
    for cert in ("rsa", "ecdsa"):
        Path(d, f"{cert}.pem").write_text(Path(d, f"{cert}.crt").read_text() + Path(d, f"{cert}.key").read_text())
        Path(d, f"sluice-{cert}.toml").write_text(sluice_conf(d, cert))
        Path(d, f"haproxy-{cert}.cfg").write_text(haproxy_conf(d, cert, maxconn=max(9000, devices + 300)))
    listeners = "".join(f"listener {p} 127.0.0.1\n" for p in BROKERS)
    Path(d, "mosquitto.conf").write_text(
        f"{listeners}allow_anonymous true\npersistence false\nlog_type none\nmax_connections -1\n")


def gateways(d, cert):
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    return {
        "sluice": lambda: B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice-{cert}.toml"], B.GW_CORE,
                                 SLUICE, f"{d}/sluice.out"),
        "haproxy": lambda: B.Proc("haproxy", [haproxy, "-db", "-f", f"{d}/haproxy-{cert}.cfg"], B.GW_CORE, HAPROXY,
                                  f"{d}/haproxy.out"),
    }


PORTS = {"sluice": SLUICE, "haproxy": HAPROXY}


def alternate(runs, each):
    """`each(name, run)` for both gateways, run by run, in alternating order."""
    for run in range(runs):
        for name in (["sluice", "haproxy"] if run % 2 == 0 else ["haproxy", "sluice"]):
            each(name, run)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per gateway, 500 idle devices")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=100000, help="idle devices for the memory figure")
    ap.add_argument("--rate", type=int, default=60000, help="messages a second offered for the relay figure")
    ap.add_argument("--figures", default="connections,memory,relay")
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration, args.connections, args.rate = 1, 1.0, 500, 2000
    figures = args.figures.split(",")
    args.connections = more_descriptors(args.connections)
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs per gateway; figures: {', '.join(figures)}")
    rows = {f: {"sluice": [], "haproxy": []} for f in figures}
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with tempfile.TemporaryDirectory(prefix="sluice-mqtt-") as d:
        os.chmod(d, 0o755)
        setup(d, args.connections)
        broker = B.Proc("mosquitto", [mosquitto, "-c", f"{d}/mosquitto.conf"], B.LOAD_CORE, BROKER, f"{d}/mosquitto.out")
        try:
            if "connections" in figures or "relay" in figures:
                started = gateways(d, "rsa")
                gws = {}
                try:
                    for name in started:
                        gws[name] = started[name]()
                    if "connections" in figures:
                        for name in gws:
                            measure(gws[name], PORTS[name], 1)  # warm-up
                        alternate(args.runs, lambda name, _: rows["connections"][name].append(
                            logged(name, measure(gws[name], PORTS[name], args.duration))))
                    if "relay" in figures:
                        alternate(args.runs, lambda name, _: rows["relay"][name].append(
                            logged(name, relay(gws[name], PORTS[name], args.duration, args.rate))))
                finally:
                    for g in gws.values():
                        g.stop()
            if "memory" in figures:
                started = gateways(d, "ecdsa")

                def fresh(name, _):
                    g = started[name]()
                    try:
                        rows["memory"][name].append(logged(name, idle_memory(g, PORTS[name], args.connections)))
                    finally:
                        g.stop()
                alternate(args.runs, fresh)
        finally:
            broker.stop()
    report(cpu, args, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-mqtt{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration,
                                "connections": args.connections, "rate": args.rate, "rows": rows}, indent=1))
    B.log(f"results: {path}")


def logged(name, r):
    B.log(f"  {name}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    return r


def report(cpu, args, rows):
    f = lambda s: f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"
    f1 = lambda s: f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]"
    col = lambda fig, name, key: [r[key] for r in rows[fig][name]]
    ratio = lambda fig, key: B.summarize([a / b for a, b in zip(col(fig, "sluice", key), col(fig, "haproxy", key))])
    print(f"CPU: {cpu}. {args.runs} runs per gateway, alternating; median [min-max].\n")
    if "connections" in rows:
        print("# New MQTT-over-TLS connections per core (RSA-2048, TLS 1.3, X25519; CONNECT and CONNACK included)\n")
        print("| gateway | connections/s | per gateway CPU-second |")
        print("|---|---|---|")
        for name in ("sluice", "haproxy"):
            print(f"| {name} | {f(B.summarize(col('connections', name, 'rate')))} | "
                  f"{f(B.summarize(col('connections', name, 'per_core')))} |")
        r = ratio("connections", "per_core")
        print(f"\n- Sluice / HAProxy, connections per gateway CPU-second, run by run: "
              f"{r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]\n")
    if "memory" in rows:
        print(f"# Memory per idle MQTT-over-TLS connection ({args.connections:,} open; ECDSA P-256, TLS 1.3)\n")
        print("| gateway | KiB per connection | RSS with all open, MiB |")
        print("|---|---|---|")
        for name in ("sluice", "haproxy"):
            rss = B.summarize([v / 1024 for v in col("memory", name, "rss_after_kib")])
            print(f"| {name} | {f1(B.summarize(col('memory', name, 'per_connection_kib')))} | {f(rss)} |")
        r = ratio("memory", "per_connection_kib")
        print(f"\n- Sluice / HAProxy, memory per connection, run by run: "
              f"{r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]\n")
    if "relay" in rows:
        print(f"# QoS 0 messages relayed per core (100-byte payloads, {args.rate:,}/s offered, 50 publishers and "
              f"50 subscribers over TLS)\n")
        print("| gateway | messages/s received | per gateway CPU-second |")
        print("|---|---|---|")
        for name in ("sluice", "haproxy"):
            print(f"| {name} | {f(B.summarize(col('relay', name, 'rate')))} | "
                  f"{f(B.summarize(col('relay', name, 'per_core')))} |")
        r = ratio("relay", "per_core")
        print(f"\n- Sluice / HAProxy, messages per gateway CPU-second, run by run: "
              f"{r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]")


if __name__ == "__main__":
    main()
