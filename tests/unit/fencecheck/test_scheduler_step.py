"""The schedule's decisions as a pure `Scheduler.step(now, observed)`: fed made-up observations
and times, no processes, no clocks. A fault that waits for a fresh grant starts on its holder,
waits longer while no operation has completed, ends early once the paused holder's successor has
written, and the same seed gives the same actions; a replay plays its recorded steps."""

from __future__ import annotations

import random
from typing import Any

from fencecheck.nemesis.faults.base import AS_NAMED, HOLDER, ScheduleView
from fencecheck.nemesis.schedule import ScheduledFault
from fencecheck.nemesis.scheduler import (
    STARTUP_WAIT_S,
    WAIT_FOR_GRANT_S,
    Action,
    EndEarly,
    Observed,
    ReplayedSchedule,
    Scheduler,
    SeededSchedule,
    StartFault,
    StopFault,
)
from fencecheck.nemesis.successor import ENDED_BY_SUCCESSOR, SETTLE_S
from fencecheck.records.schedule import Step
from fencecheck.run.config import make_config
from fencecheck.run.tail import Holding
from tests.fencecheck.fakes import Calls, FakeFault

WORKERS = ["c1", "c2", "c3"]


def worker_target(fault: str, rng: random.Random, view: ScheduleView) -> Any:
    """The fresh holder if there is one, else a worker drawn from the schedule's rng."""
    return view.fresh_holder or rng.choice(list(view.workers))


class LongFault(FakeFault):
    """Holds 4-5 s: long enough for a successor to be seen while it lasts."""

    def hold_range_s(self) -> tuple[float, float]:
        return (4.0, 5.0)


def scheduler(seed: int = 1, *, ends_early: bool = True, waits: bool = True,
              interval: tuple[float, float] = (1.0, 2.0),
              delay: tuple[float, float] = (0.0, 0.0)) -> Scheduler:
    cfg = make_config(nemesis=("pause",), nemesis_interval_s=interval, time_limit_s=30,
                      fault_options={"pause": {"delay_s": delay}})
    table = {"pause": ScheduledFault(LongFault("pause", Calls()), waits_for_grant=waits,
                                     ends_on_successor=ends_early)}
    rng = random.Random(seed)
    return Scheduler(SeededSchedule(cfg, rng, table), rng, worker_target, WORKERS, ["n1"],
                     start=0.0)


def grant(worker: str, since_ns: int, seen_at: float, writes: int = 0) -> Holding:
    return Holding(worker, "lock-0", since_ns, seen_at, writes)


def drive(s: Scheduler, until: float, seen_at: dict[float, Observed], dt: float = 0.01,
          role: str | None = None) -> list[tuple[float, Action]]:
    """Step from 0 to `until` every `dt`; at each time in `seen_at` (rounded to dt) the
    observation given, else nothing new. A start is acknowledged with its own role (or `role`)."""
    out: list[tuple[float, Action]] = []
    n = 0
    while (now := round(n * dt, 6)) < until:
        seen = seen_at.get(now, Observed())
        for a in s.step(now, seen):
            out.append((now, a))
            if isinstance(a, StartFault):
                s.started(a, role or a.step.role, now)
        n += 1
    return out


def test_a_waiting_fault_starts_on_the_fresh_holder_and_stops_after_its_hold() -> None:
    s = scheduler(ends_early=False)
    first = s.next_fault
    assert 0.0 <= first < 1.0  # every fault waits: the first gap is shorter than the shortest
    g = grant("c2", 5, first + 0.5)
    at = round(first + 0.5, 2)
    actions = drive(s, 8.0, {at: Observed([g], ["c2"], [g], completed=3)})
    (t0, start), (t1, stop) = actions[0], actions[1]
    assert isinstance(start, StartFault) and isinstance(stop, StopFault)
    assert t0 == at and start.fresh is g
    assert start.step.fault == "pause" and start.step.role == HOLDER and start.step.waited
    assert start.step.value == "c2"
    assert abs((t1 - t0) - start.step.hold_s) < 0.011  # the drawn hold, played out
    assert stop.reason is None


