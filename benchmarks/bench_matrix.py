"""Time a whole matrix (default examples/nightly.toml; goal: under 15 minutes on 2 cores) and
where each run's time goes: the time limit itself versus setup, teardown, check and report.

Runs `fencecheck matrix` as a user would (root, a fresh store), then reads matrix.json and each
run's test.json. Prints one line per run and the total; writes the table as JSON.

    sudo .venv/bin/python benchmarks/bench_matrix.py [--matrix FILE] [--only NAME] \
        [--out benchmarks/out/matrix.json] [--keep STORE]
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", type=Path, default=REPO / "examples" / "nightly.toml")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", type=Path, default=HERE / "out" / "matrix.json")
    ap.add_argument("--keep", type=Path, help="use this store and keep it (default: a temp dir)")
    args = ap.parse_args()

    store = args.keep or Path(tempfile.mkdtemp(prefix="fc-bench-matrix-"))
    out_dir = store / "_matrix" / "bench"
    argv = [sys.executable, "-m", "fencecheck", "matrix", str(args.matrix), "--store", str(store),
            "--out", str(out_dir)]
    for name in args.only:
        argv += ["--only", name]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env={**os.environ, "COLUMNS": "200"},
                          capture_output=True, text=True)
    wall_s = time.monotonic() - start
    if not (out_dir / "matrix.json").is_file():
        sys.stderr.write(proc.stdout + proc.stderr)
        return 3
    summary = json.loads((out_dir / "matrix.json").read_text())
    rows: list[dict[str, Any]] = []
    for row in summary["rows"]:
        for run in row["runs"]:
            test: dict[str, Any] = {}
            if run["run_dir"] and (Path(run["run_dir"]) / "test.json").is_file():
                test = json.loads((Path(run["run_dir"]) / "test.json").read_text())
            limit = float(test.get("config", {}).get("time_limit_s", 0.0))
            rows.append({
                "row": row["row"], "seed": run["seed"], "expect": row["expect"],
                "verdict": run["verdict"], "met": row["met"], "wall_s": run["duration_s"],
                "time_limit_s": limit, "overhead_s": round(run["duration_s"] - limit, 2),
                "ready_s": test.get("ready_s"),
            })
    for r in rows:
        ready = f"{r['ready_s']:.1f}" if isinstance(r["ready_s"], int | float) else "?"
        print(f"{r['row']:<30} seed {r['seed']:<3} {r['verdict']:<8} wall {r['wall_s']:6.1f} s"
              f"  limit {r['time_limit_s']:5.1f} s  overhead {r['overhead_s']:5.1f} s"
              f"  ready {ready} s")
    met = sum(1 for row in summary["rows"] if row["met"])
    overhead = sum(r["overhead_s"] for r in rows)
    print(f"total: {len(rows)} runs, {met}/{len(summary['rows'])} rows met, wall {wall_s:.1f} s "
          f"({wall_s / 60:.1f} min), of which overhead {overhead:.1f} s; exit {proc.returncode}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"matrix": str(args.matrix), "wall_s": round(wall_s, 1),
                                    "exit_code": proc.returncode, "runs": rows}, indent=2) + "\n")
    if args.keep is None:
        shutil.rmtree(store, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
