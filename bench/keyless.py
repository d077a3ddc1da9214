#!/usr/bin/env python3
"""Keyless: the site's private key on a key server versus in the gateway, side by side.

1. Full TLS 1.3 handshakes/s, p99 handshake latency and gateway CPU per 1,000 handshakes,
   RSA-2048 and ECDSA P-256: Sluice with engine `keyless` (no key file; `sluice-keyserver`
   signs) versus Sluice with engine `inline` (the key in the gateway, signing on its event
   loop). Both gateways pinned to the gateway core; the load generator, the origin and the key
   server share the other core (this machine has two).
2. Signatures/s one key server sustains on one core (`sluice-keyserver` with one pool thread
   pinned to the gateway core, `sluice-loadgen keyless` pipelining requests from the other
   core) versus `sluice speed ALG --engine inline` on the same core (signing in-process, no
   network, no TLS records).

Runs alternate the two sides; tables show the median with [min-max]. Called by bench/keyless.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import bench as B

KEYSERVER = B.RELEASE / "sluice-keyserver"
KS_PORT, KS_METRICS = 18450, 18451
INLINE_PORT, KEYLESS_PORT = 18445, 18447


def openssl_pair(d, stem, subj, san):
    subprocess.run(
        ["openssl", "req", "-x509", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-keyout", f"{d}/{stem}.key", "-out", f"{d}/{stem}.crt", "-days", "30", "-subj", subj,
         "-addext", f"subjectAltName={san}"],
        check=True, capture_output=True)
    os.chmod(f"{d}/{stem}.key", 0o600)


def fingerprint(path):
    out = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", path],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1]


def keyserver_conf(d, port, metrics, engines="pool"):
    engines = "[]" if engines == "inline" else f'["{engines}"]'
    return f"""
listen = "127.0.0.1:{port}"
metrics = "127.0.0.1:{metrics}"
engines = {engines}
pool_threads = 1
max_pending = 256
[tls]
certificate = "{d}/ks.crt"
key = "{d}/ks.key"
[[client]]
name = "bench-gateway"
fingerprint = "{fingerprint(f'{d}/gw.crt')}"
[[key]]
file = "{d}/rsa.key"
[[key]]
file = "{d}/ecdsa.key"
"""


def keyless_gateway_conf(d, cert):
    """The inline gateway's configuration with the key moved to the key server."""
    text = B.sluice_conf(d, cert, "inline", KEYLESS_PORT, "sluice-keyless-access.log")
    crypto = "[offload.crypto]\nengines = []\n"
    compress = "[offload.compress]\n"
    assert crypto in text and compress in text
    text = text.replace(crypto, '[offload.crypto]\nengines = ["keyless"]\ndeadline = "2s"\n', 1)
    text = text.replace(compress, f"""[offload.keyless]
servers = ["127.0.0.1:{KS_PORT}"]
server_name = "localhost"
ca = '{d}/ks.crt'
certificate = '{d}/gw.crt'
key = '{d}/gw.key'
connections = 2
timeout = "1s"
fallback = "none"
[offload.compress]
""", 1)
    key_line = f"key = '{d}/{cert}.key'\n"
    assert key_line in text
    return text.replace(key_line, "", 1)


