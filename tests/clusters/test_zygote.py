"""The run's zygote (clusters/runtimes/zygote.py): a client worker forked from it is what an
exec'd one is where the run relies on it (its node's network namespace, its output, its exit
code, its signals, its own random numbers), and nothing it forked outlives the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fencecheck.clusters.reaper import NETNS_DIR
from fencecheck.clusters.runtimes.netns import NetnsRuntime
from fencecheck.clusters.runtimes.zygote import ForkedProcess
from tests.conftest import _alive

pytestmark = pytest.mark.netns

CHILD = [sys.executable, "-m", "tests.clusters.zygote_child"]


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_forked_worker_runs_in_its_node_with_its_output_and_exit_code(
        runtime: NetnsRuntime, nothing_left: Callable[[str], None], tmp_path: Path) -> None:
    cluster = runtime.setup(["n1"], ["c1", "c2"])
    logs = [tmp_path / "c1.log", tmp_path / "c2.log"]
    procs = []
    for node, log in zip(("c1", "c2"), logs, strict=True):
        with open(log, "ab") as out:
            procs.append(cluster.clients[node].spawn([*CHILD, "7", "0.3"], stdout=out,
                                                     stderr=subprocess.STDOUT))
    assert all(isinstance(p, ForkedProcess) for p in procs)
    assert [p.wait(timeout=20) for p in procs] == [7, 7]
    for node, log in zip(("c1", "c2"), logs, strict=True):
        ino, _rnd, *argv = log.read_text().splitlines()[0].split()
        assert int(ino) == os.stat(NETNS_DIR / runtime.namespace(node)).st_ino
        assert argv == ["7", "0.3"]
        assert "to stderr" in log.read_text()  # stderr=STDOUT: the same file
    firsts = [log.read_text().split()[1] for log in logs]
    assert firsts[0] != firsts[1], "the children share the zygote's random state"


def test_signals_reach_the_worker_and_the_run_ends_what_it_forked(
        runtime: NetnsRuntime, nothing_left: Callable[[str], None], tmp_path: Path) -> None:
    cluster = runtime.setup(["n1"], ["c1"])
    node = cluster.clients["c1"]
    with open(tmp_path / "w.log", "ab") as out:
        long = node.spawn([*CHILD, "0", "600"], stdout=out)
        stopped = node.spawn([*CHILD, "0", "600"], stdout=out)
        killed = node.spawn([*CHILD, "0", "600"], stdout=out)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=20) == -signal.SIGKILL
    stopped.send_signal(signal.SIGSTOP)
    with pytest.raises(subprocess.TimeoutExpired):
        long.wait(timeout=0.2)
    assert long.poll() is None
    zygote = runtime.zygote().pid
    runtime.teardown()  # a stopped worker among them: none may stay
    for p in (long, stopped):
        assert _gone_within(p.pid, 10), f"worker {p.pid} outlived the run"
    assert _gone_within(zygote, 10)
    assert long.poll() is not None and stopped.poll() is not None


def test_workers_die_with_a_killed_zygote(
        runtime: NetnsRuntime, nothing_left: Callable[[str], None], tmp_path: Path) -> None:
    cluster = runtime.setup(["n1"], ["c1"])
    with open(tmp_path / "w.log", "ab") as out:
        p = cluster.clients["c1"].spawn([*CHILD, "0", "600"], stdout=out)
    os.kill(runtime.zygote().pid, signal.SIGKILL)
    assert _gone_within(p.pid, 10), "a worker outlived its zygote"
    assert p.wait(timeout=10) == -signal.SIGKILL


def test_what_cannot_be_forked_is_execd(
        runtime: NetnsRuntime, nothing_left: Callable[[str], None], tmp_path: Path) -> None:
    cluster = runtime.setup(["n1"], ["c1"])
    node = cluster.clients["c1"]
    with open(tmp_path / "w.log", "ab") as out:
        own_env = node.spawn([*CHILD, "3", "0"], stdout=out, env={"FC_TEST_ENV": "1"})
        no_main = node.spawn([sys.executable, "-m", "json.tool", "--help"], stdout=out)
        piped = node.spawn([*CHILD, "4", "0"], stdout=subprocess.PIPE)
    assert isinstance(own_env, subprocess.Popen) and own_env.wait(timeout=20) == 3
    assert isinstance(no_main, subprocess.Popen) and no_main.wait(timeout=20) == 0
    assert isinstance(piped, subprocess.Popen) and piped.wait(timeout=20) == 4
    assert piped.stdout is not None and piped.stdout.read().split()[2:] == [b"4", b"0"]
    piped.stdout.close()
