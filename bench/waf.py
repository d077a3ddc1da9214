#!/usr/bin/env python3
"""What the web application firewall costs: Sluice's `[route.waf]` beside NGINX with
ModSecurity-nginx (Debian's libnginx-mod-http-modsecurity), the same libmodsecurity 3.0.9
and the same rules (Debian's OWASP Core Rule Set 3.3.4 without its IP reputation file, at
paranoia level 1 and, in rows of their own, 2; blocking mode, ModSecurity's recommended body
settings), side by side on the gateway core.

Rows, each gateway: a listener without a WAF, then a WAF listener per paranoia level (for
Sluice, one per engine and level: libmodsecurity and the native engine,
`[[waf.ruleset]] engine = "native"`) with keep-alive HTTP/1.1
GETs of a 1 KiB page and POSTs of a 10 KiB urlencoded form (benign: nothing matches; h2load,
32 connections, on the load core with the NGINX origin). Per row: gateway CPU µs per request
(all threads, user + system, the WAF's threads included), median of the runs [min-max]; what
the WAF adds over the same gateway's row without it, run by run; and Sluice's WAF rows over
NGINX's, run by run (the issue's figure: total CPU per request).

A benign GET's latency (the issue's "added latency p99 <= 1 ms"): at a moderate, fixed rate
(4 keep-alive connections of 250 requests a second: no core near saturation), p50 and p99 of
each request's time to its whole response (h2load's per-request log), through each gateway
without a WAF and with each engine; what the WAF adds is the p99's difference, run by run.

Before measuring, one attack through each gateway must be refused (403) and one benign
request served, so that a row never measures rules that do not run.

Called by bench/waf.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import bench as B

ORIGIN = 18800
SLUICE = {"none": 18810, "waf": 18811, "native": 18812, "waf pl2": 18813, "native pl2": 18814}
# The first Sluice process sets `[waf] inline_percent = 0` (every inspection on the WAF's
# threads); a second one keeps Sluice's default (50) or `--inline-percent`: the native engine's
# inspections of requests without a body run on the event loop within that share of its time
# (the POSTs still go to the WAF's threads).
SLUICE_INLINE = {"native": 18815, "native pl2": 18816}
NGINX = {"none": 18820, "waf": 18821, "waf pl2": 18822}
RULES = Path("/usr/share/modsecurity-crs/rules")


def crs_files():
    """Debian's CRS 3.3.4 in load order without REQUEST-910 (IP reputation, which needs an
    HTTP:BL key to do anything; left out as in every earlier run, so rows compare): the same files
    for every gateway and engine."""
    rules = sorted(str(p) for p in RULES.glob("*.conf") if not p.name.startswith("REQUEST-910-"))
    return ["/etc/modsecurity/crs/crs-setup.conf"] + rules

# What Sluice loads before and after the rule set's files for a route (crates/waf/src/rules.rs,
# `head` and `tail`): NGINX gets the same directives. `engine` is "On" (mode = "block") or
# "DetectionOnly" (mode = "detect").
def modsec_head(engine="On", paranoia=1, body_limit=131072):
    return f"""SecRuleEngine {engine}
SecRequestBodyAccess On
SecRequestBodyLimit {body_limit}
SecRequestBodyNoFilesLimit {body_limit}
SecRequestBodyLimitAction Reject
SecResponseBodyAccess Off
SecAuditEngine Off
SecRule REQUEST_HEADERS:Content-Type "^(?:application(?:/soap\\+|/)|text/)xml" "id:200000,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=XML"
SecRule REQUEST_HEADERS:Content-Type "^application/json" "id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule REQBODY_ERROR "!@eq 0" "id:200002,phase:2,t:none,log,deny,status:400,msg:'Failed to parse request body.',logdata:'%{{reqbody_error_msg}}',severity:2"
SecRule MULTIPART_STRICT_ERROR "!@eq 0" "id:200003,phase:2,t:none,log,deny,status:400,msg:'Multipart request body failed strict validation'"
SecAction "id:880001,phase:1,pass,nolog,t:none,setvar:tx.paranoia_level={paranoia},setvar:tx.blocking_paranoia_level={paranoia},setvar:tx.detection_paranoia_level={paranoia},setvar:tx.inbound_anomaly_score_threshold=5,setvar:tx.outbound_anomaly_score_threshold=4"
"""


def modsec_tail(engine="On"):
    return f"""SecRuleEngine {engine}