def handshakes(d, origin, runs, duration):
    rows = []
    ks = B.Proc("sluice-keyserver", [str(KEYSERVER), "--config", f"{d}/ks.toml"], B.LOAD_CORE, KS_PORT,
                f"{d}/keyserver.out")
    try:
        for cert, label in (("rsa", "RSA-2048"), ("ecdsa", "ECDSA P-256")):
            Path(d, f"inline-{cert}.toml").write_text(
                B.sluice_conf(d, cert, "inline", INLINE_PORT, "sluice-inline-access.log"))
            Path(d, f"keyless-{cert}.toml").write_text(keyless_gateway_conf(d, cert))
            procs = {}
            try:
                for name, port in (("inline", INLINE_PORT), ("keyless", KEYLESS_PORT)):
                    procs[name] = B.Proc(f"sluice-{name}", [str(B.SLUICE), "run", "--config", f"{d}/{name}-{cert}.toml", "--pid-file", f"{d}/{name}-{cert}.pid"],
                                         B.GW_CORE, port, f"{d}/{name}-{cert}.out")
                time.sleep(1)
                row = {"name": f"full handshakes, {label}, TLS 1.3", "runs": {"inline": [], "keyless": []}}
                for i in range(runs):
                    order = ("inline", "keyless") if i % 2 == 0 else ("keyless", "inline")
                    for who in order:
                        p = procs[who]
                        cpu0, ks0, t0 = p.cpu(), ks.cpu(), time.time()
                        port = INLINE_PORT if who == "inline" else KEYLESS_PORT
                        r = B.loadgen("handshake", port, duration, ["--tls", "1.3", "--path", "/1k", "--concurrency", "32"])
                        wall = time.time() - t0
                        r["gateway_util"] = (p.cpu() - cpu0) / wall
                        r["keyserver_util"] = (ks.cpu() - ks0) / wall
                        r["gateway_cpu_s_per_1k"] = (p.cpu() - cpu0) / max(r["completed"], 1) * 1000
                        row["runs"][who].append(r)
                        B.log(f"  {row['name']} [{who} run {i + 1}]: {r['rate']:,.0f} conn/s, p99 {r['p99_ms']:.1f} ms, "
                              f"gateway CPU {r['gateway_util']:.0%}, key server CPU {r['keyserver_util']:.0%}, "
                              f"failed {r['failed']}" + (f" ({r['first_error']})" if r.get("first_error") else ""))
                rows.append(row)
            finally:
                for p in procs.values():
                    p.stop()
    finally:
        ks.stop()
    return rows


def signs(d, runs, duration):
    rows = []
    ks = B.Proc("sluice-keyserver", [str(KEYSERVER), "--config", f"{d}/ks.toml"], B.GW_CORE, KS_PORT,
                f"{d}/keyserver-signs.out")
    try:
        for cert, alg, scheme, label in (("rsa", "rsa2048", "0x0804", "RSA-2048"),
                                         ("ecdsa", "ecdsap256", "0x0403", "ECDSA P-256")):
            row = {"name": f"signatures/s on one core, {label}", "runs": {"local": [], "keyserver": []}}
            for i in range(runs):
                order = ("local", "keyserver") if i % 2 == 0 else ("keyserver", "local")
                for who in order:
                    if who == "local":
                        out = subprocess.run(["taskset", "-c", B.GW_CORE, str(B.SLUICE), "speed", alg, "--engine", "inline",
                                              "--seconds", str(duration), "--json"],
                                             check=True, capture_output=True, text=True).stdout
                        r = {"rate": json.loads(out.strip().splitlines()[-1])["ops_per_sec"]}
                    else:
                        ks0, t0 = ks.cpu(), time.time()
                        out, _ = B.run_load([str(B.LOADGEN), "keyless", "--addr", f"127.0.0.1:{KS_PORT}",
                                             "--cert", f"{d}/gw.crt", "--key", f"{d}/gw.key", "--site", f"{d}/{cert}.crt",
                                             "--scheme", scheme, "--connections", "2", "--window", "32",
                                             "--duration", f"{duration}s"])
                        r = json.loads(out)
                        r["keyserver_util"] = (ks.cpu() - ks0) / (time.time() - t0)
                    row["runs"][who].append(r)
                    B.log(f"  {row['name']} [{who} run {i + 1}]: {r['rate']:,.0f}/s"
                          + (f", key server CPU {r['keyserver_util']:.0%}, failed {r['failed']}" if who == "keyserver" else ""))
            rows.append(row)
    finally:
        ks.stop()
    return rows


def med(row, who, key):
    v = [r[key] for r in row["runs"][who]]
    return statistics.median(v), min(v), max(v)


