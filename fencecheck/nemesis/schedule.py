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
from fencecheck.nemesis.faults.base import ROLES, Fault, RoleTargets
from fencecheck.nemesis.scheduler import (
    Action,
    EndEarly,
    Observed,
    ReplayedSchedule,
    Scheduler,
    SeededSchedule,
    StartFault,
)
from fencecheck.records import schedule as schedule_record
from fencecheck.records.base import RecordError
from fencecheck.records.history import encode_event
from fencecheck.records.schedule import SCHEDULE_FORMAT as SCHEDULE_FORMAT  # re-exported
from fencecheck.records.schedule import Step as Step
from fencecheck.run.config import ConfigError, RunConfig
from fencecheck.run.progress import Progress, ProgressFn
from fencecheck.run.signals import Interrupted
from fencecheck.run.tail import LogTailer
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
    try:
        recorder = _Recorder(record)
        _wait_for_workers(workers, progress)
        start = time.monotonic()
        deadline = start + cfg.time_limit_s
        plan: SeededSchedule | ReplayedSchedule = (
            ReplayedSchedule(replay) if replay is not None else SeededSchedule(cfg, rng, faults))
        sched = Scheduler(plan, rng, lambda f, r, view: faults[f].fault.targets(r, view),
                          [w.name for w in workers], servers, start)
        meter = _Meter(cfg.time_limit_s, start)
        while (now := time.monotonic()) < deadline:
            # A grant released again by the time the controller reads it (its section is short,
            # the controller late under load) is no longer a critical section to land in: wait on.
            fresh = [h for h in tailer.poll() if tailer.holding.get(h.worker) is h]
            seen = Observed(fresh, list(tailer.holding), list(tailer.latest.values()),
                            tailer.completed)
            for action in sched.step(now, seen):
                _carry_out(action, sched, faults, nemesis_log, recorder)
            meter.report(now, tailer, sched.active, progress)
            time.sleep(0.005)
        for action in sched.finish():
            _carry_out(action, sched, faults, nemesis_log, recorder)
    finally:
        tailer.close()  # the logs it keeps open between polls


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


