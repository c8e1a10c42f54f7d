"""Benchmark of `fencecheck check`'s work: load + analyze a big history, against the floor.

For each history file given, two fresh subprocesses run: one only `json.loads` every line (the
floor), one `checker.verdict.load` + `judge` (what `fencecheck check` does). Each reports its
wall time and peak resident memory (`ru_maxrss`), so memory figures are of that work alone.
Goal (issue 25): check time at most 0.7x the parse time, peak RSS at most 400 MB.

    .venv/bin/python benchmarks/gen_history.py /tmp/fc-bench --events 1000000
    .venv/bin/python benchmarks/bench_checker.py /tmp/fc-bench/*.jsonl

(From a worktree, put it first on PYTHONPATH: the script's folder, not the current one, is on
sys.path, so the installed checkout's fencecheck is measured otherwise.)

Times are CPU seconds of the child (`time.process_time`), which other load on the machine
disturbs far less than wall time (wall time is reported beside them); each measurement runs
--repeat times and the fastest run counts.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _child(mode: str, path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    w0 = time.perf_counter()
    if mode == "parse":
        t0 = time.process_time()
        n = 0
        loads = json.loads
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                loads(line)
                n += 1
        out["parse_s"] = time.process_time() - t0
        out["events"] = n
    else:
        from fencecheck.checker.verdict import judge, load

        t0 = time.process_time()
        ops = load(path)
        t1 = time.process_time()
        results = judge(ops)
        t2 = time.process_time()
        out.update(load_s=t1 - t0, analyze_s=t2 - t1, ops=len(ops), valid=results.valid,
                   violations={n: c.details.get("count", 0) for n, c in results.checks.items()})
    out["wall_s"] = time.perf_counter() - w0
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _run(mode: str, path: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(path)],
                          capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON lines")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each measurement; the fastest counts (default 3)")
    args = ap.parse_args()
    if args.child:
        # the child's only output is its figures, read by the parent
        sys.stdout.write(json.dumps(_child(args.child, args.files[0])) + "\n")
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in args.files:
        floors = [_run("parse", path) for _ in range(args.repeat)]
        checks = [_run("check", path) for _ in range(args.repeat)]
        floor = min(floors, key=lambda r: r["parse_s"])
        check = min(checks, key=lambda r: r["load_s"] + r["analyze_s"])
        total = check["load_s"] + check["analyze_s"]
        row = {
            "file": str(path), "events": floor["events"], "ops": check["ops"],
            "parse_s": round(floor["parse_s"], 2), "load_s": round(check["load_s"], 2),
            "analyze_s": round(check["analyze_s"], 2), "check_s": round(total, 2),
            "ratio": round(total / floor["parse_s"], 2),
            "parse_wall_s": round(floor["wall_s"], 2), "check_wall_s": round(check["wall_s"], 2),
            "parse_maxrss_mb": round(floor["maxrss_mb"]),
            "check_maxrss_mb": round(check["maxrss_mb"]),
            "valid": check["valid"], "violations": check["violations"],
        }
        if args.json:
            sys.stdout.write(json.dumps(row) + "\n")
        else:
            log.info(
                "%s: %d events; CPU: json.loads %.2f s; load %.2f s + analyze %.2f s = %.2f s "
                "(%.2fx); wall %.2f s vs %.2f s; peak RSS %d MB (parse alone %d MB); valid=%s %s",
                row["file"], row["events"], row["parse_s"], row["load_s"], row["analyze_s"],
                row["check_s"], row["ratio"], row["check_wall_s"], row["parse_wall_s"],
                row["check_maxrss_mb"], row["parse_maxrss_mb"], row["valid"], row["violations"],
            )


if __name__ == "__main__":
    main()
