"""LeaderWorker (workloads/clients/leader.py) in-process against redis-server and the fenced
store: two candidates for a few seconds; the history has the leader workload's shape (campaigns
of "leader", renewals within a tenure, actions stamped with the term) and passes the lock checks.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fencecheck.checker.analyze import analyze
from fencecheck.checker.history import load_ops
from fencecheck.run.history_merge import merge_logs
from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.clients.leader import LEADER_LOCK, LeaderWorker
from fencecheck.workloads.eventlog import EventLog
from fencecheck.workloads.loops.worker import WorkerConfig
from fencecheck.workloads.registry import make_client
from fencecheck.workloads.resources.store import StoreResource
from tests.workloads.conftest import StartServer


def leader_config(tmp_path: Path, worker: int, redis: str, store: str, t0: int) -> WorkerConfig:
    return WorkerConfig(
        worker=worker, concurrency=2, process_base=0, client="redis-lease",
        client_options={"endpoints": [redis]}, resource="store",
        resource_options={"address": store}, locks=["lock-0"], lease_ms=600,
        acquire_timeout_s=1.0, think_ms=5, writes_per_section=3, idle_ms=10, renew=False,
        log=str(tmp_path / f"w{worker}.jsonl"), t0_ns=t0, seed=3, op_timeout_s=1.0,
        workload="leader",
    )


def test_two_candidates_take_turns_in_office(tmp_path: Path, start_redis: StartServer,
                                             start_store: StartServer) -> None:
    redis, store = start_redis(), start_store(fencing=True)
    t0 = time.monotonic_ns()
    stop = threading.Event()
    errors: list[BaseException] = []

    def candidate(i: int) -> None:
        cfg = leader_config(tmp_path, i, redis.address, store.address, t0)
        client = make_client("redis-lease", {"endpoints": [redis.address], "op_timeout_s": 1.0})
        resource = StoreResource({"address": store.address, "op_timeout_s": 1.0})
        try:
            with EventLog(cfg.log, t0) as events:
                LeaderWorker(cfg, client, resource, events, stop.is_set).run()
        except BaseException as e:
            errors.append(e)
        finally:
            client.close()
            resource.close()

    threads = [threading.Thread(target=candidate, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(4.0)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors and not any(t.is_alive() for t in threads)

    merge_logs([tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"], tmp_path / "history.jsonl")
    ops = load_ops(tmp_path / "history.jsonl")
    # in the order the grants came back: a candidate that began polling first may be granted
    # second (the first's lease lapsed while it waited), so invocation order is not grant order
    acquires = sorted((o for o in ops if o.f == "acquire" and o.ok),
                      key=lambda o: o.end_index or 0)
    assert {o.get("lock") for o in ops if o.f != "read" and o.f != "write"} == {LEADER_LOCK}
    assert len(acquires) >= 2, "a tenure is 1.5-4 leases: several terms in 4 s"
    terms = [o.get("token") for o in acquires]
    assert terms == sorted(terms) and len(set(terms)) == len(terms)
    renews = [o for o in ops if o.f == "renew" and o.ok]
    assert len(renews) >= len(acquires) - 1  # a tenure outlasts half a lease: renewed in office
    writes = [o for o in ops if o.f == "write" and o.ok]
    assert len(writes) > 3 * len(acquires)  # many actions per term
    assert all(o.get("key") == LEADER_LOCK and o.get("token") in terms for o in writes)
    # each process's actions carry the term of its latest campaign
    term_of: dict[object, int] = {}
    for o in ops:
        if o.f == "acquire" and o.ok:
            term_of[o.process] = o.get("token")
        elif o.f == "write":
            assert o.get("token") == term_of[o.process]
    results = analyze(ops)
    assert results.valid is True, results.to_json()
    # the store saw every accepted action as one increment
    check = StoreResource({"address": store.address, "op_timeout_s": 1.0})
    assert check.read(LEADER_LOCK, None, "") == len(writes)
    check.close()


def test_config_workload_fields_default_for_older_configs(tmp_path: Path) -> None:
    cfg = leader_config(tmp_path, 0, "127.0.0.1:1", "127.0.0.1:1", 0)
    data = cfg.to_json()
    assert data["workload"] == "leader" and data["idempotent"] is False
    old = {k: v for k, v in data.items() if k not in ("workload", "idempotent")}
    loaded = WorkerConfig.from_json(old)
    assert loaded.workload == "lock" and loaded.idempotent is False
    with pytest.raises(WorkloadError, match="workload"):
        WorkerConfig.from_json({**data, "workload": "batch"})
    with pytest.raises(WorkloadError, match="missing"):
        WorkerConfig.from_json({k: v for k, v in old.items() if k != "seed"})
