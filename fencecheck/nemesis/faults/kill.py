"""The `kill` fault: SIGKILL one server or a majority, restart them on their data on stop."""

from __future__ import annotations

import random
from typing import Any

from fencecheck.clusters.base import ClusterError, Killable
from fencecheck.clusters.faults.nemesis import KillNemesis
from fencecheck.descriptors.base import KILL, FaultDescriptor
from fencecheck.nemesis.faults.base import FaultContext, FaultOptions, ScheduleView
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="kill",
    factory="fencecheck.nemesis.faults.kill:KillFault",
    summary="SIGKILL one server or a majority and restart within the lease",
    requires=frozenset({KILL}),
)


class KillFault(NemesisFault):
    name = "kill"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts

    def bind(self, ctx: FaultContext) -> None:
        if not isinstance(ctx.service, Killable):
            raise ClusterError(f"kill: {self.opts.backend} declares {KILL} but cannot be killed")
        self.nemesis = KillNemesis(ctx.service)

    def hold_range_s(self) -> tuple[float, float]:
        # Restart inside the lease: a server that lost its keys (no persistence) is back
        # while the old grant is still surely held, so a second grant is a double grant.
        lease_s = self.opts.lease_ms / 1000
        return min(0.2, lease_s / 4), max(0.3, lease_s / 2)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        servers = list(view.servers)
        # One node, or a majority (what it takes to lose a Redlock quorum's keys).
        count = 1 if len(servers) < 3 or rng.random() < 0.5 else len(servers) // 2 + 1
        return {"nodes": sorted(rng.sample(servers, count))}
