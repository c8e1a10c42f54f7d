"""The `cron` workload: `CronWorker`, a singleton job runner, and the schedule it follows.

Jobs are numbered 0, 1, 2, ...; job n is due at run time n x `period_ms(config)` (a tenth of the
lease). A runner takes the lock "cron", reads the resource's record (`jobs:last`: the highest job
whose effect the store holds), and executes the due jobs after it, in order, at most
`MAX_JOBS_PER_SECTION` per section: each job is `think_ms` of work, then a write of the runner's
process to `job:<n>` with the token. It renews at half a lease (always) and releases when done.
It believes its record: a runner paused between reading the record and writing executes jobs
another runner has done meanwhile; that duplicate is what the workload measures.

A client that is a scheduler itself (Quartz: its cluster decides which job fires where) names
the job its library fired in the acquire's evidence, `"job": n`. The
runner then executes that job alone, without reading the record: a job the library fires twice is
executed twice.

With `idempotent` the write asks the store to apply it only once per job (`"once"`, see
workloads/resources/store.py) and the history records whether it was applied. Only the fenced store
has the
record and the dedup, so the workload needs the "store" resource. `locks` and
`writes_per_section` of the config are not used (one lock, as many writes as jobs are due).

History values (checker/jobs.py reads them):
- acquire/renew/release of lock "cron", as in the lock workload.
- read: `{"key": "jobs:last", "token", "lock": "cron"}`; ok adds `"value"` (int or null).
- write: `{"key": "job:<n>", "value": <process>, "token", "lock": "cron", "job": n}`, plus
  `"idempotent": true` when the store deduplicates; then ok adds `"applied": true|false`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fencecheck.workloads.base import Grant, LockClient, Resource, WorkloadError
from fencecheck.workloads.eventlog import EventLog
from fencecheck.workloads.loops.worker import Outcome, Worker, WorkerConfig

log = logging.getLogger(__name__)

CRON_LOCK = "cron"
RECORD_KEY = "jobs:last"
JOB_PREFIX = "job:"
# Keeps one section shorter than a lease even when a runner catches up on many jobs.
MAX_JOBS_PER_SECTION = 8


def period_ms(config: WorkerConfig) -> float:
    """Time between two jobs' due times: a tenth of the lease, so a holder runs several."""
    return config.lease_ms / 10.0


def job_key(n: int) -> str:
    return f"{JOB_PREFIX}{n}"


class CronWorker(Worker):
    """The runner's loop; see the module docstring."""

    def __init__(self, config: WorkerConfig, client: LockClient | None, resource: Resource,
                 events: EventLog, stop: Callable[[], bool] = lambda: False) -> None:
        if not callable(getattr(resource, "write_once", None)):
            raise WorkloadError(
                f"the cron workload needs the fenced store (resource 'store'), not "
                f"{getattr(resource, 'name', type(resource).__name__)!r}"
            )
        super().__init__(config, client, resource, events, stop)
        self.period_ns = int(period_ms(config) * 1e6)

    def final_keys(self) -> list[str]:
        return [RECORD_KEY]

    def run(self) -> None:
        assert self.client is not None, "run needs a lock client"
        while not self.stop():
            grant = self._acquire(CRON_LOCK)
            if grant is not None:
                grant = self._run_due(grant)
                if grant is not None:
                    self._release(grant)
            if self.stop():
                break
            self._sleep(self.config.idle_ms)

    def due(self) -> int:
        """The highest job id due now."""
        return self.events.now() // self.period_ns

    def _run_due(self, grant: Grant) -> Grant | None:
        """Execute due jobs after the record, or the one job the library fired. Returns the
        grant to release, or None to drop."""
        fired = ((grant.evidence or {}).get("evidence") or {}).get("job")
        if type(fired) is int:
            self._sleep(self.config.think_ms)  # the job's work
            if self.stop():
                return grant
            done = self._execute(grant, fired)
            return None if done.status == "info" else grant
        record = self._read_key(grant, RECORD_KEY)
        if record.status != "ok":
            return grant if record.status == "fail" else None
        first = (record.result if record.result is not None else -1) + 1
        last = min(self.due(), first + MAX_JOBS_PER_SECTION - 1)
        for n in range(first, last + 1):
            go, grant = self._maybe_renew(grant)
            if go != "go" or self.stop():
                return None if go == "drop" else grant
            self._sleep(self.config.think_ms)  # the job's work
            if self.stop():
                return grant
            done = self._execute(grant, n)
            if done.status != "ok":
                return grant if done.status == "fail" else None
        go, grant = self._maybe_renew(grant)
        return None if go == "drop" else grant

    def _read_key(self, grant: Grant, key: str) -> Outcome[int | None]:
        res, token, lock = self.resource, grant.token, grant.lock
        return self._op(
            "read",
            {"key": key, "token": token, "lock": lock},
            lambda: res.read(key, token, lock),
            lambda v: {"key": key, "token": token, "lock": lock, "value": v},
        )

    def _execute(self, grant: Grant, n: int) -> Outcome[Any]:
        """Job n's effect: write our process to job:<n> with the token."""
        res, token, lock, key, value = (self.resource, grant.token, grant.lock, job_key(n),
                                        self.process)
        inv: dict[str, Any] = {"key": key, "value": value, "token": token, "lock": lock, "job": n}
        if not self.config.idempotent:
            return self._op("write", inv, lambda: res.write(key, value, token, lock))
        write_once = res.write_once  # type: ignore[attr-defined]  # checked in __init__
        inv["idempotent"] = True
        return self._op("write", inv, lambda: write_once(key, value, token, lock),
                        lambda applied: {**inv, "applied": applied})
