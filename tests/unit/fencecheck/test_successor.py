"""A holder pause ends once its successor has written (fencecheck/nemesis/successor.py): the rule
on its
own, then the schedule driving a fake pause over event logs written by the test (no servers),
what schedule.json and the stop's completion record, a fixed --fault-duration played out, and a
replay that plays the recorded hold instead of watching again. Runs in about 4 s."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from fencecheck.nemesis.faults.base import ScheduleView
from fencecheck.nemesis.schedule import (
    HOLDER,
    NemesisLog,
    ScheduledFault,
    Step,
    load_steps,
    run_schedule,
)
from fencecheck.nemesis.successor import ENDED_BY_SUCCESSOR, SuccessorWatch
from fencecheck.run.config import make_config
from fencecheck.run.tail import Holding
from fencecheck.run.workers import WorkerProcess
from tests.fencecheck.fakes import Calls, FakeClientNode, FakeFault

PAUSED = Holding("c1", "l", since_ns=100, seen_at=10.0)


@pytest.mark.parametrize(("grant", "ends"), [
    (Holding("c2", "l", 200, 10.5, writes=1), True),
    (Holding("c2", "l", 200, 10.5, writes=0), False),  # granted, nothing written yet
    (Holding("c2", "m", 200, 10.5, writes=1), False),  # another lock
    (Holding("c1", "l", 200, 10.5, writes=1), False),  # the paused holder itself
    (Holding("c2", "l", 200, 9.5, writes=1), False),  # seen before the pause began
    (Holding("c2", "l", 50, 10.5, writes=1), False),  # granted before the paused grant
])
def test_a_pause_ends_only_on_another_workers_grant_of_its_lock_that_wrote(
        grant: Holding, ends: bool) -> None:
    watch = SuccessorWatch(PAUSED, since=10.0)
    assert (watch.successor([PAUSED, grant]) is grant) is ends


def _event(f: str, typ: str, value: dict[str, Any], t: int) -> str:
    return json.dumps({"time": t, "process": 0, "type": typ, "f": f, "value": value}) + "\n"


class LongPause(FakeFault):
    """Draws holds far longer than the run: only an early end stops it before the deadline."""

    def hold_range_s(self) -> tuple[float, float]:
        return (5.0, 6.0)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        super().targets(rng, view)
        return {"targets": [view.fresh_holder]}  # as the pause does: the fresh holder


def _run(tmp_path: Path, name: str, successor_at: float, fixed: bool = False,
         replay: tuple[Step, ...] | None = None) -> tuple[list[dict[str, Any]], tuple[Step, ...]]:
    """c1 is granted lock l at 0.15 s (the pause starts on it), c2 at `successor_at`, and writes;
    returns the nemesis log and the recorded schedule."""
    d = tmp_path / name
    d.mkdir()
    cfg = make_config(nemesis=("pause",), time_limit_s=1.0, nemesis_interval_s=(0.05, 0.1),
                      pause_target="holder", store=tmp_path,
                      fault_duration_s=(5.0, 6.0) if fixed else None)
    logs = {w: d / f"{w}.jsonl" for w in ("c1", "c2")}
    for p in logs.values():
        p.touch()

    def append(w: str, text: str) -> None:
        with open(logs[w], "a") as fh:
            fh.write(text)

    timers = [
        threading.Timer(0.15, append, ("c1", _event("acquire", "ok", {"lock": "l"}, 1))),
        threading.Timer(successor_at, append, ("c2", _event("acquire", "ok", {"lock": "l"}, 2)
                                               + _event("write", "ok", {"lock": "l"}, 3))),
    ]
    for t in timers:
        t.start()
    workers = [WorkerProcess(w, FakeClientNode(w, Calls()), d / "w.json", p)
               for w, p in logs.items()]
    log = NemesisLog(d / "nemesis.jsonl", 0)
    try:
        run_schedule(cfg, random.Random(1), workers,
                     {"pause": ScheduledFault(LongPause("pause", Calls()), True, True)}, log,
                     lambda p: None, ["n1"], record=d / "schedule.json", replay=replay)
    finally:
        for t in timers:
            t.cancel()
        log.close()
    events = [json.loads(x) for x in (d / "nemesis.jsonl").read_text().splitlines()]
    return events, load_steps(d / "schedule.json")


def _window_s(events: list[dict[str, Any]]) -> float:
    """From the start's invoke to the stop's invoke (the hold the schedule played)."""
    start = next(e["time"] for e in events if e["f"] == "start-pause")
    stop = next(e["time"] for e in events if e["f"] == "stop-pause")
    return float(stop - start) / 1e9


def test_a_holder_pause_ends_when_its_successor_has_written_and_says_so(tmp_path: Path) -> None:
    events, steps = _run(tmp_path, "run", successor_at=0.45)
    (step,) = steps
    assert step.role == HOLDER and step.drawn_hold_s is not None and step.drawn_hold_s >= 5.0
    assert 0.25 <= step.hold_s < 0.8  # the successor wrote 0.3 s into the pause
    assert abs(_window_s(events) - step.hold_s) < 0.05
    done = next(e for e in events if e["f"] == "stop-pause" and e["type"] == "ok")["value"]
    assert done["ended"] == ENDED_BY_SUCCESSOR and done["successor"] == "c2"
    assert done["drawn_hold_s"] == step.drawn_hold_s and done["stopped"] is True


def test_a_fixed_fault_duration_is_played_out(tmp_path: Path) -> None:
    events, steps = _run(tmp_path, "fixed", successor_at=0.45, fixed=True)
    (step,) = steps
    assert step.drawn_hold_s is None and step.hold_s >= 5.0
    done = next(e for e in events if e["f"] == "stop-pause" and e["type"] == "ok")["value"]
    assert "ended" not in done
    assert _window_s(events) > 0.6  # stopped by the run's deadline, not by c2's write


def test_a_replay_plays_the_recorded_hold_not_the_successor(tmp_path: Path) -> None:
    recorded = Step(0.05, "pause", 0.6, HOLDER, {"targets": ["c1"]}, True, drawn_hold_s=5.5)
    events, steps = _run(tmp_path, "replay", successor_at=0.4, replay=(recorded,))
    assert abs(_window_s(events) - 0.6) < 0.1  # neither 0.25 s (c2's write) nor 5.5 s (drawn)
    done = next(e for e in events if e["f"] == "stop-pause" and e["type"] == "ok")["value"]
    assert "ended" not in done
    assert [(s.hold_s, s.drawn_hold_s) for s in steps] == [(0.6, 5.5)]  # recorded as played


def test_a_schedule_without_drawn_holds_still_loads(tmp_path: Path) -> None:
    old = {"format": 1, "steps": [{"gap_s": 0.5, "fault": "pause", "hold_s": 4.0,
                                   "role": "holder", "value": {"targets": ["c1"]},
                                   "waited": True}]}
    (tmp_path / "schedule.json").write_text(json.dumps(old))
    (step,) = load_steps(tmp_path / "schedule.json", ["pause"])
    assert (step.hold_s, step.drawn_hold_s) == (4.0, None)
