#!/usr/bin/env python3
"""What Lua scripts cost: Sluice's `[route.lua]` beside NGINX with lua-nginx-module (Debian's
libnginx-mod-http-lua, the same OpenResty LuaJIT), side by side on the gateway core.

Part 1, keep-alive HTTP/1.1 GETs of 1 KiB (h2load, 32 connections, on the load core with the
NGINX origin). Each gateway has a listener without a script and one whose route runs the same
five-line `access` script (read a header, set two, check a shared-dict counter). Per row:
gateway CPU µs per request (all threads, user + system), median of the runs [min-max], and
the difference to the same gateway's row without a script, run by run; then Sluice's added
CPU over NGINX's, run by run. The Sluice listener without a script shares its configuration
(and so its Lua states) with the scripted one: a route without a script pays nothing.

Part 1b (`--perf`, on by default where `perf` runs): the same script's cost attributed by
sampling instead of by difference, which the host's noise between two rows does not blur.
Each gateway's scripted row runs again under `perf record`; the share of the gateway's
samples in its Lua machinery (LuaJIT and its traces in both; lua-nginx-module and NDK in
NGINX; `sluice_lua`, `mlua` and the request path's scripting glue in Sluice) times its CPU
per request is the script's CPU per request. This counts each gateway's own samples in those
places, not what they call elsewhere: LuaJIT's allocator runs inside libluajit in NGINX and
in Sluice's global allocator (mlua's), so Sluice's allocations, its copies of the request's
head and its clock reads are outside its share: the share favours Sluice. `--inclusive`
records call stacks (`--call-graph dwarf`) and counts every sample with a Lua frame anywhere
on its stack instead, which charges each gateway for all the work its scripts cause (a
slower pass: the stacks are parsed after each run).

Part 2, `ngx.shared` incr: a script that increments one key 100 times and answers 204, on
both gateways (every worker incrementing the same dictionary); increments per second per
gateway core (100 x requests / gateway CPU seconds), including the request's own cost.
Sluice runs both parts twice: by default, with the instruction budget and the JIT compiler
on (every chunk carrying the budget's polls, one per loop iteration here, and `incr` an FFI
call compiled into the script's trace), and in a second process with the same budget and
`[lua] jit = false` (the interpreter alone, `incr` a C function).

Called by bench/lua.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import bench as B

ORIGIN = 18700
SLUICE = {"none": 18710, "lua": 18711, "incr": 18712}
# The second Sluice process: the budget with `[lua] jit = false` (the interpreter alone).
SLUICE_INTERP = {"lua": 18714, "incr": 18713}
NGINX = {"none": 18720, "lua": 18721, "incr": 18722}

ACCESS = """
local token = ngx.var.http_x_token
ngx.req.set_header("X-Token-Seen", token or "none")
ngx.req.set_header("X-Gateway", "lua")
local n = ngx.shared.counts:incr("hits", 1, 0)
if not n then return ngx.exit(500) end
"""

INCR = """
local d = ngx.shared.counts
for i = 1, 100 do d:incr("k", 1, 0) end
return ngx.exit(204)
"""

LOAD_MODULES = """load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
"""


def origin_conf(d):
    return B.NGINX_COMMON.format(d=d, name="origin") + f"""
    access_log off;
    default_type text/plain;
    server {{ listen 127.0.0.1:{ORIGIN} backlog=4096; root {d}/www; }}
}}
"""


def nginx_conf(d):
    return LOAD_MODULES + B.NGINX_COMMON.format(d=d, name="nginx") + f"""
    access_log off;
    lua_shared_dict counts 1m;
    upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 64; }}
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    server {{
        listen 127.0.0.1:{NGINX['none']} backlog=4096;
        location / {{ proxy_pass http://o; }}
    }}
    server {{
        listen 127.0.0.1:{NGINX['lua']} backlog=4096;
        location / {{ access_by_lua_block {{ {ACCESS} }} proxy_pass http://o; }}
    }}
    server {{
        listen 127.0.0.1:{NGINX['incr']} backlog=4096;
        location / {{ access_by_lua_block {{ {INCR} }} }}
    }}
}}
"""


def sluice_conf(d, ports=SLUICE, interpreter=False):
    scripts = {"none": "", "lua": f"[route.lua]\naccess = '''{ACCESS}'''\n",
               "incr": f"[route.lua]\naccess = '''{INCR}'''\n"}
    out = [f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "off"
[admin]
enabled = false
[lua]
shared_dicts = {{ counts = "1m" }}
{"jit = false" if interpreter else ""}
[[upstream]]
name = "o"
keepalive = 64
servers = [{{ address = "127.0.0.1:{ORIGIN}" }}]
"""]
    for row, port in ports.items():
        out.append(f"""
[[listener]]
name = "{row}"
address = "127.0.0.1:{port}"
request_id = false
[[route]]
name = "{row}"
listeners = ["{row}"]
upstream = "o"
{scripts[row]}""")
    return "".join(out)


def h2load(port, duration):
    argv = ["h2load", "--h1", "-t", "1", "-c", "32", "-m", "1", "-D", str(max(1, round(duration))),
            "-H", "x-token: bench-token"]
    out, _ = B.run_load(argv + [f"http://127.0.0.1:{port}/1k"])
    m = B.H2LOAD_RE["succeeded"].search(out)
    bad = re.search(r"status codes: \d+ 2xx, \d+ 3xx, \d+ 4xx, (\d+) 5xx", out)
    if bad and int(bad.group(1)):
        raise RuntimeError(f"port {port}: {bad.group(1)} requests failed (5xx); see the gateway's log")
    return int(m.group(1)) if m else 0


def measure(proc, port, duration):
    cpu0 = proc.cpu()
    done = h2load(port, duration)
    if done == 0:
        raise RuntimeError(f"nothing served on port {port}")
    cpu = proc.cpu() - cpu0
    return {"completed": done, "cpu_us_per_req": cpu / done * 1e6, "cpu_s": cpu}


# What counts as a gateway's Lua machinery in `perf report --sort dso,sym`.
LUA_DSO = re.compile(r"libluajit|ngx_http_lua_module|ndk_http_module|\[JIT\]")
NGINX_LUA_SYM = re.compile(r"\bngx_http_lua_")
SLUICE_LUA_SYM = re.compile(r"sluice_lua::|mlua::|mlua_sys::|::lua_begin|::lua_finish|::lua_start|ScriptFetcher|RouteScripts|LuaBody")


def gateway_pids(proc):
    """The processes doing a gateway's work: NGINX's workers, or Sluice itself."""
    kids = subprocess.run(["pgrep", "-P", str(proc.p.pid)], capture_output=True, text=True).stdout.split()
    return kids or [str(proc.p.pid)]


def lua_share_inclusive(data):
    """The share of the samples in `data` with a Lua frame anywhere on their stack."""
    p = subprocess.Popen(["perf", "script", "-i", data, "-F", "comm,ip,sym,dso"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, errors="replace")
    total = lua = 0
    frames = []
    for line in list(p.stdout) + [""]:
        if line.strip():
            if line.startswith(("\t", " ")):
                frames.append(line)
            continue
        if frames:
            total += 1
            lua += any(LUA_DSO.search(f) or SLUICE_LUA_SYM.search(f) or NGINX_LUA_SYM.search(f) for f in frames)
        frames = []
    p.wait()
    return lua / total if total else 0.0


def lua_share(data):
    """The share of the samples in `data` that are the gateway's Lua machinery."""
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio"],
                         capture_output=True, text=True).stdout
    total = lua = 0.0
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
        total += pct
        if LUA_DSO.search(dso) or (dso == "sluice" and SLUICE_LUA_SYM.search(sym)):
            lua += pct
    return lua / total if total else 0.0


def measure_perf(proc, port, duration, d, inclusive):
    """One scripted row under `perf record`: CPU per request and the Lua share of it."""
    data = f"{d}/perf.data"
    stacks = ["--call-graph", "dwarf,16384"] if inclusive else []
    perf = subprocess.Popen(["perf", "record", "-F", "1999", *stacks, "-p", ",".join(gateway_pids(proc)), "-o", data,
                             "--", "sleep", str(duration + 1)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = measure(proc, port, duration)
    perf.wait()
    if not os.path.exists(data):
        raise RuntimeError("perf record wrote nothing (perf_event_paranoid?); run with --no-perf")
    r["lua_share"] = lua_share_inclusive(data) if inclusive else lua_share(data)
    os.remove(data)
    r["lua_us_per_req"] = r["cpu_us_per_req"] * r["lua_share"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="1 run of 1 s per row")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    ap.add_argument("--no-perf", action="store_true", help="skip the attribution by sampling (part 1b)")
    ap.add_argument("--inclusive", action="store_true",
                    help="attribute by call stack: every sample with a Lua frame on its stack (slower)")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.duration = 1, 1.0
    cpu = B.cpu_model()
    B.log(f"CPU: {cpu}; {args.runs} runs x {args.duration:g} s per row")
    rows = {f"{g} {k}": [] for g, ports in (("sluice", SLUICE), ("nginx", NGINX), ("sluice-interp", SLUICE_INTERP))
            for k in ports}
    sampled = not args.no_perf and shutil.which("perf") is not None
    if sampled:
        rows.update({"sluice sampled": [], "sluice-interp sampled": [], "nginx sampled": []})
    with tempfile.TemporaryDirectory(prefix="sluice-lua-") as d:
        os.chmod(d, 0o755)
        www = Path(d, "www")
        www.mkdir()
        www.joinpath("1k").write_bytes((b"Sluice Lua benchmark body.\n" * 40)[:1024])
        Path(d, "origin.conf").write_text(origin_conf(d))
        Path(d, "nginx.conf").write_text(nginx_conf(d))
        Path(d, "sluice.toml").write_text(sluice_conf(d))
        Path(d, "sluice-interp.toml").write_text(sluice_conf(d, SLUICE_INTERP, interpreter=True))
        procs = []
        try:
            procs.append(B.Proc("origin", ["nginx", "-c", f"{d}/origin.conf", "-p", d], B.LOAD_CORE, ORIGIN, f"{d}/origin.out"))
            nginx = B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE, NGINX["lua"], f"{d}/nginx.out")
            procs.append(nginx)
            sluice = B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file", f"{d}/sluice.pid"],
                            B.GW_CORE, SLUICE["lua"], f"{d}/sluice.out")
            procs.append(sluice)
            jit = B.Proc("sluice-interp", [str(B.SLUICE), "run", "--config", f"{d}/sluice-interp.toml", "--pid-file",
                                           f"{d}/sluice-interp.pid"], B.GW_CORE, SLUICE_INTERP["incr"],
                         f"{d}/sluice-interp.out")
            procs.append(jit)
            plan = [(f"sluice {k}", sluice, p) for k, p in SLUICE.items()] + \
                   [(f"nginx {k}", nginx, p) for k, p in NGINX.items()] + \
                   [(f"sluice-interp {k}", jit, p) for k, p in SLUICE_INTERP.items()]
            for name, proc, port in plan:
                measure(proc, port, 1)  # warm-up
            for run in range(args.runs):
                for name, proc, port in (plan if run % 2 == 0 else list(reversed(plan))):
                    r = measure(proc, port, args.duration)
                    rows[name].append(r)
                    B.log(f"  {name}: {r['cpu_us_per_req']:.2f} µs/req")
                if sampled:
                    for who, proc, port in (("sluice", sluice, SLUICE["lua"]), ("sluice-interp", jit, SLUICE_INTERP["lua"]),
                                            ("nginx", nginx, NGINX["lua"])):
                        r = measure_perf(proc, port, args.duration, d, args.inclusive)
                        rows[f"{who} sampled"].append(r)
                        B.log(f"  {who} sampled: {r['lua_us_per_req']:.2f} µs/req in Lua ({r['lua_share']:.1%})")
        finally:
            for p in reversed(procs):
                p.stop()
    report(cpu, args, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-lua{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps({"cpu": cpu, "runs": args.runs, "duration": args.duration,
                                "inclusive": args.inclusive, "rows": rows}, indent=1))
    B.log(f"results: {path}")


def report(cpu, args, rows):
    f = lambda s: f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"

    def added(who):
        return [a["cpu_us_per_req"] - b["cpu_us_per_req"] for a, b in zip(rows[f"{who} lua"], rows[f"{who} none"])]

    print("# What a five-line access script costs per request (keep-alive HTTP/1.1, 1 KiB)\n")
    print(f"CPU: {cpu}. {args.runs} runs x {args.duration:g} s per row, rows alternating; median [min-max]. "
          "Gateway CPU µs per request, all threads; the difference is to the same gateway's row without "
          "a script, run by run.\n")
    print("| gateway, script | gateway µs/request | added by the script |")
    print("|---|---|---|")
    for who in ("sluice", "nginx"):
        for k in ("none", "lua"):
            name = f"{who} {k}"
            add = "—" if k == "none" else f(B.summarize(added(who)))
            print(f"| {name} | {f(B.summarize([r['cpu_us_per_req'] for r in rows[name]]))} | {add} |")
    # A run whose NGINX difference is not above zero (noise larger than the script) has no
    # ratio: it is left out and counted, rather than a NaN taking the median with it.
    pairs = list(zip(added("sluice"), added("nginx")))
    ratios = [s / n for s, n in pairs if n > 0]
    left_out = len(pairs) - len(ratios)
    note = f" ({left_out} of {len(pairs)} runs left out: NGINX's difference not above zero)" if left_out else ""
    if ratios:
        ratio = B.summarize(ratios)
        print(f"\nSluice's added CPU / NGINX + lua-nginx-module's, run by run: {ratio['median']:.2f}x "
              f"[{ratio['min']:.2f}-{ratio['max']:.2f}]{note}")
    else:
        print(f"\nSluice's added CPU / NGINX + lua-nginx-module's: no run to compare{note}")
    if rows.get("sluice sampled"):
        how = ("every sample with a Lua frame on its call stack (`--inclusive`)" if args.inclusive
               else "the gateway's own samples in its Lua machinery (not what it calls elsewhere)")
        print(f"\nAttributed by sampling (`perf record` on the scripted rows, run by run): the share of "
              f"the gateway's samples that are {how}, times its CPU per request.\n")
        print("| gateway | gateway µs/request | Lua's share | Lua µs/request |")
        print("|---|---|---|---|")
        pct = lambda s: f"{s['median']:.1%} [{s['min']:.1%}-{s['max']:.1%}]"
        labels = {"sluice": "sluice (JIT on, the budget's polls compiled: the default)",
                  "sluice-interp": "sluice, [lua] jit = false (interpreter)", "nginx": "nginx"}
        for who in ("sluice", "sluice-interp", "nginx"):
            rs = rows.get(f"{who} sampled") or []
            if not rs:
                continue
            print(f"| {labels[who]} | {f(B.summarize([r['cpu_us_per_req'] for r in rs]))} | "
                  f"{pct(B.summarize([r['lua_share'] for r in rs]))} | {f(B.summarize([r['lua_us_per_req'] for r in rs]))} |")
        for who in ("sluice", "sluice-interp"):
            ratios = [a["lua_us_per_req"] / b["lua_us_per_req"]
                      for a, b in zip(rows.get(f"{who} sampled") or [], rows["nginx sampled"]) if b["lua_us_per_req"] > 0]
            if ratios:
                r = B.summarize(ratios)
                print(f"\n{labels[who]}: Lua µs / NGINX + lua-nginx-module's, run by run: {r['median']:.2f}x "
                      f"[{r['min']:.2f}-{r['max']:.2f}]")
            else:
                print(f"\n{labels[who]}: no Lua samples in NGINX's runs: no ratio.")
    print("\n# ngx.shared incr (100 per request, one key, every worker)\n")
    print("| gateway | increments per second per gateway core |")
    print("|---|---|")
    per_core = {who: [r["completed"] * 100 / max(r["cpu_s"], 1e-9) for r in rows[f"{who} incr"]]
                for who in ("sluice", "sluice-interp", "nginx")}
    g = lambda s: f"{s['median']:,.0f} [{s['min']:,.0f}-{s['max']:,.0f}]"
    names = {"sluice": "sluice (instruction budget, JIT on with its polls: the default)",
             "sluice-interp": "sluice, [lua] jit = false (interpreter)", "nginx": "nginx"}
    for who in ("sluice", "sluice-interp", "nginx"):
        print(f"| {names[who]} | {g(B.summarize(per_core[who]))} |")
    print()
    for who in ("sluice", "sluice-interp"):
        r = B.summarize([a / b for a, b in zip(per_core[who], per_core["nginx"])])
        print(f"{names[who]} / NGINX, run by run: {r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]  ")


if __name__ == "__main__":
    main()
