"""The README's one performance table, rendered from a `bench/results/*-full.json` file.

    python3 bench/table.py FILE             print the table
    python3 bench/table.py FILE --readme    write it into README.md between the markers
    python3 bench/table.py --check          fail if README.md's table is not its file's render

The README names the file its table came from in the opening marker, so that `--check` (CI)
can render it again: a table edited by hand, or a file changed under it, fails the check.
Each row gives each gateway's CPU per unit of work (µs per request or handshake; memory
rows their KiB per connection), the median of the file's runs with min-max, and Sluice's
figure over NGINX's and HAProxy's (below 1: Sluice spends less).
"""

import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = re.compile(r"<!-- bench-table: (bench/results/[^ ]+\.json) -->")
END = "<!-- /bench-table -->"
GATEWAYS = (("nginx", "NGINX"), ("haproxy", "HAProxy"), ("sluice", "Sluice"))


def per_unit(run, memory):
    """What a row compares: memory per connection, or gateway CPU per unit of work."""
    return run["value"] if memory else run["cpu_us_per_unit"]


def cell(runs, memory):
    values = [per_unit(r, memory) for r in runs]
    m = statistics.median(values)
    if len(values) == 1:
        return fmt(m)
    return f"{fmt(m)} [{fmt(min(values))}-{fmt(max(values))}]"


def fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def render(path):
    data = json.loads((ROOT / path).read_text())
    lines = [
        f"CPU: {data['cpu']}; date: {data['date'][:10]}; `{path}`; every gateway pinned to core "
        f"{data['gateway_core']}, load and origin on core {data['load_core']}; median of "
        f"{data['runs']} runs of {data['duration_s']:g} s [min-max].",
        "",
        "| scenario | unit | NGINX | HAProxy | Sluice | Sluice / NGINX | Sluice / HAProxy |",
        "|---|---|---|---|---|---|---|",
    ]
    for sc in data["scenarios"]:
        runs = sc["runs"]
        if not all(g in runs and runs[g] for g, _ in GATEWAYS):
            continue
        memory = sc.get("memory", False)
        if sc.get("lower_is_better") and not memory:
            unit = sc["metric"]
            memory = True  # a latency row: compare the value itself
        else:
            unit = "KiB per connection" if memory else "gateway CPU µs per " + (
                "handshake" if sc["metric"] == "conn/s" else "request")
        med = {g: statistics.median(per_unit(r, memory) for r in runs[g]) for g, _ in GATEWAYS}
        ratios = [f"{med['sluice'] / med[ref]:.2f}x" if med[ref] else "n/a" for ref in ("nginx", "haproxy")]
        cells = [cell(runs[g], memory) for g, _ in GATEWAYS]
        lines.append(f"| {sc['name']} | {unit} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def readme_block(text):
    m = START.search(text)
    if not m:
        sys.exit("bench/table.py: README.md has no `<!-- bench-table: FILE -->` marker")
    end = text.index(END, m.end())
    return m, end


def main(argv):
    if argv[:1] == ["--check"]:
        text = README.read_text()
        m, end = readme_block(text)
        want = render(m.group(1))
        have = text[m.end():end].strip("\n")
        if have != want:
            sys.exit(f"bench/table.py: README.md's table is not the render of {m.group(1)}; "
                     f"run `python3 bench/table.py {m.group(1)} --readme`")
        return 0
    if not argv:
        sys.exit(__doc__)
    path = str(Path(argv[0]).resolve().relative_to(ROOT))
    table = render(path)
    if "--readme" in argv[1:]:
        text = README.read_text()
        m, end = readme_block(text)
        text = text[:m.start()] + f"<!-- bench-table: {path} -->\n{table}\n" + text[end:]
        README.write_text(text)
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
