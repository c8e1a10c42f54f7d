"""The cron workload (workloads/loops/cron.py) and the store's part in it: once-writes and the
`jobs:last` record (pure), runners in-process against redis-server and the fenced store, and a
runner that stalls past its lease between reading the record and executing: a duplicate
execution, deduplicated by an idempotent store, refused by a fenced one."""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.analyze import analyze
from fencecheck.checker.history import load_ops
from fencecheck.checker.jobs import check_jobs
from fencecheck.run.history_merge import merge_logs
from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.eventlog import EventLog
from fencecheck.workloads.loops.cron import CRON_LOCK, RECORD_KEY, CronWorker, job_key
from fencecheck.workloads.loops.worker import WorkerConfig
from fencecheck.workloads.loops.worker import main as worker_main
from fencecheck.workloads.registry import make_client
from fencecheck.workloads.resources.store import StoreResource, StoreState
from tests.workloads.conftest import Server, StartServer


def cron_config(tmp_path: Path, worker: int, redis: Server, store: Server, t0: int,
                **changes: Any) -> WorkerConfig:
    base: dict[str, Any] = dict(
        worker=worker, concurrency=2, process_base=0, client="redis-setnx",
        client_options={"endpoints": [redis.address]}, resource="store",
        resource_options={"address": store.address}, locks=["lock-0"], lease_ms=500,
        acquire_timeout_s=1.0, think_ms=2, writes_per_section=3, idle_ms=10, renew=False,
        log=str(tmp_path / f"w{worker}.jsonl"), t0_ns=t0, seed=5, op_timeout_s=1.0,
        workload="cron",
    )
    return WorkerConfig(**{**base, **changes})


def runner(cfg: WorkerConfig, events: EventLog, stop: Any = lambda: False) -> CronWorker:
    client = make_client(cfg.client, {**cfg.client_options, "op_timeout_s": 1.0})
    resource = StoreResource({**cfg.resource_options, "op_timeout_s": 1.0})
    return CronWorker(cfg, client, resource, events, stop)


def close(w: CronWorker) -> None:
    assert w.client is not None
    w.client.close()
    w.resource.close()


def test_store_once_writes_and_the_record() -> None:
    s = StoreState(fencing=True)
    rd = {"op": "read", "key": RECORD_KEY, "token": 1, "lock": "cron"}
    assert s.handle(rd) == {"ok": True, "value": None}
    once = {"op": "write", "key": "job:3", "value": 7, "token": 2, "lock": "cron", "once": True}
    assert s.handle(once) == {"ok": True, "applied": True}
    assert s.handle({**once, "value": 8, "token": 3}) == {"ok": True, "applied": False}
    assert s.handle({**once, "token": 1})["error"] == "stale-token"  # the fence comes first
    assert s.values["job:3"] == 7
    assert s.handle({**rd, "token": 3}) == {"ok": True, "value": 3}
    plain = {"op": "write", "key": "job:1", "value": 9, "token": 3, "lock": "cron"}
    assert s.handle(plain) == {"ok": True}  # not a once-write: no applied flag
    assert s.handle({**rd, "token": 3})["value"] == 3  # the highest job, not the latest
    assert s.handle({**plain, "key": "job:x"}) == {"ok": True}
    assert s.handle({**rd, "token": 3})["value"] == 3


class PlainResource:
    """A resource without the store's record and once-writes."""

    name = "plain"

    def __init__(self, options: Any = None) -> None:
        pass

    def read(self, key: str, token: int | None, lock: str) -> int | None:
        return None

    def write(self, key: str, value: int, token: int | None, lock: str) -> None:
        return None

    def close(self) -> None:
        return None