SecRule TX:ANOMALY_SCORE|TX:BLOCKING_INBOUND_ANOMALY_SCORE "@gt 0" "id:880009,phase:2,pass,log,t:none,msg:'Sluice: inbound anomaly score',logdata:'%{{MATCHED_VAR}}'"
"""


UA = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"


def form(n):
    """A benign urlencoded form of `n` bytes (words, as a comment box sends them)."""
    words = "the quick brown fox jumps over a lazy dog while sluice keeps the gate ".split()
    out, i = ["name=Ann+Example&email=ann%40example.com&comment="], 0
    while sum(map(len, out)) < n:
        out.append(words[i % len(words)] + "+")
        i += 1
    return "".join(out)[:n].encode()


def origin_conf(d):
    return B.NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    default_type text/plain;
    server {{
        listen 127.0.0.1:{ORIGIN} backlog=4096;
        root {d}/www;
        client_body_buffer_size 64k;
        location = /form {{ return 200 "ok\\n"; }}
    }}
}}
"""


def nginx_conf(d):
    return "load_module /usr/lib/nginx/modules/ngx_http_modsecurity_module.so;\n" + \
        B.NGINX_COMMON.format(d=d, name="nginx") + f"""
    access_log off;
    client_body_buffer_size 64k;
    upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 64; }}
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    server {{
        listen 127.0.0.1:{NGINX['none']} backlog=4096;
        location / {{ proxy_pass http://o; }}
    }}
    server {{
        listen 127.0.0.1:{NGINX['waf']} backlog=4096;
        modsecurity on;
        modsecurity_rules_file {d}/modsec.conf;
        location / {{ proxy_pass http://o; }}
    }}
    server {{
        listen 127.0.0.1:{NGINX['waf pl2']} backlog=4096;
        modsecurity on;
        modsecurity_rules_file {d}/modsec2.conf;
        location / {{ proxy_pass http://o; }}
    }}
}}
"""


def modsec_conf(paranoia=1):
    return modsec_head(paranoia=paranoia) + "".join(f"Include {f}\n" for f in crs_files()) + modsec_tail()


def sluice_conf(ports=SLUICE, inline_percent=0):
    files = ", ".join(f'"{f}"' for f in crs_files())
    return f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[[upstream]]
name = "o"
keepalive = 64
servers = [{{ address = "127.0.0.1:{ORIGIN}" }}]
[waf]
inline_percent = {inline_percent}
[[waf.ruleset]]
name = "crs"
engine = "modsecurity"
files = [{files}]
[[waf.ruleset]]
name = "crs-native"
engine = "native"
files = [{files}]
""" + "".join(sluice_listener(key, port) for key, port in ports.items())


def sluice_listener(key, port):
    """One listener of `SLUICE` and its route: "none" without a WAF, "waf" on libmodsecurity,
    "native" on the native engine, " pl2" at paranoia level 2."""
    name = key.replace(" ", "-")
    engine, _, level = key.partition(" ")
    out = f"""[[listener]]
name = "{name}"
address = "127.0.0.1:{port}"
request_id = false
[[route]]
name = "{name}"
listeners = ["{name}"]
upstream = "o"
"""
    if engine != "none":
        out += f"""[route.waf]
