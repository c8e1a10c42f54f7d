"""The records that cross processes have one owner each: the worker configuration the
controller writes is exactly what a worker loads, and every event writer and reader goes
through `Event`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencecheck.nemesis.schedule import NemesisLog
from fencecheck.run.config import make_config
from fencecheck.run.workers import WorkerProcess, worker_config, write_worker_config
from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.eventlog import Event, EventLog, read_log
from fencecheck.workloads.loops.worker import WorkerConfig
from tests.fencecheck.fakes import Calls, FakeClientNode


def test_the_controllers_worker_config_is_what_the_worker_loads(tmp_path: Path) -> None:
    cfg = make_config(workload="cron", idempotent=True, locks=2, fencing=True, store=tmp_path)
    w = WorkerProcess("c1", FakeClientNode("c1", Calls()), tmp_path / "w.json",
                      tmp_path / "e.jsonl")
    written = worker_config(cfg, 0, w, {"endpoints": ["h:1"]}, {"fencing": True}, 42)
    write_worker_config(written, w.config)
    loaded = WorkerConfig.load(w.config)
    assert loaded == written
    assert loaded.workload == "cron" and loaded.locks == ["lock-0", "lock-1"]
    assert loaded.resource_options["fencing"] is True  # a bool, never "on"/"off"


def test_worker_and_nemesis_logs_write_the_same_event_record(tmp_path: Path) -> None:
    with EventLog(tmp_path / "w.jsonl", 0) as wlog:
        wlog.write(3, "ok", "acquire", {"lock": "l", "token": 1})
    nlog = NemesisLog(tmp_path / "n.jsonl", 0)
    nlog.write("info", "start-pause", {"targets": ["c1"]}, "boom")
    nlog.close()
    events = [Event.from_json(e) for p in ("w.jsonl", "n.jsonl") for e in read_log(tmp_path / p)]
    assert [(e.process, e.type, e.f, e.error) for e in events] == [
        (3, "ok", "acquire", None), ("nemesis", "info", "start-pause", "boom")]
    assert Event.from_json(json.loads(json.dumps(events[1].to_json()))) == events[1]


@pytest.mark.parametrize("bad", [{"time": "1", "process": 1, "type": "ok", "f": "x"},
                                 {"time": 1, "process": 1, "type": "done", "f": "x"},
                                 {"time": 1, "process": None, "type": "ok", "f": "x"}, [1]])
def test_a_malformed_event_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(WorkloadError, match="event"):
        Event.from_json(bad)
