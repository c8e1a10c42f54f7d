"""The `failover` fault (Sentinel): isolate the primary from the other service nodes right after
a grant, so the sentinels promote a replica while clients still write to the old primary.
Isolation needs iptables inside the run's namespaces, hence netns only: elsewhere the fault is
refused up front rather than silently turned into a pause."""

from __future__ import annotations

import random
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.descriptors.base import FAILOVER, FaultDescriptor
from fencecheck.nemesis.faults.base import (
    PRIMARY,
    FaultContext,
    FaultOptions,
    ScheduleView,
    default_targets,
)
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="failover",
    factory="fencecheck.nemesis.faults.failover:FailoverFault",
    summary="Sentinel: isolate the primary right after a grant",
    requires=frozenset({FAILOVER}),
    runtimes=frozenset({"netns"}),
    waits_for_grant=False,
)


class FailoverFault(NemesisFault):
    name = "failover"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts

    def bind(self, ctx: FaultContext) -> None:
        from fencecheck.clusters.faults.failover import FailoverNemesis
        from fencecheck.clusters.services.sentinel import SentinelService

        if not isinstance(ctx.service, SentinelService):
            raise ClusterError(f"failover: {self.opts.backend} has no sentinels")
        self.nemesis = FailoverNemesis(ctx.service)

    def hold_range_s(self) -> tuple[float, float]:
        return (3.0, 6.0)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        return default_targets(view)

    def recorded(self, value: Any, started: Any) -> tuple[str, Any] | None:
        """Always the primary of the moment: `start` asks the sentinels, in a run and at
        replay alike, whichever node that is."""
        return PRIMARY, value
