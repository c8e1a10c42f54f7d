"""Benchmark of `HistoryRecorder`: what recording one operation costs the caller. Goal: < 20 µs.

An operation is what `rec.op(...)` wraps: an invoke line and a completion line, each stamped,
encoded and written to the kernel (one `os.write` each). The ops are a lock workload's: acquire,
write, read, release, with the values the checker expects. Three shapes:

- `1 thread`: one thread recording back to back;
- `8 threads`: eight threads at once (the GIL serialises them; contention on the lock);
- `4 processes`: four forked processes, each with its own part file.

Cost is CPU time per op (`time.process_time`, all threads of the process; for processes, the
children's own CPU from `resource.getrusage(RUSAGE_CHILDREN)`), which other load on a shared
machine disturbs far less than wall time (reported beside it). Each shape runs --repeat times;
the fastest run counts. Also timed: `close()`, which merges the parts into history.jsonl, and a
check of the result (the history must be valid).

    .venv/bin/python benchmarks/bench_recorder.py --ops 100000
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fencecheck.api import HistoryRecorder, check_history


def cycles(rec: HistoryRecorder, process: int, ops: int) -> None:
    lock, key = f"lock-{process}", f"key-{process}"
    for i in range(1, ops // 4 + 1):
        with rec.op(process, "acquire", lock=lock, lease_ms=60_000) as op:
            op.ok(token=i)
        with rec.op(process, "write", key=key, value=i, token=i, lock=lock) as op:
            op.ok()
        with rec.op(process, "read", key=key, token=i, lock=lock) as op:
            op.ok(value=i)
        with rec.op(process, "release", lock=lock, token=i) as op:
            op.ok()


def _child(rec: HistoryRecorder, process: int, ops: int) -> None:
    cycles(rec, process, ops)
    rec.close()


def one_run(shape: str, ops: int, folder: Path) -> dict[str, Any]:
    path = folder / f"{shape.replace(' ', '-')}.jsonl"
    rec = HistoryRecorder(path)
    n = {"1 thread": 1, "8 threads": 8, "4 processes": 4}[shape]
    per = ops // n
    cpu0, wall0 = time.process_time(), time.perf_counter()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if shape == "1 thread":
        cycles(rec, 0, per)
    elif shape == "8 threads":
        threads = [threading.Thread(target=cycles, args=(rec, p, per)) for p in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=_child, args=(rec, p, per)) for p in range(n)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    if shape == "4 processes":
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ch.ru_utime - children0.ru_utime) + (ch.ru_stime - children0.ru_stime)
    t0 = time.perf_counter()
    rec.close()
    merge_s = time.perf_counter() - t0
    recorded = (per // 4) * 4 * n
    result = check_history(path)
    if result.valid is not True:
        sys.exit(f"{shape}: the recorded history is not valid:\n{result.summary()}")
    return {"shape": shape, "ops": recorded, "cpu_us_per_op": cpu / recorded * 1e6,
            "wall_us_per_op": wall / recorded * 1e6, "merge_s": merge_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000, help="operations per run")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'shape':<12} {'ops':>8} {'CPU µs/op':>10} {'wall µs/op':>11} {'merge s':>8}")
    with tempfile.TemporaryDirectory(prefix="fc-bench-recorder-") as tmp:
        for shape in ("1 thread", "8 threads", "4 processes"):
            runs = [one_run(shape, args.ops, Path(tmp)) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["cpu_us_per_op"])
            print(f"{shape:<12} {best['ops']:>8} {best['cpu_us_per_op']:>10.2f} "
                  f"{min(r['wall_us_per_op'] for r in runs):>11.2f} "
                  f"{min(r['merge_s'] for r in runs):>8.2f}")


if __name__ == "__main__":
    main()
