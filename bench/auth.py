#!/usr/bin/env python3
"""What identity at the edge costs: Sluice's `[route.auth]` beside NGINX's `auth_basic` and
`ssl_verify_client`, side by side on the gateway core.

Part 1, keep-alive HTTP/1.1 GETs of 1 KiB (h2load, 32 connections, on the load core with the
NGINX origin). Each gateway has a listener per row: none; JWT (ES256, PyJWT's token, the same
token on every request: the verified-token cache's path); JWT with the cache off (every
request verifies the signature: a first-seen token's cost); basic authentication (bcrypt, as
`htpasswd -B` writes it). Per row: gateway CPU µs per request (all threads, user + system),
median of the runs [min-max], and the difference to the same gateway's row without
authentication, run by run. Beside them, what one ES256 verification costs on this core
(`openssl speed -seconds 2 ecdsap256`).

Part 2, mutual TLS: new connections, each a full TLS 1.3 handshake and one request
(`sluice-loadgen handshake`, 32 at once), the server's key RSA-2048 and the client presenting
an ECDSA P-256 certificate of the listener's CA; Sluice with its default engines, NGINX with
`ssl_verify_client on`. Per row: full handshakes per second per gateway core (completed
connections / gateway CPU seconds), and the same without client certificates.

Called by bench/auth.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import bench as B

ORIGIN = 18600
SLUICE = {"none": 18610, "jwt": 18611, "jwt uncached": 18612, "basic": 18613}
NGINX = {"none": 18620, "basic": 18621}
SLUICE_TLS = {"tls": 18630, "mtls": 18631}
NGINX_TLS = {"tls": 18640, "mtls": 18641}
PASSWORD = "correct horse battery staple"


def origin_conf(d):
    return B.NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    default_type text/plain;
    server {{ listen 127.0.0.1:{ORIGIN} backlog=4096; root {d}/www; }}
}}
"""


def nginx_conf(d):
    tls = "".join(f"""
    server {{
        listen 127.0.0.1:{port} ssl backlog=4096;
        ssl_certificate {d}/rsa.crt;
        ssl_certificate_key {d}/rsa.key;
        ssl_protocols TLSv1.3;
        ssl_session_tickets off;
        ssl_session_cache off;
        {f"ssl_client_certificate {d}/clients.crt; ssl_verify_client on;" if row == "mtls" else ""}
        location / {{ proxy_pass http://o; }}
    }}""" for row, port in NGINX_TLS.items())
    return B.NGINX_COMMON.format(d=d, name="nginx") + f"""
    access_log off;
    upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 64; }}
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    server {{
        listen 127.0.0.1:{NGINX['none']} backlog=4096;
        location / {{ proxy_pass http://o; }}
    }}
    server {{
        listen 127.0.0.1:{NGINX['basic']} backlog=4096;
        location / {{ auth_basic "bench"; auth_basic_user_file {d}/users; proxy_pass http://o; }}
    }}{tls}
}}
"""


def sluice_conf(d):
    auth = {
        "none": "",
        "jwt": f'[route.auth]\njwt = {{ keys = "{d}/jwt.pem", algorithms = ["ES256"] }}\n',
        "jwt uncached": f'[route.auth]\njwt = {{ keys = "{d}/jwt.pem", algorithms = ["ES256"], cache_size = 0 }}\n',
        "basic": f'[route.auth]\nbasic = {{ htpasswd = "{d}/users" }}\n',
    }
    out = [f"""
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
name = "o"
keepalive = 64
servers = [{{ address = "127.0.0.1:{ORIGIN}" }}]
"""]
    for row, port in SLUICE.items():
        name = row.replace(" ", "-")
        out.append(f"""
[[listener]]
name = "{name}"
address = "127.0.0.1:{port}"
request_id = false
[[route]]
name = "{name}"
listeners = ["{name}"]
upstream = "o"
{auth[row]}""")
    for row, port in SLUICE_TLS.items():
        client = f'client_auth = "required"\nclient_ca = "{d}/clients.crt"\n' if row == "mtls" else ""
        out.append(f"""
[[listener]]
name = "{row}"
address = "127.0.0.1:{port}"
request_id = false
[listener.tls]
session_tickets = false
min_version = "1.3"
{client}[[route]]
name = "{row}"
listeners = ["{row}"]
upstream = "o"
""")
    return "".join(out)


