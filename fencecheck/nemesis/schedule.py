"""The nemesis schedule of a run: seeded gaps and holds, holder-aware timing (a fault waits for a
fresh grant so that it lands inside a critical section), fault targets, and the log of every
nemesis op in the workers' event format.

The schedule is also data: every run writes `schedule.json` (each step's gap before it, whether
it waited for a fresh grant, fault, hold, and target by role), and a run given such a file
(`replay`) plays exactly those steps instead of drawing them. A target's role is "holder" when
the step aimed at the worker that got the fresh grant it waited for (a pause of the holder, a
partition around it): at replay the fault's targets are drawn again from the view of that
moment, so they aim at the holder then. "primary", "minority" and "majority" are roles a fault
resolves itself when it starts (`RoleTargets`: a failover takes whichever node is primary then;
a partition cuts off a minority with, or without, the primary of that moment), so the recorded
value carries the role, not the nodes, and a replay against a cluster whose primary moved still
hits the primary. Any other step's targets are "as named" (nodes n1 and n3 killed, worker c3
paused, a ring partition's grudge): the same names exist in every run of the same
configuration, so they are replayed as recorded.

A holder pause ends early once its successor has written (fencecheck/nemesis/successor.py; a fault's
descriptor declares `ends_on_successor`): the step then records the hold it actually had as
`hold_s` and the hold drawn for it as `drawn_hold_s` (absent where the drawn hold was played out;
older files have none), and the `stop-` op's completion says why it ended. A replay plays the
recorded holds as they are, never adaptively.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from fencecheck.nemesis.faults.base import AS_NAMED as AS_NAMED  # re-exported: roles of a Step
from fencecheck.nemesis.faults.base import HOLDER as HOLDER
from fencecheck.nemesis.faults.base import ROLES, Fault, RoleTargets, ScheduleView
from fencecheck.nemesis.successor import ENDED_BY_SUCCESSOR, SETTLE_S, SuccessorWatch
from fencecheck.records import schedule as schedule_record
from fencecheck.records.base import RecordError
from fencecheck.records.history import encode_event
from fencecheck.records.schedule import SCHEDULE_FORMAT as SCHEDULE_FORMAT  # re-exported
from fencecheck.records.schedule import Step as Step
from fencecheck.run.config import ConfigError, RunConfig
from fencecheck.run.progress import Progress, ProgressFn
from fencecheck.run.signals import Interrupted
from fencecheck.run.tail import Holding, LogTailer
from fencecheck.run.workers import WorkerProcess
from fencecheck.workloads.eventlog import Event, EventType

log = logging.getLogger(__name__)


class NemesisLog:
    """The controller's own JSONL log of nemesis ops, in the workers' format."""

    def __init__(self, path: Path, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self.fh: IO[bytes] = open(path, "ab")  # noqa: SIM115 (closed by close())

    def write(self, typ: EventType, f: str, value: Any, error: str | None = None) -> None:
        ev = Event(time.monotonic_ns() - self.t0_ns, "nemesis", typ, f, value, error)
        self.fh.write(encode_event(ev, default=str))
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    """A fault as the schedule drives it: `waits_for_grant` and `ends_on_successor` come from
    its descriptor."""

    fault: Fault
    waits_for_grant: bool = True
    ends_on_successor: bool = False


STARTUP_WAIT_S = 15.0  # how long a first holder-aware fault waits for the workers to start
# How long the time limit may wait for every worker's first event. The limit is the workload's
# time: on a loaded machine (a parallel test suite, a matrix with --jobs) five Python workers
# can take longer to import and connect than a short run lasts, which left 5 s runs with no
# acquire completed at all (UNKNOWN) when they were timed from spawn.
WORKERS_READY_S = 60.0


class ScheduleError(ConfigError):
    """A recorded schedule that cannot be replayed (one line; the CLI exits 3)."""


def write_steps(path: Path, steps: Sequence[Step]) -> None:
    # atomic: a run killed mid-write leaves the previous complete schedule
    schedule_record.write(path, schedule_record.of_steps(steps))


def load_steps(path: Path, faults: Sequence[str] | None = None) -> tuple[Step, ...]:
    """A recorded schedule; `faults`, if given, the faults this run has (a step of another is
    refused: the configuration differs)."""
    try:
        steps = tuple(schedule_record.read(path).steps)
    except RecordError as e:
        text = str(e).removeprefix(f"{path}: ")
        if text.startswith("cannot read"):
            raise ScheduleError(f"{path}: {text}") from None
        raise ScheduleError(f"{path}: not a fault schedule: {text}") from None
    for i, st in enumerate(steps, start=1):
        if faults is not None and st.fault not in faults:
            raise ScheduleError(f"{path}: step {i}: fault {st.fault!r} is not one of this "
                                f"run's ({', '.join(faults) or 'none'})")
        if st.role not in ROLES:
            raise ScheduleError(f"{path}: step {i}: bad role or negative time")
    return steps


class _Schedule:
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
        return self.cfg.pause_target == "holder" and self.table[fault].waits_for_grant

    def ends_early(self, fault: str) -> bool:
        """Whether a start of `fault` on the fresh holder may end once its successor is seen: a
        hold the user fixed (--fault-duration) is played out."""
        return self.cfg.fault_duration_s is None and self.table[fault].ends_on_successor

    def drawn(self) -> float | None:
        return None

    def value(self, drawn: Any) -> Any:
        return drawn


class _Replayed:
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


def _wait_for_workers(workers: list[WorkerProcess], progress: ProgressFn) -> None:
    """Until every worker has written its first event (or exited, or WORKERS_READY_S passed):
    the run's time limit and its fault schedule count from then."""
    t0 = time.monotonic()
    progress(Progress("starting workers"))

    def started(w: WorkerProcess) -> bool:
        # By size, not through the tailer: its first poll in the loop must still see the first
        # grants as fresh. A worker this controller did not spawn is not waited for.
        if w.proc is None or w.proc.poll() is not None:
            return True
        try:
            return w.events.stat().st_size > 0
        except FileNotFoundError:
            return False

    while time.monotonic() - t0 < WORKERS_READY_S:
        if all(started(w) for w in workers):
            break
        time.sleep(0.02)
    else:
        log.warning("workers not all started after %.0f s: the run goes on", WORKERS_READY_S)
    log.info("workers started in %.2f s", time.monotonic() - t0)


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

    def __init__(self, schedule: _Schedule | _Replayed, rng: random.Random, targets: Targets,
                 names: Sequence[str], servers: Sequence[str], start: float) -> None:
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

    def _start(self, fault: str, hold: float, role: str, value: Any, waited: bool,
               fresh: Holding | None) -> StartFault:
        self.hold_s = hold
        step = Step(round(self.gap_s, 3), fault, round(hold, 3), role, value, waited,
                    self.schedule.drawn())
        return StartFault(step, fresh)

    def step(self, now: float, seen: Observed) -> list[Action]:
        actions: list[Action] = []
        sched = self.schedule
        if self.active is None and self.pending is None and now >= self.next_fault:
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
            view = ScheduleView(self.names, self.servers, list(seen.holding),
                                fresh.worker if fresh else None, waited=True)
            value = sched.value(self.targets(fault, self.rng, view))
            hold = sched.hold(fault)
            self.active, self.began = (fault, now + hold), now
            holder = view.fresh_holder is not None and view.fresh_holder in _names(value)
            actions.append(self._start(fault, hold, HOLDER if holder else AS_NAMED, value,
                                       True, fresh))
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


