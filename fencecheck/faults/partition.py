"""The `partition` fault: iptables grudges between the nodes (one node, majority/minority,
rings, bridges, a client cut off from the service or from the resource)."""

from __future__ import annotations

import random
from typing import Any

from fencecheck.clusters.faults.partition import PartitionNemesis
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.faults.base import FaultContext, FaultOptions, ScheduleView, default_targets
from fencecheck.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="partition",
    factory="fencecheck.faults.partition:PartitionFault",
    summary="iptables partitions between servers, clients and the resource",
)


class PartitionFault(NemesisFault):
    name = "partition"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts

    def bind(self, ctx: FaultContext) -> None:
        self.nemesis = PartitionNemesis(ctx.cluster, list(ctx.servers), ctx.resource_node,
                                        run_id=self.opts.run_id, ledger=ctx.ledger,
                                        rng=self.opts.rng)

    def hold_range_s(self) -> tuple[float, float]:
        return (3.0, 6.0)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        return default_targets(view)