def test_with_no_grant_the_wait_gives_up_after_three_seconds_once_work_has_begun() -> None:
    s = scheduler(ends_early=False)
    first = round(s.next_fault, 2)
    busy = {round(first + i * 0.01, 2): Observed(completed=1) for i in range(1000)}
    (t0, start), *_ = drive(s, first + 5.0, busy)
    assert isinstance(start, StartFault) and start.step.role == AS_NAMED and start.step.waited
    assert abs(t0 - (first + WAIT_FOR_GRANT_S)) < 0.02


def test_while_nothing_has_completed_the_wait_lasts_until_the_workers_are_up() -> None:
    s = scheduler(ends_early=False)
    (t0, start), *_ = drive(s, STARTUP_WAIT_S + 2.0, {})
    assert isinstance(start, StartFault) and start.step.role == AS_NAMED
    assert abs(t0 - STARTUP_WAIT_S) < 0.02  # not 3 s after the fault was due


def test_a_holder_pause_ends_early_once_its_successor_has_written() -> None:
    s = scheduler(interval=(5.0, 6.0))
    first = round(s.next_fault, 2)
    held = grant("c1", 10, first + 0.1)
    start_at = round(first + 0.1, 2)
    successor = grant("c3", 20, start_at + 0.5, writes=1)
    seen = {start_at: Observed([held], ["c1"], [held], completed=2)}
    later = {round(start_at + 0.5 + i * 0.01, 2): Observed([], ["c3"], [held, successor], 5)
             for i in range(50)}
    actions = drive(s, start_at + 12.0, {**later, **seen})
    kinds = [type(a).__name__ for _, a in actions]
    assert kinds[:3] == ["StartFault", "EndEarly", "StopFault"], kinds
    (t0, start), (t1, early), (t2, stop) = actions[:3]
    assert isinstance(start, StartFault) and isinstance(early, EndEarly)
    assert isinstance(stop, StopFault)
    assert t1 == round(start_at + 0.5, 2)  # the first look that saw the successor's write
    assert abs(early.hold_s - (t1 + SETTLE_S - t0)) < 1e-6
    assert early.drawn_hold_s == start.step.hold_s >= 4.0
    assert abs(t2 - (t1 + SETTLE_S)) < 0.02
    assert stop.reason == {"ended": ENDED_BY_SUCCESSOR, "successor": "c3",
                           "drawn_hold_s": start.step.hold_s}


def test_a_role_the_fault_resolved_itself_gets_no_successor_watch() -> None:
    s = scheduler(interval=(5.0, 6.0))
    first = round(s.next_fault, 2)
    held = grant("c1", 10, first + 0.1)
    start_at = round(first + 0.1, 2)
    successor = grant("c3", 20, start_at + 0.5, writes=1)
    seen = {start_at: Observed([held], ["c1"], [held], completed=2)}
    later = {round(start_at + 0.5 + i * 0.01, 2): Observed([], ["c3"], [held, successor], 5)
             for i in range(50)}
    actions = drive(s, start_at + 12.0, {**later, **seen}, role="minority")
    assert not any(isinstance(a, EndEarly) for _, a in actions)


def test_a_fault_that_does_not_wait_starts_at_its_gap_on_drawn_targets() -> None:
    s = scheduler(waits=False)
    first = s.next_fault
    assert 1.0 <= first <= 2.0  # a gap like any other
    (t0, start), *_ = drive(s, 3.0, {})
    assert isinstance(start, StartFault) and not start.step.waited
    assert start.step.role == AS_NAMED and start.step.value in WORKERS
    assert t0 >= first and t0 - first < 0.011