class _Recorder:
    """schedule.json as the run goes: each step as it starts, rewritten where it changes."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.steps = path, list[Step]()
        self._write()

    def _write(self) -> None:
        if self.path is not None:
            write_steps(self.path, self.steps)

    def add(self, step: Step) -> None:
        self.steps.append(step)
        self._write()

    def replace_last(self, **changes: Any) -> None:
        self.steps[-1] = msgspec.structs.replace(self.steps[-1], **changes)
        self._write()


def run_schedule(cfg: RunConfig, rng: random.Random, workers: list[WorkerProcess],
                 faults: dict[str, ScheduledFault], nemesis_log: NemesisLog, progress: ProgressFn,
                 servers: list[str], record: Path | None = None,
                 replay: Sequence[Step] | None = None) -> None:
    """Drive the faults until the time limit (the decisions are `Scheduler.step`'s; this loop
    reads the logs, carries them out and reports progress); `record`: write the schedule there
    as it goes; `replay`: play these steps instead of drawing them."""
    tailer = LogTailer()
    for w in workers:
        tailer.follow(w.name, w.events)
    recorder = _Recorder(record)
    _wait_for_workers(workers, progress)
    start = time.monotonic()
    deadline = start + cfg.time_limit_s
    plan: _Schedule | _Replayed = (_Replayed(replay) if replay is not None
                                   else _Schedule(cfg, rng, faults))
    sched = Scheduler(plan, rng, lambda f, r, view: faults[f].fault.targets(r, view),
                      [w.name for w in workers], servers, start)
    meter = _Meter(cfg.time_limit_s, start)
    while (now := time.monotonic()) < deadline:
        # A grant released again by the time the controller reads it (its section is short, the
        # controller late under load) is no longer a critical section to land in: wait on.
        fresh = [h for h in tailer.poll() if tailer.holding.get(h.worker) is h]
        seen = Observed(fresh, list(tailer.holding), list(tailer.latest.values()),
                        tailer.completed)
        for action in sched.step(now, seen):
            _carry_out(action, sched, faults, nemesis_log, recorder)
        meter.report(now, tailer, sched.active, progress)
        time.sleep(0.005)
    for action in sched.finish():
        _carry_out(action, sched, faults, nemesis_log, recorder)


def _carry_out(action: Action, sched: Scheduler, faults: dict[str, ScheduledFault],
               nlog: NemesisLog, recorder: _Recorder) -> None:
    if isinstance(action, StartFault):
        step = action.step
        recorder.add(step)
        f = faults[step.fault].fault
        started = _start_fault(step.fault, step.value, faults, nlog)
        by_role = f.recorded(step.value, started) if isinstance(f, RoleTargets) else None
        if by_role is not None:
            recorder.replace_last(role=by_role[0], value=by_role[1])
        sched.started(action, recorder.steps[-1].role, time.monotonic())
    elif isinstance(action, EndEarly):
        recorder.replace_last(hold_s=action.hold_s, drawn_hold_s=action.drawn_hold_s)
    else:
        _stop_fault(action.fault, faults, nlog, action.reason)


class _Meter:
    """The progress line's figures: elapsed time, ops/s over the last 2 s, the counts."""

    def __init__(self, limit_s: float, start: float) -> None:
        self.limit_s, self.start, self.last = limit_s, start, 0.0
        self.window: list[tuple[float, int]] = []

    def report(self, now: float, tailer: LogTailer, active: tuple[str, float] | None,
               progress: ProgressFn) -> None:
        if now - self.last < 0.25:
            return
        self.last = now
        done = tailer.completed
        self.window.append((now, done))
        self.window = [x for x in self.window if now - x[0] <= 2.0]
        rate = (done - self.window[0][1]) / max(1e-9, now - self.window[0][0])
        progress(Progress("running", now - self.start, self.limit_s, rate,
                          tailer.counts["ok"], tailer.counts["fail"], tailer.counts["info"],
                          [active[0]] if active else []))


