#!/usr/bin/env python3
"""The site mix counted by class: where each gateway's CPU on the mix goes.

The mix (`sitemix.py`, `sluice-loadgen mix`) is sent whole, then one class at a time on the
mix's own schedule (`--class`: the other classes' requests are skipped, not replaced):

    h2          small responses on the established HTTP/2 connections
    h1          small responses on the established HTTP/1.1 connections
    gzip        the compressible page, gzipped by the gateway (both protocols)
    image       the 16 KiB incompressible image (both protocols)
    full-rsa    new connections, full handshake on the RSA-2048 certificate
    full-ecdsa  new connections, full handshake on the ECDSA P-256 certificate
    resumed     new connections resuming a TLS 1.3 session
    idle        the idle connections alone, held open through the window

The classes partition the mix, so each one's gateway CPU over the window, divided by the
whole mix's requests in a window of that length, is its share of the mix's figure (CPU ms per
1,000 requests); the shares add up to the whole but for what classes share (an event loop
that wakes once for two classes' work). Beside each share: the CPU per request or connection
of that class alone, user and system apart. Every gateway is `bench/run`'s (the same
configurations, certificates and origin; the gateway on its core, the load generator and
origin on the other), and `sluice-x25519` is Sluice with X25519 alone as key exchange, the
group NGINX and HAProxy (Debian's OpenSSL 3.0) agree, where Sluice's default prefers
X25519MLKEM768.

    bench/mixclasses [--runs 3] [--duration 8] [--classes all,h2,...] [--gateways nginx,...]
    bench/mixclasses --smoke     1 run x 1 s, Sluice only: keeps the harness working (CI)
    bench/mixclasses --render bench/results/<time>-mixclasses.json   the table of an earlier run

Writes the table to stdout and `bench/results/latest-mixclasses.md`, every run to
`bench/results/<time>-mixclasses.json`. Called by bench/mixclasses.
"""

import argparse
import datetime
import json
import shutil
import statistics
import sys
from pathlib import Path

import bench
import sitemix

CLASSES = ("all", "h2", "h1", "gzip", "image", "full-rsa", "full-ecdsa", "resumed", "idle")
GATEWAYS = ("nginx", "haproxy", "sluice", "sluice-x25519")
LABELS = {"nginx": "NGINX", "haproxy": "HAProxy", "sluice": "Sluice", "sluice-x25519": "Sluice, X25519"}


def measure(gw, origin, who, cls, duration, idle):
    """One class against one gateway: the loadgen's figures with the gateway's CPU, and the
    class's share of the mix (µs per mix request = CPU ms per 1,000) and cost per unit."""
    r = sitemix.run(bench.LOADGEN, bench.LOAD_CORE, bench.tree_cpu_split, gw.procs[who], origin, gw.ports[who],
                    duration, idle, extra=("--class", cls))
    if r.get("failed"):
        raise RuntimeError(f"{who}, class {cls}: {r['failed']} failed; first: {r.get('first_error')}")
    mix_requests = r["offered_rate"] * r["wall_s"]
    r["share"] = r["gateway_cpu_s"] / max(mix_requests, 1) * 1e6
    r["user_share"] = r["gateway_user_s"] / max(mix_requests, 1) * 1e6
    r["sys_share"] = r["gateway_sys_s"] / max(mix_requests, 1) * 1e6
    units = r["completed"] if cls != "idle" else r["idle_opened"]
    r["per_unit"] = r["gateway_cpu_s"] / max(units, 1) * 1e6
    return r


