#!/usr/bin/env python3
"""Sluice versus NGINX and HAProxy, side by side, on the same pinned core.

The gateways run with the same certificates in front of the same origin (an NGINX serving
static files), each as one process pinned with taskset to the gateway core (NGINX: one
worker; HAProxy: one thread; Sluice: every thread). The load generators and the origin run
on the other core. Every scenario runs several times, alternating the gateways, and the
table shows the median with min-max, each gateway's CPU per unit of work (µs per request or
per handshake), the load core's use, and the ratios Sluice/NGINX and Sluice/HAProxy. Where a
run did not saturate the gateway core (the load core was the limit), the ratio is taken on
CPU per unit instead of the rate, so that no ratio measures the load generator.

Called by bench/run, which installs what this needs and builds the binaries.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
import time
from pathlib import Path

import sitemix

ROOT = Path(__file__).resolve().parent.parent
# Where cargo put the release binaries: CARGO_TARGET_DIR when set (CI keeps its build outside
# the checkout), relative to the repository root as cargo reads it there.
RELEASE = ROOT / os.environ.get("CARGO_TARGET_DIR", "target") / "release"
SLUICE = RELEASE / "sluice"
LOADGEN = RELEASE / "sluice-loadgen"
TICK = os.sysconf("SC_CLK_TCK")

ORIGIN_PORT = 18080
NGINX_PORT = 18443
SLUICE_PORT = 18444
SLUICE_INLINE_PORT = 18445
SLUICE_POOL_PORT = 18446
HAPROXY_PORT = 18447
SLUICE_ROUTES_PORT = 18448
SLUICE_MIRROR_PORT = 18449
# The mirror rows: a second origin (the same NGINX on another port) that receives 10% of the
# requests, and a listener that accepts connections into its backlog and never answers.
MIRROR_ORIGIN_PORT = 18081
# The origin's stub_status (connections it accepted, requests it served), on a port of its
# own so that reading it is not counted as the gateways' traffic.
ORIGIN_STATUS_PORT = 18083
STALLED_PORT = 18082
# The tracing rows: the same gateway with [tracing] at 1% and at 100%, exporting to a Jaeger
# (built by scripts/test-deps) on the load core.
SLUICE_TRACE1_PORT = 18450
SLUICE_TRACE100_PORT = 18451
# The request-log row: the same gateway with `[log] request_log = 0` (the baseline keeps the
# default 8 MiB of recent requests; its admin listener answers how much it holds).
SLUICE_NOLOG_PORT = 18452
# `--baseline PATH`: another Sluice binary (an earlier commit's) with the default gateway's
# configuration, measured beside it in every row the default runs in: a change's before and
# after side by side in one run.
SLUICE_BASELINE_PORT = 18453
BASELINE = None
# The site mix both ways: the default gateway negotiates X25519MLKEM768 with clients that
# offer it (as the load generator and browsers do); this one only X25519, as NGINX and HAProxy
# with Debian's OpenSSL 3.0 do.
SLUICE_X25519_PORT = 18454
# The storm rows' floor: the default gateway in a process of its own whose every thread is
# SCHED_IDLE, on the same core. A storm aimed at it reaches the measured gateway only through
# the host (the kernel's network work for the storm's packets, the shared core and caches, the
# load core's own share of the storm), which no gateway's isolation can take away.
SLUICE_FLOOR_PORT = 18455
SLUICE_ADMIN_PORT = 18901
# The 100% tracing gateway's admin listener: what became of its spans (exported or dropped).
SLUICE_TRACE100_ADMIN_PORT = 18902
JAEGER_OTLP_PORT = 18317
JAEGER_QUERY_PORT = 18686
# Prefix routes of the `sluice-routes` gateway (the route-table row): a request's routing
# cost must follow the request, not the table.
TABLE_ROUTES = 40000
# Idle connections of the memory rows (--idle-connections; the smoke run uses 300).
IDLE_CONNECTIONS = 8000
# Idle connections the site mix holds open.
SITE_MIX_IDLE = sitemix.IDLE


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cores():
    n = os.cpu_count() or 1
    if n < 2:
        log("warning: one core only: gateway and load generator share it")
        return "0", "0"
    return "0", "1"


GW_CORE, LOAD_CORE = cores()


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ---------------------------------------------------------------- processes and CPU time

def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name, or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree_pids(pid):
    """A process and its direct children (NGINX's workers)."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields and int(fields[1]) == pid:
                children.append(int(entry))
    return [pid] + children


def tree_cpu_split(pid):
    """(utime, stime) of a process and its direct children, all threads, in seconds: on
    loopback the kernel's share is about the same for every gateway, so user time is where
    designs differ."""
    user = system = 0
    for p in tree_pids(pid):
        fields = _stat_fields(p)
        if fields:
            user += int(fields[11])
            system += int(fields[12])
    return user / TICK, system / TICK


def threads_cpu_seconds(pid, prefix):
    """utime + stime of a process's threads whose name starts with `prefix` (a thread pool:
    `sluice-waf`), in seconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            head, rest = (task / "stat").read_text().rsplit(")", 1)
        except (OSError, ValueError):
            continue
        if head.split("(", 1)[1].startswith(prefix):
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def tree_cpu_seconds(pid):
    """utime + stime of a process and its direct children, all threads."""
    return sum(tree_cpu_split(pid))


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def wait_port(port, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_port_free(port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                time.sleep(0.05)
        except OSError:
            return


class Proc:
    """A server we started: stopped by PID, and only ours."""

    def __init__(self, name, argv, core, port, logfile):
        self.name = name
        self.out = open(logfile, "w")
        self.p = subprocess.Popen(["taskset", "-c", core] + argv, stdout=self.out, stderr=subprocess.STDOUT)
        try:
            wait_port(port)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"{name} did not start; see {logfile}")

    def cpu(self):
        return tree_cpu_seconds(self.p.pid)

    def cpu_split(self):
        return tree_cpu_split(self.p.pid)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.out.close()


# ---------------------------------------------------------------- configurations

def make_certs(d):
    for kind, args in (("rsa", ["-newkey", "rsa:2048"]), ("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])):
        subprocess.run(
            ["openssl", "req", "-x509", "-nodes", *args, "-keyout", f"{d}/{kind}.key", "-out", f"{d}/{kind}.crt",
             "-days", "30", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True)
        os.chmod(f"{d}/{kind}.key", 0o600)


def make_content(d):
    www = Path(d) / "www"
    www.mkdir()
    line = b"Sluice benchmark body: 1 KiB of text for keep-alive requests per second.\n"
    (www / "1k").write_bytes((line * 20)[:1024])
    # Large responses (no compression asked): what moving bytes costs each gateway.
    (www / "100k").write_bytes((line * 1500)[:100 * 1024])
    (www / "1m").write_bytes((line * 15000)[:1024 * 1024])
    # The site mix's incompressible response (an image: random bytes).
    (www / "img.jpg").write_bytes(os.urandom(16 * 1024))
    page = subprocess.run([str(SLUICE), "demo-page"], check=True, capture_output=True).stdout
    (www / "page.html").write_bytes(page)
    # Sluice's compression routes (one per codec setting) by path prefix.
    for prefix in SLUICE_GZIP:
        (www / prefix).mkdir()
        (www / prefix / "page.html").write_bytes(page)
    # The cache rows' page: the origin marks it cacheable for 10 minutes.
    (www / "cached").mkdir()
    (www / "cached" / "page.html").write_bytes(page)
    return len(page)


# Sluice compression routes: path prefix -> [route.compression] settings.
SLUICE_GZIP = {
    "i1": 'gzip_backend = "isal"\ngzip_level = 1',
    "z1": 'gzip_backend = "zlib-rs"\ngzip_level = 1',
    "z6": 'gzip_backend = "zlib-rs"\ngzip_level = 6',
}


NGINX_COMMON = """
daemon off;
master_process on;
worker_processes 1;
error_log {d}/{name}-error.log warn;
pid {d}/{name}.pid;
worker_rlimit_nofile 20000;
events {{ worker_connections 10000; multi_accept on; }}
http {{
    client_body_temp_path {d}/tmp-{name}-body;
    proxy_temp_path {d}/tmp-{name}-proxy;
    fastcgi_temp_path {d}/tmp-{name}-fcgi;
    uwsgi_temp_path {d}/tmp-{name}-uwsgi;
    scgi_temp_path {d}/tmp-{name}-scgi;
    keepalive_requests 1000000;
"""


def nginx_origin_conf(d):
    return NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    types {{ text/html html; image/jpeg jpg; }}
    default_type text/plain;
    server {{
        listen 127.0.0.1:{ORIGIN_PORT} reuseport backlog=4096;
        listen 127.0.0.1:{MIRROR_ORIGIN_PORT} reuseport backlog=4096;
        root {d}/www;
        location /cached/ {{ expires 10m; }}
    }}
    server {{
        listen 127.0.0.1:{ORIGIN_STATUS_PORT};
        location = /status {{ stub_status; }}
    }}
}}
"""


# The certificates a gateway serves: one for the handshake rows; both for the site mix (ECDSA
# to clients that offer it, else RSA), with session tickets.
CERTS = {"rsa": ("rsa",), "ecdsa": ("ecdsa",), "mix": ("rsa", "ecdsa")}


def prepared(prefix):
    """A working directory with the bench's certificates, pages and origin configuration, and
    that origin started on the load core (the tools that load one gateway at a time share
    it, and so does `main`): (directory, origin Proc, the demo page's length). Also lifts the
    open-file limit to its hard maximum (the memory rows hold thousands of connections)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, 0o755)  # NGINX's workers run as nobody and read the static files
    make_certs(d)
    page_len = make_content(d)
    Path(d, "origin.conf").write_text(nginx_origin_conf(d))
    origin = Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], LOAD_CORE, ORIGIN_PORT,
                  Path(d, "origin.out"))
    return d, origin, page_len


def nginx_gateway_conf(d, cert):
    certificates = " ".join(f"ssl_certificate {d}/{c}.crt; ssl_certificate_key {d}/{c}.key;" for c in CERTS[cert])
    tickets = "on" if cert == "mix" else "off"
    return NGINX_COMMON.format(d=d, name="nginx") + f"""
    log_format bench '$ssl_protocol $ssl_session_reused $status';
    access_log {d}/nginx-access.log bench buffer=256k;
    upstream origin {{ server 127.0.0.1:{ORIGIN_PORT}; keepalive 64; }}
    proxy_cache_path {d}/nginx-cache levels=1:2 keys_zone=pages:10m max_size=256m;
    server {{
        listen 127.0.0.1:{NGINX_PORT} ssl http2 backlog=4096;
        {certificates}
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_tickets {tickets};
        ssl_session_cache off;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        location / {{ proxy_pass http://origin; }}
        location /gz1/ {{ gzip on; gzip_comp_level 1; gzip_types text/html; gzip_proxied any; proxy_pass http://origin/; }}
        location /gz6/ {{ gzip on; gzip_comp_level 6; gzip_types text/html; gzip_proxied any; proxy_pass http://origin/; }}
        # The cache rows: proxy_cache keeps the origin's bytes and gzip compresses every hit.
        location /cc1/ {{ proxy_cache pages; gzip on; gzip_comp_level 1; gzip_types text/html; gzip_proxied any; proxy_pass http://origin/cached/; }}
        location /cc6/ {{ proxy_cache pages; gzip on; gzip_comp_level 6; gzip_types text/html; gzip_proxied any; proxy_pass http://origin/cached/; }}
    }}
}}
"""


def haproxy_conf(d, cert):
    """HAProxy as an operator would run it for this: one thread, TLS 1.2-1.3 without tickets
    or a session cache (full handshakes, as the others; the site mix: with tickets), h2 and
    HTTP/1.1 by ALPN, keep-alive to the origin, gzip (level 1, HAProxy's default) for HTML.
    No access log: HAProxy writes one line per request with a system call (stdout or
    syslog), which the others buffer; leaving it out favours HAProxy."""
    return f"""
global
    nbthread 1
    maxconn 9000
    pidfile {d}/haproxy.pid
    tune.ssl.cachesize 0
    ssl-default-bind-options ssl-min-ver TLSv1.2{"" if cert == "mix" else " no-tls-tickets"}
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 30s
    http-reuse always
frontend https
    bind 127.0.0.1:{HAPROXY_PORT} ssl {" ".join(f"crt {d}/{c}.pem" for c in CERTS[cert])} alpn h2,http/1.1
    option forwardfor
    http-request set-header X-Forwarded-Proto https
    # The site mix's compressed pages (/gz1/, as NGINX's location): gzip, level 1.
    http-request replace-path ^/gz1/(.*) /\\1
    compression algo gzip
    compression type text/html
    default_backend origin
backend origin
    server origin 127.0.0.1:{ORIGIN_PORT}
"""


# Lanes per RSA-2048 batch where `mb` runs ("auto": the default, 8; --mb-lanes 4|8).
MB_LANES = "auto"


def sluice_conf(d, cert, engine="default", port=SLUICE_PORT, log="sluice-access.log", request_log=None, admin=None,
                groups=None):
    """engine: "default" (no `engines` line and handshakes on threads of their own: what a
    new user gets), "pool" (the default before this round: signatures on `pool` threads,
    handshakes on the event loop) or "inline" (everything on the event loop). groups: the
    listener's key-exchange groups (None: Sluice's default, X25519MLKEM768 first)."""
    engines = {"default": "", "pool": 'engines = ["pool"]'}.get(engine, "engines = []")
    mb_lanes = f'\nmb_lanes = {MB_LANES if MB_LANES != "auto" else chr(34) + "auto" + chr(34)}'
    compress_engines = '["pool"]' if engine in ("pool", "default") else "[]"
    handshakes = "" if engine == "default" else "\n[offload.handshakes]\nisolate = false"
    certificates = "".join(f"[[certificate]]\nname = \"{c}\"\ncert = '{d}/{c}.crt'\nkey = '{d}/{c}.key'\n"
                           for c in CERTS[cert])
    request_log = "" if request_log is None else f"\nrequest_log = {request_log}"
    groups_line = "" if groups is None else f"groups = {json.dumps(groups)}\n"
    admin = "enabled = false" if admin is None else f'address = "127.0.0.1:{admin}"'
    return f"""
[global]
shutdown_timeout = "5s"
[log]
level = "warn"
access_log = '{d}/{log}'{request_log}
[admin]
{admin}
[offload.crypto]
{engines}{mb_lanes}
[offload.compress]
engines = {compress_engines}{handshakes}
[[listener]]
name = "https"
address = "127.0.0.1:{port}"
http3 = true
[listener.tls]
session_tickets = {"true" if cert == "mix" else "false"}
{groups_line}{certificates}[[upstream]]
name = "origin"
keepalive = 64
servers = [{{ address = "127.0.0.1:{ORIGIN_PORT}" }}]
[[route]]
name = "all"
upstream = "origin"
""" + "".join(f"""
[[route]]
name = "{prefix}"
path_prefix = "/{prefix}/"
upstream = "origin"
[route.compression]
enabled = true
codecs = ["gzip"]
{settings}
""" for prefix, settings in SLUICE_GZIP.items()) + """
[[route]]
name = "gz1"
path_prefix = "/gz1/"
strip_prefix = "/gz1"
upstream = "origin"
[route.compression]
enabled = true
codecs = ["gzip"]

[[route]]
name = "cached"
path_prefix = "/cached/"
upstream = "origin"
[route.compression]
enabled = true
codecs = ["br", "zstd", "gzip"]
[route.cache]
"""


def sluice_routes_conf(d, cert):
    """The default gateway with TABLE_ROUTES more prefix routes (`/api/vN/`, each stripping
    its prefix): the route-table row requests `/api/v7/1k`."""
    return sluice_conf(d, cert, "default", SLUICE_ROUTES_PORT, "sluice-routes-access.log") + "".join(
        f'\n[[route]]\nname = "t{i}"\npath_prefix = "/api/v{i}/"\nstrip_prefix = "/api/v{i}"\nupstream = "origin"\n'
        for i in range(TABLE_ROUTES))


def sluice_mirror_conf(d, cert):
    """The default gateway mirroring 10% of every request to a second origin, and all of
    `/stalled/` to a listener that never answers (the mirror rows)."""
    base = sluice_conf(d, cert, "default", SLUICE_MIRROR_PORT, "sluice-mirror-access.log")
    # Route order: the prefix route must come before the catch-all one.
    stalled = f"""
[[upstream]]
name = "shadow"
keepalive = 64
servers = [{{ address = "127.0.0.1:{MIRROR_ORIGIN_PORT}" }}]
[[upstream]]
name = "stalled"
servers = [{{ address = "127.0.0.1:{STALLED_PORT}" }}]
[[route]]
name = "stalled"
path_prefix = "/stalled/"
strip_prefix = "/stalled"
upstream = "origin"
[[route.mirror]]
upstream = "stalled"
percent = 100
"""
    head, all_route = base.split('[[route]]\nname = "all"', 1)
    return head + stalled + '[[route]]\nname = "all"' + all_route.replace(
        'upstream = "origin"\n', 'upstream = "origin"\n[[route.mirror]]\nupstream = "shadow"\npercent = 10\n', 1)


def sluice_traced_conf(d, cert, percent, port, admin=None):
    """The default gateway with [tracing] sampling `percent` of its requests (the tracing rows)."""
    name = f"sluice-trace{percent}"
    return f"""
[tracing]
endpoint = "http://127.0.0.1:{JAEGER_OTLP_PORT}"
sample_percent = {percent}
""" + sluice_conf(d, cert, "default", port, f"{name}-access.log", admin=admin)


JAEGER_CONF = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 20000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"""


def jaeger_path():
    tools = os.environ.get("SLUICE_TOOLS") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sluice", "bin")
    return Path(tools, "jaeger")


def mb_available():
    """Whether this CPU has AVX-512 IFMA (the mb engine falls through without it)."""
    try:
        return "avx512ifma" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


class Gateways:
    """NGINX and Sluice with the same certificate, both pinned to the gateway core."""

    def __init__(self, d, cert):
        self.d = d
        for f in ("nginx-access.log", "sluice-access.log", "sluice-inline-access.log", "sluice-pool-access.log",
                  "sluice-routes-access.log", "sluice-mirror-access.log", "sluice-trace1-access.log",
                  "sluice-trace100-access.log", "sluice-nolog-access.log", "sluice-baseline-access.log",
                  "sluice-x25519-access.log", "sluice-floor-access.log"):
            Path(d, f).unlink(missing_ok=True)
        Path(d, "nginx.conf").write_text(nginx_gateway_conf(d, cert))
        Path(d, "haproxy.cfg").write_text(haproxy_conf(d, cert))
        for c in CERTS[cert]:
            Path(d, f"{c}.pem").write_bytes(Path(d, f"{c}.crt").read_bytes() + Path(d, f"{c}.key").read_bytes())
        Path(d, "sluice.toml").write_text(sluice_conf(d, cert, admin=SLUICE_ADMIN_PORT))
        Path(d, "sluice-nolog.toml").write_text(
            sluice_conf(d, cert, "default", SLUICE_NOLOG_PORT, "sluice-nolog-access.log", request_log=0))
        Path(d, "sluice-inline.toml").write_text(sluice_conf(d, cert, "inline", SLUICE_INLINE_PORT, "sluice-inline-access.log"))
        Path(d, "sluice-pool.toml").write_text(sluice_conf(d, cert, "pool", SLUICE_POOL_PORT, "sluice-pool-access.log"))
        Path(d, "sluice-routes.toml").write_text(sluice_routes_conf(d, cert))
        Path(d, "sluice-mirror.toml").write_text(sluice_mirror_conf(d, cert))
        Path(d, "sluice-trace1.toml").write_text(sluice_traced_conf(d, cert, 1, SLUICE_TRACE1_PORT))
        Path(d, "sluice-trace100.toml").write_text(sluice_traced_conf(d, cert, 100, SLUICE_TRACE100_PORT,
                                                                       admin=SLUICE_TRACE100_ADMIN_PORT))
        Path(d, "sluice-x25519.toml").write_text(
            sluice_conf(d, cert, "default", SLUICE_X25519_PORT, "sluice-x25519-access.log", groups=["X25519"]))
        Path(d, "sluice-floor.toml").write_text(
            sluice_conf(d, cert, "default", SLUICE_FLOOR_PORT, "sluice-floor-access.log"))
        if BASELINE:
            Path(d, "sluice-baseline.toml").write_text(
                sluice_conf(d, cert, "default", SLUICE_BASELINE_PORT, "sluice-baseline-access.log"))
        # Started one by one: when one fails, the ones already running are stopped (left
        # behind, they would keep the ports, and SO_REUSEPORT would share the next run's
        # traffic with them).
        self.procs = {}
        try:
            self._start(d)
        except BaseException:
            self.stop()
            raise
        self.ports = {"nginx": NGINX_PORT, "haproxy": HAPROXY_PORT, "sluice": SLUICE_PORT, "sluice-inline": SLUICE_INLINE_PORT,
                      "sluice-pool": SLUICE_POOL_PORT, "sluice-routes": SLUICE_ROUTES_PORT,
                      "sluice-mirror": SLUICE_MIRROR_PORT, "sluice-trace1": SLUICE_TRACE1_PORT,
                      "sluice-trace100": SLUICE_TRACE100_PORT, "sluice-nolog": SLUICE_NOLOG_PORT,
                      "sluice-baseline": SLUICE_BASELINE_PORT, "sluice-x25519": SLUICE_X25519_PORT,
                      "sluice-floor": SLUICE_FLOOR_PORT}

    def _start(self, d):
        specs = [
            ("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], NGINX_PORT),
            ("haproxy", ["haproxy", "-db", "-f", f"{d}/haproxy.cfg"], HAPROXY_PORT),
            ("sluice", [str(SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/sluice.pid"], SLUICE_PORT),
            # The same gateway with handshake signatures on the event loop: the engine row.
            ("sluice-inline", [str(SLUICE), "run", "--config", f"{d}/sluice-inline.toml", "--pid-file", f"{d}/sluice-inline.pid"], SLUICE_INLINE_PORT),
            # Signatures on `pool` threads whatever the CPU (the default before the probe).
            ("sluice-pool", [str(SLUICE), "run", "--config", f"{d}/sluice-pool.toml", "--pid-file", f"{d}/sluice-pool.pid"], SLUICE_POOL_PORT),
            # The same as `sluice` with 40,000 more prefix routes: the route-table row.
            ("sluice-routes", [str(SLUICE), "run", "--config", f"{d}/sluice-routes.toml", "--pid-file",
                               f"{d}/sluice-routes.pid"], SLUICE_ROUTES_PORT),
            # The same mirroring 10% of its requests, or all of /stalled/ (the mirror rows).
            ("sluice-mirror", [str(SLUICE), "run", "--config", f"{d}/sluice-mirror.toml", "--pid-file",
                               f"{d}/sluice-mirror.pid"], SLUICE_MIRROR_PORT),
            # The same with [tracing] at 1% and 100% (the tracing rows).
            ("sluice-trace1", [str(SLUICE), "run", "--config", f"{d}/sluice-trace1.toml", "--pid-file",
                               f"{d}/sluice-trace1.pid"], SLUICE_TRACE1_PORT),
            ("sluice-trace100", [str(SLUICE), "run", "--config", f"{d}/sluice-trace100.toml", "--pid-file",
                                 f"{d}/sluice-trace100.pid"], SLUICE_TRACE100_PORT),
            # The same without the in-memory request log (the request-log row).
            ("sluice-nolog", [str(SLUICE), "run", "--config", f"{d}/sluice-nolog.toml", "--pid-file",
                              f"{d}/sluice-nolog.pid"], SLUICE_NOLOG_PORT),
            # The same with X25519 alone as key exchange (the site mix both ways).
            ("sluice-x25519", [str(SLUICE), "run", "--config", f"{d}/sluice-x25519.toml", "--pid-file",
                               f"{d}/sluice-x25519.pid"], SLUICE_X25519_PORT),
            # The storm rows' floor (SLUICE_FLOOR_PORT): chrt puts every thread it starts at
            # SCHED_IDLE.
            ("sluice-floor", ["chrt", "--idle", "0", str(SLUICE), "run", "--config", f"{d}/sluice-floor.toml",
                              "--pid-file", f"{d}/sluice-floor.pid"], SLUICE_FLOOR_PORT),
        ]
        if BASELINE:
            specs.append(("sluice-baseline", [str(BASELINE), "run", "--config", f"{d}/sluice-baseline.toml",
                                              "--pid-file", f"{d}/sluice-baseline.pid"], SLUICE_BASELINE_PORT))
        self.specs = {name: (argv, port) for name, argv, port in specs}
        for name, argv, port in specs:
            self.procs[name] = Proc(name, argv, GW_CORE, port, f"{d}/{name}.out")

    def restart(self, name):
        """A fresh process (the memory rows: an allocator's retained free memory from earlier
        rows would hide what new connections cost)."""
        self.procs[name].stop()
        argv, port = self.specs[name]
        wait_port_free(port)
        self.procs[name] = Proc(name, argv, GW_CORE, port, f"{self.d}/{name}.out")

    def stop(self):
        for p in self.procs.values():
            p.stop()

    def resumed_in_logs(self):
        """Handshakes the servers logged as resumed (must be 0 in the full-handshake rows)."""
        time.sleep(0.3)
        n = 0
        nginx_log = Path(self.d, "nginx-access.log")
        if nginx_log.exists():
            n += sum(1 for line in nginx_log.read_text().splitlines() if line.split()[1:2] == ["r"])
        for f in ("sluice-access.log", "sluice-inline-access.log", "sluice-pool-access.log"):
            sluice_log = Path(self.d, f)
            if sluice_log.exists():
                n += sluice_log.read_text().count("resumed=true")
        return n


# ---------------------------------------------------------------- load generators

class LoadHung(Exception):
    """A load generator ran well past its duration (h2load -D 1 on a machine busy with
    compiles kept 5 of its 32 connections busy for minutes): it was killed; the run is tried
    again, twice at most."""


def run_load(argv, duration=270):
    """Runs a load generator on the load core; returns (stdout, its CPU seconds). Killed, and
    LoadHung raised, when it runs 30 s past its duration (by default, 5 minutes in all)."""
    c0 = children_cpu()
    p = subprocess.Popen(["taskset", "-c", LOAD_CORE] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=duration + 30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise LoadHung(f"{' '.join(argv)} ran {duration + 30:g} s; killed")
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, argv, out, err)
    return out, children_cpu() - c0


def loadgen(mode, port, duration, extra):
    out, cpu = run_load([str(LOADGEN), mode, "--addr", f"127.0.0.1:{port}", "--duration", f"{duration}s", *extra],
                        duration)
    r = json.loads(out)
    r["loadgen_cpu_s"] = cpu
    return r


H2LOAD_RE = {
    "rate": re.compile(r"finished in [\d.]+s, ([\d.]+) req/s"),
    "succeeded": re.compile(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded"),
    "data": re.compile(r"traffic: .*? total, .*? headers \(space savings [\d.]+%\), [\d.]+[KMG]?B \((\d+)\) data"),
}


def h2load(port, duration, path, h1, clients, streams, headers=(), rps=None):
    """`rps`: each client's request rate (h2load --rps), for a paced row; else as fast as it can."""
    # -T: no connection outlives the run by more than 15 s (under CPU contention, h2load -D
    # once kept connections that connected late running for minutes).
    argv = ["h2load", "-t", "1", "-c", str(clients), "-m", str(streams), "-D", str(max(1, round(duration))),
            "-T", str(max(1, round(duration)) + 15)]
    if rps:
        argv.append(f"--rps={rps}")
    if h1:
        argv.append("--h1")
    for h in headers:
        argv += ["-H", h]
    argv.append(f"https://127.0.0.1:{port}{path}")
    out, cpu = run_load(argv, max(1, round(duration)))
    r = {"loadgen_cpu_s": cpu}
    m = H2LOAD_RE["rate"].search(out)
    r["rate"] = float(m.group(1)) if m else 0.0
    m = H2LOAD_RE["succeeded"].search(out)
    r["completed"] = int(m.group(1)) if m else 0
    m = H2LOAD_RE["data"].search(out)
    r["bytes_per_response"] = int(m.group(1)) / max(r["completed"], 1) if m else 0.0
    r["seconds"] = duration
    if not r["rate"]:
        # What h2load saw (status codes, errors, timeouts), for the log of a run that measured
        # nothing: without it such a run says only "0".
        r["first_error"] = " | ".join(line.strip() for line in out.splitlines()
                                      if line.startswith(("requests:", "status codes:"))) or out[-300:]
    return r


# ---------------------------------------------------------------- memory per idle connection

def tree_rss_kib(pid):
    """Resident memory of a process and its direct children, KiB."""
    total = 0
    for p in tree_pids(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def settled_rss_kib(pid, timeout=10.0):
    """RSS once it stops moving (memory of an earlier row's connections being returned)."""
    last = tree_rss_kib(pid)
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.5)
        now = tree_rss_kib(pid)
        if abs(now - last) <= max(last // 200, 64):
            return now
        last = now
    return last


def _h2_request(path):
    """An HTTP/2 client preface, empty SETTINGS and one GET (HPACK literals, no Huffman)."""
    def lit(index, value):  # literal header field without indexing, indexed name
        v = value.encode()
        return bytes([index]) + bytes([len(v)]) + v
    block = b"\x82\x87" + lit(4, path) + lit(1, "localhost")  # GET, https, :path, :authority
    frame = lambda ftype, flags, stream, payload: (
        len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + payload)
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 0x5, 1, block)


def _read_response(s, h2):
    """Reads until one response is complete (its body's last byte)."""
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed before the response")
        buf += chunk
        if not h2:
            head, sep, body = buf.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"(?i)content-length: *(\d+)", head)
                if m and len(body) >= int(m.group(1)):
                    return
        else:
            i = 0
            while i + 9 <= len(buf):
                length = int.from_bytes(buf[i:i + 3], "big")
                ftype, flags, stream = buf[i + 3], buf[i + 4], int.from_bytes(buf[i + 5:i + 9], "big") & 0x7FFFFFFF
                if i + 9 + length > len(buf):
                    break
                if stream == 1 and ftype in (0, 1) and flags & 0x1:
                    return
                i += 9 + length


def idle_memory_quic(pid, port, n):
    """RSS growth of a gateway per idle HTTP/3 connection (ECDSA), after one request each:
    `sluice-loadgen quic-idle` opens them, says so, and holds them while RSS is read."""
    def held(count, hold):
        p = subprocess.Popen(["taskset", "-c", LOAD_CORE, str(LOADGEN), "quic-idle", "--addr", f"127.0.0.1:{port}",
                              "--sni", "localhost", "--path", "/1k", "--connections", str(count),
                              "--duration", f"{hold}s"], stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        if not line:
            p.wait()
            raise RuntimeError("sluice-loadgen quic-idle exited without opening its connections")
        return p, json.loads(line)
    # Warm up (the upstream pool, allocator arenas, the first connections' one-off costs).
    warm, _ = held(50, 600)
    try:
        before = settled_rss_kib(pid)
        t0 = time.time()
        p, r = held(n, 600)
        try:
            if r["completed"] != n:
                raise RuntimeError(f"quic-idle opened {r['completed']} of {n}: {r.get('first_error')}")
            time.sleep(1.0)
            after = tree_rss_kib(pid)
        finally:
            p.kill()
            p.wait()
    finally:
        warm.kill()
        warm.wait()
    return {"value": (after - before) / n, "rss_before_kib": before, "rss_after_kib": after, "connections": n,
            "loadgen_cpu_s": r.get("loadgen_cpu_s", 0.0), "seconds": time.time() - t0}


def idle_memory(pid, port, n, h2):
    """RSS growth of a gateway per idle TLS 1.3 keep-alive connection (ECDSA), after one
    request each, as a site's entrance holds idle mobile connections."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(["h2"] if h2 else ["http/1.1"])
    request = _h2_request("/1k") if h2 else b"GET /1k HTTP/1.1\r\nHost: localhost\r\n\r\n"

    def connect():
        tcp = socket.create_connection(("127.0.0.1", port))
        # The request follows the client's Finished: without NODELAY, Nagle holds it for the
        # server's delayed ACK (40 ms).
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return ctx.wrap_socket(tcp, server_hostname="localhost")
    # Warm up (the upstream pool, allocator arenas, the first connection's one-off costs).
    warm = []
    for _ in range(50):
        s = connect()
        s.sendall(request)
        _read_response(s, h2)
        warm.append(s)
    before = settled_rss_kib(pid)
    conns = []
    t0 = time.time()
    try:
        for _ in range(n):
            s = connect()
            s.sendall(request)
            _read_response(s, h2)
            conns.append(s)
        time.sleep(1.0)
        after = tree_rss_kib(pid)
    finally:
        for s in conns + warm:
            s.close()
    wall = time.time() - t0
    per_conn = (after - before) / n
    return {"value": per_conn, "rss_before_kib": before, "rss_after_kib": after, "connections": n,
            "loadgen_cpu_s": 0.0, "seconds": wall}


# ---------------------------------------------------------------- scenarios

def scenarios(page_len):
    """(name, cert, what, runner(port, duration) -> result dict, gateways)"""
    s = []
    for cert, label in (("rsa", "RSA-2048"), ("ecdsa", "ECDSA P-256")):
        for tls in ("1.2", "1.3"):
            s.append({
                "name": f"full handshakes/s, {label}, TLS {tls}",
                "cert": cert, "metric": "conn/s", "full_handshake": True, "engines": True,
                "run": lambda port, dur, tls=tls: loadgen("handshake", port, dur, ["--tls", tls, "--path", "/1k", "--concurrency", "32"]),
            })
        # The same key exchange for all: NGINX's OpenSSL 3.0 has no ML-KEM, so with the
        # client's default offer Sluice (BoringSSL) agrees X25519MLKEM768 and NGINX X25519.
        s.append({
            "name": f"full handshakes/s, {label}, TLS 1.3, X25519 offered alone",
            "cert": cert, "metric": "conn/s", "full_handshake": True, "engines": True,
            "run": lambda port, dur: loadgen("handshake", port, dur, ["--tls", "1.3", "--groups", "X25519", "--path", "/1k",
                                                                      "--concurrency", "32"]),
        })
    # QUIC full handshakes (Sluice only, see the HTTP/3 row), beside the TCP rows above.
    for cert, label in (("rsa", "RSA-2048"), ("ecdsa", "ECDSA P-256")):
        s.append({
            "name": f"full handshakes/s, {label}, QUIC (HTTP/3)",
            "cert": cert, "metric": "conn/s", "full_handshake": True, "engines": True, "quic": True,
            "run": lambda port, dur: loadgen("quic-handshake", port, dur, ["--path", "/1k", "--concurrency", "32"]),
        })
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/1.1", "cert": "rsa", "metric": "req/s", "routes": True,
              "run": lambda port, dur: h2load(port, dur, "/api/v7/1k" if port == SLUICE_ROUTES_PORT else "/1k",
                                              True, 32, 1)})
    # Mirroring's cost (Sluice against itself): 10% of the requests copied to a second origin
    # (the copy is a second upstream request, so ~10% more CPU is the floor), and the p99 at a
    # fixed rate while every request's copy goes to an upstream that never answers.
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/1.1, 10% mirrored to a second origin (Sluice without / with)",
              "cert": "rsa", "metric": "req/s", "mirror": True,
              "run": lambda port, dur: h2load(port, dur, "/1k", True, 32, 1)})
    s.append({"name": "keep-alive p99 ms, 1,000 req/s, every request mirrored to a stalled upstream (Sluice without / with)",
              "cert": "rsa", "metric": "p99 ms", "lower_is_better": True, "mirror": True,
              "run": lambda port, dur: loadgen("latency", port, dur, [
                  "--tls", "1.3", "--path", "/stalled/1k" if port == SLUICE_MIRROR_PORT else "/1k",
                  "--keepalive", "4", "--rate", "250", "--storm", "0"])})
    # Tracing's cost (Sluice against itself): a SERVER span per request and a CLIENT span per
    # upstream attempt, at 1% and 100% sampling, exported to Jaeger (on the load core).
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/1.1, traced at 1% and 100% (Sluice without / with)",
              "cert": "rsa", "metric": "req/s", "traced": True,
              "run": lambda port, dur: h2load(port, dur, "/1k", True, 32, 1)})
    # The same at a fixed, moderate rate (32 connections of 100 req/s): no core saturated, so
    # the CPU per request is read without the throughput's run-to-run swing.
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/1.1, paced at 3,200 req/s, traced at 1% and 100% (Sluice without / with)",
              "cert": "rsa", "metric": "req/s", "traced": True,
              "run": lambda port, dur: h2load(port, dur, "/1k", True, 32, 1, rps=100)})
    # The in-memory request log's cost (Sluice against itself): every request's entry kept in
    # 8 MiB (the default) or none; after the runs, the baseline's /status says how much it holds
    # (the bound under this flood).
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/1.1, request log off / on (Sluice)",
              "cert": "rsa", "metric": "req/s", "request_log": True,
              "run": lambda port, dur: h2load(port, dur, "/1k", True, 32, 1)})
    # A site's usual day: a moderate, fixed rate, where each request is its own wake-up (32
    # connections of 100 req/s each). Compared on CPU per request (no core is saturated).
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/1.1, paced at 3,200 req/s", "cert": "rsa", "metric": "req/s",
              "run": lambda port, dur: h2load(port, dur, "/1k", True, 32, 1, rps=100)})
    for path, label, clients in (("/100k", "100 KiB", 16), ("/1m", "1 MiB", 8)):
        s.append({"name": f"large response: {label}, HTTP/1.1 keep-alive, no compression", "cert": "rsa",
                  "metric": "req/s",
                  "run": lambda port, dur, path=path, clients=clients: h2load(port, dur, path, True, clients, 1)})
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/2", "cert": "rsa", "metric": "req/s",
              "run": lambda port, dur: h2load(port, dur, "/1k", False, 4, 16)})
    # Many streams in flight (16 connections x 16 streams: 256 requests at once), with the
    # upstream side counted: connections opened to the origin and requests per connection.
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/2, 16 connections x 16 streams", "cert": "rsa",
              "metric": "req/s", "upstream_counted": True,
              "run": lambda port, dur: h2load(port, dur, "/1k", False, 16, 16)})
    # HTTP/3 (Sluice only: Debian's NGINX 1.22 and HAProxy 2.6 are built without QUIC). The
    # same 4 connections x 16 streams as the HTTP/2 row above, to compare CPU per request.
    s.append({"name": "keep-alive req/s, 1 KiB, HTTP/3 (QUIC)", "cert": "rsa", "metric": "req/s", "quic": True,
              "run": lambda port, dur: loadgen("quic-requests", port, dur, ["--path", "/1k", "--connections", "4",
                                                                          "--streams", "16"])})
    for level, prefix, label in ((1, "i1", "Sluice ISA-L 1"), (1, "z1", "Sluice zlib-rs 1"), (6, "z6", "Sluice zlib-rs 6")):
        s.append({"name": f"gzip {page_len // 1024} KiB HTML, req/s per gateway core: NGINX zlib {level} vs {label}",
                  "cert": "rsa", "metric": "req/s/core", "gzip": True, "engines": True, "per_core": True,
                  "run": lambda port, dur, level=level, prefix=prefix: h2load(
                      port, dur, f"/gz{level}/page.html" if port == NGINX_PORT else f"/{prefix}/page.html", True, 16, 1,
                      ["Accept-Encoding: gzip"])})
    # The response cache: hits on a cacheable page. NGINX's proxy_cache stores the origin's
    # bytes and gzips each hit; Sluice's keeps each encoding, made once and upgraded to the
    # codec's best level after `upgrade_after` hits. "br, gzip" is what browsers send: NGINX
    # (no brotli module in Debian's) answers gzip, Sluice brotli.
    for level, ae in ((1, "gzip"), (6, "gzip"), (6, "br, gzip")):
        s.append({"name": f"cached {page_len // 1024} KiB HTML, Accept-Encoding: {ae}, req/s per gateway core: "
                          f"NGINX proxy_cache + gzip {level} vs Sluice cache",
                  "cert": "rsa", "metric": "req/s/core", "gzip": True, "cache": True, "per_core": True,
                  "run": lambda port, dur, level=level, ae=ae: h2load(
                      port, dur, f"/cc{level}/page.html" if port == NGINX_PORT else "/cached/page.html", True, 16, 1,
                      [f"Accept-Encoding: {ae}"])})
    for h2, label in ((False, "HTTP/1.1"), (True, "HTTP/2")):
        s.append({"name": f"memory per idle TLS 1.3 connection, {label} (RSS growth, {IDLE_CONNECTIONS:,} connections)",
                  "cert": "ecdsa", "metric": "KiB/conn", "lower_is_better": True, "memory": True,
                  "run": lambda pid, port, dur, h2=h2: idle_memory(pid, port, IDLE_CONNECTIONS, h2)})
    # The same over HTTP/3 (Sluice only, as every QUIC row), beside the TCP rows above.
    s.append({"name": f"memory per idle HTTP/3 (QUIC) connection (RSS growth, {IDLE_CONNECTIONS:,} connections)",
              "cert": "ecdsa", "metric": "KiB/conn", "lower_is_better": True, "memory": True, "quic": True,
              "run": lambda pid, port, dur: idle_memory_quic(pid, port, IDLE_CONNECTIONS)})
    # Established traffic at its own pace (4 connections x 250 req/s): a closed loop would take
    # every cycle the gateway gives it, trading its latency against the storm's rate.
    s.append({"name": "keep-alive p99 ms, 1,000 req/s, no storm (baseline of the next row)", "cert": "rsa", "metric": "p99 ms",
              "lower_is_better": True, "engines": True,
              "run": lambda port, dur: loadgen("latency", port, dur, ["--tls", "1.3", "--path", "/1k", "--keepalive", "4",
                                                                     "--rate", "250", "--storm", "0"])})
    s.append({"name": "keep-alive p99 ms, 1,000 req/s, under a handshake storm (RSA, TLS 1.3)", "cert": "rsa",
              "metric": "p99 ms", "lower_is_better": True, "engines": True,
              "run": lambda port, dur: loadgen("latency", port, dur, ["--tls", "1.3", "--path", "/1k", "--keepalive", "4",
                                                                     "--rate", "250", "--storm", "32"])})
    # What the host alone lets the storm do: the same storm, aimed at a separate gateway whose
    # threads all run at SCHED_IDLE on the same core. The gap between this row and the one
    # above is what the measured gateway's own isolation still lets through.
    s.append({"name": "keep-alive p99 ms, 1,000 req/s, the same storm at a separate SCHED_IDLE gateway (the host's floor)",
              "cert": "rsa", "metric": "p99 ms", "lower_is_better": True,
              "run": lambda port, dur: loadgen("latency", port, dur, ["--tls", "1.3", "--path", "/1k", "--keepalive", "4",
                                                                     "--rate", "250", "--storm", "32", "--storm-addr",
                                                                     f"127.0.0.1:{SLUICE_FLOOR_PORT}"])})
    # The headline: a site's usual traffic at a fixed offered load (see sitemix.py).
    s.append({"name": "site mix: gateway CPU per 1,000 requests at a fixed offered load", "cert": "mix",
              "metric": "CPU ms/1k req", "lower_is_better": True, "engines": True, "site_mix": True, "key_share": True,
              "run": lambda proc, origin, port, dur: sitemix.run(LOADGEN, LOAD_CORE, tree_cpu_split, proc, origin, port,
                                                                 dur, SITE_MIX_IDLE)})
    return s


def origin_counts():
    """The origin's (connections accepted, requests served) so far, from its stub_status."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ORIGIN_STATUS_PORT}/status", timeout=5) as r:
        text = r.read().decode()
    # "Active connections: N\nserver accepts handled requests\n A H R\n..."
    accepts, _handled, requests = (int(x) for x in text.splitlines()[2].split())
    return accepts, requests


def measure(gw, origin, which, sc, duration):
    proc = gw.procs[which]
    counted = sc.get("upstream_counted")
    counts0 = origin_counts() if counted else None
    cpu0, origin0 = proc.cpu(), origin.cpu()
    split0 = proc.cpu_split()
    t0 = time.time()
    if sc.get("memory"):
        gw.restart(which)
        proc = gw.procs[which]
        cpu0 = proc.cpu()
        split0 = proc.cpu_split()
        r = sc["run"](proc.p.pid, gw.ports[which], duration)
    elif sc.get("site_mix"):
        # CPU read over the measured window only, by the runner.
        r = sc["run"](proc, origin, gw.ports[which], duration)
    else:
        r = sc["run"](gw.ports[which], duration)
    if sc.get("site_mix"):
        wall = r["wall_s"]
    else:
        wall = time.time() - t0
        r["gateway_cpu_s"] = proc.cpu() - cpu0
        split1 = proc.cpu_split()
        r["gateway_user_s"], r["gateway_sys_s"] = split1[0] - split0[0], split1[1] - split0[1]
        r["origin_cpu_s"] = origin.cpu() - origin0
        r["wall_s"] = wall
    if counted:
        # The upstream side: connections the gateway opened to the origin, and requests per
        # connection (the stub_status request itself excluded).
        accepts, requests = origin_counts()
        r["origin_connections"] = accepts - counts0[0] - 1
        r["origin_requests"] = requests - counts0[1] - 1
        r["origin_requests_per_connection"] = r["origin_requests"] / max(r["origin_connections"], 1)
    r["gateway_util"] = r["gateway_cpu_s"] / wall
    r["loadgen_util"] = r["loadgen_cpu_s"] / wall
    # The load core also runs the origin: what it had left decides who was the bottleneck.
    r["load_core_util"] = (r["loadgen_cpu_s"] + r["origin_cpu_s"]) / wall
    if sc.get("memory") or sc.get("site_mix"):
        pass  # the runner's value: KiB per connection, or CPU ms per 1,000 requests
    elif sc["metric"] == "p99 ms":
        r["value"] = r["p99_ms"]
    elif sc.get("per_core"):
        # Requests per second per gateway core: what the gateway would serve with a whole
        # core of its own (its CPU use from /proc, every thread).
        r["value"] = r["rate"] / max(r["gateway_util"], 0.01)
    else:
        r["value"] = r["rate"]
    if r.get("rate"):
        r["gateway_cpu_s_per_1k"] = r["gateway_cpu_s"] / (r["rate"] * wall / 1000)
        # µs of gateway CPU (all its threads, user + system) per request or handshake.
        units = r.get("completed") or r["rate"] * wall
        r["cpu_us_per_unit"] = r["gateway_cpu_s"] / max(units, 1) * 1e6
        r["user_us_per_unit"] = r["gateway_user_s"] / max(units, 1) * 1e6
        r["sys_us_per_unit"] = r["gateway_sys_s"] / max(units, 1) * 1e6
    return r


def summarize(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def spread(values):
    """`median [min-max]` of `values`, as the latency tables print them."""
    s = summarize(values)
    return f"{s['median']:g} [{s['min']:g}-{s['max']:g}]"


def keepalive_latencies(port, path, seconds, clients=4, headers=None):
    """`clients` keep-alive HTTP/1.1 clients GETting `path` back to back for `seconds`: every
    request's latency (s), sorted, and how many failed (a status other than 200, or an error,
    after which the client reconnects)."""
    latencies, failed, lock = [], [0], threading.Lock()

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine, bad, end = [], 0, time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers or {})
                resp = conn.getresponse()
                resp.read()
                bad += resp.status != 200
            except (OSError, http.client.HTTPException):
                bad += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            mine.append(time.perf_counter() - start)
        conn.close()
        with lock:
            latencies.extend(mine)
            failed[0] += bad

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(latencies), failed[0]


def fmt(x):
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="3 runs of 2 s per scenario (under 3 minutes)")
    ap.add_argument("--smoke", action="store_true", help="1 run of about 1 s per scenario, to keep the harness working")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--baseline", metavar="BINARY",
                    help="another sluice binary measured beside the default gateway in each of its rows "
                         "(a change's before and after in one run)")
    ap.add_argument("--duration", type=float)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--only", help="run only scenarios whose name contains this text (alternatives separated by |; "
                    "one starting with = must be the whole name)")
    ap.add_argument("--mb-lanes", choices=["auto", "4", "8"], default="auto",
                    help="lanes per RSA-2048 batch of the `mb` gateway (default: auto, 8)")
    ap.add_argument("--render", metavar="JSON", help="print the table of an earlier run's JSON file and exit")
    ap.add_argument("--idle-connections", type=int, help="connections of the memory rows (default 8000)")
    args = ap.parse_args()
    global MB_LANES, IDLE_CONNECTIONS, SITE_MIX_IDLE, BASELINE
    if args.baseline:
        BASELINE = Path(args.baseline).resolve()
    IDLE_CONNECTIONS = args.idle_connections or (300 if args.smoke else IDLE_CONNECTIONS)
    SITE_MIX_IDLE = sitemix.SMOKE_IDLE if args.smoke else sitemix.IDLE
    MB_LANES = args.mb_lanes
    if args.render:
        meta = json.loads(Path(args.render).read_text())
        print(render(meta["scenarios"], meta["runs"], meta["duration_s"], meta["cpu"], meta["date"]))
        return 0
    runs, duration = (5, 8.0)
    if args.quick:
        runs, duration = (3, 2.0)
    if args.smoke:
        runs, duration = (1, 1.0)
    runs = args.runs or runs
    duration = args.duration or duration

    d, origin, page_len = prepared("sluice-bench-")
    log(f"bench: working in {d}; gateway core {GW_CORE}, load core {LOAD_CORE}; {runs} run(s) x {duration:g} s")
    # The tracing rows' collector: Jaeger on the load core, as a site's would be elsewhere.
    jaeger = None
    if jaeger_path().exists():
        Path(d, "jaeger.yaml").write_text(JAEGER_CONF.format(otlp=JAEGER_OTLP_PORT, query=JAEGER_QUERY_PORT,
                                                             query_grpc=JAEGER_QUERY_PORT + 1))
        jaeger = Proc("jaeger", [str(jaeger_path()), "--config", f"{d}/jaeger.yaml"], LOAD_CORE, JAEGER_OTLP_PORT,
                      f"{d}/jaeger.out")
    # The stalled mirror upstream: connections land in the backlog and are never accepted.
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    stalled.bind(("127.0.0.1", STALLED_PORT))
    stalled.listen(4096)
    results = []
    try:
        wanted = args.only.split("|") if args.only else None
        def picked(name):
            return any(name == w[1:] if w.startswith("=") else w in name for w in wanted)
        all_sc = [s for s in scenarios(page_len) if not wanted or picked(s["name"])]
        for cert in ("rsa", "ecdsa", "mix"):
            group = [s for s in all_sc if s["cert"] == cert]
            if not group:
                continue
            gw = Gateways(d, cert)
            try:
                for sc in group:
                    who_all = ("nginx",) + (() if sc.get("gzip") else ("haproxy",)) + ("sluice",)
                    if sc.get("quic"):
                        who_all = ("sluice",)
                    if sc.get("engines"):
                        who_all += ("sluice-pool", "sluice-inline")
                    if sc.get("routes"):
                        who_all += ("sluice-routes",)
                    if sc.get("key_share"):
                        who_all += ("sluice-x25519",)
                    if sc.get("mirror"):
                        who_all = ("sluice", "sluice-mirror")
                    if sc.get("traced"):
                        who_all = ("sluice", "sluice-trace1", "sluice-trace100")
                    if sc.get("request_log"):
                        who_all = ("sluice", "sluice-nolog")
                    if BASELINE and "sluice" in who_all:
                        who_all += ("sluice-baseline",)
                    row = {"name": sc["name"], "metric": sc["metric"], "runs": {w: [] for w in who_all}}
                    spans_before = trace_spans() if sc.get("traced") else None
                    for i in range(min(runs, 3) if sc.get("memory") else runs):
                        order = who_all if i % 2 == 0 else tuple(reversed(who_all))
                        for which in order:
                            for attempt in range(3):
                                try:
                                    r = measure(gw, origin, which, sc, duration)
                                except LoadHung as e:
                                    if attempt == 2:
                                        raise
                                    log(f"  {sc['name']} [{which} run {i + 1}]: {e}; again")
                                    continue
                                # A run that measured nothing is run again, its output logged;
                                # twice more nothing and it stands, failing the run (failed_runs).
                                why = run_failure(r)
                                if why is None or attempt == 2:
                                    break
                                log(f"  {sc['name']} [{which} run {i + 1}]: {why}; again")
                            row["runs"][which].append(r)
                            log(f"  {sc['name']} [{which} run {i + 1}]: {fmt(r['value'])} {sc['metric']}, "
                                f"gateway CPU {r['gateway_util']:.0%}, load core CPU {r['load_core_util']:.0%} "
                                f"(load generator {r['loadgen_util']:.0%})"
                                + (f"; {r.get('cpu_us_per_unit', 0):.1f} µs/req, origin: "
                                   f"{r['origin_connections']:,} connections opened, "
                                   f"{r['origin_requests_per_connection']:,.0f} requests each, "
                                   f"{r['origin_cpu_s'] / r['wall_s']:.0%} CPU"
                                   if sc.get("upstream_counted") else "")
                                + (f"; first error: {r['first_error']}" if r.get("first_error") else ""))
                    if sc.get("full_handshake"):
                        resumed = sum(r.get("resumed", 0) for w in row["runs"].values() for r in w)
                        row["resumed_handshakes"] = resumed + gw.resumed_in_logs()
                        row["all_full_handshakes"] = row["resumed_handshakes"] == 0
                    if sc.get("request_log"):
                        row["request_log"] = request_log_held()
                    if spans_before is not None:
                        after = trace_spans()
                        row["spans"] = {k: after.get(k, 0) - spans_before.get(k, 0) for k in after}
                    row["lower_is_better"] = sc.get("lower_is_better", False)
                    row["memory"] = sc.get("memory", False)
                    row["site_mix"] = sc.get("site_mix", False)
                    row["gzip"] = sc.get("gzip", False)
                    row["cache"] = sc.get("cache", False)
                    results.append(row)
            finally:
                gw.stop()
    finally:
        origin.stop()
        stalled.close()
        if jaeger:
            jaeger.stop()
    # A run that finished leaves nothing behind (its logs are ~1 GiB); one that failed keeps
    # its directory, named at the start, to read.
    shutil.rmtree(d, ignore_errors=True)

    report = render(results, runs, duration, cpu_model(), datetime.date.today().isoformat())
    print(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    kind = "smoke" if args.smoke else "quick" if args.quick else "full"
    meta = {"date": stamp, "kind": kind, "cpu": cpu_model(), "gateway_core": GW_CORE, "load_core": LOAD_CORE,
            "runs": runs, "duration_s": duration, "scenarios": results}
    (out / f"{stamp}-{kind}.json").write_text(json.dumps(meta, indent=1, default=str))
    (out / f"latest-{kind}.md").write_text(report + "\n")
    (out / f"latest-{kind}.svg").write_text(chart(results, f"Sluice / NGINX, {cpu_model()}, {stamp} ({kind})"))
    log(f"bench: wrote {out}/{stamp}-{kind}.json, latest-{kind}.md and latest-{kind}.svg")
    bad = [r["name"] for r in results if r.get("all_full_handshakes") is False]
    if bad:
        log(f"bench: resumed handshakes found in: {bad}")
        return 1
    broken = failed_runs(results)
    for line in broken:
        log(f"bench: FAILED: {line}")
    return 1 if broken else 0


def failed_runs(results):
    """Every run that measured nothing or failed requests: a value of 0 or none, no request
    completed, or failures with an error (the smoke CI runs must be able to fail: a scenario
    that breaks shows here, not as a row of zeros)."""
    broken = []
    for row in results:
        for who, runs in row["runs"].items():
            for i, r in enumerate(runs):
                why = run_failure(r)
                if why:
                    broken.append(f"{row['name']} [{who} run {i + 1}]: {why}")
    return broken


def run_failure(r):
    """Why one run counts as broken (see failed_runs), or None."""
    if not r.get("value"):
        return f"measured {r.get('value')!r}" + (f" ({r['first_error']})" if r.get("first_error") else "")
    if "completed" in r and not r["completed"]:
        return "no request completed"
    if r.get("failed") and r.get("first_error"):
        return f"{r['failed']} failed, first: {r['first_error']}"
    return None


def comparable(row):
    """A compression row compares throughput only at a similar compressed size."""
    if not row["gzip"]:
        return True
    b = {w: statistics.median(r["bytes_per_response"] for r in row["runs"][w]) for w in ("nginx", "sluice")}
    return b["sluice"] <= 1.1 * b["nginx"]


def med(row, who, key):
    return statistics.median(r.get(key, 0) for r in row["runs"][who])


def ratio_basis(row, who="sluice", ref="nginx"):
    """(who's advantage over ref, "rate" | "CPU/unit" | "latency"), or (None, why).

    Throughput rows compare rates when both gateways saturated their core (95%) and neither
    run's load core did (90%); otherwise the load core was (also) the limit and the rates would
    measure it, so the ratio is ref's CPU per unit over who's. Latency and memory rows compare
    the value (ref/who: above 1, who is better)."""
    if ref not in row["runs"] or who not in row["runs"]:
        return None, "not run"
    if row["lower_is_better"]:
        n, s = med(row, ref, "value"), med(row, who, "value")
        return ((n / s) if n and s else None), "latency"
    if not comparable(row):
        return None, "not comparable"
    if row["gzip"] or all(med(row, w, "gateway_util") >= 0.95 and med(row, w, "load_core_util") < 0.9
                          for w in (ref, who)):
        n, s = med(row, ref, "value"), med(row, who, "value")
        return ((s / n) if n and s else None), "rate"
    n, s = med(row, ref, "cpu_us_per_unit"), med(row, who, "cpu_us_per_unit")
    return ((n / s) if n and s else None), "CPU/unit"


def ratio(row, who="sluice", ref="nginx"):
    return ratio_basis(row, who, ref)[0]


def fmt_ratio(row, who, ref):
    v, basis = ratio_basis(row, who, ref)
    if v is None:
        return "n/a" if basis == "not run" else f"n/a ({basis})"
    return f"{v:.2f}x" + (" (CPU/unit)" if basis == "CPU/unit" else "")


def bound(r):
    """Who limited a run: the gateway core, the load core (load generator + origin), or neither."""
    if r["gateway_util"] >= 0.85:
        return ""
    if r["load_core_util"] >= 0.85:
        return " (load-core bound: load generator and origin)"
    return " (neither core saturated)"


GATEWAYS = (("nginx", "N"), ("haproxy", "H"), ("sluice", "S"))


def render(results, runs, duration, cpu, date):
    lines = [
        f"CPU: {cpu}; date: {date[:10]}; gateway on core {GW_CORE}, load generator and origin on core {LOAD_CORE}; "
        f"median of {runs} run(s) of {duration:g} s, [min-max]. Ratios > 1: Sluice ahead; "
        "'(CPU/unit)': taken on gateway CPU per request or handshake, as a gateway core was not saturated or a load core was.",
        "",
        f"| scenario | NGINX | HAProxy | Sluice (default: handshakes on threads of their own, signatures "
        f"{'on mb' if mb_available() else 'inline there'}) | Sluice/NGINX | Sluice/HAProxy "
        "| gateway CPU µs per unit (N / H / S) | gateway core (N / H / S) | load core (N / H / S) | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(row, who):
        if who not in row["runs"]:
            return "-"
        s = summarize([r["value"] for r in row["runs"][who]])
        return f"{fmt(s['median'])} [{fmt(s['min'])}-{fmt(s['max'])}] {row['metric']}"

    def triple(row, key, pct):
        out = []
        for who, _ in GATEWAYS:
            if who not in row["runs"]:
                out.append("-")
            else:
                v = med(row, who, key)
                out.append(f"{v:.0%}" if pct else fmt(v))
        return " / ".join(out)

    for row in results:
        notes = []
        for who, _ in GATEWAYS:
            if who in row["runs"] and not row.get("memory"):
                b = bound({k: med(row, who, k) for k in ("gateway_util", "load_core_util")})
                if b:
                    notes.append(f"{who}{b}")
        if row.get("all_full_handshakes") is not None:
            notes.append("all handshakes full" if row["all_full_handshakes"] else f"{row['resumed_handshakes']} RESUMED")
        if row["gzip"]:
            if not comparable(row):
                notes.append("not comparable: Sluice's responses are over 10% larger")
            if row.get("cache"):
                notes.append(f"bytes per response Sluice/NGINX: {med(row, 'sluice', 'bytes_per_response') / max(med(row, 'nginx', 'bytes_per_response'), 1):.2f}")
            for who in ("nginx", "sluice"):
                bpr = med(row, who, "bytes_per_response")
                rate = med(row, who, "rate")
                notes.append(f"{who}: {bpr / 1024:.1f} KiB/resp, {rate:,.0f} req/s")
        if not row["lower_is_better"] and all("user_us_per_unit" in r for w in row["runs"].values() for r in w):
            split = " / ".join(f"{fmt(med(row, w, 'user_us_per_unit'))}+{fmt(med(row, w, 'sys_us_per_unit'))}"
                               for w, _ in GATEWAYS if w in row["runs"])
            notes.append(f"user+system µs/unit (N / H / S): {split}")
        if all("storm_rate" in r for w in row["runs"].values() for r in w) and any(
                r.get("storm_completed") for w in row["runs"].values() for r in w):
            notes.append("storm handshakes/s (N / H / S): " + " / ".join(
                fmt(med(row, w, "storm_rate")) for w, _ in GATEWAYS if w in row["runs"]))
        if all("origin_connections" in r for w in row["runs"].values() for r in w):
            notes.append("origin connections opened / requests per connection / origin CPU (N / H / S): " + " / ".join(
                f"{med(row, w, 'origin_connections'):,.0f} / {med(row, w, 'origin_requests_per_connection'):,.0f} / "
                f"{med(row, w, 'origin_cpu_s') / med(row, w, 'wall_s'):.0%}" for w, _ in GATEWAYS if w in row["runs"]))
        if row.get("site_mix"):
            notes.append(f"mix: {sitemix.MIX_STATED}")
            notes += sitemix.notes(row, GATEWAYS)
            notes.append("ratio = other/Sluice (less CPU is better)")
        elif row.get("memory"):
            notes.append("ratio = other/Sluice (less memory is better)")
        elif row["lower_is_better"]:
            notes.append("ratio = other/Sluice (lower latency is better)")
        cpu_units = triple(row, "cpu_us_per_unit", False) if row.get("site_mix") or not row["lower_is_better"] else "-"
        lines.append(
            f"| {row['name']} | {cell(row, 'nginx')} | {cell(row, 'haproxy')} | {cell(row, 'sluice')} | "
            f"{fmt_ratio(row, 'sluice', 'nginx')} | {fmt_ratio(row, 'sluice', 'haproxy')} | {cpu_units} | "
            f"{triple(row, 'gateway_util', True)} | {triple(row, 'load_core_util', True)} | {'; '.join(notes)} |")
        for who, label in (("sluice-inline", "Sluice engines = [], handshakes on the event loop (no offload)"),
                           ("sluice-pool", "Sluice engines = [\"pool\"], handshakes on the event loop (the default before)"),
                           ("sluice-routes", f"Sluice with {TABLE_ROUTES:,} prefix routes (request on /api/v7/)"),
                           ("sluice-mirror", "Sluice mirroring (10% to a second origin; all of /stalled/ to a stalled one)"),
                           ("sluice-trace1", "Sluice [tracing] sample_percent = 1"),
                           ("sluice-trace100", "Sluice [tracing] sample_percent = 100"),
                           ("sluice-nolog", "Sluice [log] request_log = 0 (no request log)"),
                           ("sluice-x25519", "Sluice [listener.tls] groups = [\"X25519\"] (NGINX's and HAProxy's key share)"),
                           ("sluice-baseline", f"the baseline binary ({BASELINE})")):
            if who not in row["runs"]:
                continue
            si = summarize([r["value"] for r in row["runs"][who]])
            b = bound({k: med(row, who, k) for k in ("gateway_util", "load_core_util")})
            per_unit = "-" if row["lower_is_better"] and not row.get("site_mix") else f"- / - / {fmt(med(row, who, 'cpu_us_per_unit'))}"
            lines.append(
                f"| ↳ same, {label} | | | "
                f"{fmt(si['median'])} [{fmt(si['min'])}-{fmt(si['max'])}] {row['metric']} | "
                f"{fmt_ratio(row, who, 'nginx')} | {fmt_ratio(row, who, 'haproxy')} | {per_unit} | "
                f"{med(row, who, 'gateway_util'):.0%} | {med(row, who, 'load_core_util'):.0%} | "
                f"{'; '.join(n for n in (who + b if b else '', routes_note(row, who), mirror_note(row, who), storm_note(row, who)) if n)} |")
    return "\n".join(lines)


def storm_note(row, who):
    """The storm's own rate beside a latency figure (the scheduler must not cost it)."""
    runs = row["runs"][who]
    if not runs or not all(r.get("storm_completed") for r in runs):
        return ""
    return f"storm handshakes/s: {fmt(med(row, who, 'storm_rate'))}"


def routes_note(row, who):
    """The route-table row's goal: against the same gateway with one route."""
    if who != "sluice-routes":
        return ""
    return f"Sluice {TABLE_ROUTES:,} routes / one route: {fmt_ratio(row, who, 'sluice')}"


def request_log_held():
    """The baseline gateway's request log after the flood (`/status`'s `request_log`)."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{SLUICE_ADMIN_PORT}/status", timeout=10) as r:
        return json.loads(r.read())["request_log"]


def trace_spans():
    """The 100% tracing gateway's span counters (`/status`'s `tracing`): a figure is only
    worth something if the spans were exported, not dropped. Empty where it cannot be read."""
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{SLUICE_TRACE100_ADMIN_PORT}/status", timeout=10) as r:
            t = json.loads(r.read()).get("tracing") or {}
    except OSError:
        return {}
    return {k: t.get(k, 0) for k in ("exported", "dropped_queue_full", "dropped_export_failed")}


def mirror_note(row, who):
    """The mirror and tracing rows' goals, against the same gateway without: CPU per
    primary request (mirroring 10%: at most 12% more; tracing 1%: 3%, 100%: 15%), or the p99
    (unmoved)."""
    if who == "sluice-nolog" and "sluice" in row["runs"]:
        more = med(row, "sluice", "cpu_us_per_unit") / max(med(row, who, "cpu_us_per_unit"), 1e-9) - 1
        held = row.get("request_log") or {}
        bound = (f"; after the runs it held {held['entries']:,} requests in {held['bytes']:,} of "
                 f"{held['budget']:,} bytes ({held['evicted_total']:,} evicted)") if held else ""
        return f"CPU per request with the request log / without: {more:+.1%}{bound}"
    if who not in ("sluice-mirror", "sluice-trace1", "sluice-trace100") or "sluice" not in row["runs"]:
        return ""
    if row["lower_is_better"]:
        return f"p99 with / without: {med(row, who, 'value') / max(med(row, 'sluice', 'value'), 1e-9):.2f}x"
    more = med(row, who, "cpu_us_per_unit") / max(med(row, "sluice", "cpu_us_per_unit"), 1e-9) - 1
    spans = row.get("spans") if who == "sluice-trace100" else None
    fate = (f"; spans exported {spans['exported']:,}, dropped {spans['dropped_queue_full']:,} (queue full) + "
            f"{spans['dropped_export_failed']:,} (export failed)") if spans else ""
    return f"CPU per request with / without: {more:+.1%}{fate}"


def chart(results, title):
    """A horizontal bar chart of the ratios, with a line at 1.0 (parity)."""
    rows = [(r["name"], ratio(r)) for r in results]
    width, bar_h, left, top = 900, 26, 430, 40
    scale_max = max([2.0] + [v for _, v in rows if v])
    h = top + bar_h * len(rows) + 40
    x = lambda v: left + (width - left - 40) * v / scale_max
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{h}" fill="white"/>',
           f'<text x="10" y="22" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, (name, v) in enumerate(rows):
        y = top + i * bar_h
        out.append(f'<text x="{left - 8}" y="{y + 17}" text-anchor="end">{escape(name[:70])}</text>')
        if v:
            color = "#2a9d8f" if v >= 1 else "#e76f51"
            out.append(f'<rect x="{left}" y="{y + 5}" width="{x(v) - left:.1f}" height="{bar_h - 10}" fill="{color}"/>')
            out.append(f'<text x="{x(v) + 4:.1f}" y="{y + 17}">{v:.2f}x</text>')
        else:
            out.append(f'<text x="{left + 4}" y="{y + 17}" fill="#888">n/a</text>')
    out.append(f'<line x1="{x(1):.1f}" y1="{top}" x2="{x(1):.1f}" y2="{h - 30}" stroke="#333" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{x(1):.1f}" y="{h - 14}" text-anchor="middle">1.0 = parity with NGINX</text>')
    out.append("</svg>")
    return "\n".join(out)


def escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


if __name__ == "__main__":
    sys.exit(main())