def _start_fault(fault: str, value: Any, faults: dict[str, ScheduledFault],
                 nlog: NemesisLog) -> Any:
    """The start's completion value; None if it failed."""
    f = faults[fault].fault
    return _nemesis_op(f"start-{fault}", value, lambda: f.start(value), nlog)


def _stop_fault(fault: str, faults: dict[str, ScheduledFault], nlog: NemesisLog,
                reason: dict[str, Any] | None = None) -> None:
    """Stop `fault`; `reason`, if given, joins the completion value (why it ended early)."""
    f = faults[fault].fault

    def stop() -> Any:
        done = f.stop()
        if reason is None:
            return done
        return {**(done if isinstance(done, dict) else {"stopped": done}), **reason}

    _nemesis_op(f"stop-{fault}", None, stop, nlog)


def _nemesis_op(f: str, value: Any, call: Callable[[], Any], nlog: NemesisLog) -> Any:
    """One nemesis op, logged as invoke and completion; a failed op is `info`, never fatal.
    Returns the completion value (None if it failed)."""
    nlog.write("invoke", f, value)
    try:
        done = call()
        nlog.write("ok", f, done)
        return done
    except Interrupted:
        nlog.write("info", f, value, "interrupted")
        raise
    except Exception as e:
        log.exception("%s failed", f)
        nlog.write("info", f, value, str(e))
        return None


