"""Starting the resource a lock protects, one starter per ResourceDescriptor: each registers its
undo on the run's ExitStack before it starts anything and returns the options its clients get."""

from __future__ import annotations

import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import LockService, Remote, RemoteError

STORE_PORT = 7000


@dataclass(frozen=True, slots=True)
class ResourceStart:
    """What a starter gets: the resource's node, the lock service, the run directory, the
    ExitStack to register undos on, the run's fencing and op timeout, and the resource's own
    options (`--resource-opt`, checked against its descriptor's model)."""

    node: Remote
    service: LockService
    run_dir: Path
    stack: ExitStack
    fencing: bool
    op_timeout_s: float
    options: dict[str, Any] = field(default_factory=dict)


def store_argv(remote: Remote, fencing: bool, log: Path) -> list[str]:
    return [sys.executable, "-m", "fencecheck.workloads.resources.store", "--host", remote.address,
            "--port", str(STORE_PORT), "--fencing", "on" if fencing else "off", "--log", str(log)]


# A connect by bash's /dev/tcp: a few ms of CPU where a Python probe took 40 (482 probes, 18 CPU s
# in a run of the test command), on every runtime's nodes (ZooKeeper's probes do the same).
_CONNECT = 'exec 3<>"/dev/tcp/$0/$1"'


def wait_port(remote: Remote, host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        res = remote.run(["timeout", "1", "bash", "-c", _CONNECT, host, str(port)], check=False)
        if res.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RemoteError(res, f"nothing listens on {host}:{port} after {timeout_s} s")
        time.sleep(0.05)


def start_store(s: ResourceStart) -> dict[str, Any]:
    """Our fenced store server on the resource node."""
    node = s.node
    logdir = s.run_dir / "nodes" / node.name
    logdir.mkdir(parents=True, exist_ok=True)
    argv = store_argv(node, s.fencing, logdir / "store-requests.log")
    daemon = node.start_daemon("store", argv, log=logdir / "store.log")
    s.stack.callback(node.signal, daemon.pid, signal.SIGKILL)
    wait_port(node, node.address, STORE_PORT, 10.0)
    return {"address": f"{node.address}:{STORE_PORT}", "op_timeout_s": s.op_timeout_s,
            "fencing": s.fencing}


def start_postgres(s: ResourceStart) -> dict[str, Any]:
    """A PostgreSQL server on the resource node."""
    from fencecheck.clusters.services.postgres import PostgresService

    pg = PostgresService()
    s.stack.callback(pg.teardown)
    pg.setup({s.node.name: s.node}, s.run_dir)
    return {"endpoints": pg.endpoints(), "op_timeout_s": s.op_timeout_s, "fencing": s.fencing}


def start_in_service(s: ResourceStart) -> dict[str, Any]:
    """The lock service itself holds the data (etcd): nothing to start."""
    return {"endpoints": s.service.endpoints(), "op_timeout_s": s.op_timeout_s,
            "fencing": s.fencing}