ruleset = "{'crs-native' if engine == 'native' else 'crs'}"
"""
    if level == "pl2":
        out += "paranoia_level = 2\n"
    return out


def h2load(port, duration, kind, d):
    argv = ["h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-D", str(max(1, round(duration))),
            "-H", f"user-agent: {UA}", "-H", "accept: text/html,*/*"]
    if kind == "post":
        argv += ["-d", f"{d}/form.txt", "-H", "content-type: application/x-www-form-urlencoded"]
        url = f"http://127.0.0.1:{port}/form"
    else:
        url = f"http://127.0.0.1:{port}/1k"
    out, _ = B.run_load(argv + [url])
    m = B.H2LOAD_RE["succeeded"].search(out)
    bad = re.search(r"status codes: \d+ 2xx, \d+ 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if bad and (int(bad.group(1)) or int(bad.group(2))):
        raise RuntimeError(f"port {port} {kind}: {bad.group(1)} 4xx, {bad.group(2)} 5xx; a benign request was refused")
    return int(m.group(1)) if m else 0


def measure(proc, port, duration, kind, d):
    """Gateway CPU per request, all threads; for Sluice also its WAF threads' alone (the
    engine's work, which no change to the rest of the gateway can cut)."""
    waf = lambda: B.threads_cpu_seconds(proc.p.pid, "sluice-waf") if proc.name == "sluice" else 0.0
    cpu0, waf0 = proc.cpu(), waf()
    done = h2load(port, duration, kind, d)
    if done == 0:
        raise RuntimeError(f"nothing served on port {port}")
    cpu, waf_cpu = proc.cpu() - cpu0, waf() - waf0
    return {"completed": done, "cpu_us_per_req": cpu / done * 1e6, "cpu_s": cpu,
            "waf_threads_us_per_req": waf_cpu / done * 1e6}


# The latency rows' offered load: this many keep-alive connections of LAT_RPS requests a second.
LAT_CLIENTS, LAT_RPS = 4, 250
# Which listeners the latency rows measure (gateway, key of its ports), benign GETs only.
LAT_ROWS = (("sluice", "none"), ("sluice", "native"), ("sluice", "waf"), ("sluice-inline", "native"),
            ("nginx", "none"), ("nginx", "waf"))


def latency(port, duration, d):
    """p50 and p99 ms of benign keep-alive GETs at LAT_CLIENTS x LAT_RPS requests a second,
    from h2load's per-request log (microseconds from each request's start to its response's
    end); every response must be a 200."""
    log = Path(d, f"latency-{port}.tsv")
    log.unlink(missing_ok=True)
    argv = ["h2load", "--h1", "-t", "1", "-c", str(LAT_CLIENTS), "-m", "1", f"--rps={LAT_RPS}",
            "-D", str(max(1, round(duration))), "--log-file", str(log),
            "-H", f"user-agent: {UA}", "-H", "accept: text/html,*/*", f"http://127.0.0.1:{port}/1k"]
    B.run_load(argv)
    rows = [line.split("\t") for line in log.read_text().splitlines() if line.strip()]
    refused = [r for r in rows if r[1] != "200"]
    if refused or not rows:
        raise RuntimeError(f"port {port} latency: {len(rows)} requests, {len(refused)} not 200")
    us = sorted(int(r[2]) for r in rows)
    q = lambda f: us[min(len(us) - 1, int(f * len(us)))] / 1000
    return {"requests": len(us), "p50_ms": q(0.50), "p99_ms": q(0.99)}


def status(port, path):
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-A", UA,
                          f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True)
    return out.stdout.strip()


