"""Lost-lock notices over seeds (issue 28): for each library, when its notice came against the
grant's surely-held end (the `notices` check's lead, < 0 a lag), how long after the paused holder
woke, and how often a careless holder's write after its notice was caught.

Runs `fencecheck matrix` on a matrix of rows with `client_options.notices` (default
benchmarks/notices.toml), then reads each run's results.json (the check's per-grant figures) and
history.jsonl (the pause windows: a notice's delay after its own node's `stop-pause`). Must run as
root (network namespaces). Prints one Markdown row per matrix row; `--json` keeps every figure.

    sudo .venv/bin/python benchmarks/bench_notices.py --json notices.json
    sudo .venv/bin/python benchmarks/bench_notices.py --out store/_matrix/notices --no-run

Figures: docs/findings/notices.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from fencecheck.checker.history import load_ops  # noqa: E402
from fencecheck.checker.names import load_names  # noqa: E402


def wake_delays(run_dir: Path) -> list[int]:
    """ns from the end of the pause of a notice's own node to the notice, per notice that came
    while or after its node was paused (the first notice after each wake)."""
    ops = load_ops(run_dir / "history.jsonl")
    names = load_names(run_dir)
    woke: dict[str, int] = {}  # node -> its last stop-pause completion
    told: set[tuple[str, int]] = set()
    out: list[int] = []
    for op in sorted(ops, key=lambda o: o.time):
        if op.f == "stop-pause" and op.ok and isinstance(op.value, dict):
            for node in op.value.get("resumed", []):
                woke[str(node)] = op.time  # SIGCONT goes out between invoke and ok
        elif op.f == "notice" and op.ok:
            node = names.node(op.process)
            if node in woke and (node, woke[node]) not in told:
                told.add((node, woke[node]))
                out.append(op.time - woke[node])
    return out


def row_figures(row: dict[str, Any]) -> dict[str, Any]:
    leads: list[int] = []
    delays: list[int] = []
    notices = found = runs = 0
    for run in row["runs"]:
        if not run.get("run_dir"):
            continue
        run_dir = Path(run["run_dir"])
        results = json.loads((run_dir / "results.json").read_text())
        runs += 1
        check = results["checks"].get("notices", {})
        notices += int(check.get("notices", 0))
        leads += [g["lead_ns"] for g in check.get("per_grant", [])
                  if isinstance(g.get("lead_ns"), int)]
        found += "write-after-notice" in check.get("count_by_kind", {})
        delays += wake_delays(run_dir)
    return {"row": row["row"], "runs": runs, "notices": notices, "grants": len(leads),
            "leads_ns": leads, "wake_delays_ns": delays, "write_after_notice_runs": found}


def _ms(ns: list[int]) -> str:
    if not ns:
        return "–"
    med = statistics.median_low(ns) / 1e6
    return f"{med:+.0f} ms ({min(ns) / 1e6:+.0f} … {max(ns) / 1e6:+.0f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", type=Path, default=HERE / "notices.toml")
    ap.add_argument("--store", type=Path, default=Path("store"))
    ap.add_argument("--out", type=Path, default=Path("store/_matrix/notices"))
    ap.add_argument("--jobs", default="1")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--no-run", action="store_true", help="read an earlier --out only")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if not a.no_run:
        argv = [sys.executable, "-m", "fencecheck", "matrix", str(a.matrix), "--store",
                str(a.store), "--out", str(a.out), "--jobs", a.jobs]
        for name in a.only:
            argv += ["--only", name]
        subprocess.run(argv, cwd=REPO, check=False)
    matrix = json.loads((a.out / "matrix.json").read_text())
    rows = [row_figures(r) for r in matrix["rows"]]
    print("| row | runs | notices | grants told | lead (median, range) | after waking "
          "(median, range) | runs with write-after-notice |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {r['runs']} | {r['notices']} | {r['grants']} | "
              f"{_ms(r['leads_ns'])} | {_ms(r['wake_delays_ns'])} | "
              f"{r['write_after_notice_runs']}/{r['runs']} |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
