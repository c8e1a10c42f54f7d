"""The `clock` fault: an LD_PRELOAD shim moves servers' wall clocks (bumps beyond the lease on a
majority, strobes). Servers must start under the shim, so this fault prepares their env."""

from __future__ import annotations

import random
from contextlib import ExitStack
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.faults.clock import ClockControl, ClockNemesis
from fencecheck.descriptors.base import CLOCK, FaultDescriptor, Need
from fencecheck.nemesis.faults.base import (
    EnvFor,
    FaultContext,
    FaultOptions,
    ScheduleView,
    default_targets,
)
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="clock",
    factory="fencecheck.nemesis.faults.clock:ClockFault",
    summary="an LD_PRELOAD shim moves a node's wall clock",
    requires=frozenset({CLOCK}),
    needs=(Need("C compiler (clock shim)", binary="cc", package="gcc libc6-dev"),),
)


class ClockFault(NemesisFault):
    name = "clock"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts
        self.control: ClockControl | None = None

    def prepare(self, stack: ExitStack) -> EnvFor:
        control = ClockControl(self.opts.run_dir / "clock")
        stack.callback(control.reset_all)
        control.setup()
        self.control = control
        return control.env_for

    def bind(self, ctx: FaultContext) -> None:
        if self.control is None:
            raise ClusterError("clock: the servers were not started under the clock shim")
        self.nemesis = ClockNemesis(self.control, list(ctx.servers), lease_ms=self.opts.lease_ms,
                                    rng=self.opts.rng)

    def hold_range_s(self) -> tuple[float, float]:
        return (3.0, 6.0)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        return default_targets(view)