def make_files(d):
    B.make_certs(d)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)
    run("openssl", "req", "-x509", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-keyout", "clients.key", "-out", "clients.crt", "-days", "30", "-subj", "/CN=bench clients")
    run("openssl", "req", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=bench client")
    run("openssl", "x509", "-req", "-in", "client.csr", "-CA", "clients.crt", "-CAkey", "clients.key",
        "-CAcreateserial", "-out", "client.crt", "-days", "30")
    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "jwt.key")
    run("openssl", "ec", "-in", "jwt.key", "-pubout", "-out", "jwt.pem")
    run("htpasswd", "-cbB", "-C", "5", "users", "bench", PASSWORD)
    token = subprocess.run(
        ["/usr/bin/python3", "-c",
         "import jwt,sys; print(jwt.encode({'sub': 'bench', 'exp': 4102444800}, open(sys.argv[1]).read(), algorithm='ES256'))",
         f"{d}/jwt.key"], check=True, capture_output=True, text=True).stdout.strip()
    www = Path(d, "www")
    www.mkdir()
    www.joinpath("1k").write_bytes((b"Sluice auth benchmark body.\n" * 40)[:1024])
    return token


def h2load(port, duration, header):
    argv = ["h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-D", str(max(1, round(duration)))]
    if header:
        argv += ["-H", header]
    out, _ = B.run_load(argv + [f"http://127.0.0.1:{port}/1k"])
    m = B.H2LOAD_RE["succeeded"].search(out)
    bad = re.search(r"status codes: (\d+) 2xx, \d+ 3xx, (\d+) 4xx", out)
    if bad and int(bad.group(2)):
        raise RuntimeError(f"port {port}: {bad.group(2)} requests refused; the credentials are wrong")
    return int(m.group(1)) if m else 0


def measure_requests(proc, port, duration, header):
    cpu0 = proc.cpu()
    done = h2load(port, duration, header)
    if done == 0:
        raise RuntimeError(f"nothing served on port {port}")
    return {"completed": done, "cpu_us_per_req": (proc.cpu() - cpu0) / done * 1e6}


def measure_handshakes(proc, port, duration, d, mutual):
    cpu0 = proc.cpu()
    extra = ["--tls", "1.3", "--path", "/1k", "--concurrency", "32"]
    if mutual:
        extra += ["--client-cert", f"{d}/client.crt", "--client-key", f"{d}/client.key"]
    r = B.loadgen("handshake", port, duration, extra)
    cpu = proc.cpu() - cpu0
    if not r.get("completed"):
        raise RuntimeError(f"no handshake completed on port {port}: {r}")
    return {"completed": r["completed"], "per_core": r["completed"] / max(cpu, 1e-6), "errors": r.get("errors", 0)}


def ecdsa_verify_us():
    out = subprocess.run(["taskset", "-c", B.GW_CORE, "openssl", "speed", "-seconds", "2", "ecdsap256"],
                         capture_output=True, text=True).stdout
    # "256 bits ecdsa (nistp256)   0.0000s   0.0001s  33870.0  10123.4": the last column is
    # verifications per second (the time columns are rounded to 0.1 ms).
    m = re.search(r"256 bits ecdsa \(nistp256\)\s+[\d.]+s\s+[\d.]+s\s+[\d.]+\s+([\d.]+)", out)
    return 1e6 / float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per row")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs x {args.duration:g} s per row")
    rows = {f"sluice {k}": [] for k in SLUICE} | {f"nginx {k}": [] for k in NGINX}
    tls_rows = {f"sluice {k}": [] for k in SLUICE_TLS} | {f"nginx {k}": [] for k in NGINX_TLS}
    with tempfile.TemporaryDirectory(prefix="sluice-auth-") as d:
        os.chmod(d, 0o755)
        token = make_files(d)
        Path(d, "origin.conf").write_text(origin_conf(d))
        Path(d, "nginx.conf").write_text(nginx_conf(d))
        Path(d, "sluice.toml").write_text(sluice_conf(d))
        import base64
        basic = "authorization: Basic " + base64.b64encode(f"bench:{PASSWORD}".encode()).decode()
        headers = {"none": None, "jwt": f"authorization: Bearer {token}",
                   "jwt uncached": f"authorization: Bearer {token}", "basic": basic}
        procs = []
        try:
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, ORIGIN, f"{d}/origin.out"))
            nginx = B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE, NGINX["basic"], f"{d}/nginx.out")
            procs.append(nginx)
            sluice = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/sluice.pid"],
                            B.GW_CORE, SLUICE["basic"], f"{d}/sluice.out")
            procs.append(sluice)
            plan = [(f"sluice {k}", sluice, p, headers[k]) for k, p in SLUICE.items()] + \
                   [(f"nginx {k}", nginx, p, headers[k]) for k, p in NGINX.items()]
            tls_plan = [(f"sluice {k}", sluice, p, k == "mtls") for k, p in SLUICE_TLS.items()] + \
                       [(f"nginx {k}", nginx, p, k == "mtls") for k, p in NGINX_TLS.items()]
            for name, proc, port, header in plan:
                measure_requests(proc, port, 1, header)  # warm-up
            for run in range(args.runs):
                for name, proc, port, header in (plan if run % 2 == 0 else list(reversed(plan))):
                    r = measure_requests(proc, port, args.duration, header)
                    rows[name].append(r)
                    B.log(f"  {name}: {r['cpu_us_per_req']:.2f} µs/req")
                for name, proc, port, mutual in (tls_plan if run % 2 == 0 else list(reversed(tls_plan))):
                    r = measure_handshakes(proc, port, args.duration, d, mutual)
                    tls_rows[name].append(r)
                    B.log(f"  {name}: {r['per_core']:.0f} handshakes/s per core")
        finally:
            for p in reversed(procs):
                p.stop()
    verify_us = ecdsa_verify_us()
    report(cpu, args, rows, tls_rows, verify_us)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-auth{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration, "rows": rows,
                                "handshakes": tls_rows, "ecdsa_p256_verify_us": verify_us}, indent=1))
    B.log(f"results: {path}")


