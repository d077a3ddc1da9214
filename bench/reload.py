#!/usr/bin/env python3
"""Reloads under load, Sluice and NGINX side by side (issue: live configuration).

Each gateway carries, for --duration seconds, keep-alive HTTP/1.1 and HTTP/2 requests,
full TLS 1.3 handshakes, 50 WebSockets echoing every 200 ms and 20 server-sent-event
streams (`sluice-loadgen soak`, through TLS), three times:
  baseline  no reloads (the p99 reference);
  reloads   10 reloads a second, two valid configurations alternating, and once a second an
            invalid one (Sluice: SIGHUP; NGINX: its master's SIGHUP, what `nginx -s reload`
            sends);
  upgrade   one binary upgrade in the middle (Sluice: `sluice upgrade`; NGINX: USR2, then
            QUIT to the old master once the new one runs, its documented procedure).
Reported: requests, failures and retries (a request the client sent again because a reused
connection closed before processing it, as RFC 9112 9.3.1 and RFC 9113 8.7 allow; a second
such error in a row is a failure), WebSockets and streams cut, p99 latency against the
baseline, and the gateway's RSS, threads, processes and open descriptors: before the phase,
its peak (sampled every 0.5 s) and one second after it.
Gateways on core 0 (NGINX: one worker), the load generator and the origin on core 1.

Called by bench/reload (the shell wrapper), which installs what it needs and builds.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402

ORIGIN = 18090
PORT = {"sluice": 18451, "nginx": 18452}
ADMIN = 18459


def sluice_conf(d, variant, port):
    """Two valid variants that differ in a route and an upstream setting; "bad" is invalid."""
    extra = {
        "a": "",
        "b": '\n[[route]]\nname = "extra"\npath_prefix = "/extra"\nupstream = "origin"\n',
        "bad": '\n[[route]]\nname = "broken"\nupstream = "missing"\n',
    }[variant]
    keepalive = 32 if variant == "a" else 16
    return f"""