def check_rules_run(ports):
    """Each WAF listener refuses an attack and serves a benign page; the plain one serves both."""
    for name, port in ports.items():
        attack = status(port, "/1k?id=1%27%20or%20%271%27%3D%271")
        benign = status(port, "/1k?page=2")
        want = "403" if name.split()[1] in ("waf", "native") else "200"
        if (attack, benign) != (want, "200"):
            raise RuntimeError(f"{name}: attack {attack}, benign {benign}: the rules do not run as configured")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per row")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    ap.add_argument("--inline-percent", type=int, default=50,
                    help="[waf] inline_percent of the second Sluice process (the sluice-inline rows; "
                         "default 50, Sluice's own; the first process sets 0: every inspection on the WAF's threads)")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs x {args.duration:g} s per row")
    kinds = ("get", "post")
    gateways = (("sluice", SLUICE), ("nginx", NGINX), ("sluice-inline", SLUICE_INLINE))
    rows = {f"{g} {k} {kind}": [] for g, ports in gateways for k in ports for kind in kinds}
    rows.update({f"latency {g} {k}": [] for g, k in LAT_ROWS})
    with tempfile.TemporaryDirectory(prefix="sluice-waf-") as d:
        os.chmod(d, 0o755)
        www = Path(d, "www")
        www.mkdir()
        www.joinpath("1k").write_bytes((b"Sluice WAF benchmark body.\n" * 40)[:1024])
        Path(d, "form.txt").write_bytes(form(10 * 1024))
        Path(d, "origin.conf").write_text(origin_conf(d))
        Path(d, "nginx.conf").write_text(nginx_conf(d))
        Path(d, "modsec.conf").write_text(modsec_conf())
        Path(d, "modsec2.conf").write_text(modsec_conf(paranoia=2))
        Path(d, "sluice.toml").write_text(sluice_conf())
        Path(d, "sluice-inline.toml").write_text(sluice_conf(SLUICE_INLINE, args.inline_percent))
        procs = []
        try:
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, ORIGIN, f"{d}/origin.out"))
            nginx = B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE, NGINX["waf"], f"{d}/nginx.out")
            procs.append(nginx)
            sluice = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/sluice.pid"],
                            B.GW_CORE, SLUICE["waf"], f"{d}/sluice.out")
            procs.append(sluice)
            inline = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice-inline.toml", "--pid-file",
                                       f"{d}/sluice-inline.pid"], B.GW_CORE, SLUICE_INLINE["native"], f"{d}/sluice-inline.out")
            procs.append(inline)
            check_rules_run({f"{g} {k}": p for g, ports in gateways for k, p in ports.items()})
            proc_of = {"sluice": sluice, "nginx": nginx, "sluice-inline": inline}
            plan = [(f"{g} {k} {kind}", proc_of[g], port, kind)
                    for g, ports in gateways for k, port in ports.items() for kind in kinds]
            for name, proc, port, kind in plan:
                measure(proc, port, 1, kind, d)  # warm-up
            ports_of = {"sluice": SLUICE, "nginx": NGINX, "sluice-inline": SLUICE_INLINE}
            lat_plan = [(f"latency {g} {k}", ports_of[g][k]) for g, k in LAT_ROWS]
            for run in range(args.runs):
                for name, proc, port, kind in (plan if run % 2 == 0 else list(reversed(plan))):
                    r = measure(proc, port, args.duration, kind, d)
                    rows[name].append(r)
                    B.log(f"  {name}: {r['cpu_us_per_req']:.2f} µs/req")
                for name, port in (lat_plan if run % 2 == 0 else list(reversed(lat_plan))):
                    r = latency(port, args.duration, d)
                    rows[name].append(r)
                    B.log(f"  {name}: p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms ({r['requests']} requests)")
        finally:
            for p in reversed(procs):
                p.stop()
    report(cpu, args, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-waf{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration,
                                "inline_percent": args.inline_percent, "rows": rows}, indent=1))
    B.log(f"results: {path}")


