"""Benchmark of the linearizability checker (checker.linear).

1. The 102 Porcupine etcd histories (cas-register): total and worst single-history time (Porcupine,
   in Go, takes about 0.5 s in total on a 2-core machine). Read from the repo's sibling
   `shared/corpus`, skipped where absent.
2. A generated 10,000-operation mutex history from 10 concurrent processes (random grant order,
   think and hold times, acquire and release returns overlapping the next grant), valid and with
   one planted double grant: time and peak traced memory of the check.

Run: `.venv/bin/python benchmarks/bench_linear.py [--ops 10000] [--processes 10] [--seed 1]`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fencecheck.checker.base import Op
from fencecheck.checker.formats import load_any
from fencecheck.checker.linear import check_linearizable

log = logging.getLogger("bench_linear")

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
ETCD_VALID = {2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100,
              101, 102}


def mutex_history(n_ops: int, processes: int, seed: int, plant: bool = False) -> list[Op]:
    """A history of a correct mutex: each process loops acquire, hold, release, think.
    `plant` adds one extra acquire, by a fresh process, that is granted inside another grant."""
    rng = random.Random(seed)
    t = 0.0
    free_at = 0.0  # when the lock is next free (its linearization point of the last release)
    # Each process's next acquire invoke time; the lock grants in invoke order (FIFO).
    ready = [rng.uniform(0, 5) for _ in range(processes)]
    raw: list[tuple[float, float, int, str, dict[str, Any]]] = []  # (invoke, end, proc, f, value)
    token = 0
    holds: list[tuple[float, float]] = []
    while len(raw) < n_ops:
        # The lock picks any waiting process (Redis-style retry loops grant in no fixed order),
        # or the next to arrive when nobody waits.
        waiting = [i for i in range(processes) if ready[i] <= free_at]
        p = rng.choice(waiting) if waiting else min(range(processes), key=lambda i: ready[i])
        inv = ready[p]
        grant = max(inv, free_at) + rng.uniform(0.01, 0.5)
        token += 1
        ok = grant + rng.uniform(0.01, 1.0)
        raw.append((inv, ok, p, "acquire", {"lock": "lock", "lease_ms": 10_000, "token": token}))
        rel_inv = ok + rng.uniform(0.1, 3.0)
        rel_point = rel_inv + rng.uniform(0.01, 0.5)
        rel_ok = rel_point + rng.uniform(0.01, 1.0)
        raw.append((rel_inv, rel_ok, p, "release", {"lock": "lock", "token": token}))
        holds.append((ok, rel_inv))
        free_at = rel_point
        ready[p] = rel_ok + rng.uniform(0.0, 2.0)
        t = max(t, rel_ok)
    if plant:
        start, end = holds[len(holds) // 2]
        a, b = sorted(rng.uniform(start, end) for _ in range(2))
        raw.append((a, b, processes, "acquire", {"lock": "lock", "lease_ms": 10_000, "token": 0}))
    return _to_ops(raw)


def _to_ops(raw: list[tuple[float, float, int, str, dict[str, Any]]]) -> list[Op]:
    """Number invoke and completion events by time, as a recorded history would."""
    events = sorted(
        [(inv, 0, i) for i, (inv, *_rest) in enumerate(raw)]
        + [(end, 1, i) for i, (_inv, end, *_rest) in enumerate(raw)]
    )
    index: dict[tuple[int, int], int] = {(k, i): n for n, (_, k, i) in enumerate(events)}
    ops = [
        Op(p, f, "ok", index[(0, i)], int(inv * 1e9), index[(1, i)], int(end * 1e9), value)
        for i, (inv, end, p, f, value) in enumerate(raw)
    ]
    ops.sort(key=lambda o: o.index)
    return ops


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def bench_etcd() -> None:
    folder = CORPUS / "porcupine" / "jepsen"
    if not folder.is_dir():
        log.info("etcd corpus: skipped, %s is absent", folder)
        return
    total, worst, worst_name, wrong = 0.0, 0.0, "", []
    for i in range(103):
        path = folder / f"etcd_{i:03d}.log"
        if i == 95 or not path.is_file():
            continue  # etcd_095 is empty: the cluster never started
        ops = load_any(path)
        dt, res = _timed(functools.partial(check_linearizable, ops, "cas-register", 60))
        total += dt
        if dt > worst:
            worst, worst_name = dt, path.name
        if res.valid != (i in ETCD_VALID):
            wrong.append((path.name, res.valid))
    log.info("etcd corpus (102 histories, cas-register): total %.3f s, worst %.3f s (%s), "
             "wrong verdicts: %s", total, worst, worst_name, wrong or "none")


def bench_mutex(n_ops: int, processes: int, seed: int) -> None:
    for plant in (False, True):
        ops = mutex_history(n_ops, processes, seed, plant)
        dt, res = _timed(functools.partial(check_linearizable, ops, "mutex", 600))
        tracemalloc.start()
        check_linearizable(ops, "mutex", 600)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        label = "one planted double grant" if plant else "valid"
        log.info("mutex, %d ops, %d processes, %s: %s in %.3f s, %s configurations, "
                 "peak traced memory %.1f MiB", len(ops), processes, label, res.valid, dt,
                 res.details.get("configurations"), peak / 2**20)


def cas_history(n_ops: int, processes: int, seed: int) -> list[Op]:
    """A linearizable cas-register history: `processes` clients, each op taking effect at a
    random instant inside a long invoke..return window, so that ~all processes overlap."""
    rng = random.Random(seed)
    ready = [rng.uniform(0, 1) for _ in range(processes)]
    points: list[tuple[float, float, float, int, str, Any]] = []  # (lin, inv, ret, p, f, arg)
    while len(points) < n_ops:
        p = min(range(processes), key=lambda i: ready[i])
        inv = ready[p]
        ret = inv + rng.uniform(0.5, 5.0)
        lin = rng.uniform(inv, ret)
        f = rng.choice(["read", "write", "cas"])
        arg = rng.randrange(5) if f == "write" else (rng.randrange(5), rng.randrange(5)) \
            if f == "cas" else None
        points.append((lin, inv, ret, p, f, arg))
        ready[p] = ret + rng.uniform(0, 0.1)
    value: int | None = None
    raw: list[tuple[float, float, int, str, dict[str, Any], str]] = []
    for _lin, inv, ret, p, f, arg in sorted(points):
        if f == "read":
            raw.append((inv, ret, p, f, {"value": value}, "ok"))
        elif f == "write":
            value = arg
            raw.append((inv, ret, p, f, {"value": arg}, "ok"))
        else:
            ok = value == arg[0]
            if ok:
                value = arg[1]
            raw.append((inv, ret, p, f, {"from": arg[0], "to": arg[1]}, "ok" if ok else "fail"))
    events: list[tuple[float, int, int, str, str, dict[str, Any] | None]] = []
    for n, (inv, ret, _p, f, v, typ) in enumerate(raw):
        events.append((inv, 0, n, "invoke", f, v if f != "read" else {"value": None}))
        events.append((ret, 1, n, typ, f, v if f == "read" else None))
    events.sort()
    pending: dict[int, tuple[int, int, Any]] = {}
    ops: list[Op] = []
    for i, (t, _, n, typ, f, v) in enumerate(events):
        p = raw[n][2]
        if typ == "invoke":
            pending[n] = (i, int(t * 1e9), v)
        else:
            j, t0, v0 = pending.pop(n)
            ops.append(Op(p, f, typ, j, t0, i, int(t * 1e9), {**(v0 or {}), **(v or {})}))  # type: ignore[arg-type]
    ops.sort(key=lambda o: o.index)
    return ops


def bench_time_limit(n_ops: int, processes: int, seed: int, limit_s: float) -> None:
    """A search that cannot finish in time must end `unknown` within 1 s of the limit."""
    ops = cas_history(n_ops, processes, seed)
    dt, res = _timed(functools.partial(check_linearizable, ops, "cas-register", limit_s))
    log.info("cas-register, %d ops, %d processes, time limit %.0f s: %s after %.2f s "
             "(%.2f s past the limit), %s configurations", len(ops), processes, limit_s,
             res.valid, dt, dt - limit_s, res.details.get("configurations"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cas-ops", type=int, default=1000)
    ap.add_argument("--cas-processes", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--only", choices=("etcd", "mutex", "cas"), default=None)
    args = ap.parse_args()
    # A benchmark's output is its log: INFO lines on stdout.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if args.only in (None, "etcd"):
        bench_etcd()
    if args.only in (None, "mutex"):
        bench_mutex(args.ops, args.processes, args.seed)
    if args.only in (None, "cas"):
        bench_time_limit(args.cas_ops, args.cas_processes, args.seed, args.time_limit)


if __name__ == "__main__":
    main()