[global]
# The drain window of an upgrade's old process: WebSockets and streams it carries live until
# it ends. Longer than a phase, like NGINX's default (no worker_shutdown_timeout).
shutdown_timeout = "300s"
[log]
access_log = "off"
[admin]
address = "127.0.0.1:{ADMIN}"
[offload.crypto]
engines = ["pool"]
pool_threads = 1
[[listener]]
name = "https"
address = "127.0.0.1:{port}"
protocols = ["h2", "http/1.1"]
[listener.tls]
[[certificate]]
name = "ecdsa"
cert = "{d}/ecdsa.crt"
key = "{d}/ecdsa.key"
[[upstream]]
name = "origin"
keepalive = {keepalive}
servers = [{{ address = "127.0.0.1:{ORIGIN}" }}]
[[route]]
name = "all"
upstream = "origin"
{extra}"""


def nginx_conf(d, variant, port):
    extra = {
        "a": "",
        "b": "location /extra { proxy_pass http://origin; }",
        "bad": "location /broken { proxy_pass http://missing_upstream; unknown_directive on; }",
    }[variant]
    keepalive = 32 if variant == "a" else 16
    # Daemonized: NGINX ignores USR2 (binary upgrade) while its parent is alive, so the
    # master must be a child of init, as in production.
    common = B.NGINX_COMMON.format(d=d, name="nginx").replace("daemon off;", "daemon on;")
    return common + f"""
    access_log off;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
    upstream origin {{ server 127.0.0.1:{ORIGIN}; keepalive {keepalive}; }}
    server {{
        listen 127.0.0.1:{port} ssl http2 reuseport backlog=4096;
        ssl_certificate {d}/ecdsa.crt;
        ssl_certificate_key {d}/ecdsa.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_buffering off;
            proxy_read_timeout 1h;
        }}
        {extra}
    }}
}}
"""


def tree(pid):
    """Every process of the gateway: pid and its descendants."""
    pids, frontier = [pid], [pid]
    while frontier:
        nxt = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) in frontier:
                    nxt.append(int(entry))
        pids += nxt
        frontier = nxt
    return pids


def footprint(pids):
    rss = threads = fds = 0
    alive = 0
    for p in pids:
        try:
            status = Path(f"/proc/{p}/status").read_text()
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            continue
        alive += 1
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1])
            elif line.startswith("Threads:"):
                threads += int(line.split()[1])
    return {"rss_mib": round(rss / 1024, 1), "threads": threads, "fds": fds, "processes": alive}


class Gateway:
    def __init__(self, kind, d):
        self.kind, self.d, self.port = kind, d, PORT[kind]
        self.conf = Path(d) / ("sluice.toml" if kind == "sluice" else "nginx.conf")
        self.write("a")
        self.pid_file = Path(d) / f"{kind}.pid"
        if kind == "sluice":
            argv = [str(B.SLUICE), "run", "--config", str(self.conf), "--pid-file", str(self.pid_file)]
        else:
            # By full path: NGINX's upgrade re-executes argv[0].
            argv = [shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(self.conf), "-p", d]
        self.proc = B.Proc(kind, argv, B.GW_CORE, self.port, f"{d}/{kind}.out")

    def write(self, variant):
        text = (sluice_conf if self.kind == "sluice" else nginx_conf)(self.d, variant, PORT[self.kind])
        tmp = self.conf.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.conf)

    def master(self):
        """The process that serves now (after an upgrade, not the one we started)."""
        try:
            return int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return self.proc.p.pid

    def reload(self):
        os.kill(self.master(), signal.SIGHUP)

    def upgrade(self):
        if self.kind == "sluice":
            out = subprocess.run([str(B.SLUICE), "upgrade", "--pid-file", str(self.pid_file)],
                                 capture_output=True, text=True)
            return out.returncode == 0, (out.stdout + out.stderr).strip()
        # NGINX: USR2 starts a new master (pid file -> .oldbin); QUIT the old one when it runs.
        old = self.master()
        os.kill(old, signal.SIGUSR2)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                new = int(self.pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                new = old
            if new != old:
                os.kill(old, signal.SIGQUIT)
                return True, f"nginx master {new} serves; {old} quits"
            time.sleep(0.05)
        return False, "nginx did not start a new master"

    def footprint(self):
        pids = tree(self.proc.p.pid)
        m = self.master()
        if m not in pids:
            pids += tree(m)
        return footprint(pids)

    def stop(self):
        m = self.master()
        if m != self.proc.p.pid:
            try:
                os.kill(m, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.proc.stop()


def soak(gw, duration):
    argv = [str(B.LOADGEN), "soak", "--addr", f"127.0.0.1:{gw.port}", "--path", "/1k",
            "--duration", f"{duration}s", "--http1", "4", "--http2", "1", "--streams", "4",
            "--handshakes", "2", "--websockets", "50", "--sse", "20"]
    return subprocess.Popen(["taskset", "-c", B.LOAD_CORE] + argv, stdout=subprocess.PIPE, text=True)


def phase(gw, mode, duration):
    before = gw.footprint()
    load = soak(gw, duration)
    stop = threading.Event()
    peak = dict(before)

    def sampler():
        while not stop.wait(0.5):
            f = gw.footprint()
            for k in peak:
                peak[k] = max(peak[k], f[k])

    sampling = threading.Thread(target=sampler)
    sampling.start()
    events = {"reloads": 0, "invalid": 0, "upgrade": None}

    def reloader():
        i = 0
        while not stop.wait(0.1):
            i += 1
            if i % 10 == 0:
                gw.write("bad")
                events["invalid"] += 1
            else:
                gw.write("b" if i % 2 else "a")
            gw.reload()
            events["reloads"] += 1
        gw.write("a")

    t = None
    if mode == "reloads":
        time.sleep(0.5)
        t = threading.Thread(target=reloader)
        t.start()
    elif mode == "upgrade":
        time.sleep(duration / 2)
        events["upgrade"] = gw.upgrade()
    out, _ = load.communicate(timeout=duration + 60)
    stop.set()
    if t:
        t.join()
    sampling.join()
    time.sleep(1.0)
    after = gw.footprint()
    return {"mode": mode, "events": events, "load": json.loads(out), "before": before, "after": after,
            "peak": peak}


def p99_of(r):
    return max(r["load"]["http1"]["p99_ms"], r["load"]["http2"]["p99_ms"])


def row(kind, runs, i):
    """One table row: phase `i` of `kind` over every run (figures summed over runs, p99 and
    its ratio to the same run's baseline as median [min-max], footprint of the last run)."""
    phases = [run[i] for run in runs]
    last = phases[-1]

    def total(f):
        return sum(f(r["load"]) for r in phases)

    reqs = statistics.median(r["load"]["http1"]["requests"] + r["load"]["http2"]["requests"] for r in phases)
    failed = total(lambda l: l["http1"]["failed"] + l["http2"]["failed"] + l["handshakes"]["failed"])
    retried = total(lambda l: l["http1"].get("retried", 0) + l["http2"].get("retried", 0))
    hs = statistics.median(r["load"]["handshakes"]["completed"] for r in phases)
    ws_cut, ws_open = total(lambda l: l["websockets"]["cut"]), total(lambda l: l["websockets"]["opened"])
    sse_cut, sse_open = total(lambda l: l["sse"]["cut"]), total(lambda l: l["sse"]["opened"])
    p99s = [p99_of(r) for r in phases]
    ratios = [p99_of(run[i]) / (p99_of(run[0]) or 1e-9) for run in runs]
    ev = last["events"]
    upgrades = [r["events"]["upgrade"] for r in phases if r["events"]["upgrade"]]
    what = {"baseline": "no reloads",
            "reloads": f"{ev['reloads']} reloads ({ev['invalid']} invalid) per run",
            "upgrade": "one binary upgrade" + ("" if all(u[0] for u in upgrades) else " (FAILED)")}[last["mode"]]
    b, a, pk = last["before"], last["after"], last["peak"]
    rng = f"[{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""
    return (f"| {kind} | {what} | {reqs:,.0f} | {failed} | {retried} | {hs:,.0f} | "
            f"{ws_cut}/{ws_open} | {sse_cut}/{sse_open} | "
            f"{statistics.median(p99s):.2f} ms ({statistics.median(ratios):.2f}x {rng}) | "
            f"{b['rss_mib']}→{a['rss_mib']} (peak {pk['rss_mib']}) MiB | "
            f"{b['threads']}→{a['threads']} | {b['processes']}→{a['processes']} (peak {pk['processes']}) | "
            f"{b['fds']}→{a['fds']} (peak {pk['fds']}) |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--runs", type=int, default=1, help="runs, alternating the gateways")
    ap.add_argument("--smoke", action="store_true", help="3 s phases: keeps the harness working")
    ap.add_argument("--only", choices=["sluice", "nginx"])
    ap.add_argument("--phases", default="baseline,reloads,upgrade",
                    help="comma-separated subset of baseline,reloads,upgrade (baseline is always run first)")
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    duration = 3 if args.smoke else args.duration
    phases = ["baseline"] + [p for p in ("reloads", "upgrade") if p in args.phases.split(",")]
    cpu = B.cpu_model()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%S")
    results = {}
    with tempfile.TemporaryDirectory(prefix="sluice-reload-") as d:
        B.make_certs(d)
        origin = subprocess.Popen(["taskset", "-c", B.LOAD_CORE, str(B.LOADGEN), "origin", "--addr",
                                   f"127.0.0.1:{ORIGIN}", "--duration",
                                   # Outlives every phase of every run (it is stopped below).
                                   f"{int((duration + 30) * 3 * 2 * (1 if args.smoke else args.runs) + 300)}s"],
                                  stdout=subprocess.DEVNULL)
        try:
            B.wait_port(ORIGIN)
            runs = 1 if args.smoke else args.runs
            for n in range(runs):
                for kind in ("sluice", "nginx"):
                    if args.only and kind != args.only:
                        continue
                    B.log(f"reload: {kind}, run {n + 1}/{runs}")
                    gw = Gateway(kind, d)
                    try:
                        results.setdefault(kind, []).append([phase(gw, m, duration) for m in phases])
                    finally:
                        gw.stop()
        finally:
            origin.terminate()
            origin.wait()
    lines = [
        f"Reloads under load ({'smoke, figures mean nothing' if args.smoke else f'{duration:.0f} s per phase, {args.runs} run(s)'}), "
        f"{cpu}, {date}",
        "",
        "| gateway | during the phase | keep-alive requests | failed | retried | handshakes | WebSockets cut | "
        "SSE cut | p99 (vs baseline) | RSS | threads | processes | open fds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, runs_of in results.items():
        lines += [row(kind, runs_of, i) for i in range(len(phases))]
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{date}-reload{'-smoke' if args.smoke else ''}"
    (out / f"{stem}.json").write_text(json.dumps({"cpu": cpu, "date": date, "duration": duration,
                                                  "results": results}, indent=1))
    (out / f"latest-reload{'-smoke' if args.smoke else ''}.md").write_text(table + "\n")
    B.log(f"reload: wrote {out / (stem + '.json')}")


if __name__ == "__main__":
    main()
