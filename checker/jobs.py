"""The `jobs` check of the cron workload: duplicate executions, and effects applied twice.

A job is executed by an ok `write` whose value carries `"job": n` (or whose key is `job:<n>`;
workloads/loops/cron.py documents the values). Two modes, chosen by the history itself:
- efficiency (no job write carries `"idempotent": true`): duplicates are the cost of a lock used
  to avoid duplicate work, not a violation. details report the duplicate-execution rate: jobs
  executed more than once / jobs executed.
- correctness (the resource deduplicates; writes carry `"idempotent": true` and their ok says
  `"applied"`): a job with two ok writes that both say `applied: true` had its effect applied
  twice: violation `duplicate-effect`. An ok write without `applied` counts as not applied (a
  resource that does not say cannot be convicted); indeterminate writes never make a finding.
Skipped, with the reason, when the history has no job writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fencecheck.checker.base import CheckResult, Op, op_ref
from fencecheck.checker.grants import Collector, seconds, tok, who
from fencecheck.checker.registry import CheckSpec, KindSpec

JOB_PREFIX = "job:"


def job_id(op: Op) -> int | None:
    """The job a write executes: its value's `job`, else the n of a key `job:<n>`."""
    job = op.get("job")
    if type(job) is int:
        return job
    key = op.get("key")
    if isinstance(key, str) and key.startswith(JOB_PREFIX):
        n = key.removeprefix(JOB_PREFIX)
        if n.isdigit():
            return int(n)
    return None


def check_jobs(ops: Sequence[Op]) -> CheckResult:
    """Duplicate-execution rate (both modes) and `duplicate-effect`s (correctness mode)."""
    executed: dict[int, list[Op]] = {}
    attempts = indeterminate = refused = 0
    idempotent = False
    for op in ops:
        if op.f != "write" or op.value is None:
            continue
        n = job_id(op)
        if n is None:
            continue
        attempts += 1
        idempotent = idempotent or op.get("idempotent") is True
        if op.type == "ok":
            executed.setdefault(n, []).append(op)
        elif op.type == "info":
            indeterminate += 1
        else:
            refused += 1
    if attempts == 0:
        return CheckResult("jobs", True, skipped="the history has no job executions (job writes)")
    duplicated = {n: ws for n, ws in executed.items() if len(ws) > 1}
    details: dict[str, Any] = {
        "mode": "correctness" if idempotent else "efficiency",
        "jobs_executed": len(executed),
        "executions": sum(len(ws) for ws in executed.values()),
        "jobs_executed_more_than_once": len(duplicated),
        "duplicate_rate": round(len(duplicated) / len(executed), 4) if executed else 0.0,
        "extra_executions": sum(len(ws) - 1 for ws in duplicated.values()),
        "executions_refused": refused,
        "executions_indeterminate": indeterminate,
    }
    if not idempotent:
        return CheckResult("jobs", True, details=details)
    found = Collector()
    deduplicated = 0
    for n, ws in sorted(executed.items()):
        applied = [w for w in ws if w.get("applied") is True]
        deduplicated += sum(1 for w in ws if w.get("applied") is False)
        if len(applied) < 2:
            continue
        first, second = applied[0], applied[1]
        at = second.end_time if second.end_time is not None else second.time
        found.add(
            at, "duplicate-effect",
            f"job {n}'s effect was applied twice: by {who(first.process)} with "
            f"{tok(first.get('token'))} at {seconds(first.time)} and by "
            f"{who(second.process)} with {tok(second.get('token'))} at {seconds(second.time)}, "
            f"although the resource deduplicates by job id",
            (op_ref(first), op_ref(second)), key=first.get("key"),
        )
    details["executions_deduplicated"] = deduplicated
    details.update(found.details())
    return CheckResult("jobs", found.count == 0, found.reported(), details=details)


CHECK = CheckSpec(
    name="jobs",
    kinds=(
        KindSpec("duplicate-effect",
                 "one job's effect applied more than once where the resource was asked "
                 "to apply it once",
                 "none"),
    ),
    run=lambda ops, table: check_jobs(ops),
    applies=lambda table: bool(table.job_writes),
    order=50,
)
