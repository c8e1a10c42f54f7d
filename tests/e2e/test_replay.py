"""Replay: every run records its fault schedule (schedule.json: gaps, faults, holds, targets by
role), `fencecheck run --replay RUN_DIR` plays exactly that schedule on the same configuration,
and a replay of a recorded unfenced-pause redis run finds violations again. A folder that is not
a replayable run is one line, exit 3."""

from __future__ import annotations

import json
import os
import random
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.base import NemesisOp
from fencecheck.clusters.cleaner import teardown_run
from fencecheck.clusters.faults.grudges import side_of, side_split
from fencecheck.clusters.faults.partition import PartitionNemesis
from fencecheck.clusters.runtimes.netns import NetnsRuntime
from fencecheck.nemesis.faults.base import AS_NAMED, MAJORITY, MINORITY, PRIMARY, FaultOptions
from fencecheck.nemesis.faults.failover import FailoverFault
from fencecheck.nemesis.faults.partition import PartitionFault
from fencecheck.nemesis.schedule import (
    HOLDER,
    NemesisLog,
    ScheduledFault,
    ScheduleError,
    Step,
    load_steps,
    run_schedule,
    write_steps,
)
from fencecheck.run.config import make_config
from tests.conftest import run_directory, run_fencecheck
from tests.fencecheck.fakes import Calls, FakeFault


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return run_fencecheck(*args, timeout=240, env=env)


def test_a_schedule_round_trips(tmp_path: Path) -> None:
    steps = [Step(1.5, "pause", 2.25, HOLDER, {"targets": ["w2"]}, True),
             Step(0.7, "kill", 3.0, "as named", {"nodes": ["n1", "n3"]}, True),
             Step(0.7, "partition", 3.0, "as named", {"holder": None, "clients": ["w1"]}),
             Step(0.2, "failover", 4.0, PRIMARY, {"holder": "c1", "clients": ["c1"]}),
             Step(0.2, "partition", 4.0, MINORITY, {"shape": "halves", "side": MINORITY}),
             Step(0.2, "partition", 4.0, MAJORITY, {"shape": "one-node", "side": MAJORITY})]
    write_steps(tmp_path / "s.json", steps)
    faults = ["pause", "kill", "partition", "failover"]
    assert load_steps(tmp_path / "s.json", faults) == tuple(steps)


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
        replay = run_directory(r.stdout)
        test = json.loads((replay / "test.json").read_text())
        assert test["config"]["replay"] == str((original / "schedule.json").resolve())
        # exactly the recorded steps, as far as the time limit reached them
        assert _steps(replay) == recorded[:len(_steps(replay))] and _steps(replay)
        found += r.returncode == 1
        if found:
            break
    assert found, "no replay found violations"


# --- targets by role: resolved when the fault starts, in a run and at replay ------------------


class PrimaryFault(FakeFault):
    """A failover-like fault: `start` takes whichever node is primary at that moment."""

    def __init__(self, calls: Calls) -> None:
        super().__init__("kill", calls)
        self.primary = "n1"
        self.hit: list[str] = []

    def start(self, value: Any) -> Any:
        self.hit.append(self.primary)
        return {"primary": self.primary}

    def recorded(self, value: Any, started: Any) -> tuple[str, Any] | None:
        return FailoverFault.recorded(self, value, started)  # type: ignore[arg-type]


def _play(tmp_path: Path, fault: PrimaryFault, name: str,
          replay: tuple[Step, ...] | None = None) -> Path:
    cfg = make_config(nemesis=("kill",), time_limit_s=0.5, nemesis_interval_s=(0.05, 0.1),
                      pause_target="random", store=tmp_path)
    log = NemesisLog(tmp_path / f"{name}.jsonl", 0)
    try:
        run_schedule(cfg, random.Random(1), [], {"kill": ScheduledFault(fault, False)}, log,
                     lambda p: None, ["n1", "n2", "n3"], record=tmp_path / f"{name}.json",
                     replay=replay)
    finally:
        log.close()
    return tmp_path / f"{name}.json"


def test_a_replayed_primary_step_hits_the_primary_of_the_replay(tmp_path: Path) -> None:
    fault = PrimaryFault(Calls())
    recorded = load_steps(_play(tmp_path, fault, "run"), ["kill"])
    assert recorded and {s.role for s in recorded} == {PRIMARY} and set(fault.hit) == {"n1"}
    fault.primary, fault.hit = "n3", []  # the cluster failed over since the recording
    _play(tmp_path, fault, "replay", replay=recorded[:1])
    assert fault.hit == ["n3"]
    nemesis = [json.loads(x) for x in (tmp_path / "replay.jsonl").read_text().splitlines()]
    assert [e["value"] for e in nemesis if e["f"] == "start-kill" and e["type"] == "ok"] == [
        {"primary": "n3"}]


