"""Time a whole matrix (default examples/nightly.toml) at one or more `--jobs` values, one after
another in one invocation, and compare: the wall time of each, and the rows whose verdicts differ
from the first value's (run at --jobs 1 twice to see which rows vary on their own).

Runs `fencecheck matrix` as a user would (root, a fresh store per value), then reads matrix.json
and each run's test.json. Prints one line per run, a total per --jobs value, the differing rows,
and writes everything as JSON.

    sudo .venv/bin/python benchmarks/bench_matrix.py --jobs 1,auto
    sudo .venv/bin/python benchmarks/bench_matrix.py --matrix examples/libraries.toml --rows 20 \
        --spread --jobs 1,auto
    sudo .venv/bin/python benchmarks/bench_matrix.py --matrix benchmarks/detection.toml \
        --jobs 1,auto
    sudo .venv/bin/python benchmarks/bench_matrix.py --jobs 1,1     # what varies by itself
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def jobs_twice(run_dir: str | None) -> int | None:
    """A cron run's jobs executed more than once (the jobs check; a scheduler's duplicate
    firings are counted there, not as violations), None for other runs."""
    path = Path(run_dir or "") / "results.json"
    if not run_dir or not path.is_file():
        return None
    jobs = json.loads(path.read_text()).get("checks", {}).get("jobs", {})
    twice = jobs.get("jobs_executed_more_than_once")
    return twice if isinstance(twice, int) else None


def run_matrix(matrix: Path, jobs: str, only: list[str], store: Path) -> dict[str, Any]:
    out_dir = store / "_matrix" / "bench"
    argv = [sys.executable, "-m", "fencecheck", "matrix", str(matrix), "--store", str(store),
            "--out", str(out_dir), "--jobs", jobs]
    for name in only:
        argv += ["--only", name]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env={**os.environ, "COLUMNS": "200"},
                          capture_output=True, text=True)
    wall_s = time.monotonic() - start
    if not (out_dir / "matrix.json").is_file():
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(3)
    summary = json.loads((out_dir / "matrix.json").read_text())
    runs: list[dict[str, Any]] = []
    for row in summary["rows"]:
        for run in row["runs"]:
            test: dict[str, Any] = {}
            if run["run_dir"] and (Path(run["run_dir"]) / "test.json").is_file():
                test = json.loads((Path(run["run_dir"]) / "test.json").read_text())
            limit = float(test.get("config", {}).get("time_limit_s", 0.0))
            runs.append({
                "row": row["row"], "seed": run["seed"], "expect": row["expect"],
                "verdict": run["verdict"], "met": row["met"], "wall_s": run["duration_s"],
                "time_limit_s": limit, "overhead_s": round(run["duration_s"] - limit, 2),
                "ready_s": test.get("ready_s"), "jobs_twice": jobs_twice(run["run_dir"]),
            })
    met = sum(1 for row in summary["rows"] if row["met"])
    return {"jobs": jobs, "wall_s": round(wall_s, 1), "exit_code": proc.returncode,
            "rows": len(summary["rows"]), "met": met, "runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", type=Path, default=REPO / "examples" / "nightly.toml")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--rows", type=int, help="only N rows of the file (the first N, or spread)")
    ap.add_argument("--spread", action="store_true",
                    help="with --rows: every k-th row, so the subset covers every fault")
    ap.add_argument("--jobs", default="1", help="comma-separated --jobs values, run in turn")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "matrix.json")
    ap.add_argument("--keep", type=Path, help="keep the stores under this folder")
    args = ap.parse_args()

    only = list(args.only)
    if args.rows:
        rows = tomllib.loads(args.matrix.read_text())["row"]
        step = max(1, len(rows) // args.rows) if args.spread else 1
        rows = rows[::step][: args.rows]
        only += [r["name"] for r in rows]
    results = []
    for i, jobs in enumerate(args.jobs.split(",")):
        base = args.keep or Path(tempfile.mkdtemp(prefix="fc-bench-matrix-"))
        store = base / f"jobs-{jobs}-{i}"
        res = run_matrix(args.matrix, jobs, only, store)
        results.append(res)
        for r in res["runs"]:
            ready = f"{r['ready_s']:.1f}" if isinstance(r["ready_s"], int | float) else "?"
            print(f"[jobs {jobs}] {r['row']:<32} seed {r['seed']:<3} {r['verdict']:<8} "
                  f"wall {r['wall_s']:6.1f} s  limit {r['time_limit_s']:5.1f} s  "
                  f"ready {ready} s")
        print(f"[jobs {jobs}] total: {len(res['runs'])} runs, {res['met']}/{res['rows']} rows "
              f"met, wall {res['wall_s']:.1f} s ({res['wall_s'] / 60:.1f} min); "
              f"exit {res['exit_code']}", flush=True)
        found: dict[str, list[int]] = {}
        for r in res["runs"]:
            tally = found.setdefault(r["row"], [0, 0, 0, 0])
            tally[0] += str(r["verdict"]).lower() == "invalid"
            tally[1] += 1
            tally[2] += r["jobs_twice"] is not None
            tally[3] += bool(r["jobs_twice"])
        for row_name, (hits, n, cron, twice) in found.items():
            if n > 1:
                jobs_note = f"; a job executed twice in {twice}/{n} seeds" if cron else ""
                print(f"[jobs {jobs}] {row_name:<32} found in {hits}/{n} seeds{jobs_note}")
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    first = results[0]
    verdicts = {(r["row"], r["seed"]): r["verdict"] for r in first["runs"]}
    for res in results[1:]:
        differ = [(r["row"], r["seed"], verdicts.get((r["row"], r["seed"])), r["verdict"])
                  for r in res["runs"] if verdicts.get((r["row"], r["seed"])) != r["verdict"]]
        ratio = res["wall_s"] / first["wall_s"] if first["wall_s"] else float("nan")
        print(f"jobs {res['jobs']} vs {first['jobs']}: wall {res['wall_s']:.0f} s vs "
              f"{first['wall_s']:.0f} s ({ratio:.2f}x); verdicts differing: {len(differ)}")
        for row, seed, a, b in differ:
            print(f"  {row} seed {seed}: {a} at --jobs {first['jobs']}, {b} at {res['jobs']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"matrix": str(args.matrix), "results": results},
                                   indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