def spread(values):
    """`median [min-max]` to a tenth (`bench.spread` prints every digit `:g` keeps)."""
    s = bench.summarize(values)
    if len(values) == 1:
        return f"{s['median']:.1f}"
    return f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]"


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def render(runs, gateways, classes, args, cpu):
    """The breakdown: a row per class, each gateway's share of the mix's CPU ms per 1,000
    requests, Sluice's over NGINX's run by run, and the split and cost per unit."""
    lines = [f"CPU: {cpu}; {args.runs} runs x {args.duration} s per class and gateway; gateway on core "
             f"{bench.GW_CORE}, load generator and origin on core {bench.LOAD_CORE}; {args.idle:,} idle connections "
             f"(class `idle` and the whole mix); mix: {sitemix.MIX_STATED}", "",
             "Share: the class's gateway CPU over the window per 1,000 requests of the whole mix (CPU ms), median "
             "[min-max]; the classes add up to the mix but for what they share. Per unit: µs per request of the "
             "class (idle: per connection held through the window).", ""]
    head = "| class | " + " | ".join(f"{LABELS[w]} share" for w in gateways)
    has_nginx = "nginx" in gateways and "sluice" in gateways
    head += " | Sluice/NGINX, run by run" if has_nginx else ""
    head += " | user+system share (" + " / ".join(LABELS[w] for w in gateways) + ")"
    head += " | per unit µs (" + " / ".join(LABELS[w] for w in gateways) + ") |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for cls in classes:
        cells = [spread([r["share"] for r in runs[w][cls]]) for w in gateways]
        row = f"| {cls} | " + " | ".join(cells)
        if has_nginx:
            # A share NGINX spent nothing on (idle connections, below /proc's tick) has no ratio.
            ratios = [s["share"] / n["share"] for s, n in zip(runs["sluice"][cls], runs["nginx"][cls]) if n["share"] > 0]
            row += f" | {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else " | -"
        row += " | " + " / ".join(f"{med(runs[w][cls], 'user_share'):.1f}+{med(runs[w][cls], 'sys_share'):.1f}"
                                  for w in gateways)
        row += " | " + " / ".join(f"{med(runs[w][cls], 'per_unit'):.1f}" for w in gateways) + " |"
        lines.append(row)
    parts = [c for c in classes if c != "all"]
    if "all" in classes and parts:
        sums = " | ".join(f"{sum(med(runs[w][c], 'share') for c in parts):.1f}" for w in gateways)
        lines.append(f"| sum of the classes | {sums} |" + " |" * (2 + has_nginx))
    lines += ["", "Key share negotiated by new connections (the whole mix): " + "; ".join(
        f"{LABELS[w]} {sitemix.key_shares(runs[w].get('all', []))}" for w in gateways)]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8, help="seconds of measured window per class (default 8)")
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--gateways", default=",".join(GATEWAYS))
    ap.add_argument("--smoke", action="store_true", help="1 run x 1 s, Sluice only; figures mean nothing")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--render", metavar="FILE", help="print the table of an earlier run's JSON file, and run nothing")
    args = ap.parse_args()
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        args.runs, args.duration, args.idle = saved["runs_per_class"], saved["duration_s"], saved["idle"]
        gateways = [w for w in GATEWAYS if w in saved["runs"]]
        print(render(saved["runs"], gateways, saved["classes"], args, saved["cpu"]))
        return
    if args.smoke:
        args.runs, args.duration, args.gateways = 1, 1, "sluice"
    args.idle = sitemix.SMOKE_IDLE if args.smoke else sitemix.IDLE
    classes = args.classes.split(",")
    gateways = args.gateways.split(",")
    for c in classes:
        if c not in CLASSES:
            sys.exit(f"mixclasses: unknown class {c!r}; the classes are {', '.join(CLASSES)}")
    for w in gateways:
        if w not in GATEWAYS:
            sys.exit(f"mixclasses: unknown gateway {w!r}; the gateways are {', '.join(GATEWAYS)}")
    d, origin, _ = bench.prepared("sluice-mixclasses-")
    runs = {w: {c: [] for c in classes} for w in gateways}
    try:
        gw = bench.Gateways(d, "mix")
        try:
            for i in range(args.runs):
                for cls in classes:
                    # Gateways in alternating order, so that none always follows the same one.
                    for who in gateways if i % 2 == 0 else reversed(gateways):
                        r = measure(gw, origin, who, cls, args.duration, args.idle)
                        runs[who][cls].append(r)
                        bench.log(f"  run {i + 1}, {cls}, {who}: share {r['share']:.1f} CPU ms/1k mix requests, "
                                  f"{r['per_unit']:.1f} µs per unit, {r['completed']} completed")
        finally:
            gw.stop()
    finally:
        origin.stop()
    shutil.rmtree(d, ignore_errors=True)
    cpu = bench.cpu_model()
    table = render(runs, gateways, classes, args, cpu)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    kind = "mixclasses-smoke" if args.smoke else "mixclasses"
    (out / f"{stamp}-{kind}.json").write_text(json.dumps(
        {"date": stamp, "cpu": cpu, "runs_per_class": args.runs, "duration_s": args.duration, "idle": args.idle,
         "classes": classes, "runs": runs}, indent=1))
    (out / f"latest-{kind}.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
