"""Tests of workloads/loops/worker.py: the config, the loop's rules (with scripted fakes), and real
worker processes against redis-server and the fenced store (log shape, SIGTERM, SIGSTOP)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fencecheck.workloads.base import (
    DefiniteFailure,
    Grant,
    Indeterminate,
    StaleToken,
    WorkloadError,
)
from fencecheck.workloads.eventlog import EventLog, read_log
from fencecheck.workloads.loops.worker import Worker, WorkerConfig
from tests.workloads.conftest import REPO, Server, StartServer

INVOKE_KEYS = {
    "acquire": {"lock", "lease_ms"},
    "renew": {"lock", "token", "lease_ms"},
    "release": {"lock", "token"},
    "read": {"key", "token", "lock"},
    "write": {"key", "value", "token", "lock"},
}
OK_EXTRA = {"acquire": {"token"}, "read": {"value"}}


def config(tmp_path: Path, **changes: Any) -> WorkerConfig:
    base = WorkerConfig(
        worker=0, concurrency=1, process_base=0, client="redis-setnx",
        client_options={"endpoints": ["127.0.0.1:1"]}, resource="store",
        resource_options={"address": "127.0.0.1:1"}, locks=["a"], lease_ms=1000,
        acquire_timeout_s=1.0, think_ms=0, writes_per_section=2, idle_ms=0, renew=False,
        log=str(tmp_path / "w0.jsonl"), t0_ns=time.monotonic_ns(), seed=7, op_timeout_s=1.0,
    )
    return dataclasses.replace(base, **changes)


def check_log(events: list[dict[str, Any]], cfg: WorkerConfig) -> dict[int, list[dict[str, Any]]]:
    """Assert the DESIGN.md event shape; returns ops per process as (invoke, completion) pairs
    flattened to the completions (value = completion value)."""
    times = [e["time"] for e in events]
    assert times == sorted(times)
    open_op: dict[int, dict[str, Any]] = {}
    retired: set[int] = set()
    done: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        p = e["process"]
        assert set(e) <= {"time", "process", "type", "f", "value", "error"}
        assert p not in retired, f"retired process {p} went on: {e}"
        assert (p - cfg.process_base) % cfg.concurrency == cfg.worker
        assert e["f"] in INVOKE_KEYS
        if e["type"] == "invoke":
            assert p not in open_op, f"two ops at once in {p}: {e}"
            assert set(e["value"]) == INVOKE_KEYS[e["f"]], e
            open_op[p] = e
            continue
        inv = open_op.pop(p)
        assert inv["f"] == e["f"] and e["type"] in ("ok", "fail", "info")
        extra = OK_EXTRA.get(e["f"], set()) if e["type"] == "ok" else set()
        if e["f"] == "acquire" and e["type"] == "ok" and "attempt_ns" in e["value"]:
            # a polling client's winning attempt went out between the invoke and the ok
            assert inv["time"] <= e["value"]["attempt_ns"] <= e["time"], e
            extra = extra | {"attempt_ns"}
        assert set(e["value"]) == INVOKE_KEYS[e["f"]] | extra, e
        assert {k: e["value"][k] for k in INVOKE_KEYS[e["f"]]} == inv["value"]
        assert ("error" in e) == (e["type"] != "ok")
        if e["type"] == "info":
            retired.add(p)
        done.setdefault(p, []).append(e)
    # an invoke without completion may only be the very last event of the log
    assert not open_op or (len(open_op) == 1 and events[-1]["type"] == "invoke")
    return done


# --- configuration --------------------------------------------------------------------------

def test_config_round_trips_through_json(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.dump(tmp_path / "c.json")
    assert WorkerConfig.load(tmp_path / "c.json") == cfg
    data = cfg.to_json()
    with pytest.raises(WorkloadError, match="missing"):
        WorkerConfig.from_json({k: v for k, v in data.items() if k != "seed"})
    with pytest.raises(WorkloadError, match="unknown"):
        WorkerConfig.from_json({**data, "sed": 1})
    with pytest.raises(WorkloadError, match="worker"):
        WorkerConfig.from_json({**data, "worker": 1})


# --- the loop's rules, with scripted fakes ---------------------------------------------------

class FakeClient:
    name = "fake"

    def __init__(self, renew_error: Exception | None = None,
                 acquire_errors: list[Exception] | None = None) -> None:
        self.token = 0
        self.renew_error = renew_error
        self.acquire_errors = list(acquire_errors or [])
        self.released: list[Grant] = []

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        self.token += 1
        if self.acquire_errors:
            raise self.acquire_errors.pop(0)
        return Grant(lock, self.token, lease_ms)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        if self.renew_error is not None:
            raise self.renew_error
        return grant

    def release(self, grant: Grant) -> None:
        self.released.append(grant)

    def close(self) -> None:
        pass


class FakeResource:
    """Fails the n-th write (1-based) with `error`; a plain dict otherwise."""

    name = "fake"

    def __init__(self, fail_write: int = 0, error: Exception | None = None) -> None:
        self.values: dict[str, int] = {}
        self.writes = 0
        self.fail_write, self.error = fail_write, error

    def read(self, key: str, token: int | None, lock: str) -> int | None:
        return self.values.get(key)

    def write(self, key: str, value: int, token: int | None, lock: str) -> None:
        self.writes += 1
        if self.writes == self.fail_write and self.error is not None:
            raise self.error
        self.values[key] = value

    def close(self) -> None:
        pass


def run_fake(tmp_path: Path, cfg: WorkerConfig, client: FakeClient, res: FakeResource,
             until: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    with EventLog(cfg.log, cfg.t0_ns) as events:
        worker = Worker(cfg, client, res, events, stop=lambda: until(read_log(cfg.log)))
        worker.run()
    got = read_log(cfg.log)
    check_log(got, cfg)
    return got


def released(events: list[dict[str, Any]]) -> int:
    return sum(e["f"] == "release" and e["type"] != "invoke" for e in events)


def ops(events: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    return [(e["process"], e["f"], e["type"]) for e in events if e["type"] != "invoke"]


def test_a_plain_section(tmp_path: Path) -> None:
    cfg = config(tmp_path, concurrency=3, worker=1, process_base=10)
    res = FakeResource()
    got = run_fake(tmp_path, cfg, FakeClient(), res, lambda ev: len(ev) >= 10)
    assert ops(got) == [(11, f, "ok") for f in ("acquire", "read", "write", "read", "write",
                                                "release")]
    assert res.values == {"a": 2}
    assert got[1]["value"]["token"] == 1 and got[5]["value"] == {
        "key": "a", "value": 1, "token": 1, "lock": "a"}


def test_info_retires_the_process_and_drops_the_grant(tmp_path: Path) -> None:
    cfg = config(tmp_path, concurrency=2)
    client = FakeClient()
    res = FakeResource(fail_write=1, error=Indeterminate("timeout"))
    got = run_fake(tmp_path, cfg, client, res, lambda ev: len(ev) >= 8)
    assert ops(got)[:4] == [(0, "acquire", "ok"), (0, "read", "ok"), (0, "write", "info"),
                            (2, "acquire", "ok")]
    # process 2 never held process 0's grant (token 1), so it does not release it
    assert 1 not in [g.token for g in client.released]


def test_failed_and_unknown_acquires_go_on_without_the_lock(tmp_path: Path) -> None:
    cfg = config(tmp_path, concurrency=4, worker=3, writes_per_section=1)
    client = FakeClient(acquire_errors=[DefiniteFailure("timeout"), Indeterminate("timeout")])
    got = run_fake(tmp_path, cfg, client, FakeResource(), lambda ev: released(ev) >= 1)
    assert ops(got) == [(3, "acquire", "fail"), (3, "acquire", "info"), (7, "acquire", "ok"),
                        (7, "read", "ok"), (7, "write", "ok"), (7, "release", "ok")]
    assert [g.token for g in client.released] == [3]


def test_stale_token_ends_the_section_with_a_release(tmp_path: Path) -> None:
    cfg = config(tmp_path, writes_per_section=3)
    res = FakeResource(fail_write=1, error=StaleToken("token 1 < fence 2"))
    got = run_fake(tmp_path, cfg, FakeClient(), res, lambda ev: len(ev) >= 8)
    assert ops(got)[:4] == [(0, "acquire", "ok"), (0, "read", "ok"), (0, "write", "fail"),
                            (0, "release", "ok")]
    assert got[5]["error"] == "stale-token"


def test_renewal_every_half_lease_and_a_refused_renew_ends_the_section(tmp_path: Path) -> None:
    cfg = config(tmp_path, renew=True, lease_ms=40, think_ms=15, writes_per_section=4)
    got = run_fake(tmp_path, cfg, FakeClient(), FakeResource(),
                   lambda ev: released(ev) >= 2)
    fs = [f for _, f, _ in ops(got)]
    assert "renew" in fs and fs.count("write") == 8
    plain = config(tmp_path / "x", renew=False, lease_ms=40, think_ms=15, writes_per_section=4)
    (tmp_path / "x").mkdir()
    got = run_fake(tmp_path, plain, FakeClient(), FakeResource(),
                   lambda ev: released(ev) >= 1)
    assert "renew" not in [f for _, f, _ in ops(got)]
    (tmp_path / "y").mkdir()
    refused = config(tmp_path / "y", renew=True, lease_ms=40, think_ms=15, writes_per_section=4)
    got = run_fake(tmp_path, refused, FakeClient(DefiniteFailure("not-owner")), FakeResource(),
                   lambda ev: released(ev) >= 1)
    assert [(f, t) for _, f, t in ops(got)][-2:] == [("renew", "fail"), ("release", "ok")]


def test_unexpected_exceptions_are_recorded_as_info(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    res = FakeResource(fail_write=1, error=KeyError("boom"))
    got = run_fake(tmp_path, cfg, FakeClient(), res, lambda ev: len(ev) >= 6)
    info = [e for e in got if e["type"] == "info"]
    assert info and info[0]["error"] == "KeyError: 'boom'"


# --- real worker processes against redis-server and the fenced store -------------------------

def spawn(cfg: WorkerConfig, procs: list[subprocess.Popen[bytes]], *args: str,
          ) -> subprocess.Popen[bytes]:
    path = Path(cfg.log).with_suffix(".json")
    cfg.dump(path)
    err = open(Path(cfg.log).with_suffix(".stderr"), "wb")  # noqa: SIM115
    try:
        proc = subprocess.Popen([sys.executable, "-m", "fencecheck.workloads.loops.worker",
            str(path),
                                 *args],
                                cwd=REPO, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    finally:
        err.close()
    procs.append(proc)
    return proc


def events_of(path: str) -> list[dict[str, Any]]:
    """The log so far; empty before the worker has created it."""
    return read_log(path) if Path(path).exists() else []


def wait_for(what: Callable[[], bool], timeout_s: float, why: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, f"timed out waiting for {why}"
        time.sleep(0.002)


def worker_configs(tmp_path: Path, redis: Server, store: Server, n: int, client: str,
                   **changes: Any) -> list[WorkerConfig]:
    t0 = time.monotonic_ns()
    return [
        config(tmp_path, worker=i, concurrency=n, client=client,
               client_options={"endpoints": [redis.address]},
               resource_options={"address": store.address},
               log=str(tmp_path / f"w{i}.jsonl"), t0_ns=t0, **changes)
        for i in range(n)
    ]


@pytest.mark.parametrize(("client", "fencing"), [("redis-setnx", True), ("redis-py", False)])
def test_workers_write_well_formed_logs_and_stop_on_sigterm(
    tmp_path: Path, redis_server: Server, start_store: StartServer,
    processes: list[subprocess.Popen[bytes]], client: str, fencing: bool,
) -> None:
    store = start_store(fencing=fencing)
    # Generous lease and timeouts: the suite shares 2 cores with other tests, and this run is
    # meant to have no faults. Sections (~1.2 s) outlast half a lease, so renewals happen.
    cfgs = worker_configs(tmp_path, redis_server, store, 2, client, locks=["a", "b"],
                          lease_ms=2000, think_ms=60, writes_per_section=20, idle_ms=10,
                          renew=True, acquire_timeout_s=5.0, op_timeout_s=5.0)
    procs = [spawn(c, processes) for c in cfgs]

    def ran_enough() -> bool:
        events = [e for c in cfgs for e in events_of(c.log) if e["type"] == "ok"]
        fs = [str(e["f"]) for e in events]
        return fs.count("renew") >= 2 and fs.count("write") > 20

    wait_for(ran_enough, 30, "two renewals and 20 writes")
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        assert p.wait(timeout=5) == 0
    final = dataclasses.replace(cfgs[0], process_base=100, log=str(tmp_path / "final.jsonl"))
    assert spawn(final, processes, "--final-read").wait(timeout=10) == 0

    merged: list[dict[str, Any]] = []
    for c in cfgs:
        events = read_log(c.log)
        done = check_log(events, c)
        assert events[-1]["type"] != "invoke"
        last = events[-1]
        # SIGTERM: a held lock is released before exiting
        assert last["f"] == "release" or (last["f"] == "acquire" and last["type"] != "ok")
        assert all(e["type"] == "ok" or (e["f"] == "acquire" and e["error"] == "timeout")
                   for d in done.values() for e in d), "no faults injected"
        merged += events
    merged.sort(key=lambda e: e["time"])
    fs = [e["f"] for e in merged if e["type"] == "ok"]
    assert fs.count("write") > 20 and fs.count("renew") >= 2
    grants = [e["value"] for e in merged if e["f"] == "acquire" and e["type"] == "ok"]
    for lock in ("a", "b"):
        tokens = [g["token"] for g in grants if g["lock"] == lock]
        if client == "redis-setnx":
            assert tokens == sorted(set(tokens)) and all(isinstance(t, int) for t in tokens)
        else:
            assert set(tokens) <= {None}
    # no faults: every accepted write is one increment, and the observer read sees them all
    observed = {e["value"]["key"]: e["value"]["value"] for e in read_log(final.log)
                if e["type"] == "ok"}
    writes = {k: sum(e["f"] == "write" and e["type"] == "ok" and e["value"]["key"] == k
                     for e in merged) for k in ("a", "b")}
    assert {k: observed[k] or 0 for k in ("a", "b")} == writes
    assert {e["process"] for e in read_log(final.log)} == {100}


@pytest.mark.parametrize(("fencing", "renew"), [(False, False), (True, False), (False, True)])
def test_a_paused_worker_resumed_makes_its_stale_write(
    tmp_path: Path, redis_server: Server, start_store: StartServer,
    processes: list[subprocess.Popen[bytes]], fencing: bool, renew: bool,
) -> None:
    """With renewal on too: the pending write goes out before the overdue renewal."""
    store = start_store(fencing=fencing)
    slow, fast = worker_configs(tmp_path, redis_server, store, 2, "redis-setnx", locks=["x"],
                                lease_ms=400, writes_per_section=1, idle_ms=20,
                                acquire_timeout_s=2.0, op_timeout_s=1.0, renew=renew)
    slow = dataclasses.replace(slow, think_ms=150)
    fast = dataclasses.replace(fast, think_ms=5)
    a, b = spawn(slow, processes), spawn(fast, processes)

    def a_in_think() -> bool:
        events = events_of(slow.log)
        return bool(events) and events[-1]["type"] == "ok" and events[-1]["f"] == "read"

    # Stop it in its think time (like a GC pause in the critical section), long past the lease.
    # A busy machine can make us miss the 150 ms window: then let it go on and try again.
    for _ in range(10):
        wait_for(a_in_think, 10, "the slow worker to read")
        os.kill(a.pid, signal.SIGSTOP)
        last = read_log(slow.log)[-1]
        if last["type"] == "ok" and last["f"] == "read":
            break
        os.kill(a.pid, signal.SIGCONT)
    else:
        pytest.fail("could not pause the slow worker inside its critical section")
    token_a = last["value"]["token"]

    def b_wrote_later() -> list[dict[str, Any]]:
        return [e for e in events_of(fast.log) if e["f"] == "write" and e["type"] == "ok"
                and e["value"]["token"] > token_a]

    wait_for(lambda: bool(b_wrote_later()), 10, "the other worker to write with a newer token")
    os.kill(a.pid, signal.SIGCONT)

    def a_write() -> list[dict[str, Any]]:
        return [e for e in read_log(slow.log) if e["f"] == "write"
                and e["value"]["token"] == token_a]

    # 30 s: the resumed worker is a starved Python process beside the parallel suite (10 s ran out)
    wait_for(lambda: len(a_write()) == 2, 30, "the resumed worker's write to complete")
    invoke, done = a_write()
    assert b_wrote_later()[0]["time"] < invoke["time"]
    if fencing:
        assert (done["type"], done.get("error")) == ("fail", "stale-token")
    else:
        assert done["type"] == "ok"  # the unfenced store took the stale write
    for p in (a, b):
        p.send_signal(signal.SIGTERM)
    for p in (a, b):
        assert p.wait(timeout=5) == 0
    for c in (slow, fast):
        check_log(read_log(c.log), c)
    if renew:  # the overdue renewal after the write is refused
        after = [e for e in read_log(slow.log) if e["time"] > done["time"]]
        assert (after[1]["f"], after[1]["type"], after[1].get("error")) == (
            "renew", "fail", "not-owner")


def test_a_bad_config_exits_3_with_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    data = {**config(tmp_path).to_json(), "client": "no-such-client"}
    bad.write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, "-m", "fencecheck.workloads.loops.worker", str(bad)],
        cwd=REPO,
                          capture_output=True, timeout=30)
    assert proc.returncode == 3
    assert b"unknown client 'no-such-client'" in proc.stderr and b"Traceback" not in proc.stderr
    assert not Path(data["log"]).exists()  # nothing recorded
