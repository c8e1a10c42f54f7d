"""The workloads' own options (`--workload-opt KEY=VALUE`, a RunConfig's `workload_options`), one
pydantic model per workload (descriptors/workloads.py names them). The controller validates them
and writes them into each worker's config (fencecheck.workloads.loops.worker.WorkerConfig); the
worker process itself never imports this module."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class WorkloadOptions(BaseModel):
    """What every built-in workload has."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    think_ms: float = Field(
        default=20.0,
        ge=0,
        description="think time inside the critical section (cron: each job's work)",
    )
    idle_ms: float = Field(default=10.0, ge=0, description="pause between critical sections")
    acquire_timeout_s: float = Field(default=5.0, gt=0, description="how long one acquire may wait")


class LockOptions(WorkloadOptions):
    writes_per_section: int = Field(
        default=3, ge=1, description="read/write rounds per critical section"
    )
    renew: bool = Field(default=False, description="renew leases while holding (at half a lease)")


class LeaderOptions(WorkloadOptions):
    """A leader always renews (at half a lease) and acts until its tenure ends."""


class CronOptions(WorkloadOptions):
    idempotent: bool = Field(
        default=False, description="the resource deduplicates executions by job id"
    )