def report(cpu, args, rows, tls_rows, verify_us):
    f = lambda s: f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"

    def delta(name, base):
        return B.summarize([a["cpu_us_per_req"] - b["cpu_us_per_req"] for a, b in zip(rows[name], rows[base])])

    print("# What authentication costs per request (keep-alive HTTP/1.1, 1 KiB)\n")
    print(f"CPU: {cpu}. {args.runs} runs x {args.duration:g} s per row, rows alternating; median [min-max]. "
          "Gateway CPU µs per request, all threads; the difference is to the same gateway's row without "
          "authentication, run by run.\n")
    print("| gateway, authentication | gateway µs/request | added by authentication |")
    print("|---|---|---|")
    for name in rows:
        base = "sluice none" if name.startswith("sluice") else "nginx none"
        added = "—" if name == base else f(delta(name, base))
        print(f"| {name} | {f(B.summarize([r['cpu_us_per_req'] for r in rows[name]]))} | {added} |")
    if verify_us:
        print(f"\nOne ES256 signature verification on this core (`openssl speed ecdsap256`): {verify_us:.1f} µs.")
    print("\n# Full TLS 1.3 handshakes per gateway core, RSA-2048 server key\n")
    print("| gateway | without client certificates | with an ECDSA client certificate (verified) |")
    print("|---|---|---|")
    g = lambda s: f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"
    for who in ("sluice", "nginx"):
        t = B.summarize([r["per_core"] for r in tls_rows[f"{who} tls"]])
        m = B.summarize([r["per_core"] for r in tls_rows[f"{who} mtls"]])
        print(f"| {who} | {g(t)} | {g(m)} |")
    ratio = B.summarize([a["per_core"] / b["per_core"] for a, b in zip(tls_rows["sluice mtls"], tls_rows["nginx mtls"])])
    print(f"\nSluice / NGINX with client certificates, run by run: {ratio['median']:.2f}x "
          f"[{ratio['min']:.2f}-{ratio['max']:.2f}]")


if __name__ == "__main__":
    main()
