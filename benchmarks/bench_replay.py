"""Replay: record one run, then replay its fault schedule (`fencecheck run --replay RUN_DIR`)
--tries times and count the replays that find violations again, and of the same kinds. Must run
as root (network namespaces).

    .venv/bin/python benchmarks/bench_replay.py --tries 10 -- --backend redis --fencing off \
        --nemesis pause --time-limit 10 --lease-ms 1000 --seed 1

Everything after `--` goes to the recorded `fencecheck run` unchanged (a replay takes its
configuration from the recorded run). The recorded run must find violations: a replay of a
run that found none proves nothing. Prints one Markdown table row.

The shipped findings (issue 29: each must replay to its violation kind in at least 8 of 10
tries): replay every folder of examples/findings/ (or those named) --tries times, count the
replays that found the finding's kind (its finding.toml's `kind`), and write the counts as JSON
for the findings pages (python -m fencecheck.reports.findings --replays FILE):

    .venv/bin/python benchmarks/bench_replay.py --findings --tries 10 --jobs 2 \
        --json benchmarks/replay-findings.json [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
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


FINDINGS = Path(__file__).resolve().parent.parent / "examples" / "findings"


def _finding(folder: Path, tries: int, store: Path) -> dict[str, Any]:
    """Replay one shipped finding `tries` times: how many found its kind."""
    kind = tomllib.loads((folder / "finding.toml").read_text())["kind"]
    runs = []
    for i in range(tries):
        code, run_dir = _run(store, ["--replay", str(folder)])
        kinds = _figures(run_dir)["kinds"] if run_dir and (run_dir / "results.json").is_file() \
            else []
        runs.append({"try": i + 1, "exit": code, "kinds": kinds, "run_dir": str(run_dir)})
        print(json.dumps({"finding": folder.name, **runs[-1]}), file=sys.stderr, flush=True)
    return {"kind": kind, "tries": tries, "same_kind": sum(kind in r["kinds"] for r in runs),
            "found": sum(r["exit"] == 1 for r in runs), "runs": runs}


def findings(names: list[str], tries: int, jobs: int, out: Path | None) -> None:
    folders = [f for f in sorted(FINDINGS.iterdir()) if (f / "finding.toml").is_file()
               and (f / "schedule.json").is_file() and (not names or f.name in names)]
    store = Path(tempfile.mkdtemp(prefix="fc-bench-replay-"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(zip([f.name for f in folders],
                        pool.map(lambda f: _finding(f, tries, store), folders), strict=True))
    if out is not None:
        old = json.loads(out.read_text()) if out.is_file() else {}
        out.write_text(json.dumps({**old, **done}, indent=1) + "\n")
    for name, r in done.items():
        met = "met" if r["same_kind"] >= 0.8 * r["tries"] else "**MISSED**"
        print(f"| {name} | {r['kind']} | {r['same_kind']} of {r['tries']} replays found it "
              f"({r['found']} found a violation) | {met} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--findings", action="store_true",
                    help="replay the shipped findings (examples/findings/; names: only those)")
    ap.add_argument("--jobs", type=int, default=1, help="--findings: findings at once")
    ap.add_argument("--json", type=Path, help="--findings: where the counts go (merged)")
    ap.add_argument("run_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.run_args if x != "--"]
    if a.findings:
        findings(args, a.tries, a.jobs, a.json)
        return
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
