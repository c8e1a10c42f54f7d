"""Tests of workloads/eventlog.py: line format, monotone times, torn last lines."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.eventlog import EventLog, read_log


def test_events_are_lines_with_times_since_t0(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    t0 = time.monotonic_ns()
    with EventLog(path, t0) as events:
        events.write(3, "invoke", "acquire", {"lock": "a", "lease_ms": 100})
        events.write(3, "fail", "acquire", {"lock": "a", "lease_ms": 100}, "timeout")
        # flushed per event: readable before close
        assert len(path.read_text().splitlines()) == 2
    got = read_log(path)
    assert [e["type"] for e in got] == ["invoke", "fail"]
    assert got[1]["error"] == "timeout" and "error" not in got[0]
    assert 0 <= got[0]["time"] <= got[1]["time"] <= time.monotonic_ns() - t0
    assert set(got[0]) == {"time", "process", "type", "f", "value"}


def test_torn_last_line_is_dropped_but_a_bad_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    good = json.dumps({"time": 1, "process": 0, "type": "invoke", "f": "read", "value": None})
    path.write_text(good + "\n" + '{"time": 2, "proc')
    assert len(read_log(path)) == 1
    path.write_text(good + "\n" + "{oops\n" + good + "\n")
    with pytest.raises(WorkloadError, match=":2:"):
        read_log(path)


@pytest.mark.parametrize("value", [
    {"lock": "a", "token": 2**80, "note": "é"},
    {"x": float("nan"), "y": [float("inf")]},  # msgspec would write null: json's NaN is kept
    {1: "int key"},
])
def test_a_line_reads_back_as_json_would_write_it(tmp_path: Path, value: dict[object, object]
                                                  ) -> None:
    path = tmp_path / "w.jsonl"
    with EventLog(path, 0) as events:
        events.write(1, "ok", "read", value)  # type: ignore[arg-type]
    got = read_log(path)[0]["value"]
    assert json.dumps(got) == json.dumps(json.loads(json.dumps(value)))
