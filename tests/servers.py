"""Shared test helpers for redis-server based services on loopback aliases: free ports, node
sets on a random 127.0.x.0/24, and context managers that set up a `ClockControl`, a
`RedisService` or a `SentinelService` and tear it down on every exit path (plus the `sentinel`
fixture built on the last one: bind it in a test module as `sentinel = servers.sentinel`).
etcd, ZooKeeper and PostgreSQL are in tests/backends.py.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from fencecheck.clusters.base import Remote
from fencecheck.clusters.faults.clock import ClockControl
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services.redis import RedisService
from fencecheck.clusters.services.sentinel import SentinelService
from tests.backends import running
from tests.conftest import WORKER


def free_port(addresses: list[str], exclude: int = 0) -> int:
    """A port (not exclude) free on every one of addresses (they are loopback aliases)."""
    for _ in range(100):
        port = random.randint(20000, 40000)
        if port == exclude:
            continue
        try:
            for a in addresses:
                with socket.socket() as s:
                    s.bind((a, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port")


def random_loopback_nodes(prefix: str, n: int) -> dict[str, LocalRemote]:
    """Nodes <prefix>1..<prefix>n at 127.<slot>.<random>.1..n."""
    # A random third octet keeps concurrent test sessions off each other's addresses, and the
    # worker's second octet the xdist workers of one session.
    net = random.randint(100, 250)
    names = [f"{prefix}{i}" for i in range(1, n + 1)]
    return {name: LocalRemote(name, f"127.{WORKER}.{net}.{i}")
            for i, name in enumerate(names, 1)}


@contextlib.contextmanager
def clock_control(
    root: Path, nodes: Mapping[str, Remote], cache_dir: Path
) -> Iterator[ClockControl]:
    """A set-up ClockControl over nodes; every clock reset on exit."""
    c = ClockControl(root, dict(nodes), cache_dir=cache_dir)
    c.setup()
    try:
        yield c
    finally:
        c.reset_all()


@contextlib.contextmanager
def redis_service(
    nodes: Mapping[str, Remote],
    store: Path,
    env_for: Callable[[str], Mapping[str, str]] | None = None,
) -> Iterator[RedisService]:
    """Independent redis-server masters on nodes, on a port free on all of them."""
    port = free_port([r.address for r in nodes.values()])
    with running(RedisService(port=port, env_for=env_for), nodes, store) as svc:
        yield svc


def sentinel_service() -> tuple[SentinelService, dict[str, LocalRemote]]:
    """A SentinelService not yet set up, and the three nodes (s1..s3) to set it up on."""
    nodes = random_loopback_nodes("s", 3)
    addrs = [n.address for n in nodes.values()]
    port = free_port(addrs)
    return SentinelService(port=port, sentinel_port=free_port(addrs, port)), nodes


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[SentinelService]:
    """A primary, two replicas and three sentinels on loopback aliases."""
    svc, nodes = sentinel_service()
    with running(svc, nodes, tmp_path / "store"):
        yield svc
