"""The `partition` fault: iptables grudges between the nodes (one node, majority/minority,
rings, bridges, a client cut off from the service or from the resource). Its schedule role is
"minority"/"majority" for a one-node or halves cut (the side the primary was on, resolved again
when a replay starts it), as named for the others."""

from __future__ import annotations

import random
from typing import Any

from fencecheck.clusters.base import HasPrimary
from fencecheck.clusters.faults.partition import PartitionNemesis
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import (
    AS_NAMED,
    MAJORITY,
    MINORITY,
    FaultContext,
    FaultOptions,
    ScheduleView,
    default_targets,
)
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="partition",
    factory="fencecheck.nemesis.faults.partition:PartitionFault",
    summary="iptables partitions between servers, clients and the resource",
)


class PartitionFault(NemesisFault):
    name = "partition"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts

    def bind(self, ctx: FaultContext) -> None:
        primary = ctx.service.primary if isinstance(ctx.service, HasPrimary) else None
        self.nemesis = PartitionNemesis(ctx.cluster, list(ctx.servers), ctx.resource_node,
                                        run_id=self.opts.run_id, ledger=ctx.ledger,
                                        rng=self.opts.rng, primary=primary)

    def hold_range_s(self) -> tuple[float, float]:
        return (3.0, 6.0)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        return default_targets(view)

    def recorded(self, value: Any, started: Any) -> tuple[str, Any] | None:
        """A minority/majority cut by the side the primary was on (resolved again at replay);
        rings and bridges as named, by their grudge; a client cut off: the schedule's call."""
        if not isinstance(started, dict) or not isinstance(value, dict):
            return None
        shape, side = started.get("shape"), started.get("side")
        if side in (MINORITY, MAJORITY):
            return str(side), {**value, "shape": shape, "side": side}
        if shape == "client-isolate":
            return None
        return AS_NAMED, {**value, "shape": shape, "grudge": started.get("grudge")}
