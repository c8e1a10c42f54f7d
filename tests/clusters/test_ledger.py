"""Tests of the run ledger and the standalone cleaner: records, the run index, LIFO undo,
pid-reuse safety, gathered errors, and crash safety of a real netns cluster with redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fencecheck.clusters.cleaner import (
    ENV_MARKER,
    Ledger,
    TeardownError,
    known_runs,
    run_namespaces,
    teardown_all,
    teardown_run,
)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; killed (after SIGCONT) and reaped on every exit path."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            if p.poll() is None:
                os.kill(p.pid, sig)
        p.wait()


def sleeper(procs: list[subprocess.Popen[bytes]], env: dict[str, str] | None = None) -> int:
    p = subprocess.Popen(["sleep", "60"], env={**os.environ, **(env or {})})
    procs.append(p)
    return p.pid


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_records_and_index(tmp_path: Path, run_id: str) -> None:
    index = tmp_path / "index"
    led = Ledger(tmp_path / "run" / "ledger.jsonl", run_id, index=index)
    Ledger(tmp_path / "run" / "ledger.jsonl", run_id, index=index)  # registers only once
    led.record("netns", f"fc-{run_id}-n1", node="n1")
    led.record("dir", "/x")
    lines = (tmp_path / "run" / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["owner", "owner", "netns", "dir"]
    assert led.records()[0]["pid"] == os.getpid()
    assert led.records()[2] == {"kind": "netns", "name": f"fc-{run_id}-n1", "run": run_id,
                                "node": "n1"}
    assert (index / run_id).read_text().splitlines() == [str((tmp_path / "run" /
                                                             "ledger.jsonl").resolve())]
    assert known_runs(index) == [run_id]
    # A crash mid-write leaves a torn last line: everything before it still counts.
    with open(led.path, "a") as f:
        f.write('{"kind": "proc')
    assert len(led.records()) == 4
    assert led.env() == {ENV_MARKER: run_id}


def test_bad_run_id_rejected(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="bad run id"):
        Ledger(tmp_path / "l", "../etc", index=tmp_path / "i")


def test_teardown_kills_recorded_stopped_and_marked_processes(
    tmp_path: Path, run_id: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    index = tmp_path / "index"
    led = Ledger(tmp_path / "ledger.jsonl", run_id, index=index)
    recorded = sleeper(procs)
    led.record_process("n1", "sleeper", recorded)
    os.kill(recorded, signal.SIGSTOP)  # a paused server: must be resumed, then killed
    marked = sleeper(procs, led.env())  # started but never recorded (a crash in between)
    bystander = sleeper(procs)
    # The same pid with another start time is someone else's process now: leave it alone.
    led.record("process", "reused", node="n1", pid=bystander, start=1)

    removed = teardown_run(run_id, index=index)
    assert gone(recorded) and gone(marked) and not gone(bystander)
    assert any("sleeper" in r for r in removed) and any("marked" in r for r in removed)
    assert not (index / run_id).exists()
    assert teardown_run(run_id, index=index) == []  # idempotent


def test_errors_are_gathered_not_swallowed(
    tmp_path: Path, run_id: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    index = tmp_path / "index"
    led = Ledger(tmp_path / "ledger.jsonl", run_id, index=index)
    pid = sleeper(procs)
    led.record_process("n1", "sleeper", pid)
    led.record("mystery", "thing")  # undone first (LIFO) and fails
    with pytest.raises(TeardownError, match="no undo known for mystery") as e:
        teardown_run(run_id, index=index)
    assert len(e.value.errors) == 1
    assert gone(pid)  # the failure did not stop the rest
    assert (index / run_id).exists()  # kept, so a later teardown can retry


def test_teardown_all_covers_every_indexed_run(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    index = tmp_path / "index"
    pids = []
    for run in ("a1b2c3", "d4e5f6"):
        led = Ledger(tmp_path / run / "ledger.jsonl", run, index=index)
        pids.append(sleeper(procs))
        led.record_process("n1", "sleeper", pids[-1])
    assert len(teardown_all(index, orphans=False)) == 2
    assert all(gone(p) for p in pids)
    assert known_runs(index) == []


OWNER = """
import subprocess, sys, time
from pathlib import Path
from fencecheck.clusters.cleaner import Ledger
run_id, tmp = sys.argv[1], Path(sys.argv[2])
led = Ledger(tmp / "ledger.jsonl", run_id, index=tmp / "index")
p = subprocess.Popen(["sleep", "60"])
led.record_process("n1", "sleeper", p.pid)
print(p.pid, flush=True)
time.sleep(60)
"""


def test_teardown_all_leaves_live_runs_alone(
    tmp_path: Path, run_id: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OWNER), run_id, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    procs.append(owner)
    assert owner.stdout is not None
    pid = int(owner.stdout.readline())
    try:
        assert teardown_all(tmp_path / "index", orphans=False) == []
        assert not gone(pid)
        owner.kill()
        owner.wait()
        assert len(teardown_all(tmp_path / "index", orphans=False)) == 1
        assert gone(pid)
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


CRASHER = """
import sys, time
from pathlib import Path
from fencecheck.clusters.runtimes.netns import NetnsRuntime
from fencecheck.clusters.services.redis import RedisService
run_id, store = sys.argv[1], Path(sys.argv[2])
rt = NetnsRuntime(run_id, store)
cluster = rt.setup(["n1", "n2"], ["c1"])
svc = RedisService(ledger=rt.ledger)
svc.setup(cluster.servers, store)
svc.pause("n2")
client = cluster.clients["c1"].spawn(["sleep", "300"])
print(svc.pid("n1"), svc.pid("n2"), client.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.netns
def test_crash_then_teardown_run_leaves_nothing(
    need_netns: None, run_id: str, tmp_path: Path, nothing_left: Callable[[str], None]
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CRASHER), run_id, str(tmp_path / "store")],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        pids = [int(x) for x in line.split()]
        assert len(pids) == 3, line
        assert len(run_namespaces(run_id)) == 4
        proc.kill()  # the controller dies with a paused redis and a live worker
        proc.wait()
        assert not any(gone(p) for p in pids)

        removed = teardown_run(run_id)
        assert all(gone(p) for p in pids)
        assert sum(r.startswith("netns") for r in removed) == 4
        nothing_left(run_id)
        assert teardown_run(run_id) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        teardown_run(run_id)
