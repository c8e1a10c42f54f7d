"""The default run (redis, unfenced, pause of the holder) ends its first pause once the holder's
successor has written: schedule.json records the hold it had, shorter than the one drawn, and a
`--replay` plays that hold. One 5 s run and one 5 s replay (about 14 s)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fencecheck.nemesis.successor import ENDED_BY_SUCCESSOR
from tests.conftest import run_directory, run_fencecheck


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_fencecheck(*args, timeout=240, env={**os.environ, "COLUMNS": "200"})


def _run_dir(r: subprocess.CompletedProcess[str]) -> Path:
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return run_directory(r.stdout)


def _pauses(run_dir: Path) -> list[tuple[float, dict[str, Any]]]:
    """Each pause's window (start invoke to stop invoke, s) and its stop's completion value."""
    ops = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    nem = [o for o in ops if o["process"] == "nemesis"]
    starts = [o["time"] for o in nem if o["f"] == "start-pause" and o["type"] == "invoke"]
    stops = [o["time"] for o in nem if o["f"] == "stop-pause" and o["type"] == "invoke"]
    dones = [o["value"] for o in nem if o["f"] == "stop-pause" and o["type"] == "ok"]
    return [((b - a) / 1e9, d) for a, b, d in zip(starts, stops, dones, strict=False)]


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_a_holder_pause_ends_at_its_successor_and_a_replay_plays_that_hold(
        tmp_path: Path) -> None:
    store = tmp_path / "store"
    original = _run_dir(_cli("run", "--time-limit", "5", "--seed", "1", "--store", str(store)))
    steps = json.loads((original / "schedule.json").read_text())["steps"]
    early = steps[0]
    assert early["role"] == "holder" and early["drawn_hold_s"] > early["hold_s"], steps
    window, done = _pauses(original)[0]
    assert done["ended"] == ENDED_BY_SUCCESSOR and done["drawn_hold_s"] == early["drawn_hold_s"]
    assert abs(window - early["hold_s"]) < 0.1
    assert early["hold_s"] >= 2.0 * 0.99  # no successor before the 2 s lease ran out

    replay = _run_dir(_cli("run", "--replay", str(original), "--store", str(store)))
    played = json.loads((replay / "schedule.json").read_text())["steps"]
    assert (played[0]["hold_s"], played[0]["drawn_hold_s"]) == (early["hold_s"],
                                                                 early["drawn_hold_s"])
    window, done = _pauses(replay)[0]
    assert "ended" not in done  # the recorded hold, not a new watch for a successor
    assert abs(window - early["hold_s"]) < 0.25 < early["drawn_hold_s"] - window