@pytest.mark.parametrize("shape", ["one-node", "halves"])
@pytest.mark.parametrize("side", [MINORITY, MAJORITY])
@pytest.mark.parametrize("primary", ["n1", "n4", None])
def test_a_side_is_cut_around_the_primary_of_the_moment(shape: str, side: str,
                                                        primary: str | None) -> None:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    for seed in range(5):
        grudge = side_split(nodes, shape, side, primary, random.Random(seed))
        cut = {n for n in nodes if len(grudge[n]) > 2}  # the minority drops the 3 others
        assert len(cut) == (1 if shape == "one-node" else 2)
        if primary is not None:
            assert (primary in cut) == (side == MINORITY)
        assert side_of(nodes, grudge, primary) == (side if primary else MINORITY)


def test_the_faults_record_their_roles(tmp_path: Path) -> None:
    opts = FaultOptions("abc123", tmp_path, "redis-sentinel", 2000, "holder", (3.0, 5.0),
                        random.Random(0))
    value = {"holder": "c1", "clients": ["c1", "c2"]}
    assert FailoverFault(opts).recorded(value, {"primary": "n2"}) == (PRIMARY, value)
    part = PartitionFault(opts)
    assert part.recorded(value, {"shape": "halves", "grudge": {}, "side": MAJORITY}) == (
        MAJORITY, {**value, "shape": "halves", "side": MAJORITY})
    ring = {"n1": ["n3"], "n2": ["n1"], "n3": ["n2"]}
    assert part.recorded(value, {"shape": "majorities-ring", "grudge": ring}) == (
        AS_NAMED, {**value, "shape": "majorities-ring", "grudge": ring})
    assert part.recorded(value, {"shape": "client-isolate", "grudge": {}}) is None


@pytest.mark.netns
def test_a_partition_replayed_by_side_or_grudge_cuts_what_it_says(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    run_id = secrets.token_hex(3)
    rt = NetnsRuntime(run_id, tmp_path / "store")
    primary = ["n2"]
    try:
        cluster = rt.setup(["n1", "n2", "n3", "r1"], ["c1"])
        nem = PartitionNemesis(cluster, ["n1", "n2", "n3"], "r1", ledger=rt.ledger,
                               rng=random.Random(0), primary=lambda: primary[0])
        for now in ("n2", "n3"):
            primary[0] = now
            out = nem.invoke(NemesisOp("start-partition",
                                       {"holder": "c1", "shape": "one-node", "side": MINORITY}))
            assert out["side"] == MINORITY and out["grudge"][now] == sorted({"n1", "n2", "n3"}
                                                                            - {now})
            assert rt.remote(now).run(["iptables", "-S", f"FC-{run_id}"]).stdout.count(
                "DROP") == 2
            nem.invoke(NemesisOp("stop-partition"))
        ring = {"n1": ["n3"], "n2": ["n1"], "n3": ["n2"]}
        out = nem.invoke(NemesisOp("start-partition", {"shape": "majorities-ring",
                                                       "grudge": ring}))
        assert out == {"shape": "majorities-ring", "grudge": ring}
        nem.heal()
    finally:
        try:
            rt.teardown()
        finally:
            teardown_run(run_id)


def test_a_first_holder_aware_fault_comes_early_and_waits_for_the_workers(
        tmp_path: Path) -> None:
    """The default run's first fault: drawn under the shortest gap, and it waits past the usual
    3 s for the workers' first grant while nothing has completed yet (they are starting)."""
    import threading

    from fencecheck.run.workers import WorkerProcess
    from tests.fencecheck.fakes import FakeClientNode

    cfg = make_config(nemesis=("pause",), time_limit_s=4.6, nemesis_interval_s=(0.5, 1.0),
                      pause_target="holder", store=tmp_path)
    events = tmp_path / "c1.jsonl"
    events.touch()
    grant = {"time": 1, "process": 0, "type": "ok", "f": "acquire", "value": {"lock": "l"}}
    timer = threading.Timer(4.0, lambda: events.write_text(json.dumps(grant) + "\n"))
    timer.start()
    fault = FakeFault("pause", Calls())
    log = NemesisLog(tmp_path / "n.jsonl", 0)
    try:
        run_schedule(cfg, random.Random(1),
                     [WorkerProcess("c1", FakeClientNode("c1", Calls()), tmp_path / "w.json",
                                    events)],
                     {"pause": ScheduledFault(fault, True)}, log, lambda p: None, ["n1"],
                     record=tmp_path / "schedule.json")
    finally:
        timer.cancel()
        log.close()
    assert fault.views and fault.views[0].fresh_holder == "c1"
    first = load_steps(tmp_path / "schedule.json")[0]
    assert first.gap_s < 0.5 and first.waited
