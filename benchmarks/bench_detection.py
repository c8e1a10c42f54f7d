"""Detection rate and speed: runs `fencecheck run` with one configuration over several seeds and
reports the cluster-ready time, the fraction of runs that found a violation, and the median time
to the first violation. Must run as root (network namespaces).

    .venv/bin/python benchmarks/bench_detection.py --seeds 10 -- --backend redis --fencing off \
        --nemesis pause --time-limit 30

Everything after `--` goes to `fencecheck run` unchanged. Prints one Markdown table row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(store: Path, seed: int, args: list[str]) -> dict[str, object]:
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "fencecheck", "run", "--store", str(store),
                        "--seed", str(seed), "--name", f"s{seed}", *args],
                       capture_output=True, text=True)
    wall = time.monotonic() - t
    run_dir = (store / f"s{seed}" / "latest").resolve()
    if not (run_dir / "results.json").exists():  # the run failed to start: say why, go on
        return {"seed": seed, "exit": r.returncode, "ready_s": None, "first_s": None,
                "kinds": [], "wall_s": wall, "error": r.stderr.strip()[-300:]}
    test = json.loads((run_dir / "test.json").read_text())
    results = json.loads((run_dir / "results.json").read_text())
    first = results["stats"].get("first_violation_ns")
    kinds = sorted({v["kind"] for c in results["checks"].values() for v in c["violations"]})
    return {"seed": seed, "exit": r.returncode, "ready_s": test.get("ready_s"),
            "first_s": first / 1e9 if isinstance(first, int) else None, "kinds": kinds,
            "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--label", default=None)
    ap.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    ap.add_argument("run_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.run_args if x != "--"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fc-bench-") as d:
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            row = one(Path(d), seed, args)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    found = [r for r in rows if r["exit"] == 1]
    firsts = [float(r["first_s"]) for r in found if isinstance(r["first_s"], float)]
    ready = [float(r["ready_s"]) for r in rows if isinstance(r["ready_s"], (int, float))]
    kinds = sorted({k for r in found for k in r["kinds"]})  # type: ignore[attr-defined]
    label = a.label or " ".join(args)
    med_first = f"{statistics.median(firsts):.1f} s" if firsts else "—"
    med_ready = f"{statistics.median(ready):.2f} s" if ready else "—"
    print(f"| {label} | {len(found)}/{len(rows)} | {med_first} | {med_ready} | "
          f"{', '.join(kinds) or '—'} |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
