"""The `delay` fault: the lock holder's traffic to the resource is held for longer than the
lease, then delivered in order (a request sent under a valid lease lands after the next grant);
`delay-service` (faults/delay_service.py) does the same to its traffic to the lock service. The
proxies, the hold and the release are in clusters/faults/delay.py; docs/delay-and-careless.md
tells the whole story.

Both stand in the workers' data path, so they are `ClientRoutes`: before the workers start they
put a proxy on every client node and point the workers' options at it, raising the op timeout on
that path above the longest hold (so the late reply is awaited and the history records `ok`)."""

from __future__ import annotations

import random
from contextlib import ExitStack
from typing import Any

from fencecheck.clusters.base import Cluster, ClusterError, NemesisOp
from fencecheck.clusters.faults.delay import (
    DelayNemesis,
    DelayPath,
    DelayProxies,
    late_timeout_s,
    path_targets,
)
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import (
    FaultContext,
    FaultOptions,
    HoldSettings,
    ScheduleView,
)
from fencecheck.run.errors import ConfigError

RUNTIMES = frozenset({"netns", "docker"})  # the proxies run beside the workers, on this host

DESCRIPTOR = FaultDescriptor(
    name="delay",
    factory="fencecheck.nemesis.faults.delay:DelayFault",
    summary="hold the holder's traffic to the resource past its lease, then deliver it",
    runtimes=RUNTIMES,
    options="fencecheck.nemesis.faults.base:HoldSettings",
)


class DelayFault:
    name = "delay"
    path: DelayPath = "resource"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts
        self.settings = (opts.settings if isinstance(opts.settings, HoldSettings) else
                         HoldSettings(hold_s=opts.pause_duration_s))
        self.nemesis: DelayNemesis | None = None

    def route(self, cluster: Cluster, stack: ExitStack, ledger: Any,
              resource_options: dict[str, Any],
              client_options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        opts = resource_options if self.path == "resource" else client_options
        targets = path_targets(opts)
        if not targets:
            raise ConfigError(f"bad configuration: nemesis: {self.name}: the {self.path} has no "
                              "address a proxy can stand in front of")
        proxies = DelayProxies(self.path, targets)
        stack.callback(proxies.stop)
        proxies.start(cluster.clients, self.opts.run_dir, ledger)
        timeout_s = late_timeout_s(float(opts.get("op_timeout_s", 1.0)),
                                   self.hold_range_s()[1])
        rewritten = proxies.rewrite(opts, timeout_s)
        self.nemesis = DelayNemesis(self.name, proxies)
        if self.path == "resource":
            return rewritten, client_options
        return resource_options, rewritten

    def bind(self, ctx: FaultContext) -> None:
        if self.nemesis is None:
            raise ClusterError(f"{self.name}: no proxies (route runs before the workers start)")

    def hold_range_s(self) -> tuple[float, float]:
        return self.settings.hold_range_s(self.opts.lease_ms)  # longer than the lease

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        holder = view.fresh_holder or next(iter(view.holding), None)
        return {"holder": holder, "clients": list(view.workers)}

    def start(self, value: Any) -> Any:
        assert self.nemesis is not None
        return self.nemesis.invoke(NemesisOp(f"start-{self.name}", value))

    def stop(self) -> Any:
        assert self.nemesis is not None
        return self.nemesis.invoke(NemesisOp(f"stop-{self.name}"))

    def heal(self) -> None:
        if self.nemesis is not None:
            self.nemesis.heal()