def cell(t, unit=""):
    return f"{B.fmt(t[0])} [{B.fmt(t[1])}-{B.fmt(t[2])}]{unit}"


def render(hs, sg, runs, duration, engine):
    lines = [f"CPU: {B.cpu_model()}; gateway core {B.GW_CORE}; load generator, origin and (in the handshake rows) "
             f"the key server on core {B.LOAD_CORE}; median of {runs} run(s) of {duration:g} s, [min-max]", "",
             "| scenario | Sluice `inline` (key in the gateway) | Sluice `keyless` (key on the key server) | keyless/inline |",
             "|---|---|---|---|"]
    for row in hs:
        i, k = med(row, "inline", "rate"), med(row, "keyless", "rate")
        lines.append(f"| {row['name']}, conn/s | {cell(i)} | {cell(k)} | {k[0] / i[0]:.2f}x |")
        i, k = med(row, "inline", "p99_ms"), med(row, "keyless", "p99_ms")
        lines.append(f"| ↳ p99 handshake ms | {cell(i)} | {cell(k)} | {k[0] / i[0]:.2f}x |")
        i, k = med(row, "inline", "gateway_cpu_s_per_1k"), med(row, "keyless", "gateway_cpu_s_per_1k")
        lines.append(f"| ↳ gateway CPU-s per 1,000 handshakes | {cell(i)} | {cell(k)} | {k[0] / i[0]:.2f}x |")
        ks = statistics.median(r["keyserver_util"] for r in row["runs"]["keyless"])
        lines.append(f"| ↳ key server CPU (on the load core) | | {ks:.0%} | |")
    lines += ["", f"| signatures/s on one core | `sluice speed --engine inline` (in-process) | `sluice-keyserver` (engine `{engine}`, over mTLS) | key server/local |",
              "|---|---|---|---|"]
    for row in sg:
        l, k = med(row, "local", "rate"), med(row, "keyserver", "rate")
        util = statistics.median(r["keyserver_util"] for r in row["runs"]["keyserver"])
        lines.append(f"| {row['name']} | {cell(l)} | {cell(k)} (key server CPU {util:.0%}) | {k[0] / l[0]:.2f}x |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    ap.add_argument("--keyserver-engine", default="inline", choices=("inline", "pool", "mb"),
                    help="the key server's crypto engine (inline: signed on the connection's task)")
    ap.add_argument("--only", choices=("handshakes", "signs"), help="run one part")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sluice-keyless-bench-")
    os.chmod(d, 0o755)
    B.log(f"keyless bench: working in {d}; {args.runs} run(s) x {args.duration:g} s")
    B.make_certs(d)
    B.make_content(d)
    openssl_pair(d, "ks", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
    openssl_pair(d, "gw", "/CN=bench-gateway", "DNS:bench-gateway")
    Path(d, "ks.toml").write_text(keyserver_conf(d, KS_PORT, KS_METRICS, args.keyserver_engine))
    Path(d, "origin.conf").write_text(B.nginx_origin_conf(d))
    origin = B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, B.ORIGIN_PORT, f"{d}/origin.out")
    try:
        hs = handshakes(d, origin, args.runs, args.duration) if args.only != "signs" else []
    finally:
        origin.stop()
    sg = signs(d, args.runs, args.duration) if args.only != "handshakes" else []
    report = render(hs, sg, args.runs, args.duration, args.keyserver_engine)
    print(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    (out / f"{stamp}-keyless.json").write_text(json.dumps(
        {"date": stamp, "cpu": B.cpu_model(), "runs": args.runs, "duration_s": args.duration,
         "keyserver_engine": args.keyserver_engine, "handshakes": hs, "signs": sg}, indent=1, default=str))
    (out / "latest-keyless.md").write_text(report + "\n")
    B.log(f"keyless bench: wrote {out}/{stamp}-keyless.json and latest-keyless.md")
    failed = sum(r.get("failed", 0) for row in hs + sg for w in row["runs"].values() for r in w)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
