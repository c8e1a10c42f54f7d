"""The controller without root or servers: the plan derived from a configuration, the seeded
schedule, and the order of setup and teardown, against the in-memory fakes of fakes.py. Runs in
seconds."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest

from fencecheck.clusters.base import ClusterError
from fencecheck.nemesis.schedule import NemesisLog, ScheduledFault, run_schedule
from fencecheck.run import controller
from fencecheck.run.config import ConfigError, make_config
from fencecheck.run.plan import make_plan
from fencecheck.run.workers import WorkerProcess
from tests.fencecheck.fakes import Calls, FakeClientNode, FakeFault, fake_parts


def test_plan_takes_nodes_clients_and_faults_from_the_descriptors(tmp_path: Path) -> None:
    plan = make_plan(make_config(backend="redlock", nemesis=("kill", "pause"), concurrency=2,
                                 store=tmp_path, seed=7))
    assert plan.servers == ("n1", "n2", "n3", "n4", "n5")  # redlock's declared node count
    assert plan.clients == ("c1", "c2")
    assert plan.nodes[-1] == plan.resource_node == "r1"
    assert [f.name for f in plan.faults] == ["kill", "pause"]
    assert plan.cfg.client_name == plan.backend.default_client == "redlock-ref"
    assert (plan.schedule_seed, plan.fault_seed) == (7, 8)
    assert list(tmp_path.iterdir()) == []  # planning creates nothing


@pytest.mark.parametrize(
    ("options", "needles"),
    [
        ({"backend": "etcd", "nemesis": ("clock",)}, ("clock", "etcd", "vDSO")),
        ({"backend": "redis-sentinel", "nemesis": ("failover",), "runtime": "docker"},
         ("failover", "docker")),
        ({"backend": "redis", "nemesis": ("failover",)}, ("failover", "redis")),
        ({"backend": "redis", "resource": "etcd"}, ("etcd", "backend")),
        ({"backend": "redis", "client": "zookeeper"}, ("zookeeper", "redis")),
    ],
)
def test_plan_refuses_unsupported_pairs_naming_both(options: dict[str, object],
                                                     needles: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as e:
        make_plan(make_config(**options))
    assert all(n in str(e.value) for n in needles), str(e.value)


def _schedule(tmp_path: Path, seed: int, waits: bool = False) -> list[dict[str, object]]:
    cfg = make_config(nemesis=("pause", "kill"), time_limit_s=0.8, seed=seed,
                      nemesis_interval_s=(0.02, 0.05), pause_target="random", store=tmp_path)
    calls = Calls()
    workers = []
    for name in ("c1", "c2"):
        events = tmp_path / f"{name}.jsonl"
        events.touch()
        workers.append(WorkerProcess(name, FakeClientNode(name, calls), tmp_path / "w.json",
                                     events))
    faults = {n: ScheduledFault(FakeFault(n, calls), waits) for n in ("pause", "kill")}
    log = NemesisLog(tmp_path / f"nemesis-{seed}.jsonl", 0)
    try:
        run_schedule(cfg, random.Random(seed), workers, faults, log, lambda p: None,
                     ["n1", "n2", "n3"])
    finally:
        log.close()
    return [json.loads(x) for x in (tmp_path / f"nemesis-{seed}.jsonl").read_text().splitlines()]


def test_schedule_alternates_start_and_stop_and_ends_stopped(tmp_path: Path) -> None:
    events = _schedule(tmp_path, seed=3)
    ops = [e["f"] for e in events if e["type"] == "ok"]
    assert len(ops) >= 4, ops
    for start, stop in zip(ops[::2], ops[1::2], strict=True):
        assert str(start).startswith("start-") and stop == "stop-" + str(start)[6:]
    assert all(e["process"] == "nemesis" for e in events)


def test_schedule_is_a_function_of_the_seed(tmp_path: Path) -> None:
    def starts(seed: int) -> list[tuple[object, object]]:
        return [(e["f"], json.dumps(e["value"])) for e in _schedule(tmp_path, seed)
                if e["type"] == "invoke" and str(e["f"]).startswith("start-")][:3]

    assert starts(5) == starts(5)
    assert starts(5) != starts(6)


@pytest.mark.parametrize("waits", [True, False])
def test_a_holder_aware_fault_starts_on_a_fresh_grant_only_if_it_waits(tmp_path: Path,
                                                                       waits: bool) -> None:
    cfg = make_config(nemesis=("pause",), time_limit_s=1.0, nemesis_interval_s=(0.05, 0.1),
                      pause_target="holder", store=tmp_path)
    events = tmp_path / "c1.jsonl"
    events.touch()
    grant = {"time": 1, "process": 0, "type": "ok", "f": "acquire", "value": {"lock": "l"}}
    # the grant comes after the fault is due: a waiting fault starts on it, the other before it
    timer = threading.Timer(0.4, lambda: events.write_text(json.dumps(grant) + "\n"))
    timer.start()
    fault = FakeFault("pause", Calls())
    log = NemesisLog(tmp_path / "n.jsonl", 0)
    try:
        run_schedule(cfg, random.Random(1),
                     [WorkerProcess("c1", FakeClientNode("c1", Calls()), tmp_path / "w.json",
                                    events)],
                     {"pause": ScheduledFault(fault, waits)}, log, lambda p: None, ["n1"])
    finally:
        timer.cancel()
        log.close()
    first = fault.views[0]
    assert first.waited is waits
    assert first.holding == (["c1"] if waits else [])
    assert first.fresh_holder == ("c1" if waits else None)


def test_a_run_sets_up_in_order_and_tears_down_in_reverse(tmp_path: Path) -> None:
    calls = Calls()
    cfg = make_config(nemesis=("pause",), time_limit_s=0.6, concurrency=2, store=tmp_path,
                      nemesis_interval_s=(0.05, 0.1), pause_target="random")
    outcome = controller.run(cfg, parts=fake_parts(calls))
    log = calls.log
    setup = ["runtime.setup n1,r1 c1,c2", "pause.build", "service.setup n1",
             "resource.start r1", "spawn c1", "spawn c2", "pause.bind c1,c2"]
    assert [x for x in log if x in setup] == setup
    i = calls.index
    # healed before the final read; then the undo stack unwinds LIFO
    assert i("pause.heal") < i("spawn c1 final-read") < i("resource.stop") \
        < i("service.teardown") < i("runtime.teardown")
    assert log[-1] == "runtime.teardown"
    assert "pause.start" in log and log.count("pause.start") == log.count("pause.stop")
    history = (outcome.run_dir / "history.jsonl").read_text()
    assert '"start-pause"' in history
    assert json.loads((outcome.run_dir / "test.json").read_text())["exit_code"] == \
        outcome.exit_code


def test_a_failing_service_setup_still_undoes_what_was_registered(tmp_path: Path) -> None:
    calls = Calls(fail={"service.setup n1"})
    cfg = make_config(nemesis=("pause",), time_limit_s=0.5, store=tmp_path)
    with pytest.raises(ClusterError, match=r"service\.setup"):
        controller.run(cfg, parts=fake_parts(calls))
    log = calls.log
    # the service's undo was registered before its setup; nothing after it was started
    assert log[-3:] == ["service.setup n1", "service.teardown", "runtime.teardown"]
    assert not any(x.startswith(("spawn", "resource", "pause.bind")) for x in log)
    assert (next(tmp_path.glob("*/latest")) / "history.jsonl").exists()
