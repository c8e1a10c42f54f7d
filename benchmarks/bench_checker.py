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
disturbs less than wall time (wall time is reported beside them, and the load average before and
after); each measurement runs --repeat times and the fastest run counts. Load still inflates the
check's CPU time more than the floor's (the check holds half a million ops in memory, the floor
nothing, so cache misses cost it more), so on a shared machine also measure with
`--instructions`: each child under valgrind's cachegrind, less an imports-only twin, gives the
instruction count of the work (not disturbed by load, but blind to cache misses; with
PYTHONHASHSEED=0 unless it is set, so that the same code counts the same) and, with the
cache simulation, an estimate of its cycles (Ir + 10 x L1 misses + 100 x last-level misses, the
usual weights; the simulated caches are the host's, not shared). Slow: about 100x the work's time.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _child(mode: str, path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if mode.startswith("imports-"):  # the twin an instruction count subtracts
        if mode == "imports-check":
            _import_checker()
        return out
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
        t0 = time.process_time()
        _import_checker()  # what the first load and judge import: counted apart
        out["imports_s"] = time.process_time() - t0
        w0 = time.perf_counter()
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


def _import_checker() -> None:
    """What `load` and `judge` import on first use: outside the measured work."""
    import fencecheck.checker.analyze
    import fencecheck.checker.formats
    import fencecheck.checker.history
    from fencecheck.checker import registry
    from fencecheck.checker.verdict import judge, load

    registry.checks()
    del fencecheck, judge, load


def _run(mode: str, path: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(path)],
                          capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


_CACHEGRIND = re.compile(r"(I|I1|D1|LLi|LLd)\s+(refs|misses):\s+([\d,]+)")


def _counted(mode: str, path: Path, cache_sim: bool) -> dict[str, int]:
    """cachegrind's totals for one child: Ir, and with the cache simulation L1 and LL misses."""
    # str hashes are salted per process, which moves dict probing and a count by some 5 M from
    # run to run: a fixed seed makes the count of the same code the same (unless one is set)
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    proc = subprocess.run(
        ["valgrind", "--tool=cachegrind", f"--cache-sim={'yes' if cache_sim else 'no'}",
         "--cachegrind-out-file=/dev/null", sys.executable, __file__, "--child", mode, str(path)],
        capture_output=True, text=True, check=True, env=env)
    found = {f"{a} {b}": int(n.replace(",", "")) for a, b, n in _CACHEGRIND.findall(proc.stderr)}
    out = {"ir": found["I refs"]}
    if cache_sim:
        out["l1"] = found["I1 misses"] + found["D1 misses"]
        out["ll"] = found["LLi misses"] + found["LLd misses"]
        out["cycles"] = out["ir"] + 10 * out["l1"] + 100 * out["ll"]
    return out


def instructions(path: Path, cache_sim: bool) -> dict[str, Any]:
    """The work's instruction counts (and estimated cycles), each child less its imports."""
    work: dict[str, dict[str, int]] = {}
    for mode in ("parse", "check"):
        full, base = _counted(mode, path, cache_sim), _counted(f"imports-{mode}", path, cache_sim)
        work[mode] = {k: full[k] - base[k] for k in full}
    row: dict[str, Any] = {"file": str(path), "parse": work["parse"], "check": work["check"],
                           "ir_ratio": round(work["check"]["ir"] / work["parse"]["ir"], 3)}
    if cache_sim:
        row["cycles_ratio"] = round(work["check"]["cycles"] / work["parse"]["cycles"], 3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON lines")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each measurement; the fastest counts (default 3)")
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions with valgrind instead of timing (slow)")
    ap.add_argument("--cache-sim", action="store_true",
                    help="with --instructions: simulate the caches too, estimate cycles")
    args = ap.parse_args()
    if args.child:
        # the child's only output is its figures, read by the parent
        sys.stdout.write(json.dumps(_child(args.child, args.files[0])) + "\n")
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in args.files:
        if args.instructions:
            row = instructions(path, args.cache_sim)
            if args.json:
                sys.stdout.write(json.dumps(row) + "\n")
            else:
                log.info("%s: instructions: json.loads %.3f G, load + analyze %.3f G (%.3fx)%s",
                         path, row["parse"]["ir"] / 1e9, row["check"]["ir"] / 1e9,
                         row["ir_ratio"],
                         f"; estimated cycles {row['cycles_ratio']:.3f}x (last-level misses "
                         f"{row['check']['ll'] / 1e6:.1f} M vs {row['parse']['ll'] / 1e6:.1f} M)"
                         if args.cache_sim else "")
            continue
        load_before = os.getloadavg()[0]
        floors = [_run("parse", path) for _ in range(args.repeat)]
        checks = [_run("check", path) for _ in range(args.repeat)]
        floor = min(floors, key=lambda r: r["parse_s"])
        check = min(checks, key=lambda r: r["load_s"] + r["analyze_s"])
        total = check["load_s"] + check["analyze_s"]
        row = {
            "file": str(path), "events": floor["events"], "ops": check["ops"],
            "parse_s": round(floor["parse_s"], 2), "imports_s": round(check["imports_s"], 2),
            "load_s": round(check["load_s"], 2),
            "analyze_s": round(check["analyze_s"], 2), "check_s": round(total, 2),
            "ratio": round(total / floor["parse_s"], 2),
            # as measured before the imports were counted apart
            "ratio_with_imports": round((total + check["imports_s"]) / floor["parse_s"], 2),
            "parse_wall_s": round(floor["wall_s"], 2), "check_wall_s": round(check["wall_s"], 2),
            "parse_maxrss_mb": round(floor["maxrss_mb"]),
            "check_maxrss_mb": round(check["maxrss_mb"]),
            "valid": check["valid"], "violations": check["violations"],
            "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        }
        if args.json:
            sys.stdout.write(json.dumps(row) + "\n")
        else:
            log.info(
                "%s: %d events; CPU: json.loads %.2f s; load %.2f s + analyze %.2f s = %.2f s "
                "(%.2fx; %.2fx with the imports, %.2f s); wall %.2f s vs %.2f s; "
                "peak RSS %d MB (parse alone %d MB); valid=%s %s; "
                "load average %.1f before, %.1f after",
                row["file"], row["events"], row["parse_s"], row["load_s"], row["analyze_s"],
                row["check_s"], row["ratio"], row["ratio_with_imports"], row["imports_s"],
                row["check_wall_s"], row["parse_wall_s"],
                row["check_maxrss_mb"], row["parse_maxrss_mb"], row["valid"], row["violations"],
                *row["load_average"],
            )


if __name__ == "__main__":
    main()
