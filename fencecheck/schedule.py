"""The nemesis schedule of a run: seeded gaps and holds, holder-aware timing (a fault waits for a
fresh grant so that it lands inside a critical section), fault targets, and the log of every
nemesis op in the workers' event format."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fencecheck.config import RunConfig
from fencecheck.faults.base import Fault, ScheduleView
from fencecheck.progress import Progress, ProgressFn
from fencecheck.signals import Interrupted
from fencecheck.tail import LogTailer
from fencecheck.workers import Worker
from fencecheck.workloads.eventlog import Event, EventType

log = logging.getLogger(__name__)


class EventLog:
    """The controller's own JSONL log of nemesis ops, in the workers' format."""

    def __init__(self, path: Path, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self.fh: IO[str] = open(path, "a")  # noqa: SIM115 (closed by close())

    def write(self, typ: EventType, f: str, value: Any, error: str | None = None) -> None:
        ev = Event(time.monotonic_ns() - self.t0_ns, "nemesis", typ, f, value, error)
        self.fh.write(json.dumps(ev.to_json(), separators=(",", ":"), default=str) + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    """A fault as the schedule drives it: `waits_for_grant` comes from its descriptor."""

    fault: Fault
    waits_for_grant: bool = True


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

    def hold(self, fault: str) -> float:
        if self.cfg.fault_duration_s is not None:
            lo, hi = self.cfg.fault_duration_s
        else:
            lo, hi = self.table[fault].fault.hold_range_s()
        return self.rng.uniform(lo, hi)

    def pick(self) -> str:
        return self.rng.choice(self.faults)


def run_schedule(cfg: RunConfig, rng: random.Random, workers: list[Worker],
                 faults: dict[str, ScheduledFault], nemesis_log: EventLog, progress: ProgressFn,
                 servers: list[str]) -> None:
    tailer = LogTailer()
    for w in workers:
        tailer.follow(w.name, w.events)
    schedule = _Schedule(cfg, rng, faults)
    names = [w.name for w in workers]
    start = time.monotonic()
    deadline = start + cfg.time_limit_s
    next_fault = start + schedule.gap() if schedule.faults else float("inf")
    active: tuple[str, float] | None = None  # (fault, stop at)
    # Holder-aware timing: a fault waits (up to 3 s) for a fresh grant, so that it lands inside
    # a critical section; a pause then freezes exactly that holder.
    pending: tuple[str, float] | None = None  # (fault, give up waiting at)
    last_progress = 0.0
    window: list[tuple[float, int]] = []
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        fresh = tailer.poll()
        if active is None and pending is None and now >= next_fault:
            fault = schedule.pick()
            if cfg.pause_target == "holder" and faults[fault].waits_for_grant:
                pending = (fault, now + 3.0)
            else:
                active = (fault, now + schedule.hold(fault))
                view = ScheduleView(names, servers, list(tailer.holding))
                _start_fault(fault, faults[fault].fault.targets(rng, view), faults, nemesis_log)
        if pending is not None and (fresh or now >= pending[1]):
            fault = pending[0]
            pending = None
            view = ScheduleView(names, servers, list(tailer.holding),
                                fresh[-1].worker if fresh else None, waited=True)
            value = faults[fault].fault.targets(rng, view)
            active = (fault, now + schedule.hold(fault))
            _start_fault(fault, value, faults, nemesis_log)
        if active is not None and now >= active[1]:
            _stop_fault(active[0], faults, nemesis_log)
            active = None
            next_fault = now + schedule.gap()
        if now - last_progress >= 0.25:
            last_progress = now
            done = tailer.completed
            window.append((now, done))
            window = [x for x in window if now - x[0] <= 2.0]
            rate = (done - window[0][1]) / max(1e-9, now - window[0][0])
            progress(Progress("running", now - start, cfg.time_limit_s, rate,
                              tailer.counts["ok"], tailer.counts["fail"], tailer.counts["info"],
                              [active[0]] if active else []))
        time.sleep(0.005)
    if active is not None:
        _stop_fault(active[0], faults, nemesis_log)


def _start_fault(fault: str, value: Any, faults: dict[str, ScheduledFault],
                 nlog: EventLog) -> None:
    f = faults[fault].fault
    _nemesis_op(f"start-{fault}", value, lambda: f.start(value), nlog)


def _stop_fault(fault: str, faults: dict[str, ScheduledFault], nlog: EventLog) -> None:
    f = faults[fault].fault
    _nemesis_op(f"stop-{fault}", None, f.stop, nlog)


def _nemesis_op(f: str, value: Any, call: Callable[[], Any], nlog: EventLog) -> None:
    """One nemesis op, logged as invoke and completion; a failed op is `info`, never fatal."""
    nlog.write("invoke", f, value)
    try:
        nlog.write("ok", f, call())
    except Interrupted:
        nlog.write("info", f, value, "interrupted")
        raise
    except Exception as e:
        log.exception("%s failed", f)
        nlog.write("info", f, value, str(e))


