#!/usr/bin/env python3
"""The OWASP Core Rule Set's regression suite against Sluice's WAF (each engine: libmodsecurity
and the native one) and against NGINX with
ModSecurity-nginx (Debian's libnginx-mod-http-modsecurity), side by side: the same
libmodsecurity 3.0.9, the same rules (CRS 4.22.0 from the Go module
github.com/corazawaf/coraza-coreruleset/v4, which carries CRS's rules and its go-ftw tests),
the same settings, the same backend (albedo, the CRS project's reflector).

The setup is the CRS project's own for its regression runs (its tests/docker-compose.yml and
go-ftw's README): paranoia level 4, detection only (every rule runs; a test reads which rules
matched from the log), the test-marker rule 999999 that go-ftw looks for around each test.
NGINX writes ModSecurity's messages to its error log; Sluice writes its JSON access log, whose
`waf.matches` name each rule as `"id":N` (go-ftw reads both forms), unbuffered
(`access_flush = "0s"`).

What a run asserts: every test NGINX's connector passes, Sluice passes, except the ones
listed in bench/crs-overrides.toml, each with its reason; every listed test still differs
(a fixed difference leaves the list); and every test Sluice passes with libmodsecurity it
passes with its native engine (`[[waf.ruleset]] engine = "native"`, a second Sluice). Tests both gateways fail are the engine's (libmodsecurity
3.0.9 with rules written for later engines) and are counted, not hidden.

Called by bench/crs (the whole suite: ~4,100 tests, minutes) and bench/crs --smoke (a subset
of one or two tests per rule family, for CI).
"""

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import bench as B
import waf as W

