"""The `partition` fault: iptables grudges between the nodes (one node, majority/minority,
rings, bridges, a client cut off from the service or from the resource). Its schedule role is
"minority"/"majority" for a one-node or halves cut (the side the primary was on, resolved again
when a replay starts it), as named for the others."""

from __future__ import annotations

import random
from typing import Any

from pydantic import Field, field_validator

from fencecheck.clusters.base import HasPrimary
from fencecheck.clusters.faults.partition import SHAPES, PartitionNemesis
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import (
    AS_NAMED,
    MAJORITY,
    MINORITY,
    FaultContext,
    FaultOptions,
    FaultSettings,
    ScheduleView,
    default_targets,
)
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="partition",
    factory="fencecheck.nemesis.faults.partition:PartitionFault",
    summary="iptables partitions between servers, clients and the resource",
    options="fencecheck.nemesis.faults.partition:PartitionSettings",
)


class PartitionSettings(FaultSettings):
    """Which shapes the partition fault draws from (`--fault-opt partition.shapes=...`)."""

    shapes: tuple[str, ...] = Field(
        default=SHAPES,
        description="the shapes drawn from, comma-separated: " + ", ".join(SHAPES) +
        " (default: all of them that fit the cluster)")

    @field_validator("shapes", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        return tuple(s.strip() for s in v.split(",")) if isinstance(v, str) else v

    @field_validator("shapes")
    @classmethod
    def _known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in v if s not in SHAPES]
        if bad or not v:
            raise ValueError(f"unknown shape(s) {bad}; known: {', '.join(SHAPES)}")
        return v


class PartitionFault(NemesisFault):
    name = "partition"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts
        self.settings = (opts.settings if isinstance(opts.settings, PartitionSettings)
                         else PartitionSettings())

    def bind(self, ctx: FaultContext) -> None:
        primary = ctx.service.primary if isinstance(ctx.service, HasPrimary) else None
        self.nemesis = PartitionNemesis(ctx.cluster, list(ctx.servers), ctx.resource_node,
                                        run_id=self.opts.run_id, ledger=ctx.ledger,
                                        rng=self.opts.rng, primary=primary,
                                        shapes=self.settings.shapes)

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