def test_the_same_seed_gives_the_same_actions_and_another_seed_others() -> None:
    def actions(seed: int) -> list[tuple[float, Action]]:
        return drive(scheduler(seed, waits=False), 20.0, {})
    assert actions(3) == actions(3)
    assert actions(3) != actions(4)


def test_a_replay_plays_the_recorded_steps_then_nothing() -> None:
    steps = [Step(0.5, "pause", 1.0, AS_NAMED, "c2"), Step(2.0, "pause", 0.5, HOLDER, "c1",
                                                             waited=True)]
    rng = random.Random(9)
    s = Scheduler(ReplayedSchedule(steps), rng, worker_target, WORKERS, ["n1"], start=0.0)
    g = grant("c1", 1, 3.6)
    actions = drive(s, 12.0, {3.6: Observed([g], ["c1"], [g], 1)})
    starts = [(t, a.step) for t, a in actions if isinstance(a, StartFault)]
    stops = [t for t, a in actions if isinstance(a, StopFault)]
    assert [st.value for _, st in starts] == ["c2", "c1"]  # as named, then the holder now
    assert [st.hold_s for _, st in starts] == [1.0, 0.5]
    assert [st.gap_s for _, st in starts] == [0.5, 2.0]
    assert starts[0][0] == 0.5 and stops[0] == 1.5
    assert starts[1][0] == 3.6  # 2.0 after the stop it waited, then the grant came
    assert len(stops) == 2 and s.finish() == []


def test_a_pause_delay_starts_on_the_fresh_holder_a_drawn_moment_later() -> None:
    # pause.delay_s (--pause-delay): the grant is seen at `at`; the fault starts within the
    # drawn range after it, aimed at that grant's holder even though another worker holds by
    # then, and the step records the delay so that a replay plays it again.
    s = scheduler(ends_early=False, delay=(0.1, 0.3))
    at = round(s.next_fault + 0.5, 2)
    g = grant("c2", 5, at)
    actions = drive(s, 8.0, {at: Observed([g], ["c2"], [g], completed=3),
                             round(at + 0.05, 2): Observed([], ["c3"], [g], completed=4)})
    t0, start = actions[0]
    assert isinstance(start, StartFault) and start.fresh is g
    assert start.step.value == "c2" and start.step.role == HOLDER and start.step.waited
    delay = start.step.delay_s
    assert delay is not None and 0.1 <= delay <= 0.3
    assert abs((t0 - at) - delay) < 0.011
    replayed = Scheduler(ReplayedSchedule([start.step]), random.Random(2), worker_target,
                         WORKERS, ["n1"], start=0.0)
    at2 = round(start.step.gap_s + 0.2, 2)
    again = drive(replayed, 8.0, {at2: Observed([g], ["c2"], [g], completed=3)})
    assert abs((again[0][0] - at2) - delay) < 0.011


def test_without_a_pause_delay_the_seed_draws_as_before() -> None:
    # the delay is drawn only when asked for: a seed's schedule is the one it always was (the
    # first gap, the fault, then the hold, from the seed's rng); asking for one draws it before
    # the hold
    def first(delay: tuple[float, float]) -> tuple[float, float]:
        s = scheduler(4, ends_early=False, delay=delay)
        g = grant("c1", 5, 0.9)
        (_, a), *_ = drive(s, 3.0, {0.9: Observed([g], ["c1"], [g], completed=2)})
        assert isinstance(a, StartFault)
        return a.step.gap_s, a.step.hold_s
    rng = random.Random(4)
    gap, _, hold = rng.uniform(0.0, 1.0), rng.choice(["pause"]), rng.uniform(4.0, 5.0)
    assert first((0.0, 0.0)) == (round(gap, 3), round(hold, 3))
    assert first((0.2, 0.2))[1] != round(hold, 3)


def test_finish_stops_the_fault_still_active() -> None:
    s = scheduler(waits=False)
    drive(s, s.next_fault + 0.02, {})
    assert s.finish() == [StopFault("pause")]
    assert s.finish() == []
