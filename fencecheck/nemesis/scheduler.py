"""The schedule's decisions, without processes or clocks: the seeded schedule (`SeededSchedule`:
gaps, holds and the fault to start, drawn from the run's seed) or a recorded one played back
(`ReplayedSchedule`), and `Scheduler.step(now, observed) -> actions`, which says at each moment what
to start, cut short or stop given what the workers' logs showed. The loop that reads the logs
and carries the actions out is `run_schedule` (fencecheck/nemesis/schedule.py); the tests drive
`step` with made-up observations (tests/unit/fencecheck/test_scheduler_step.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fencecheck.nemesis.faults.base import AS_NAMED, HOLDER, ScheduleView
from fencecheck.nemesis.successor import ENDED_BY_SUCCESSOR, SETTLE_S, SuccessorWatch
from fencecheck.records.schedule import Step
from fencecheck.run.tail import Holding

if TYPE_CHECKING:
    from fencecheck.nemesis.schedule import ScheduledFault
    from fencecheck.run.config import RunConfig

STARTUP_WAIT_S = 15.0  # how long a first holder-aware fault waits for the workers to start


class SeededSchedule:
    """The seeded fault schedule: wait, start one fault, hold it, stop it, repeat."""

    def __init__(self, cfg: RunConfig, rng: random.Random,
                 faults: dict[str, ScheduledFault]) -> None:
        self.cfg = cfg
        self.rng = rng
        self.table = faults
        self.faults = list(cfg.faults)

    def gap(self) -> float:
        lo, hi = self.cfg.nemesis_interval_s
        return self.rng.uniform(lo, hi)

    def first_gap(self) -> float:
        """Before the first fault: when every fault waits for a fresh grant, less than the
        shortest gap (no earlier fault to recover from, and the wait itself lets the workers
        start); else a gap like any other."""
        if all(self.waits(f) for f in self.faults):
            return self.rng.uniform(0.0, self.cfg.nemesis_interval_s[0])
        return self.gap()

    def hold(self, fault: str) -> float:
        if self.cfg.fault_duration_s is not None:
            lo, hi = self.cfg.fault_duration_s
        else:
            lo, hi = self.table[fault].fault.hold_range_s()
        return self.rng.uniform(lo, hi)

    def pick(self) -> str:
        return self.rng.choice(self.faults)

    def waits(self, fault: str) -> bool:
        return self.cfg.fault_target(fault) == "holder" and self.table[fault].waits_for_grant

    def ends_early(self, fault: str) -> bool:
        """Whether a start of `fault` on the fresh holder may end once its successor is seen: a
        hold the user fixed (--fault-duration) is played out."""
        return self.cfg.fault_duration_s is None and self.table[fault].ends_on_successor

    def drawn(self) -> float | None:
        return None

    def delay(self, fault: str) -> float:
        """How long after its fresh grant a holder-aware fault starts (`delay_s`); drawn only
        when the range is not (0, 0), so a seed without it keeps its schedule."""
        lo, hi = self.cfg.fault_delay_s(fault)
        return self.rng.uniform(lo, hi) if hi > 0 else 0.0

    def value(self, drawn: Any) -> Any:
        return drawn


class ReplayedSchedule:
    """A recorded schedule, step by step; no more faults once the steps run out."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        self.faults = [s.fault for s in self.steps]  # non-empty while steps remain
        self.i = -1

    def gap(self) -> float:
        return self.steps[self.i + 1].gap_s if self.i + 1 < len(self.steps) else float("inf")

    def first_gap(self) -> float:
        return self.gap()

    def pick(self) -> str:
        self.i += 1
        return self.steps[self.i].fault

    def hold(self, fault: str) -> float:
        return self.steps[self.i].hold_s

    def waits(self, fault: str) -> bool:
        return self.steps[self.i].waited

    def ends_early(self, fault: str) -> bool:
        return False  # the recorded hold, as it was played

    def drawn(self) -> float | None:
        return self.steps[self.i].drawn_hold_s

    def delay(self, fault: str) -> float:
        return self.steps[self.i].delay_s or 0.0

    def value(self, drawn: Any) -> Any:
        """The holder's targets as drawn now; any others as recorded (by name, or the role the
        fault resolves when it starts)."""
        step = self.steps[self.i]
        return drawn if step.role == HOLDER else step.value


