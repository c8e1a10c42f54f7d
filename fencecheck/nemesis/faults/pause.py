"""The `pause` fault: SIGSTOP a worker (the lock holder by default) or a server, SIGCONT on stop.
Pauses outlast the lease by default: that is what exposes an unfenced lock; a pause of the holder
ends once its successor has written (fencecheck/nemesis/successor.py)."""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import Field

from fencecheck.clusters.base import Pausable
from fencecheck.clusters.faults.nemesis import PauseNemesis, PauseTarget, process_target
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import (
    FaultContext,
    FaultOptions,
    HoldSettings,
    ScheduleView,
)
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="pause",
    factory="fencecheck.nemesis.faults.pause:PauseFault",
    summary="SIGSTOP/SIGCONT of the lock holder (or --fault-opt pause.target=random|server)",
    # a paused holder resumed inside its successor's critical section: as soon as it has one
    ends_on_successor=True,
    options="fencecheck.nemesis.faults.pause:PauseSettings",
)


class PauseSettings(HoldSettings):
    """The pause fault can aim at a server too (a wider `target` than other faults')."""

    target: Literal["holder", "random", "server"] = Field(  # type: ignore[assignment]
        default="holder",
        description="holder: the worker of a fresh grant, right after it; random: a worker at "
        "random times; server: a server at random times")


class PauseFault(NemesisFault):
    name = "pause"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts
        self.settings = (opts.settings if isinstance(opts.settings, PauseSettings) else
                         PauseSettings.model_validate({"target": opts.pause_target,
                                                       "hold_s": opts.pause_duration_s}))

    def bind(self, ctx: FaultContext) -> None:
        targets: dict[str, PauseTarget] = {
            name: process_target(name, pid) for name, pid in ctx.workers.items()
        }
        if isinstance(ctx.service, Pausable):
            for n in ctx.servers:
                targets[n] = _server_target(ctx.service, n)
        self.nemesis = PauseNemesis(targets)

    def hold_range_s(self) -> tuple[float, float]:
        return self.settings.hold_range_s(self.opts.lease_ms)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        if view.waited:
            holder = view.fresh_holder
            if holder is None:
                current = list(view.holding)
                holder = rng.choice(current) if current else rng.choice(list(view.workers))
            return {"targets": [holder]}
        if self.settings.target == "server":
            return {"targets": [rng.choice(list(view.servers))]}
        return {"targets": [rng.choice(list(view.workers))]}


def _server_target(service: Pausable, node: str) -> PauseTarget:
    return PauseTarget(node, lambda: service.pause(node), lambda: service.resume(node))
