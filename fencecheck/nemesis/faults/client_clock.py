"""The `client-clock` fault: the LD_PRELOAD clock shim (clusters/faults/clock.py) moves the wall
clocks of the lock clients, not of the servers. Each start moves the current holder's clock back
by more than a lease, and makes every other worker's clock leap forward by that much again and
again (every `LEAP_PERIOD_S`, shorter than a candidate's polling) while it holds; stop puts them
all back. A single leap would mislead only a candidate that happened to observe the holder just
before it: repeated leaps reach every candidate that polls during the fault.

It tells clients that judge a lease by the wall clock (`time.time()`: a waiting candidate whose
clock leaps past the holder's lease takes the lock over) from those that trust a monotonic clock
(client-go: Go reads the clock through the vDSO, which the shim cannot move, and leader election
measures leases on Go's monotonic clock). Workers, and the programs they start, must run under
the shim, so this fault gives the workers their environment (`WorkerEnv`).
"""

from __future__ import annotations

import random
import threading
from contextlib import ExitStack
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.faults.clock import ClockControl
from fencecheck.descriptors.base import FaultDescriptor, Need
from fencecheck.nemesis.faults.base import EnvFor, FaultContext, FaultOptions, ScheduleView

LEAP_PERIOD_S = 0.5

DESCRIPTOR = FaultDescriptor(
    name="client-clock",
    factory="fencecheck.nemesis.faults.client_clock:ClientClockFault",
    summary="an LD_PRELOAD shim moves the holder's wall clock back and the other clients' "
            "forward, past the lease",
    # the shim and its offset files are on this host: the netns runtime's workers share them
    runtimes=frozenset({"netns"}),
    # A leap misleads a candidate that observed the holder before it, not one that is yet to:
    # right at a fresh grant is the worst moment.
    waits_for_grant=False,
    worker_env=True,
    needs=(Need("C compiler (clock shim)", binary="cc", package="gcc libc6-dev"),),
)


class ClientClockFault:
    name = "client-clock"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts
        self.control: ClockControl | None = None
        self.workers: list[str] = []
        self._leaping: tuple[threading.Thread, threading.Event] | None = None

    def worker_env(self, stack: ExitStack) -> EnvFor:
        control = ClockControl(self.opts.run_dir / "client-clock")
        stack.callback(control.reset_all)
        control.setup()
        self.control = control
        return control.env_for

    def _control(self) -> ClockControl:
        if self.control is None:
            raise ClusterError("client-clock: the workers were not started under the clock shim")
        return self.control

    def bind(self, ctx: FaultContext) -> None:
        self._control()
        self.workers = list(ctx.workers)

    def hold_range_s(self) -> tuple[float, float]:
        return (3.0, 6.0)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        holder = view.fresh_holder or next(iter(view.holding), None)
        # Past the lease, so that a wall-clock judge of the lease sees it over at once.
        delta = round(rng.uniform(1.5, 3.0) * self.opts.lease_ms / 1000 + 1.0, 3)
        return {"back": [holder] if holder else [],
                "forward": [w for w in view.workers if w != holder], "delta_s": delta,
                "period_s": LEAP_PERIOD_S}

    def start(self, value: Any) -> Any:
        control = self._control()
        delta, forward = float(value["delta_s"]), list(value["forward"])
        offsets = control.bump(list(value["back"]), -delta) if value["back"] else {}
        if forward:
            offsets.update(control.bump(forward, delta))
            done = threading.Event()
            thread = threading.Thread(target=self._leap, daemon=True,
                                      args=(control, forward, delta, float(value["period_s"]),
                                            done))
            self._leaping = (thread, done)
            thread.start()
        return {"offset_s": offsets}

    @staticmethod
    def _leap(control: ClockControl, nodes: list[str], delta_s: float, period_s: float,
              done: threading.Event) -> None:
        while not done.wait(period_s):
            control.bump(nodes, delta_s)

    def stop(self) -> Any:
        self.heal()
        return {"nodes": self.workers}

    def heal(self) -> None:
        if self._leaping is not None:
            thread, done = self._leaping
            done.set()
            thread.join(timeout=5)
            self._leaping = None
        if self.control is not None:
            self.control.reset_all()
