"""`freeze-all`: SIGSTOP every worker at once, SIGCONT on stop (netns runtime only)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
from typing import Any

from pydantic import Field

from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import FaultContext, FaultOptions, FaultSettings, ScheduleView

DESCRIPTOR = FaultDescriptor(
    name="freeze-all",
    factory="fencecheck_demo_plugin.fault:FreezeAll",
    summary="SIGSTOP every worker, SIGCONT on stop",
    runtimes=frozenset({"netns"}),
    waits_for_grant=False,
    options="fencecheck_demo_plugin.fault:FreezeSettings",
)


class FreezeSettings(FaultSettings):
    """`--fault-opt freeze-all.hold_s=LOW,HIGH` (a fault's options model)."""

    hold_s: tuple[float, float] = Field(default=(0.5, 1.0), description="seconds a freeze holds")


class FreezeAll:
    name = "freeze-all"

    def __init__(self, opts: FaultOptions) -> None:
        self.settings = opts.settings if isinstance(opts.settings, FreezeSettings) else \
            FreezeSettings()
        self.pids: dict[str, int] = {}
        self.frozen: list[str] = []

    def bind(self, ctx: FaultContext) -> None:
        self.pids = dict(ctx.workers)

    def hold_range_s(self) -> tuple[float, float]:
        return self.settings.hold_s

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        return {"targets": sorted(view.workers)}

    def start(self, value: Any) -> Any:
        for name in value["targets"]:
            self.frozen.append(name)  # recorded first: heal must find it
            self._signal(name, signal.SIGSTOP)
        return {"frozen": list(value["targets"])}

    def stop(self) -> Any:
        names = sorted(self.frozen)
        self.heal()
        return {"thawed": names}

    def heal(self) -> None:
        while self.frozen:
            self._signal(self.frozen.pop(), signal.SIGCONT)

    def _signal(self, name: str, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pids[name], sig)
