#!/usr/bin/env python3
"""Fleet mode at a large site's size: 40,000 routes, 2,000 upstreams and 500 certificates in
a real etcd (Debian's), two Sluice gateways in fleet mode.

- The generated configuration goes into etcd with `sluice config push` (private keys sealed
  with a keyring), as an operator migrating from one machine would.
- Cold start: from `sluice run` to the admin listener answering with every object applied
  (the https listener holds all 500 certificates), and the gateway's RSS then.
- Propagation: one route changed in etcd (its JSON gateway, as any client writes), until
  both gateways serve the new revision (their admin API's `applied_revision`, polled every
  2 ms): p50/p99 over the changes.
- CPU per change: route changes at 10 a second for the run's duration, no polling; the
  gateway's CPU (all threads) over the changes minus its CPU over the same time without
  changes, divided by the number of changes; and the part of it at the normal priority (the
  event loop and its blocking threads; the rest runs on `sluice-idle` threads at SCHED_IDLE).
  Gateway B is stopped after the propagation figures: it shares the load core with the load
  generator, and its own work on each change would be counted as gateway A's latency.
- Traffic while changes arrive: p99 of keep-alive HTTPS requests (sluice-loadgen's latency
  mode, TLS 1.3, 4 connections) on the gateway core, without changes, with 10 a second, and
  with 10 writes a second to a key no gateway watches (the control: what etcd's work on the
  load core adds by itself).
- Route lookup: keep-alive HTTP/1.1 1 KiB requests/s (h2load, 32 connections) through the
  40,000-route gateway against the same gateway built with one route, on the gateway core.

Gateway A is pinned to the gateway core; etcd, the origin (NGINX), gateway B and the load
generators to the load core. Called by bench/fleet.
"""

import argparse
import base64
import datetime
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import bench as B

ETCD, ETCD_PEER, ORIGIN = 18700, 18701, 18702
GW = {"a": (18710, 18711, 18712), "b": (18720, 18721, 18722)}  # http, https, admin
ONE_ROUTE = 18730


def generate(d, routes, upstreams, certs):
    """The site's configuration as one file, pushed into etcd by `sluice config push`."""
    cdir = Path(d, "certs")
    cdir.mkdir()
    for i in range(certs):
        key, crt = cdir / f"h{i}.key", cdir / f"h{i}.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", key, "-out", crt, "-subj", f"/CN=h{i}.test", "-addext",
                        f"subjectAltName=DNS:h{i}.test", "-days", "30"], check=True, capture_output=True)
        os.chmod(key, 0o600)
    out = ['[[listener]]\nname = "web"\naddress = "127.0.0.1:0"\n[listener.tls]\n']
    out += [f'[[certificate]]\nname = "h{i}"\ncert = "certs/h{i}.crt"\nkey = "certs/h{i}.key"\n' for i in range(certs)]
    out += [f'[[upstream]]\nname = "u{i}"\nkeepalive = 8\nservers = [{{ address = "127.0.0.1:{ORIGIN}" }}]\n'
            for i in range(upstreams)]
    out += [route_toml(i, i % upstreams) for i in range(routes)]
    Path(d, "site.toml").write_text("\n".join(out))


def route_toml(i, u):
    return f'[[route]]\nname = "r{i}"\npath_prefix = "/api/v{i}/"\nstrip_prefix = "/api/v{i}"\nupstream = "u{u}"\n'


def route_json(i, u):
    return {"path_prefix": f"/api/v{i}/", "strip_prefix": f"/api/v{i}", "upstream": f"u{u}"}


def gateway_conf(d, name):
    http, https, admin = GW[name]
    return f"""[config]
source = "etcd"
endpoints = ["127.0.0.1:{ETCD}"]
cache_file = "{name}-cache.json"
keyring = "keyring"
[admin]
address = "127.0.0.1:{admin}"
[log]
level = "warn"
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:{http}"
request_id = false
[[listener]]
name = "https"
address = "127.0.0.1:{https}"
request_id = false
[listener.tls]
session_tickets = false
"""


def one_route_conf():
    return f"""[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[[listener]]
name = "http"
address = "127.0.0.1:{ONE_ROUTE}"
request_id = false
[[upstream]]
name = "u0"
keepalive = 8
servers = [{{ address = "127.0.0.1:{ORIGIN}" }}]
{route_toml(7, 0)}"""