def _names(value: Any) -> set[str]:
    """Every string in a JSON-like value (the nodes and workers a fault's targets name)."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_names(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(_names(v) for v in value))
    return set()


@dataclass(frozen=True, slots=True)
class Observed:
    """What the loop read from the workers' event logs at one moment: `fresh`, the grants seen
    since the last look that were still held when read (oldest first); `holding`, the workers
    holding a lock; `latest`, each worker's last grant (for the successor watch); `completed`, the
    operations completed so far."""

    fresh: Sequence[Holding] = ()
    holding: Sequence[str] = ()
    latest: Sequence[Holding] = ()
    completed: int = 0


@dataclass(frozen=True, slots=True)
class StartFault:
    """Start `step.fault` on `step.value`; the loop records `step`, starts the fault and tells
    the scheduler the role it recorded (`Scheduler.started`). `fresh`: the grant it waited for."""

    step: Step
    fresh: Holding | None = None


@dataclass(frozen=True, slots=True)
class EndEarly:
    """The active fault's successor was seen: the recorded step's hold becomes `hold_s` (the
    drawn one kept as `drawn_hold_s`), and it stops at the time the step asks for."""

    hold_s: float
    drawn_hold_s: float


@dataclass(frozen=True, slots=True)
class StopFault:
    """Stop `fault`; `reason`, if given, joins its completion value (why it ended early)."""

    fault: str
    reason: dict[str, Any] | None = None


Action = StartFault | EndEarly | StopFault
Targets = Callable[[str, random.Random, ScheduleView], Any]
WAIT_FOR_GRANT_S = 3.0  # how long a holder-aware fault waits for a fresh grant


class Scheduler:
    """The schedule's decisions, without processes or clocks: `step(now, observed)` says what
    to do at `now` given what the workers' logs showed; the loop (`run_schedule`) does it.

    Holder-aware timing: a fault waits (up to WAIT_FOR_GRANT_S) for a fresh grant, so that it
    lands inside a critical section; a pause then freezes exactly that holder. While no
    operation has completed yet the workers are still starting (seconds on a loaded machine),
    so the wait goes on, up to STARTUP_WAIT_S: a first fault given up on would hit no holder."""

    def __init__(self, schedule: SeededSchedule | ReplayedSchedule, rng: random.Random,
                 targets: Targets, names: Sequence[str], servers: Sequence[str],
                 start: float) -> None:
        self.schedule, self.rng, self.targets = schedule, rng, targets
        self.names, self.servers, self.start = list(names), list(servers), start
        self.gap_s = schedule.first_gap() if schedule.faults else float("inf")
        self.next_fault = start + self.gap_s
        self.active: tuple[str, float] | None = None  # (fault, stop at)
        self.began = 0.0  # when the active fault started: its hold counts from there
        self.hold_s = 0.0  # the active fault's hold as drawn
        self.watch: SuccessorWatch | None = None  # the active fault ends once it sees one
        self.reason: dict[str, Any] | None = None  # why the active fault ended early
        self.pending: tuple[str, float] | None = None  # (fault, give up waiting at)
        # a fault whose fresh grant came, waiting out its delay: (fault, grant, start at, delay)
        self.delayed: tuple[str, Holding, float, float] | None = None

    def _start(self, fault: str, hold: float, role: str, value: Any, waited: bool,
               fresh: Holding | None, delay: float = 0.0) -> StartFault:
        self.hold_s = hold
        step = Step(round(self.gap_s, 3), fault, round(hold, 3), role, value, waited,
                    self.schedule.drawn(), round(delay, 3) if delay > 0 else None)
        return StartFault(step, fresh)

    def _start_waited(self, now: float, fault: str, fresh: Holding | None,
                      holding: Sequence[str], delay: float = 0.0) -> StartFault:
        """Start a fault that waited for a fresh grant (None: it waited in vain)."""
        sched = self.schedule
        view = ScheduleView(self.names, self.servers, list(holding),
                            fresh.worker if fresh else None, waited=True)
        value = sched.value(self.targets(fault, self.rng, view))
        hold = sched.hold(fault)
        self.active, self.began = (fault, now + hold), now
        holder = view.fresh_holder is not None and view.fresh_holder in _names(value)
        return self._start(fault, hold, HOLDER if holder else AS_NAMED, value, True, fresh,
                           delay)

    def step(self, now: float, seen: Observed) -> list[Action]:
        actions: list[Action] = []
        sched = self.schedule
        if (self.active is None and self.pending is None and self.delayed is None
                and now >= self.next_fault):
            fault = sched.pick()
            if sched.waits(fault):
                self.pending = (fault, now + WAIT_FOR_GRANT_S)
            else:
                hold = sched.hold(fault)
                self.active = (fault, now + hold)
                view = ScheduleView(self.names, self.servers, list(seen.holding))
                value = sched.value(self.targets(fault, self.rng, view))
                actions.append(self._start(fault, hold, AS_NAMED, value, False, None))
        if self.pending is not None and not seen.fresh and seen.completed == 0:
            give_up = max(self.pending[1], min(now + WAIT_FOR_GRANT_S,
                                               self.start + STARTUP_WAIT_S))
            self.pending = (self.pending[0], give_up)
        if self.pending is not None and (seen.fresh or now >= self.pending[1]):
            fault, self.pending = self.pending[0], None
            fresh = seen.fresh[-1] if seen.fresh else None
            delay = sched.delay(fault) if fresh is not None else 0.0
            if delay > 0 and fresh is not None:  # at this grant's holder, a drawn moment later
                self.delayed = (fault, fresh, now + delay, delay)
            else:
                actions.append(self._start_waited(now, fault, fresh, seen.holding))
        if self.delayed is not None and now >= self.delayed[2]:
            fault, fresh, _, delay = self.delayed
            self.delayed = None
            actions.append(self._start_waited(now, fault, fresh, seen.holding, delay))
        if self.active is not None and self.watch is not None and now < self.active[1]:
            successor = self.watch.successor(seen.latest)
            if successor is not None:
                self.watch = None
                if now + SETTLE_S < self.active[1]:  # else the drawn hold ends it as soon
                    used = now + SETTLE_S - self.began
                    actions.append(EndEarly(round(used, 3), round(self.hold_s, 3)))
                    self.reason = {"ended": ENDED_BY_SUCCESSOR, "successor": successor.worker,
                                   "drawn_hold_s": round(self.hold_s, 3)}
                    self.active = (self.active[0], now + SETTLE_S)
        if self.active is not None and now >= self.active[1]:
            actions.append(StopFault(self.active[0], self.reason))
            self.active, self.watch, self.reason = None, None, None
            self.gap_s = sched.gap()
            self.next_fault = now + self.gap_s
        return actions

    def started(self, start: StartFault, role: str, at: float) -> None:
        """The loop started `start` and recorded `role` for it (a fault resolving its own role
        may have replaced the scheduled one), at `at`: a pause of the fresh holder may end
        early from then on."""
        if role == HOLDER and start.fresh is not None and self.schedule.ends_early(
                start.step.fault):
            self.watch = SuccessorWatch(start.fresh, at)

    def finish(self) -> list[Action]:
        """At the time limit: stop the fault still active."""
        active, self.active = self.active, None
        return [StopFault(active[0])] if active is not None else []


