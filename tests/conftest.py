"""Shared test fixtures: what a test needs from the machine, and the check that a test left
nothing behind (no namespace, no SIGSTOPped process)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"


def fencecheck_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "fencecheck", *args]


def run_cmd(argv: list[str], *, timeout: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """argv to completion, output captured as text, like `subprocess.run`, except when the test
    gives up on it (the timeout, pytest-timeout's interrupt, Ctrl-C): subprocess.run would SIGKILL
    the child alone, leaving a `fencecheck run`'s namespaces and servers behind. Here the child's
    process group gets SIGTERM, which a run answers by healing and tearing down; only a child
    still there a minute later is killed, and `fencecheck teardown --all` then removes what runs
    with a dead owner left."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            subprocess.run(fencecheck_argv("teardown", "--all"), capture_output=True, timeout=120)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_fencecheck(*args: str, timeout: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """`fencecheck ARGS` through `run_cmd`."""
    return run_cmd(fencecheck_argv(*args), timeout=timeout, **popen)


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Every call at the same time (threads: each usually waits on a `fencecheck run` process);
    their results in order. All have ended when it returns, so a test leaves nothing running,
    and the first exception is raised then. The test command's time is mostly runs waiting out
    their time limits: twin runs side by side halve it."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]


def netns_available() -> str | None:
    """None if network namespaces can be made here, else the reason."""
    if os.geteuid() != 0:
        return "needs root"
    for b in ("ip", "iptables"):
        if not shutil.which(b) and not os.path.exists(f"/usr/sbin/{b}"):
            return f"{b} not installed (bash scripts/setup.sh)"
    return None


def fc_namespaces(run_id: str = "") -> list[str]:
    """fencecheck's namespaces (of one run, if given)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    prefix = f"fc-{run_id}-" if run_id else "fc-"
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def _ps() -> list[str]:
    argv = ["ps", "-ww", "-eo", "pid=,stat=,args="]  # -ww: full command lines, never cut
    return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()


def stopped_processes(matching: str = "") -> list[str]:
    """SIGSTOPped processes (whose command line contains `matching`, if given)."""
    return [line.strip() for line in _ps()
            if line.split()[1].startswith("T") and matching in line]


def processes_matching(text: str) -> list[str]:
    """Live processes whose command line contains text (e.g. a test's tmp_path)."""
    return [line.strip() for line in _ps()
            if text in line and not line.split()[1].startswith("Z") and "ps -ww" not in line]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = netns_available()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"netns: {reason}")
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """Fails the test if it leaves a fencecheck namespace or a SIGSTOPped process behind."""
    before_ns = set(fc_namespaces())
    before_stopped = set(stopped_processes())
    yield
    left_ns = set(fc_namespaces()) - before_ns
    left_stopped = set(stopped_processes()) - before_stopped
    assert not left_ns, f"namespaces left behind: {sorted(left_ns)}"
    assert not left_stopped, f"stopped processes left behind: {sorted(left_stopped)}"
