"""Fixtures for the workloads tests: a real redis-server and a real fenced store on this test
process's loopback address (`HOST`, free ports), each torn down on every exit path (SIGCONT
first, in case a test paused it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.conftest import WORKER

REPO = Path(__file__).resolve().parents[2]


# This test process's own loopback address for the servers started here (tests/backends.py's
# scheme, octet 41). A free port found by binding 127.0.0.1 can be taken by another xdist
# worker's server before ours binds it, and the test then speaks to the other test's server:
# what fits a leader test that saw 366 terms in 4 s and no renewal, as if every read were
# refused for a token below another test's.
HOST = f"127.{WORKER}.41.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"{proc.args!r} did not listen on {port} in {timeout_s} s")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Resume (it may be SIGSTOPped), terminate, and reap; kill if it will not go."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def admin(self) -> redis.Redis:
        """A plain redis-py client (for redis servers only) for test setup and inspection."""
        return redis.Redis(host=HOST, port=self.port, socket_timeout=5,
                           decode_responses=True)


StartServer = Callable[..., Server]


@pytest.fixture
def start_redis(request: pytest.FixtureRequest, tmp_path: Path) -> StartServer:
    """Factory: a fresh redis-server (no persistence) per call, stopped at test end."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")

    def start() -> Server:
        port = free_port()
        workdir = tmp_path / f"redis-{port}"
        workdir.mkdir()
        log = workdir / "redis.log"
        argv = ["redis-server", "--port", str(port), "--bind", HOST, "--save", "",
                "--appendonly", "no", "--dir", str(workdir), "--logfile", str(log)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        request.addfinalizer(lambda: stop_process(proc))  # before waiting: always reaped
        _wait_port(port, proc)
        return Server(proc, port, log)

    return start


@pytest.fixture
def redis_server(start_redis: StartServer) -> Server:
    return start_redis()


@pytest.fixture
def start_store(request: pytest.FixtureRequest, tmp_path: Path) -> StartServer:
    """Factory: start_store(fencing=True|False) -> a fenced store process, stopped at test end."""

    def start(fencing: bool = True) -> Server:
        port = free_port()
        log = tmp_path / f"store-{port}.log"
        argv = [sys.executable, "-m", "fencecheck.workloads.resources.store", "--host", HOST,
                "--port", str(port), "--fencing", "on" if fencing else "off", "--log", str(log)]
        proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        request.addfinalizer(lambda: stop_process(proc))
        _wait_port(port, proc)
        return Server(proc, port, log)

    return start


@pytest.fixture
def processes(request: pytest.FixtureRequest) -> Iterator[list[subprocess.Popen[bytes]]]:
    """A list to put started processes in; each is resumed, terminated and reaped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    errors: list[BaseException] = []
    for proc in reversed(procs):
        try:
            stop_process(proc)
        except Exception as e:  # stop the others first, then report
            errors.append(e)
    if errors:
        raise errors[0]
