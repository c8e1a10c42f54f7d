"""Integration tests of RedisService in network namespaces: serving a client in another
namespace, pause/resume, kill/restart with and without persistence, startup errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.clusters.base import ClusterError, Killable, LockService, LogFiles, Pausable
from fencecheck.clusters.runtimes.netns import NetnsRuntime
from fencecheck.clusters.services.redis import RedisService

pytestmark = pytest.mark.netns


def cli(rt: NetnsRuntime, client: str, server: str, *args: str, timeout_s: float = 2.0) -> str:
    argv = ["redis-cli", "-h", rt.address(server), "-p", "6379", *args]
    return rt.remote(client).run(argv, timeout_s=timeout_s).stdout.strip()


def test_serves_client_in_other_namespace_pause_resume(runtime: NetnsRuntime) -> None:
    cluster = runtime.setup(["n1", "n2"], ["c1"])
    svc = RedisService(ledger=runtime.ledger)
    as_service: LockService = svc  # mypy checks the protocol
    assert as_service.name == "redis"
    assert isinstance(svc, Pausable) and isinstance(svc, Killable)
    assert isinstance(svc, LogFiles)
    try:
        svc.setup(cluster.servers, runtime.run_dir)
        assert svc.endpoints() == ["10.77.0.2:6379", "10.77.0.3:6379"]
        assert cli(runtime, "c1", "n1", "set", "k", "v1") == "OK"
        assert cli(runtime, "c1", "n2", "get", "k") == ""  # independent masters
        assert cli(runtime, "c1", "n1", "get", "k") == "v1"

        svc.pause("n1")
        assert not svc.ping("n1", timeout_s=0.5)
        assert svc.ping("n2")  # only n1 is frozen
        svc.resume("n1")
        assert svc.ping("n1")
        assert cli(runtime, "c1", "n1", "get", "k") == "v1"

        log = svc.log_files()["n1"][0]
        assert log.is_relative_to(runtime.run_dir / "nodes" / "n1")
        assert "Ready to accept connections" in log.read_text()
        conf = (runtime.run_dir / "nodes" / "n1" / "redis.conf").read_text()
        assert 'save ""' in conf and "appendonly no" in conf and "bind 10.77.0.2" in conf
    finally:
        svc.teardown()
    assert not svc.ping("n1")
    svc.teardown()  # idempotent


@pytest.mark.parametrize(("persistence", "survives"), [("off", False), ("always", True)])
def test_kill_restart(runtime: NetnsRuntime, persistence: str, survives: bool) -> None:
    cluster = runtime.setup(["n1"], ["c1"])
    svc = RedisService(persistence=persistence)  # type: ignore[arg-type]
    try:
        svc.setup(cluster.servers, runtime.run_dir)
        assert cli(runtime, "c1", "n1", "set", "lock", "me") == "OK"
        old = svc.pid("n1")
        svc.kill("n1")
        assert not cluster.servers["n1"].alive(old)
        assert not svc.ping("n1", timeout_s=0.5)
        svc.restart("n1")
        assert svc.pid("n1") != old
        assert cli(runtime, "c1", "n1", "get", "lock") == ("me" if survives else "")
    finally:
        svc.teardown()


def test_paused_server_is_stopped_by_teardown(runtime: NetnsRuntime) -> None:
    cluster = runtime.setup(["n1"], [])
    svc = RedisService(stop_grace_s=1.0)
    svc.setup(cluster.servers, runtime.run_dir)
    pid = svc.pid("n1")
    svc.pause("n1")
    svc.teardown()  # must SIGCONT first, or SIGTERM would wait behind the stop
    assert not cluster.servers["n1"].alive(pid)


def test_startup_failure_names_node_and_log(runtime: NetnsRuntime, tmp_path: Path) -> None:
    cluster = runtime.setup(["n1"], [])
    first = RedisService()
    first.setup(cluster.servers, runtime.run_dir)
    second = RedisService(startup_timeout_s=5.0)
    try:
        with pytest.raises(ClusterError, match=r"redis on n1 .*exited.*(in use|bind)"):
            second.setup(cluster.servers, tmp_path / "other")
    finally:
        second.teardown()
        first.teardown()


def test_env_for_reaches_the_server(runtime: NetnsRuntime, tmp_path: Path) -> None:
    # redis-server rewrites its own environ block for its process title, so /proc/PID/environ
    # shows nothing: a wrapper records the environment it was started with, then execs it.
    wrapper = tmp_path / "redis-wrapper"
    wrapper.write_text(f'#!/bin/sh\nenv > {tmp_path}/env.txt\nexec redis-server "$@"\n')
    wrapper.chmod(0o755)
    cluster = runtime.setup(["n1"], [])
    svc = RedisService(
        env_for=lambda node: {"FC_TEST_NODE": node}, ledger=runtime.ledger, binary=str(wrapper)
    )
    try:
        svc.setup(cluster.servers, runtime.run_dir)
        env = (tmp_path / "env.txt").read_text().splitlines()
        assert "FC_TEST_NODE=n1" in env
        assert f"FENCECHECK_RUN={runtime.run_id}" in env
    finally:
        svc.teardown()
