"""`analyze`: run the lock checks on a history's ops and gather the verdict and statistics.

The checks are those of checker/registry.py (`mutex`, `fencing`, `exclusion`, `counter` on every
history, `jobs` where there are job writes; DESIGN.md, "Checks and their violation kinds"); they
share one grant table. A check that crashes is reported `unknown` with the error, never as a
pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from operator import gt
from typing import Any

from fencecheck.checker import registry
from fencecheck.checker.base import CheckResult, Op, Results, combine
from fencecheck.checker.grants import GrantTable, build_grants
from fencecheck.checker.history import gc_paused
from fencecheck.checker.incidents import build_incidents

log = logging.getLogger(__name__)

def _guarded(name: str, run: Callable[[], CheckResult]) -> CheckResult:
    try:
        return run()
    except Exception as e:  # a crashed check must read as unknown, never as a pass
        log.exception("check %s crashed", name)
        return CheckResult(name, "unknown", details={"error": f"{type(e).__name__}: {e}"})


def stats(ops: Sequence[Op], table: GrantTable) -> dict[str, Any]:
    """Counts of what happened that is not itself a violation (from the tally the grant table
    gathered in its pass over the ops)."""
    tally = table.tally
    if tally is None:
        raise ValueError("the grant table carries no tally of the ops")
    nemesis: dict[str, int] = {}
    for op in table.nemesis_ops or ():
        nemesis[op.f] = nemesis.get(op.f, 0) + 1
    by_f: dict[str, dict[str, int]] = {}
    for f, n in tally.per_f.items():
        fail, info = tally.not_ok.get((f, "fail"), 0), tally.not_ok.get((f, "info"), 0)
        by_f[f] = {"ok": n - fail - info, "fail": fail, "info": info}
    last_time = max(tally.last_end, max((op.time for op in tally.unfinished), default=0))
    expired_at = [g.expired_at for g in table.grants]  # grant ids are list positions
    late = sum(map(gt, tally.granted_times, map(expired_at.__getitem__, tally.granted_gids)))
    grants_per_lock: dict[str, int] = {}
    for g in table.grants:
        grants_per_lock[g.lock] = grants_per_lock.get(g.lock, 0) + 1
    return {
        "ops": len(ops),
        "processes": len(tally.processes),
        "duration_ns": last_time,
        "ops_by_f": by_f,
        "nemesis_ops_by_f": nemesis,
        "indeterminate_ops": sum(n for (_, type_), n in tally.not_ok.items() if type_ == "info"),
        "unfinished_ops": len(tally.unfinished),
        "writes_rejected_by_fence": tally.rejected_writes,
        "writes_accepted_after_lease_expired": late,
        "writes_without_grant": by_f.get("write", {}).get("ok", 0) - len(table.write_grant),
        "grants_per_lock": grants_per_lock,
        "acquire_ops": table.acquire_ops,
        "acquires_with_lease": table.acquires_with_lease,
        "max_drift": table.max_drift,
    }


def analyze(ops: Sequence[Op], *, max_drift: float = 0.01) -> Results:
    """Run every lock check. `valid` is False on any violation, else "unknown" if a check
    crashed or every check had to skip (nothing to judge), else True."""
    if not 0 <= max_drift < 1:
        raise ValueError(f"max_drift must be in [0, 1), not {max_drift}")
    with gc_paused():
        return _analyze(ops, max_drift)


def _analyze(ops: Sequence[Op], max_drift: float) -> Results:
    try:
        table = build_grants(ops, max_drift=max_drift)
    except Exception as e:  # every check needs the table: all of them are unknown
        log.exception("building the grant table crashed")
        error = {"error": f"{type(e).__name__}: {e}"}
        crashed = {n: CheckResult(n, "unknown", details=dict(error))
                   for n in registry.always_run()}
        return Results("unknown", crashed, {"ops": len(ops), **error})
    checks: dict[str, CheckResult] = {}
    for spec in registry.checks():
        run = spec.run
        if run is None or (spec.applies is not None and not spec.applies(table)):
            continue
        checks[spec.name] = _guarded(spec.name, lambda: run(ops, table))  # noqa: B023 (now)
    try:
        st = stats(ops, table)
    except Exception as e:  # statistics are a reading aid: their failure leaves the verdict
        log.exception("statistics crashed")
        st = {"ops": len(ops), "error": f"{type(e).__name__}: {e}"}
    firsts = [c.details["first_violation_ns"] for c in checks.values()
              if "first_violation_ns" in c.details]
    st["first_violation_ns"] = min(firsts) if firsts else None
    st["violations"] = {name: c.details.get("count", 0) for name, c in checks.items()}
    verdict = combine(list(checks.values()))
    if verdict is True and all(c.skipped is not None for c in checks.values()):
        verdict = "unknown"  # nothing could be judged: too thin a history to call it valid
    try:
        incidents = build_incidents(checks, table, ops)
    except Exception:  # the grouping is a reading aid: its failure must not change the verdict
        log.exception("grouping violations into incidents crashed")
        incidents = []
    st["incidents"] = len(incidents)
    return Results(verdict, checks, st, incidents)
