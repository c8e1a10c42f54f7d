"""The built-in workloads: what the workers do (`--workload`). Each is data: its Worker class
and the model of its own options (`--workload-opt`); see docs/extending.md."""

from __future__ import annotations

from fencecheck.descriptors.base import WorkloadDescriptor

WORKLOADS: tuple[WorkloadDescriptor, ...] = (
    WorkloadDescriptor(
        "lock", "fencecheck.workloads.loops.worker:Worker",
        summary="acquire, read-think-write the lock's counter k times, release",
        options="fencecheck.workloads.loops.options:LockOptions",
    ),
    WorkloadDescriptor(
        "leader", "fencecheck.workloads.clients.leader:LeaderWorker",
        summary="campaign; in office act on key `leader` with the term, renewing",
        options="fencecheck.workloads.loops.options:LeaderOptions",
    ),
    WorkloadDescriptor(
        "cron", "fencecheck.workloads.loops.cron:CronWorker",
        summary="run each due job once under a job lock (ShedLock's model)",
        options="fencecheck.workloads.loops.options:CronOptions",
    ),
)