def report(cpu, args, rows):
    f = lambda s: f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"
    x = lambda s: f"{s['median']:.2f}x [{s['min']:.2f}-{s['max']:.2f}]"
    us = lambda name: [r["cpu_us_per_req"] for r in rows[name]]
    print("# What the WAF costs per request (CRS 3.3.4, blocking; keep-alive HTTP/1.1)\n")
    print(f"CPU: {cpu}. {args.runs} runs x {args.duration:g} s per row, rows alternating; median [min-max]. "
          "Gateway CPU µs per request, all threads; 'added' is over the same gateway's row without a WAF, run by run.\n")
    print("| request | paranoia level | gateway | without WAF | with WAF | added by the WAF |")
    print("|---|---|---|---|---|---|")
    for kind, what in (("get", "GET 1 KiB page"), ("post", "POST 10 KiB form")):
        for level, suffix in ((1, ""), (2, " pl2")):
            for g, engine in (("sluice", "native"), ("sluice", "waf"), ("nginx", "waf")):
                label = f"{g} (native engine)" if engine == "native" else f"{g} (libmodsecurity)"
                row = f"{g} {engine}{suffix} {kind}"
                added = [a - b for a, b in zip(us(row), us(f"{g} none {kind}"))]
                print(f"| {what} | {level} | {label} | {f(B.summarize(us(f'{g} none {kind}')))} | "
                      f"{f(B.summarize(us(row)))} | {f(B.summarize(added))} |")
    print()
    for kind, what in (("get", "GET"), ("post", "POST 10 KiB form")):
        total = B.summarize([a / b for a, b in zip(us(f"sluice waf {kind}"), us(f"nginx waf {kind}"))])
        added = B.summarize([(a - b) / (c - e) if c > e else float("nan") for a, b, c, e in
                             zip(us(f"sluice waf {kind}"), us(f"sluice none {kind}"), us(f"nginx waf {kind}"), us(f"nginx none {kind}"))])
        engine = B.summarize([r["waf_threads_us_per_req"] for r in rows[f"sluice waf {kind}"]])
        bound = B.summarize([r["waf_threads_us_per_req"] / n["cpu_us_per_req"]
                             for r, n in zip(rows[f"sluice waf {kind}"], rows[f"nginx waf {kind}"])])
        print(f"- {what}: Sluice's CPU per request with the WAF / NGINX + ModSecurity's, run by run: {x(total)}; "
              f"what the WAF adds, Sluice / NGINX: {x(added)}; Sluice's WAF threads alone (the engine's "
              f"evaluation): {f(engine)} µs, {x(bound)} of NGINX's whole request")
        for level, suffix in ((1, ""), (2, " pl2")):
            native = B.summarize([a / b for a, b in zip(us(f"sluice native{suffix} {kind}"), us(f"sluice waf{suffix} {kind}"))])
            native_nginx = B.summarize([a / b for a, b in zip(us(f"sluice native{suffix} {kind}"), us(f"nginx waf{suffix} {kind}"))])
            native_added = B.summarize([(a - b) / (c - b) if c > b else float("nan") for a, b, c in
                                        zip(us(f"sluice native{suffix} {kind}"), us(f"sluice none {kind}"), us(f"sluice waf{suffix} {kind}"))])
            native_threads = B.summarize([r["waf_threads_us_per_req"] / m["waf_threads_us_per_req"]
                                          for r, m in zip(rows[f"sluice native{suffix} {kind}"], rows[f"sluice waf{suffix} {kind}"])
                                          if m["waf_threads_us_per_req"] > 0] or [float("nan")])
            print(f"- {what}, paranoia level {level}, the native engine: Sluice's CPU per request with it / with "
                  f"libmodsecurity: {x(native)}; / NGINX + ModSecurity's: {x(native_nginx)}; what the WAF adds, "
                  f"native / libmodsecurity: {x(native_added)}; WAF threads, native / libmodsecurity: {x(native_threads)}")
            inline = f"sluice-inline native{suffix} {kind}"
            on_loop = B.summarize([a / b for a, b in zip(us(inline), us(f"sluice waf{suffix} {kind}"))])
            vs_threads = B.summarize([a / b for a, b in zip(us(inline), us(f"sluice native{suffix} {kind}"))])
            print(f"- {what}, paranoia level {level}, the native engine with inline_percent = {args.inline_percent} "
                  f"(a second Sluice process): {f(B.summarize(us(inline)))} µs per request; / libmodsecurity's: "
                  f"{x(on_loop)}; / the native engine on the WAF's threads: {x(vs_threads)}")
    ms = lambda s: f"{s['median']:.3f} [{s['min']:.3f}-{s['max']:.3f}]"
    p = lambda name, key: [r[key] for r in rows[name]]
    print(f"\n## A benign GET's latency at {LAT_CLIENTS * LAT_RPS:,} requests a second "
          f"({LAT_CLIENTS} keep-alive connections, paranoia level 1)\n")
    print("ms from each request's start to its response's end; 'added' is the p99 over the same gateway's "
          "without a WAF, run by run.\n")
    print("| gateway | engine | p50 | p99 | p99 added by the WAF |")
    print("|---|---|---|---|---|")
    for g, k in LAT_ROWS:
        name = f"latency {g} {k}"
        base = f"latency {'sluice' if g == 'sluice-inline' else g} none"
        added = "" if k == "none" else ms(B.summarize([a - b for a, b in zip(p(name, "p99_ms"), p(base, "p99_ms"))]))
        engine = {"none": "no WAF", "native": "native", "waf": "libmodsecurity"}[k]
        if g == "sluice-inline":
            engine += f", inline_percent = {args.inline_percent}"
        print(f"| {g.split('-')[0]} | {engine} | {ms(B.summarize(p(name, 'p50_ms')))} | "
              f"{ms(B.summarize(p(name, 'p99_ms')))} | {added} |")


if __name__ == "__main__":
    main()
