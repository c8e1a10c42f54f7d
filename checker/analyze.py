"""`analyze`: run the lock checks on a history's ops and gather the verdict and statistics.

The checks are `mutex`, `fencing`, `exclusion` and `counter` (DESIGN.md, "Checks and their
violation kinds"); they share one grant table. A check that crashes is reported `unknown` with
the error, never as a pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from checker.base import NEMESIS, CheckResult, Op, Results, combine
from checker.counter import counter
from checker.exclusion import exclusion
from checker.fencing import fencing
from checker.grants import GrantTable, build_grants
from checker.mutex import mutex

log = logging.getLogger(__name__)

CHECK_NAMES = ("mutex", "fencing", "exclusion", "counter")


def _guarded(name: str, run: Callable[[], CheckResult]) -> CheckResult:
    try:
        return run()
    except Exception as e:  # a crashed check must read as unknown, never as a pass
        log.exception("check %s crashed", name)
        return CheckResult(name, "unknown", details={"error": f"{type(e).__name__}: {e}"})


def stats(ops: Sequence[Op], table: GrantTable) -> dict[str, Any]:
    """Counts of what happened that is not itself a violation."""
    by_f: dict[str, dict[str, int]] = {}
    nemesis: dict[str, int] = {}
    indeterminate = unfinished = rejected = 0
    processes: set[Any] = set()
    last_time = 0
    for op in ops:
        last_time = max(last_time, op.time if op.end_time is None else op.end_time)
        if op.end_time is None:
            unfinished += 1
        if op.process == NEMESIS:
            nemesis[op.f] = nemesis.get(op.f, 0) + 1
            continue
        processes.add(op.process)
        counts = by_f.get(op.f)
        if counts is None:
            counts = by_f[op.f] = {"ok": 0, "fail": 0, "info": 0}
        counts[op.type] += 1
        if op.type == "info":
            indeterminate += 1
        elif op.type == "fail" and op.f == "write" and op.error == "stale-token":
            rejected += 1
    grants_per_lock: dict[str, int] = {}
    for g in table.grants:
        grants_per_lock[g.lock] = grants_per_lock.get(g.lock, 0) + 1
    late = 0
    if table.write_grant:
        grants = table.grants
        by_id = {g.id: g for g in grants}
        for op in ops:
            if op.f == "write" and op.type == "ok":
                gid = table.write_grant.get(op.index)
                if gid is not None and op.time > by_id[gid].expired_at:
                    late += 1
    return {
        "ops": len(ops),
        "processes": len(processes),
        "duration_ns": last_time,
        "ops_by_f": by_f,
        "nemesis_ops_by_f": nemesis,
        "indeterminate_ops": indeterminate,
        "unfinished_ops": unfinished,
        "writes_rejected_by_fence": rejected,
        "writes_accepted_after_lease_expired": late,
        "writes_without_grant": sum(
            1 for op in ops if op.f == "write" and op.type == "ok"
        ) - len(table.write_grant),
        "grants_per_lock": grants_per_lock,
        "max_drift": table.max_drift,
    }


def analyze(ops: Sequence[Op], *, max_drift: float = 0.01) -> Results:
    """Run every lock check; `valid` is False on any violation, unknown if a check crashed."""
    if not 0 <= max_drift < 1:
        raise ValueError(f"max_drift must be in [0, 1), not {max_drift}")
    table = build_grants(ops, max_drift=max_drift)
    checks = {
        "mutex": _guarded("mutex", lambda: mutex(ops, grants=table)),
        "fencing": _guarded("fencing", lambda: fencing(ops, grants=table)),
        "exclusion": _guarded("exclusion", lambda: exclusion(ops, grants=table)),
        "counter": _guarded("counter", lambda: counter(ops)),
    }
    st = stats(ops, table)
    firsts = [c.details["first_violation_ns"] for c in checks.values()
              if "first_violation_ns" in c.details]
    st["first_violation_ns"] = min(firsts) if firsts else None
    st["violations"] = {name: c.details.get("count", 0) for name, c in checks.items()}
    return Results(combine(list(checks.values())), checks, st)