def etcd_put(key, value):
    """A put through etcd's JSON gateway; returns the revision it made."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                       "value": base64.b64encode(json.dumps(value).encode()).decode()}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{ETCD}/v3/kv/put", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return int(json.loads(r.read())["header"]["revision"])


def applied(name):
    with urllib.request.urlopen(f"http://127.0.0.1:{GW[name][2]}/api/v1/fleet", timeout=5) as r:
        return json.loads(r.read())


def idle_priority_cpu(pid):
    """CPU seconds of a gateway's threads at idle priority (named `sluice-idle`, long-lived)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        comm, fields = text.split("(", 1)[1].rsplit(")", 1)
        if comm == "sluice-idle":
            f = fields.split()
            total += int(f[11]) + int(f[12])
    return total / B.TICK


def start_gateway(d, name, core):
    t0 = time.time()
    p = B.Proc(f"gw-{name}", [str(B.SLUICE), "run", "--config", f"{d}/{name}.toml", "--pid-file", f"{d}/{name}.pid"],
               core, GW[name][2], f"{d}/{name}.out")
    started = time.time() - t0
    return p, started


def change(i, n, upstreams, routes):
    """Route i alternates between two upstreams."""
    r = i % routes
    return etcd_put(f"/sluice/routes/r{r}", route_json(r, (r + n) % upstreams))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="a small table and 1 run of 1 s: keeps the harness working")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--changes", type=int, default=200, help="route changes timed for propagation")
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    routes, upstreams, certs = 40000, 2000, 500
    if args.smoke:
        args.runs, args.duration, args.changes = 1, 1.0, 10
        routes, upstreams, certs = 2000, 100, 10
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {routes:,} routes, {upstreams:,} upstreams, {certs} certificates; "
          f"{args.runs} runs x {args.duration:g} s")
    res = {"cold_start_s": [], "rss_mib": [], "propagation_ms": {"a": [], "b": []}, "etcd_put_ms": [], "cpu_ms_per_change": [], "normal_cpu_ms_per_change": [],
           "p99_ms_quiet": [], "p99_ms_changes": [], "p99_ms_control": [], "rps_one_route": [], "rps_all_routes": []}
    procs = []
    with tempfile.TemporaryDirectory(prefix="sluice-fleet-") as d:
        os.chmod(d, 0o755)
        Path(d, "www").mkdir()
        Path(d, "www", "1k").write_bytes((b"Sluice fleet benchmark body.\n" * 40)[:1024])
        Path(d, "origin.conf").write_text(B.NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    default_type text/plain;
    server {{ listen 127.0.0.1:{ORIGIN} backlog=4096; root {d}/www; }}
}}
""")
        Path(d, "keyring").write_text(f"k1 {os.urandom(32).hex()}\n")
        os.chmod(Path(d, "keyring"), 0o600)
        for name in GW:
            Path(d, f"{name}.toml").write_text(gateway_conf(d, name))
        Path(d, "one.toml").write_text(one_route_conf())
        B.log("generating the configuration and its certificates")
        generate(d, routes, upstreams, certs)
        try:
            procs.append(B.Proc("etcd", ["etcd", "--data-dir", f"{d}/etcd", "--name", "default",
                                         "--listen-client-urls", f"http://127.0.0.1:{ETCD}",
                                         "--advertise-client-urls", f"http://127.0.0.1:{ETCD}",
                                         "--listen-peer-urls", f"http://127.0.0.1:{ETCD_PEER}",
                                         "--initial-advertise-peer-urls", f"http://127.0.0.1:{ETCD_PEER}",
                                         "--initial-cluster", f"default=http://127.0.0.1:{ETCD_PEER}",
                                         "--quota-backend-bytes", str(4 << 30)],
                                B.LOAD_CORE, ETCD, f"{d}/etcd.out"))
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, ORIGIN,
                                f"{d}/origin.out"))
            t0 = time.time()
            pushed = subprocess.run([str(B.SLUICE), "config", "push", f"{d}/site.toml", "--etcd", f"127.0.0.1:{ETCD}",
                                     "--keyring", f"{d}/keyring"], check=True, capture_output=True, text=True)
            B.log(f"  {pushed.stdout.strip()} in {time.time() - t0:.1f} s")

            # Cold start and RSS (gateway A, restarted each run).
            for run in range(args.runs):
                a, started = start_gateway(d, "a", B.GW_CORE)
                status = applied("a")
                assert status["objects"]["routes"] == routes, status
                assert not status["invalid"], status["invalid"][:3]
                rss = B.settled_rss_kib(a.p.pid) / 1024
                res["cold_start_s"].append(started)
                res["rss_mib"].append(rss)
                B.log(f"  cold start {started:.2f} s, RSS {rss:.0f} MiB")
                if run < args.runs - 1:
                    a.stop()
                    B.wait_port_free(GW["a"][2])
            procs.append(a)
            b, _ = start_gateway(d, "b", B.LOAD_CORE)
            procs.append(b)

            # Propagation to both gateways.
            for n in range(args.changes):
                t = time.time()
                rev = change(n * 7919, n + 1, upstreams, routes)
                res["etcd_put_ms"].append((time.time() - t) * 1000)
                pending = {"a", "b"}
                while pending and time.time() - t < 10:
                    for name in list(pending):
                        if applied(name)["applied_revision"] >= rev:
                            res["propagation_ms"][name].append((time.time() - t) * 1000)
                            pending.discard(name)
                    time.sleep(0.002)
                if pending:
                    raise RuntimeError(f"change {n} (revision {rev}) did not reach {pending} within 10 s")
                time.sleep(0.05)

            # Gateway B has done its part (propagation). It runs on the load core, where its
            # own work on each change would slow the load generator and be counted as A's.
            b.stop()
            procs.remove(b)

            # CPU per change, and p99 of traffic with and without changes.
            def latency(duration):
                r = B.loadgen("latency", GW["a"][1], duration, ["--tls", "1.3", "--sni", "h1.test",
                                                                "--path", "/api/v1/1k", "--keepalive", "4",
                                                                "--storm", "0"])
                return r["p99_ms"]

            for run in range(args.runs):
                c0, i0 = a.cpu(), idle_priority_cpu(a.p.pid)
                time.sleep(args.duration)
                idle = a.cpu() - c0
                idle_normal = idle - (idle_priority_cpu(a.p.pid) - i0)
                res["p99_ms_quiet"].append(latency(args.duration))
                # Changes at 10/s while the same traffic runs.
                import threading
                stop = threading.Event()
                made = [0]

                def changer(control=False):
                    k = 0
                    while not stop.is_set():
                        t = time.time()
                        if control:
                            # The same write to a key no gateway watches: etcd's and the load
                            # core's share of the rise, without the gateway's.
                            etcd_put("/elsewhere/noise", route_json(k, k))
                        else:
                            change(100003 * (k + 1), k + run, upstreams, routes)
                        made[0] += 1
                        k += 1
                        stop.wait(max(0.0, 0.1 - (time.time() - t)))

                th = threading.Thread(target=changer)
                c0, i0 = a.cpu(), idle_priority_cpu(a.p.pid)
                th.start()
                time.sleep(args.duration)
                stop.set()
                th.join()
                busy = a.cpu() - c0
                busy_normal = busy - (idle_priority_cpu(a.p.pid) - i0)
                res["cpu_ms_per_change"].append(max(0.0, busy - idle) / max(made[0], 1) * 1000)
                # What competes with requests: the change's CPU at the normal priority (the
                # event loop and its blocking threads), not the idle-priority part.
                res["normal_cpu_ms_per_change"].append(max(0.0, busy_normal - idle_normal) / max(made[0], 1) * 1000)
                stop.clear()
                made[0] = 0
                th = threading.Thread(target=changer)
                th.start()
                res["p99_ms_changes"].append(latency(args.duration))
                stop.set()
                th.join()
                stop.clear()
                th = threading.Thread(target=changer, args=(True,))
                th.start()
                res["p99_ms_control"].append(latency(args.duration))
                stop.set()
                th.join()
                B.log(f"  run {run + 1}: {res['cpu_ms_per_change'][-1]:.2f} ms CPU per change "
                      f"({res['normal_cpu_ms_per_change'][-1]:.2f} ms at normal priority); p99 "
                      f"{res['p99_ms_quiet'][-1]:.2f} ms quiet, {res['p99_ms_changes'][-1]:.2f} ms with 10 changes/s, "
                      f"{res['p99_ms_control'][-1]:.2f} ms with 10 writes/s elsewhere")

            # Route lookup: 40,000 routes against one.
            one = B.Proc("one-route", [str(B.SLUICE), "run", "--config", f"{d}/one.toml", "--pid-file", f"{d}/one.pid"],
                         B.GW_CORE, ONE_ROUTE, f"{d}/one.out")
            procs.append(one)
            for run in range(args.runs):
                order = [("rps_one_route", ONE_ROUTE, one), ("rps_all_routes", GW["a"][0], a)]
                for key, port, proc in (order if run % 2 == 0 else order[::-1]):
                    c0 = proc.cpu()
                    out, _ = B.run_load(["h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-D",
                                         str(max(1, round(args.duration))), f"http://127.0.0.1:{port}/api/v7/1k"])
                    m = B.H2LOAD_RE["succeeded"].search(out)
                    done = int(m.group(1)) if m else 0
                    if done == 0:
                        raise RuntimeError(f"nothing served on port {port}:\n{out}")
                    busy = proc.cpu() - c0
                    # Requests per second of gateway CPU: what one core would serve.
                    res[key].append(done / max(busy, 1e-6))
                    B.log(f"  {key}: {res[key][-1]:,.0f} req/s per gateway core")
        finally:
            for p in reversed(procs):
                p.stop()

    S = B.summarize
    f = lambda s, unit="": f"{s['median']:,.2f}{unit} [{s['min']:,.2f}-{s['max']:,.2f}]"
    prop = {k: sorted(v) for k, v in res["propagation_ms"].items()}
    pct = lambda v, q: v[min(len(v) - 1, int(q * len(v)))]
    ratios = [b / a for a, b in zip(res["rps_one_route"], res["rps_all_routes"])]
    p99_ratio = [b / a for a, b in zip(res["p99_ms_quiet"], res["p99_ms_changes"])]
    print(f"# Fleet mode: {routes:,} routes, {upstreams:,} upstreams, {certs} certificates in etcd, two gateways\n")
    print(f"CPU: {cpu}. {args.runs} runs x {args.duration:g} s; median [min-max]. Gateway A on the gateway core; "
          f"etcd, origin, gateway B (stopped after the propagation figures) and the load on the load core.\n")
    print("| figure | Sluice | goal |")
    print("|---|---|---|")
    print(f"| cold start to serving (s) | {f(S(res['cold_start_s']))} | — |")
    print(f"| RSS after start (MiB) | {f(S(res['rss_mib']))} | — |")
    for name in ("a", "b"):
        v = prop[name]
        print(f"| propagation of one route change to gateway {name.upper()}, p50 / p99 (ms, {len(v)} changes) | "
              f"{pct(v, 0.5):.1f} / {pct(v, 0.99):.1f} | p99 ≤ 100 |")
    v = sorted(res["etcd_put_ms"])
    print(f"| of which etcd's own write (the put's answer), p50 / p99 (ms) | {pct(v, 0.5):.1f} / {pct(v, 0.99):.1f} | — |")
    print(f"| gateway CPU per route change (ms) | {f(S(res['cpu_ms_per_change']))} | ≤ 20 |")
    print(f"| of which at normal priority: the event loop and its blocking threads (ms) | "
          f"{f(S(res['normal_cpu_ms_per_change']))} | — |")
    print(f"| keep-alive HTTPS p99 without changes (ms) | {f(S(res['p99_ms_quiet']))} | — |")
    print(f"| the same with 10 changes/s (ms) | {f(S(res['p99_ms_changes']))} | — |")
    print(f"| ratio with/without changes | {f(S(p99_ratio), 'x')} | ≤ 1.5x |")
    control = [b / a for a, b in zip(res["p99_ms_quiet"], res["p99_ms_control"])]
    print(f"| control: 10 writes/s to a key no gateway watches (ms; ratio) | {f(S(res['p99_ms_control']))}; "
          f"{f(S(control), 'x')} | — |")
    print(f"| HTTP/1.1 req/s per gateway core, one route | {f(S(res['rps_one_route']))} | — |")
    print(f"| the same, {routes:,} routes | {f(S(res['rps_all_routes']))} | — |")
    print(f"| ratio {routes:,} routes / one | {f(S(ratios), 'x')} | ≥ 0.9x |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-fleet{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "routes": routes, "upstreams": upstreams, "certificates": certs,
                                "runs": args.runs, "duration": args.duration, "results": res}, indent=1))
    B.log(f"results: {path}")


if __name__ == "__main__":
    main()
