"""Fixtures for cluster tests: root/netns checks, fresh run ids, a netns runtime that is torn
down (and checked to leave nothing) on every exit path."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fencecheck.clusters.cleaner import (
    NETNS_DIR,
    RUN_INDEX,
    marked_pids,
    run_namespaces,
    teardown_run,
)
from fencecheck.clusters.runtimes.netns import NetnsRuntime


def _netns_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "iptables", "redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


@pytest.fixture
def need_netns() -> None:
    reason = _netns_missing()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def run_id() -> str:
    # The lead's scheme: 6 lowercase hex characters.
    return secrets.token_hex(3)


def assert_nothing_left(run_id: str) -> None:
    assert run_namespaces(run_id) == []
    assert marked_pids(run_id) == []
    links = os.popen("ip -o link").read()
    assert f"fc{run_id}" not in links
    if NETNS_DIR.exists():
        assert not any(n.startswith(f"fc-{run_id}-") for n in os.listdir(NETNS_DIR))


@pytest.fixture
def nothing_left() -> Callable[[str], None]:
    """The check that a run left no namespace, veth or marked process behind."""
    return assert_nothing_left


@pytest.fixture
def runtime(need_netns: None, run_id: str, tmp_path: Path) -> Iterator[NetnsRuntime]:
    rt = NetnsRuntime(run_id, tmp_path / "store")
    try:
        yield rt
    finally:
        try:
            rt.teardown()
        finally:
            teardown_run(run_id)  # also drops the run from the global index
            assert not (RUN_INDEX / run_id).exists()
            assert_nothing_left(run_id)
