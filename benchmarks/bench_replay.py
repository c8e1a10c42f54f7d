"""Replay: record one run, then replay its fault schedule (`fencecheck run --replay RUN_DIR`)
--tries times and count the replays that find violations again, and of the same kinds. Must run
as root (network namespaces).

    .venv/bin/python benchmarks/bench_replay.py --tries 10 -- --backend redis --fencing off \
        --nemesis pause --time-limit 10 --lease-ms 1000 --seed 1

Everything after `--` goes to the recorded `fencecheck run` unchanged (a replay takes its
configuration from the recorded run). The recorded run must find violations: a replay of a
run that found none proves nothing. Prints one Markdown table row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def _run(store: Path, args: list[str]) -> tuple[int, Path | None]:
    r = subprocess.run([sys.executable, "-m", "fencecheck", "run", "--store", str(store), *args],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "500"})
    if "run directory:" in r.stdout:
        return r.returncode, Path(r.stdout.split("run directory:")[1].split()[0])
    print(r.stderr.strip()[-300:], file=sys.stderr)
    return r.returncode, None


def _figures(run_dir: Path) -> dict[str, Any]:
    results = json.loads((run_dir / "results.json").read_text())
    first = results["stats"].get("first_violation_ns")
    steps = json.loads((run_dir / "schedule.json").read_text())["steps"]
    return {"kinds": sorted({v["kind"] for c in results["checks"].values()
                             for v in c["violations"]}),
            "first_s": first / 1e9 if isinstance(first, int) else None,
            "faults": len(steps), "targets": [s["value"] for s in steps]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("run_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.run_args if x != "--"]
    with tempfile.TemporaryDirectory(prefix="fc-bench-replay-") as d:
        store = Path(d)
        code, original = _run(store, args)
        if code != 1 or original is None:
            sys.exit(f"the recorded run found no violations (exit {code}): nothing to replay")
        rec = _figures(original)
        print(json.dumps({"recorded": str(original), **rec}), file=sys.stderr, flush=True)
        rows = []
        for i in range(a.tries):
            code, run_dir = _run(store, ["--replay", str(original)])
            row = {"try": i + 1, "exit": code, **(_figures(run_dir) if run_dir else {})}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    found = [r for r in rows if r["exit"] == 1]
    same = [r for r in found if set(r["kinds"]) & set(rec["kinds"])]
    firsts = [r["first_s"] for r in found if isinstance(r.get("first_s"), float)]
    median = f"{statistics.median(firsts):.1f} s" if firsts else "-"
    print(f"| replay of `{' '.join(args)}` ({rec['faults']} faults, recorded kinds "
          f"{', '.join(rec['kinds'])}) | {len(found)} of {a.tries} replays found violations, "
          f"{len(same)} of the same kind; median first violation {median} "
          f"(recorded: {rec['first_s']:.1f} s) |")


if __name__ == "__main__":
    main()