CRS_MODULE = "github.com/corazawaf/coraza-coreruleset/v4"
CRS_VERSION = "v4.22.0"
ALBEDO, SLUICE, NGINX, NATIVE, CORAZA = 18960, 18961, 18962, 18963, 18964
TOOLS = Path(os.environ.get("SLUICE_TOOLS") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice" / "bin")
OVERRIDES = B.ROOT / "bench" / "crs-overrides.toml"
BODY_LIMIT = 1 << 20
PARANOIA = 4
# CI's subset: the first tests of rules from every request family, and the ones that exercise
# what a gateway does before the engine sees a request (request line, headers, bodies).
SMOKE = (r"^(911100-[1-3]|913100-[1-3]|920100-[1-9]|920160-[1-4]|920170-[1-3]|920180-[1-3]|920270-[1-4]"
         r"|920280-[1-3]|920430-[1-8]|921110-[1-3]|922110-[1-3]|930100-[1-3]|931100-[1-3]|932160-[1-3]"
         r"|933100-[1-3]|934100-[1-3]|941100-[1-3]|942100-[1-3]|943100-[1-3]|944100-[1-3]|949110-[1-3])$")

# The CRS regression setup's variables (the values of go-ftw's and Coraza's CRS runs) and the
# marker go-ftw sends before and after each test; a marker request runs no other rule.
SETUP = r"""SecAction "id:900005,phase:1,nolog,pass,t:none,setvar:tx.crs_validate_utf8_encoding=1,setvar:tx.arg_name_length=100,setvar:tx.arg_length=400,setvar:tx.total_arg_length=64000,setvar:tx.max_num_args=255,setvar:tx.max_file_size=64100,setvar:tx.combined_file_sizes=65535"
SecRule REQUEST_HEADERS:X-CRS-Test "@rx ^.*$" "id:999999,phase:1,pass,t:none,log,msg:'X-CRS-Test %{MATCHED_VAR}',ctl:ruleRemoveById=1-999999"
"""

# Tests neither gateway runs. 980170-1 and -2 expect a log line from a phase-5 rule with
# `noauditlog`, which libmodsecurity 3 never writes (CRS's own nginx-overrides.yaml says so);
# they are marked `retry_once`, and go-ftw v1.3.0 ends the whole run when such a test fails
# twice.
IGNORED = {"^980170-[12]$": "libmodsecurity 3 logs no noauditlog rule; go-ftw aborts on a failed retry_once"}


def crs_module():
    """The Go module's directory (downloaded into Go's module cache once)."""
    out = subprocess.run(["go", "mod", "download", "-json", f"{CRS_MODULE}@{CRS_VERSION}"],
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return Path(json.loads(out.stdout)["Dir"])


def prepare_rules(module, d):
    """CRS's rules, setup and tests under `d/crs`. The module's rule files have their comments
    and blank lines stripped, and libmodsecurity 3.0.9's parser then reads a chained rule
    without actions (REQUEST-949's `SecRule TX:EARLY_BLOCKING "@eq 1"`) into the next line:
    a blank line after each directive restores what CRS's own files have (rules unchanged).
    libmodsecurity also cuts an `Include` path at '@' (the module cache's `v4@v4.22.0`)."""
    crs = Path(d, "crs")
    (crs / "rules").mkdir(parents=True)
    for f in sorted((module / "rules" / "@owasp_crs").iterdir()):
        text = f.read_text()
        if f.suffix == ".conf":
            text = re.sub(r"(?m)^(.*[^\\\n])$", r"\1\n", text)
        (crs / "rules" / f.name).write_text(text)
    shutil.copyfile(module / "rules" / "@crs-setup.conf.example", crs / "crs-setup.conf")
    (crs / "setup.conf").write_text(SETUP)
    shutil.copytree(module / "tests", crs / "tests", ignore=shutil.ignore_patterns("*.go"))
    for p in crs.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return crs


def files(crs):
    return [crs / "setup.conf", crs / "crs-setup.conf", crs / "rules" / "*.conf"]


def modsec_conf(crs):
    """The directives NGINX's ModSecurity (and `--coraza`'s Coraza) load: what Sluice puts
    before and after a route's rule set, responses inspected as the CRS project's
    regression setup does (the same media types: Sluice's `response_mime_types` below)."""
    head = W.modsec_head("DetectionOnly", PARANOIA, BODY_LIMIT).replace(
        "SecResponseBodyAccess Off\n",
        "SecResponseBodyAccess On\nSecResponseBodyMimeType text/plain text/html text/xml application/json\n")
    return head + "".join(f"Include {f}\n" for f in files(crs)) + W.modsec_tail("DetectionOnly")


# CRS's crs-setup.conf sets `SecDefaultAction` for phases 1 and 2 only. A rule of phase 3 or 4
# without `log` then logs in ModSecurity (its built-in default logs) and not in Coraza (no
# default action: CRS's response rules matched and wrote nothing). Coraza gets ModSecurity's.
CORAZA_DEFAULTS = """SecDefaultAction "phase:3,log,auditlog,pass"
SecDefaultAction "phase:4,log,auditlog,pass"
"""


def coraza_gateway():
    """bench/coraza built into the tools' directory (Go's module cache keeps its modules)."""
    exe = TOOLS / "coraza-gateway"
    subprocess.run(["go", "build", "-o", str(exe), "."], cwd=B.ROOT / "bench" / "coraza", check=True)
    return exe


def nginx_conf(d, crs):
    Path(d, "modsec.conf").write_text(modsec_conf(crs))
    # ModSecurity-nginx writes each match to the error log at `warn`; the marker's too.
    return "load_module /usr/lib/nginx/modules/ngx_http_modsecurity_module.so;\n" + \
        B.NGINX_COMMON.format(d=d, name="nginx").replace("nginx-error.log warn", "nginx-error.log info") + f"""
    access_log off;
    client_max_body_size {BODY_LIMIT};
    client_body_buffer_size 128k;
    upstream o {{ server 127.0.0.1:{ALBEDO}; keepalive 16; }}
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    server {{
        listen 127.0.0.1:{NGINX};
        modsecurity on;
        modsecurity_rules_file {d}/modsec.conf;
        location / {{ proxy_pass http://o; }}
    }}
}}
"""


def sluice_conf(d, crs, engine="modsecurity", port=SLUICE, log="sluice-access.log"):
    listed = ", ".join(f'"{f}"' for f in files(crs))
    return f"""
[global]
shutdown_timeout = "2s"
[log]
level = "warn"
access_log = "{d}/{log}"
access_format = "json"
access_flush = "0s"
[admin]
enabled = false
[[upstream]]
name = "albedo"
servers = [{{ address = "127.0.0.1:{ALBEDO}" }}]
[[waf.ruleset]]
name = "crs"
engine = "{engine}"
files = [{listed}]
[[listener]]
name = "crs"
address = "127.0.0.1:{port}"
[[route]]
name = "crs"
upstream = "albedo"
[route.waf]
ruleset = "crs"
mode = "detect"
paranoia_level = {PARANOIA}
request_body_limit = "{BODY_LIMIT // 1024}k"
inspect_response = true
response_mime_types = ["text/plain", "text/html", "text/xml", "application/json"]
"""


def go_ftw(name, port, logfile, d, crs, include):
    """go-ftw's run against one gateway, its failures run once more: the test ids passed and
    failed. go-ftw reads the log while the gateway appends to it; Sluice's access log is
    written by its own thread just after the response (NGINX writes ModSecurity's lines
    before it answers), and a line that straddles a page of the file can be read half
    written: the marker then never matches, and about 1 test in 200 fails at random. A test
    that fails twice is a failure."""
    first = go_ftw_once(name, port, logfile, d, crs, include)
    if not first["failed"]:
        return first
    again = go_ftw_once(name + "-again", port, logfile, d, crs, "^(" + "|".join(sorted(first["failed"])) + ")$")
    first["passed"] |= again["passed"]
    first["failed"] = again["failed"]
    first["flaky"] = sorted(again["passed"])
    return first


def go_ftw_once(name, port, logfile, d, crs, include):
    """One go-ftw run against a gateway."""
    cfg = Path(d, f"ftw-{name}.yaml")
    cfg.write_text(f"logfile: {logfile}\nlogmarkerheadername: X-CRS-Test\n"
                   f"testoverride:\n  input:\n    dest_addr: 127.0.0.1\n    port: {port}\n"
                   "  ignore:\n" + "".join(f"    '{k}': '{v}'\n" for k, v in IGNORED.items()))
    out = Path(d, f"ftw-{name}.json")
    argv = [str(TOOLS / "go-ftw"), "run", "--config", str(cfg), "-d", str(crs / "tests"), "-o", "json",
            "-f", str(out), "--read-timeout", "10s", "--max-marker-retries", "50"]
    if include:
        argv += ["--include", include]
    with open(Path(d, f"ftw-{name}.log"), "w") as log:
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=3600)
    last = [line for line in out.read_text().splitlines() if line.startswith("{")] if out.exists() else []
    if not last:
        raise RuntimeError(f"go-ftw against {name} ended without its results; see {d}/ftw-{name}.log:\n"
                           + Path(d, f"ftw-{name}.log").read_text()[-2000:])
    stats = json.loads(last[-1])
    return {"passed": set(stats.get("success") or []), "failed": set(stats.get("failed") or []),
            "skipped": len(stats.get("skipped") or []), "ignored": len(stats.get("ignored") or []), "flaky": []}


def overrides():
    """bench/crs-overrides.toml: test id -> why Sluice's result differs from NGINX's."""
    listed = {}
    for entry in tomllib.loads(OVERRIDES.read_text()).get("difference", []):
        for t in entry["tests"]:
            listed[t] = entry["reason"]
    return listed


def compare(nginx, sluice, listed):
    ran = nginx["passed"] | nginx["failed"]
    differs = nginx["passed"] - sluice["passed"]
    unexplained = sorted(differs - listed.keys())
    stale = sorted(t for t in listed.keys() & ran if t not in differs)
    return {"differs": sorted(differs), "unexplained": unexplained, "stale": stale,
            "sluice_only": sorted(sluice["passed"] - nginx["passed"]),
            "both_fail": sorted(nginx["failed"] & sluice["failed"])}


def report(cpu, nginx, sluice, cmp, smoke, native=None):
    n = lambda r: len(r["passed"]) + len(r["failed"])
    print(f"# The CRS {CRS_VERSION} regression suite (go-ftw), paranoia level {PARANOIA}, detection only"
          f"{' (smoke subset)' if smoke else ''}\n")
    print(f"CPU: {cpu}. libmodsecurity 3.0.9 in both gateways; backend albedo.\n")
    print("| gateway | tests run | passed | failed | passed when run again |")
    print("|---|---|---|---|---|")
    gateways = [("NGINX + ModSecurity-nginx", nginx), ("Sluice (libmodsecurity)", sluice),
                ("Sluice (native engine)", native)]
    for name, r in gateways:
        print(f"| {name} | {n(r)} | {len(r['passed'])} | {len(r['failed'])} | {len(r['flaky'])} |")
    print()
    print(f"- NGINX passes and Sluice fails: {len(cmp['differs'])}, each listed in bench/crs-overrides.toml "
          f"with its reason ({len(cmp['unexplained'])} unlisted)")
    print(f"- Sluice passes and NGINX fails: {len(cmp['sluice_only'])}: {' '.join(cmp['sluice_only'][:40])}")
    print(f"- both fail (the engine's, with these rules): {len(cmp['both_fail'])}")
    print(f"- Sluice's libmodsecurity engine passes and its native engine fails: {len(cmp['native_misses'])}: "
          f"{' '.join(cmp['native_misses'][:40])}")
    print(f"- the native engine passes and libmodsecurity fails: {len(cmp['native_only'])}: "
          f"{' '.join(cmp['native_only'][:40])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="the CI subset")
    ap.add_argument("--include", help="go-ftw's --include: a regular expression of test ids")
    ap.add_argument("--out", default=str(B.ROOT / "bench" / "results"))
    ap.add_argument("--coraza", action="store_true",
                    help="also run the suite through Coraza (bench/coraza, built with Go), the engine CRS is tested against: "
                         "its count, and the tests it passes that the native engine fails")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (new or empty) and keep it: logs, configurations, go-ftw's output")
    args = ap.parse_args()
    include = SMOKE if args.smoke else args.include
    cpu = B.cpu_model()
    for tool in ("go-ftw", "albedo"):
        if not (TOOLS / tool).exists():
            raise SystemExit(f"bench/crs: {TOOLS / tool} is missing; scripts/test-deps builds it")
    module = crs_module()
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="sluice-crs-")) as d:
        Path(d).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
        crs = prepare_rules(module, d)
        Path(d, "nginx.conf").write_text(nginx_conf(d, crs))
        Path(d, "sluice.toml").write_text(sluice_conf(d, crs))
        Path(d, "native.toml").write_text(sluice_conf(d, crs, "native", NATIVE, "native-access.log"))
        procs = []
        try:
            procs.append(B.Proc("albedo", [str(TOOLS / "albedo"), "-b", "127.0.0.1", "-p", str(ALBEDO)],
                                B.LOAD_CORE, ALBEDO, f"{d}/albedo.out"))
            procs.append(B.Proc("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-p", d], B.GW_CORE, NGINX, f"{d}/nginx.out"))
            procs.append(B.Proc("sluice", [str(B.SLUICE), "run", "--config", f"{d}/sluice.toml", "--pid-file",
                                           f"{d}/sluice.pid"], B.GW_CORE, SLUICE, f"{d}/sluice.out"))
            procs.append(B.Proc("sluice-native", [str(B.SLUICE), "run", "--config", f"{d}/native.toml", "--pid-file",
                                                  f"{d}/native.pid"], B.GW_CORE, NATIVE, f"{d}/native.out"))
            B.log("go-ftw against NGINX + ModSecurity-nginx")
            nginx = go_ftw("nginx", NGINX, f"{d}/nginx-error.log", d, crs, include)
            B.log("go-ftw against Sluice")
            sluice = go_ftw("sluice", SLUICE, f"{d}/sluice-access.log", d, crs, include)
            B.log("go-ftw against Sluice's native engine")
            native = go_ftw("native", NATIVE, f"{d}/native-access.log", d, crs, include)
            coraza = None
            if args.coraza:
                Path(d, "coraza.conf").write_text(CORAZA_DEFAULTS + modsec_conf(crs))
                procs.append(B.Proc("coraza", [str(coraza_gateway()), "-listen", f"127.0.0.1:{CORAZA}", "-backend",
                                               f"http://127.0.0.1:{ALBEDO}", "-conf", f"{d}/coraza.conf",
                                               "-log", f"{d}/coraza.log"], B.GW_CORE, CORAZA, f"{d}/coraza.out"))
                B.log("go-ftw against Coraza")
                coraza = go_ftw("coraza", CORAZA, f"{d}/coraza.log", d, crs, include)
            cmp = compare(nginx, sluice, overrides())
            # The bar: the native engine passes every test the libmodsecurity engine
            # passes, in the same gateway (same parsing, same settings, same backend).
            cmp["native_misses"] = sorted(sluice["passed"] - native["passed"])
            cmp["native_only"] = sorted(native["passed"] - sluice["passed"])
            if cmp["stale"]:
                # A listed test that passed: run it again before calling the list stale (a
                # half-read log line can also make a test pass, see `go_ftw`).
                again = go_ftw_once("sluice-stale", SLUICE, f"{d}/sluice-access.log", d, crs,
                                    "^(" + "|".join(cmp["stale"]) + ")$")
                cmp["stale"] = sorted(again["passed"])
        finally:
            for p in reversed(procs):
                p.stop()
    report(cpu, nginx, sluice, cmp, args.smoke, native)
    if coraza:
        cmp["coraza_only"] = sorted(coraza["passed"] - native["passed"])
        cmp["native_not_coraza"] = sorted(native["passed"] - coraza["passed"])
        print(f"\nCoraza (bench/coraza): {len(coraza['passed'])} passed, {len(coraza['failed'])} failed; "
              f"{len(cmp['coraza_only'])} tests pass in Coraza and fail with the native engine: "
              f"{' '.join(cmp['coraza_only'])}; {len(cmp['native_not_coraza'])} the other way: "
              f"{' '.join(cmp['native_not_coraza'])}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = out / f"{stamp}-crs{'-smoke' if args.smoke else ''}.json"
    counts = lambda r: {"passed": len(r["passed"]), "failed": len(r["failed"]), "skipped": r["skipped"], "flaky": r["flaky"],
                        "failed_tests": sorted(r["failed"])}
    path.write_text(json.dumps({"cpu": cpu, "crs": CRS_VERSION, "paranoia_level": PARANOIA, "include": include,
                                "nginx": counts(nginx), "sluice": counts(sluice), "native": counts(native),
                                **({"coraza": counts(coraza)} if coraza else {}),
                                "compare": cmp}, indent=1))
    B.log(f"results: {path}")
    bad = []
    if cmp["unexplained"]:
        bad.append(f"NGINX passes and Sluice fails, not in {OVERRIDES.name}: {' '.join(cmp['unexplained'])}")
    if cmp["native_misses"]:
        bad.append(f"Sluice's libmodsecurity engine passes and its native engine fails: {' '.join(cmp['native_misses'])}")
    if cmp["stale"]:
        bad.append(f"listed in {OVERRIDES.name} but no longer different (remove them): {' '.join(cmp['stale'])}")
    if bad:
        raise SystemExit("bench/crs: " + "\n".join(bad))


if __name__ == "__main__":
    main()