def test_cron_needs_the_store(tmp_path: Path, start_redis: StartServer,
                              start_store: StartServer) -> None:
    cfg = cron_config(tmp_path, 0, start_redis(), start_store(), time.monotonic_ns())
    with EventLog(cfg.log, cfg.t0_ns) as events, pytest.raises(WorkloadError, match="store"):
        CronWorker(cfg, None, PlainResource(), events)
    # the worker process says so and exits 3 (a bad configuration), before any operation
    plain = dataclasses.replace(cfg, resource=f"{__name__}:PlainResource",
                                log=str(tmp_path / "plain.jsonl"))
    plain.dump(tmp_path / "plain.json")
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert worker_main([str(tmp_path / "plain.json")]) == 3
    finally:  # main installs its own handlers: give pytest its own back
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert not (tmp_path / "plain.jsonl").exists() or not (tmp_path / "plain.jsonl").read_text()


@pytest.mark.parametrize("idempotent", [False, True])
def test_two_runners_execute_every_due_job_once(tmp_path: Path, start_redis: StartServer,
                                                start_store: StartServer,
                                                idempotent: bool) -> None:
    redis, store = start_redis(), start_store(fencing=True)
    t0 = time.monotonic_ns()
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(i: int) -> None:
        cfg = cron_config(tmp_path, i, redis, store, t0, idempotent=idempotent)
        try:
            with EventLog(cfg.log, t0) as events:
                w = runner(cfg, events, stop.is_set)
                try:
                    w.run()
                finally:
                    close(w)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(2.5)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors
    merge_logs([tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"], tmp_path / "history.jsonl")
    ops = load_ops(tmp_path / "history.jsonl")
    assert {o.get("lock") for o in ops} == {CRON_LOCK}
    writes = [o for o in ops if o.f == "write" and o.ok]
    jobs = sorted(o.get("job") for o in writes)
    assert len(jobs) >= 30  # 2.5 s at one job per 50 ms
    assert jobs == list(range(len(jobs)))  # in order, none skipped, none twice
    assert all(o.get("key") == job_key(o.get("job")) and o.get("value") == o.process
               for o in writes)
    if idempotent:
        assert all(o.get("idempotent") is True and o.get("applied") is True for o in writes)
    result = check_jobs(ops)
    assert result.valid is True
    assert result.details["mode"] == ("correctness" if idempotent else "efficiency")
    assert result.details["duplicate_rate"] == 0.0
    assert result.details["jobs_executed"] == len(jobs)
    assert analyze(ops).valid is True
    check = StoreResource({"address": store.address, "op_timeout_s": 1.0})
    assert check.read(RECORD_KEY, None, "") == jobs[-1]
    check.close()


@pytest.mark.parametrize(
    ("fencing", "idempotent", "late"),
    [
        (False, False, "executed twice"),
        (False, True, "deduplicated"),
        (True, False, "refused"),
        (True, True, "refused"),
    ],
)
def test_a_stalled_runner_executes_a_done_job_late(
    tmp_path: Path, start_redis: StartServer, start_store: StartServer,
    fencing: bool, idempotent: bool, late: str,
) -> None:
    redis, store = start_redis(), start_store(fencing=fencing)
    t0 = time.monotonic_ns()
    cfg_a = cron_config(tmp_path, 0, redis, store, t0, idempotent=idempotent, lease_ms=300)
    cfg_b = cron_config(tmp_path, 1, redis, store, t0, idempotent=idempotent, lease_ms=300)
    stop_b = threading.Event()
    with EventLog(cfg_a.log, t0) as ev_a, EventLog(cfg_b.log, t0) as ev_b:
        a, b = runner(cfg_a, ev_a), runner(cfg_b, ev_b, stop_b.is_set)
        try:
            grant = a._acquire(CRON_LOCK)
            assert grant is not None
            assert a._read_key(grant, RECORD_KEY).status == "ok"  # nothing done yet
            time.sleep(0.5)  # a stalls past its lease (300 ms), before executing job 0
            tb = threading.Thread(target=b.run)
            tb.start()
            time.sleep(0.4)  # b takes the lock and executes the due jobs, 0 first
            stop_b.set()
            tb.join(10)
            out = a._execute(grant, 0)  # a's late execution of job 0
        finally:
            close(a)
            close(b)
    assert out.status == ("fail" if late == "refused" else "ok")
    merge_logs([tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"], tmp_path / "history.jsonl")
    ops = load_ops(tmp_path / "history.jsonl")
    result = check_jobs(ops)
    assert result.valid is True  # a duplicate is never a violation; a double effect would be
    d = result.details
    if late == "executed twice":
        assert d["jobs_executed_more_than_once"] == 1 and d["duplicate_rate"] > 0
        # A lock for efficiency: the duplicate is reported as a rate, never as a violation
        # (the jobs check alone judges executions; the lock checks leave job writes to it).
        results = analyze(ops)
        assert results.valid is True
        assert results.checks["jobs"].details["jobs_executed_more_than_once"] == 1
    elif late == "deduplicated":
        assert d["executions_deduplicated"] == 1 and d["mode"] == "correctness"
    else:
        assert d["executions_refused"] == 1 and d["jobs_executed_more_than_once"] == 0


# A scheduler as a stdio program: it fires jobs 0, 1 and 1 again (as a cluster that recovers a
# firing it believes lost), and its third release finds the lock lost. Every reply's evidence is
# what the library said.
SCHEDULER = r"""
import json, sys
fired = iter([0, 1, 1])
released = 0
for line in sys.stdin:
    req = json.loads(line)
    reply = {"id": req["id"], "status": "ok"}
    if req["op"] == "acquire":
        job = next(fired, None)
        reply = ({"id": req["id"], "status": "fail", "error": "no-firing"} if job is None else
                 {**reply, "token": None, "evidence": {"job": job, "recovering": released == 2}})
    elif req["op"] == "release":
        released += 1
        if released == 3:
            reply = {"id": req["id"], "status": "fail", "error": "lock-lost",
                     "evidence": {"unlock_error": "ConcurrentModificationException: lost"}}
    elif req["op"] == "close":
        break
    print(json.dumps(reply), flush=True)
"""


def test_a_scheduler_names_the_job_it_fired_and_a_job_fired_twice_runs_twice(
        tmp_path: Path, start_store: StartServer) -> None:
    store = start_store(fencing=False)
    program = tmp_path / "scheduler.py"
    program.write_text(SCHEDULER)
    t0 = time.monotonic_ns()
    cfg = cron_config(tmp_path, 0, store, store, t0, idempotent=True, client="stdio",
                      client_options={"cmd": [sys.executable, str(program)],
                                      "endpoints": [store.address]})
    with EventLog(cfg.log, t0) as events:
        w = runner(cfg, events)
        try:
            for _ in range(4):  # three firings, then none
                grant = w._acquire(CRON_LOCK)
                if grant is not None and (grant := w._run_due(grant)) is not None:
                    w._release(grant)
        finally:
            close(w)
    merge_logs([tmp_path / "w0.jsonl"], tmp_path / "history.jsonl")
    ops = load_ops(tmp_path / "history.jsonl")
    assert not [o for o in ops if o.f == "read"]  # the scheduler decides: no record read
    grants = [o for o in ops if o.f == "acquire" and o.ok]
    assert [o.get("evidence") for o in grants] == [  # under the op value's "evidence"
        {"job": 0, "recovering": False}, {"job": 1, "recovering": False},
        {"job": 1, "recovering": True}]
    writes = [(o.get("job"), o.get("applied")) for o in ops if o.f == "write" and o.ok]
    assert writes == [(0, True), (1, True), (1, False)]  # job 1 twice, deduplicated
    lost = [o for o in ops if o.f == "release" and o.type == "fail"]
    assert len(lost) == 1 and lost[0].error == "lock-lost"
    assert lost[0].get("evidence") == {"unlock_error": "ConcurrentModificationException: lost"}
    assert check_jobs(ops).details["jobs_executed_more_than_once"] == 1
