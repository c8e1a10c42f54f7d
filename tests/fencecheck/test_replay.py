"""Replay: every run records its fault schedule (schedule.json: gaps, faults, holds, targets by
role), `fencecheck run --replay RUN_DIR` plays exactly that schedule on the same configuration,
and a replay of a recorded unfenced-pause redis run finds violations again. A folder that is not
a replayable run is one line, exit 3."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fencecheck.schedule import HOLDER, ScheduleError, Step, load_steps, write_steps
from tests.conftest import run_fencecheck


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return run_fencecheck(*args, timeout=240, env=env)


def test_a_schedule_round_trips(tmp_path: Path) -> None:
    steps = [Step(1.5, "pause", 2.25, HOLDER, {"targets": ["w2"]}, True),
             Step(0.7, "kill", 3.0, "as named", {"nodes": ["n1", "n3"]}, True),
             Step(0.7, "partition", 3.0, "as named", {"holder": None, "clients": ["w1"]})]
    write_steps(tmp_path / "s.json", steps)
    assert load_steps(tmp_path / "s.json", ["pause", "kill", "partition"]) == tuple(steps)


@pytest.mark.parametrize(("text", "match"), [
    ("{", "not a fault schedule"),
    ('{"format": 9, "steps": []}', "format"),
    ('{"format": 1, "steps": [{"gap_s": 1, "fault": "kill", "hold_s": 1, "role": "holder"}]}',
     "step 1: fault 'kill' is not one of this run's"),
    ('{"format": 1, "steps": [{"gap_s": 1, "fault": "pause", "hold_s": 1, "role": "boss"}]}',
     "step 1: bad role"),
])
def test_a_bad_schedule_is_one_line(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "s.json").write_text(text)
    with pytest.raises(ScheduleError, match=match):
        load_steps(tmp_path / "s.json", ["pause"])


def test_replay_of_a_folder_that_is_no_run_is_exit_3(tmp_path: Path) -> None:
    r = _cli("run", "--replay", str(tmp_path), "--store", str(tmp_path / "store"))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "--replay" in r.stderr and "test.json" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "test.json").write_text(json.dumps({"config": {"backend": "redis"}}))
    r = _cli("run", "--replay", str(tmp_path), "--store", str(tmp_path / "store"))
    assert r.returncode == 3 and "no recorded schedule" in r.stderr, r.stderr


def _steps(run_dir: Path) -> list[tuple[float, str, float, bool]]:
    data = json.loads((run_dir / "schedule.json").read_text())
    return [(s["gap_s"], s["fault"], s["hold_s"], s["waited"]) for s in data["steps"]]


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_replay_of_an_unfenced_pause_run_finds_violations_again(tmp_path: Path) -> None:
    store = tmp_path / "store"
    r = _cli("run", "--backend", "redis", "--nemesis", "pause", "--fencing", "off",
             "--time-limit", "10", "--lease-ms", "1000", "--concurrency", "4", "--seed", "1",
             "--store", str(store))
    assert r.returncode == 1, r.stdout + r.stderr  # the recorded run found violations
    original = next(store.glob("*/2*"))
    recorded = _steps(original)
    assert recorded and all(f == "pause" and waited for _, f, _, waited in recorded)
    roles = [s["role"] for s in json.loads((original / "schedule.json").read_text())["steps"]]
    assert HOLDER in roles  # a pause of the worker that just got the lock
    found = 0
    for _ in range(2):  # a real system is not deterministic: a couple of tries
        r = _cli("run", "--replay", str(original), "--store", str(store))
        assert r.returncode in (0, 1), r.stdout + r.stderr
        replay = Path(r.stdout.split("run directory:")[1].split()[0])
        test = json.loads((replay / "test.json").read_text())
        assert test["config"]["replay"] == str((original / "schedule.json").resolve())
        # exactly the recorded steps, as far as the time limit reached them
        assert _steps(replay) == recorded[:len(_steps(replay))] and _steps(replay)
        found += r.returncode == 1
        if found:
            break
    assert found, "no replay found violations"
